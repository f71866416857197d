"""What the study's rows share: the study's fixed names, the runs of a spec, the sampled draws of a run,
the text of counts and rates, and which runs or arms are copies of others."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tooldecode.classify import CONTINUE_KINDS, EXTRA_OUTCOMES
from tooldecode.measures import crate, distinct_draws, sample_continuation, sample_outcome
from tooldecode.records import Condition, SampleRecord
from tooldecode.runs import Run
from tooldecode.stats import cluster_rate

# The study's fixed names: the model the single-model rows and the pooled corpus rows read, the spec of
# the exact close-brace probe the sampled rate is checked against, and the prefix of the engine specs
# (their runs go one per model, docs/engines.md).
STUDY_MODEL = "qwen2.5-coder-0.5b-instruct"
CLOSE_BRACE_SPEC = "e5-close-brace"
ENGINES_SPEC_PREFIX = "e15"

KIND_ORDER = ("close", *CONTINUE_KINDS, "string_goes_on", "wrong_closer", "stray")
CR = "cluster-robust CR1 95% CI over scenarios"
PT = "paired over scenarios: t CI of the mean difference, sign-flip permutation p"


def per_scenario(samples: list[SampleRecord], pred: Callable[[SampleRecord], bool]) -> dict[str, float]:
    """Per scenario: the share of ``samples`` for which ``pred`` holds (the values a paired row compares)."""
    by: dict[str, list[bool]] = defaultdict(list)
    for s in samples:
        by[s.scenario].append(bool(pred(s)))
    return {k: float(np.mean(v)) for k, v in by.items()}


def few(g: int) -> str:
    return f"{g} scenarios" + (", fewer than 10 clusters" if g < 10 else "")


def run_model(run: Run) -> str:
    """The model a one-model run (a probe suite's) was made with."""
    return str(run.manifest.get("config", {}).get("model", "?"))


def runs_of(spec: str, runs: dict[str, Run]) -> list[Run]:
    return [r for r in runs.values() if r.spec == spec]


def source(rs: list[Run]) -> str:
    return "; ".join(f"{r.name}{' (git_dirty)' if r.git_dirty else ''}" for r in rs) or "-"


def short(model: str) -> str:
    """A model id as the rows print it (``qwen-0.5b`` for ``qwen2.5-coder-0.5b-instruct``)."""
    return model.replace("qwen2.5-coder-", "qwen-").replace("-instruct", "")


def arm_filter(samples: Sequence[SampleRecord], **want: Any) -> list[SampleRecord]:
    """Samples without an error whose arm has every ``field=value`` of ``want``."""
    return [s for s in samples if all(s.arm.get(k) == v for k, v in want.items()) and not s.error]


def l2(run: Run, **want: Any) -> list[SampleRecord]:
    """The run's L2 samples without an error whose arm has every ``field=value`` of ``want``."""
    return [s for s in arm_filter(run.samples, **want) if s.arm.level == "L2"]


def rerun_command(run: Run) -> str:
    """The run's command with a new folder: a rerun draws with per-scenario streams (the spec default)."""
    cmd = re.sub(rf"\s--out\s+\S*{re.escape(run.name)}\b/?", "", run.command())
    return cmd + f" --out runs/{run.name}-streams"


def redone_by(run: Run, runs: dict[str, Run]) -> list[str]:
    """Runs of the same spec and models drawn with per-scenario streams (reruns of a shared-stream run)."""
    models = {s.arm.model for s in run.samples}
    return sorted(
        o.name
        for o in runs.values()
        if o.spec == run.spec and o.samples and not o.shared_streams
        and models <= {s.arm.model for s in o.samples}
    )  # fmt: skip


def shared_streams_line(runs: dict[str, Run]) -> str:
    """The runs drawn with shared streams, each with the run that redid it or its rerun command."""
    parts = []
    for r in sorted((r for r in runs.values() if r.shared_streams), key=lambda r: r.name):
        redone = redone_by(r, runs)
        parts.append(
            f"{r.name} (rerun as {', '.join(redone)})" if redone else f"{r.name} (`{rerun_command(r)}`)"
        )
    if not parts:
        return ""
    return (
        "- Drawn with one random stream shared by every scenario (no cluster interval; their rows show counts "
        "only and pooled rows leave them out), to be rerun with per-scenario streams: "
        + "; ".join(parts)
        + "."
    )


def shared_note(run: Run, runs: dict[str, Run] | None = None) -> str:
    """Why a run's figures carry no interval, and the run that redid it with per-scenario streams or the
    command that would."""
    redone = redone_by(run, runs or {})
    again = (
        f"rerun with per-scenario streams as {', '.join(redone)}"
        if redone
        else f"rerun with per-scenario streams: `{rerun_command(run)}`"
    )
    return (
        f"No interval: {run.name} was drawn before per-scenario random streams (its manifest has no "
        '"streams": "scenario"), so every scenario shares one stream and scenarios are not independent '
        f"clusters; {again}."
    )


def kinds_text(samples: list[SampleRecord], kinds: tuple[str, ...] = KIND_ORDER) -> str:
    ss = distinct_draws(samples)
    if not ss:
        return "no samples"
    if any(s.stream is None for s in ss):  # drawn with one stream shared by every scenario
        cs = Counter(sample_continuation(s).kind for s in ss)
        g = len({s.scenario for s in ss})
        body = ", ".join(f"{k} {cs[k]}/{len(ss)}" for k in kinds if cs[k])
        return f"{len(ss)} distinct draws, {few(g)}: {body} (counts only)"
    cs = [sample_continuation(s) for s in ss]
    parts = []
    for k in kinds:
        if any(c.kind == k for c in cs):
            r = cluster_rate([c.kind == k for c in cs], [s.scenario for s in ss])
            parts.append(f"{k} {int(r.k)}/{r.n} = {100 * r.rate:.1f}% [{100 * r.lo:.1f}, {100 * r.hi:.1f}]")
    g = len({s.scenario for s in ss})
    return f"{len(ss)} distinct draws, {few(g)}: " + ", ".join(parts)


OUTCOME_WORDS = {
    "source_shaped": "source-shaped failure",
    "duplicate": "duplicate key",
    "derailment": "derailment",
    "extra_other": "other failure",
}


def outcomes_text(extra: list[SampleRecord]) -> str:
    """The outcomes of extra-key draws (``tooldecode.classify.EXTRA_OUTCOMES``) with cluster intervals."""
    if not extra:
        return "no extra key"
    outs = [sample_outcome(s) for s in extra]
    parts = []
    for o in EXTRA_OUTCOMES:
        if o in outs:
            r = crate(extra, lambda s, o=o: sample_outcome(s) == o)
            parts.append(f"{OUTCOME_WORDS[o]} {r}")
    return ", ".join(parts)


def keys_of(samples: list[SampleRecord], kinds: tuple[str, ...]) -> Counter:
    return Counter(
        c.key for c in (sample_continuation(s) for s in distinct_draws(samples)) if c.kind in kinds and c.key
    )


def arm_fields(arm: Condition) -> str:
    """An arm as ``field=value`` pairs in name order, without the fields that follow from the others."""
    skip = {"model", "backend", "level", "wire", "expected_tool"}
    return ",".join(f"{k}={v}" for k, v in sorted(arm.to_json().items()) if k not in skip)


def identical_arms(samples: Sequence[SampleRecord]) -> list[list[str]]:
    """Groups (2 or more) of arm labels whose prompts and prefills are byte-identical in every scenario
    and whose sampling settings agree: the same arm under different names."""
    sig: dict[str, dict[str, tuple]] = defaultdict(dict)
    settings: dict[str, tuple] = {}
    for s in samples:
        a = s.arm
        lab = arm_fields(a)
        sig[lab][s.scenario] = (s.prompt_sha256, s.prefill)
        settings[lab] = (a.model, a.mode, a.engine, a.temperature)
    groups: dict[tuple, list[str]] = defaultdict(list)
    for lab, per in sig.items():
        groups[(settings[lab], tuple(sorted(per.items())))].append(lab)
    return [sorted(v) for v in groups.values() if len(v) > 1]
