"""Write FINDINGS.md from the committed runs in runs/ and the specs in experiments/ (no model is loaded).

The rows come from experiments/study.py, driven by each spec's ``[findings]`` table; the statistics
and the classification from tooldecode (``make findings``; tests/test_findings.py checks for drift).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "experiments"))

from study import build_rows, provenance  # noqa: E402

from tooldecode.findings import load_runs, write_findings  # noqa: E402

PREAMBLE = """
Each row is one claim of the background (docs/background.md) or one descriptive measurement, computed
from the committed runs in `runs/` (raw samples and probe rows) by `make findings`. Conventions:

- **Kinds** (tooldecode/classify.py, one definition for sampled and exact rows): after the value of
  `newText`, *close*, or a *continue* split into *repeat* (a key the item already has, mangled
  spellings included), *declared*, *wrong_level*, *schema_word* (a word of the tool definitions shown
  in the prompt), *invented*, *next_item*, *other*; or *string_goes_on*, *wrong_closer*, *stray*. A
  key is a key only when `:` follows it. *Extra key* = repeat + wrong_level + schema_word + invented.
- **n** counts distinct draws: copies (byte-identical arms, repeated T=0 draws) are removed.
- **Intervals**: rates over scenario-clustered samples carry a cluster-robust CR1 95% interval with
  t on G−1 degrees of freedom; comparisons are paired over scenarios (t interval of the mean
  per-scenario difference, sign-flip permutation p; ratios with a cluster-robust delta-method
  interval). Figures from fewer than 10 scenarios say so.
- **Verdicts** against the claimed effect stated in each spec (experiments/*.toml, `[findings]`):
  *reproduces* when the interval excludes no-effect in the claimed direction from ≥ 5 events in ≥ 3
  scenarios (an L3 event: a scenario whose probability reaches 0.01 in either arm); *contradicts* when
  it excludes the claimed size (or points the other way); *inconclusive* otherwise, with the minimum
  detectable effect at 80% power.
- "L2": sampling after the gold newText content was forced; "L3": the exact probe (docs/experiments.md).
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", default=str(ROOT / "runs"))
    ap.add_argument("--out", default=str(ROOT / "FINDINGS.md"))
    args = ap.parse_args()
    runs = load_runs(Path(args.runs))
    rows = build_rows(runs)
    text = PREAMBLE + "\n## Runs read\n\n" + provenance(runs) + "\n\n## Table\n"
    path = write_findings(rows, Path(args.out), preamble=text)
    print(f"wrote {path} ({len(rows)} rows)")


if __name__ == "__main__":
    main()
