"""Declarative experiments: a TOML spec → arms → runs on disk (resumable), and the probe suite.

A spec crosses models × transcript variant fields × modes (loose/strict) × temperatures; every arm
samples ``n`` calls per scenario per seed. Levels (see ``docs/experiments.md``):

- L0 free: ``conditioning = "free"`` — the model decides whether and how to call;
- L1 forced tool: ``conditioning = "forced-tool"`` — the call's opening is prefilled;
- L2 gold-conditioned: ``conditioning = "gold-prefix"`` — the gold call is forced through the end
  of ``newText``'s content and the model writes what follows;
- L3 exact probe: ``[probe]`` — P(close)/P(continue) at every decision point of the gold call.

Strict arms mask every token with the grammar of the offered tools in the prompt's wire format
(``tooldecode.grammar``, mode "strict": closed objects), advanced over the prefill.
"""

from __future__ import annotations

from tooldecode.experiments.arms import arm_label
from tooldecode.experiments.rundir import RunStoreRefusal
from tooldecode.experiments.runner import run_demo, run_spec
from tooldecode.experiments.spec import (
    LEVELS,
    STRICT_MODES,
    VARIANT_FIELDS,
    Spec,
    SpecError,
    load_spec,
    validate_spec,
)

__all__ = [
    "LEVELS",
    "RunStoreRefusal",
    "STRICT_MODES",
    "Spec",
    "SpecError",
    "VARIANT_FIELDS",
    "arm_label",
    "load_spec",
    "run_demo",
    "run_spec",
    "validate_spec",
]
