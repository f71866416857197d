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

from study import build_rows, provenance, reruns, summary  # noqa: E402

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


def committed_runs(runs_dir: Path) -> set[str] | None:
    """Names of the run directories whose manifest is committed (None outside a git checkout)."""
    import subprocess

    try:
        out = subprocess.run(
            ["git", "ls-files", "--", "*/manifest.json"],
            cwd=runs_dir,
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return {Path(line).parts[0] for line in out.splitlines() if line.strip()}


BEGIN, END = "<!-- findings summary: begin (make findings) -->", "<!-- findings summary: end -->"


def with_summary(readme: str, bullets: str) -> str:
    """``readme`` with the text between the summary markers replaced by ``bullets``."""
    if BEGIN not in readme or END not in readme:
        raise SystemExit(f"README.md lacks the markers {BEGIN!r} … {END!r}; put them around the summary")
    head, rest = readme.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{bullets}\n{END}{tail}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", default=str(ROOT / "runs"))
    ap.add_argument("--out", default=str(ROOT / "FINDINGS.md"))
    ap.add_argument(
        "--readme-out",
        default=str(ROOT / "README.md"),
        help="where to write README.md with its summary rebuilt",
    )
    ap.add_argument(
        "--all-runs", action="store_true", help="also read run directories not committed to git (a preview)"
    )
    args = ap.parse_args()
    runs = load_runs(Path(args.runs))
    if not args.all_runs:
        tracked = committed_runs(Path(args.runs))
        if tracked is not None:
            runs = {k: v for k, v in runs.items() if k in tracked}
    rows = build_rows(runs)
    text = (
        PREAMBLE
        + "\n## Runs read\n\n"
        + provenance(runs)
        + "\n\n## What remains to rerun\n\n"
        + reruns(rows, runs)
        + "\n\n## Table\n"
    )
    path = write_findings(rows, Path(args.out), preamble=text)
    readme = with_summary((ROOT / "README.md").read_text(encoding="utf-8"), summary(rows))
    Path(args.readme_out).write_text(readme, encoding="utf-8")
    print(f"wrote {path} ({len(rows)} rows) and the summary in {args.readme_out}")


if __name__ == "__main__":
    main()
