"""Write FINDINGS.md from the committed runs in runs/ and the specs in experiments/ (no model is loaded).

The rows come from experiments/study.py, driven by each spec's ``[findings]`` table; the statistics
and the classification from tooldecode (``make findings``; tests/test_findings.py checks for drift).
Run it from the repository root as ``python -m scripts.findings``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from experiments import study
from experiments.decision_rows import comparison_block, decision_block
from experiments.headline import FIGURE, headline_table, write_figure
from experiments.organism_table import exact_kinds_table, organism_table
from experiments.remedy_rows import sampled_block
from experiments.study import build_rows, cite_rows, provenance, reruns, write_findings
from tooldecode.runs import load_runs

ROOT = Path(__file__).resolve().parent.parent

PREAMBLE = """
## How to read this

Each row of the full table is one claim of the background (docs/background.md) or one descriptive
measurement, computed from the committed runs in `runs/` (raw samples and probe rows) by `make findings`.
A row's number is where it stands in this build; its anchor (`FINDINGS.md#r` and six hex digits, from
its observation, and its run where rows share an observation) stays put when rows are added or runs come,
and the docs cite rows by it.

- **Kinds** (tooldecode/classify.py, one definition for sampled and exact rows): after the value of
  `newText`, *close*, or a *continue* split into *repeat* (a key the item already has; mangled
  spellings too: junk in the key string, `newText1`, `newTextDoc`, `oldTextModifier`, `new_text`),
  *declared*, *wrong_level*, *schema_word* (a word of the tool definitions that arm's prompt shows,
  earlier turns' tools included: the prior arm shows the flat Edit tool, so `replace_all` is one),
  *invented*, *next_item*, *other*; or *string_goes_on* (a *run-on string*), *wrong_closer*, *stray*.
  A key is a key only when `:` follows it. *Extra key* = repeat + wrong_level + schema_word + invented.
- **Outcomes of an extra key** (what the whole call does, from the scorer's verdict): *source-shaped
  failure* (the call parses under its wire format, every declared key is present, and its only schema
  violations are additional properties inside `edits[]` items: the source's failure); *duplicate key*
  (an exact repeat of a present key: JSON-legal, `JSON.parse` and `json.loads` keep one value, so never
  counted as a validation failure; most such draws repeat until the token budget); *derailment* (any
  other extra key after which the call does not parse); *other failure* (it parses but fails otherwise).
- **n** counts distinct draws: copies (byte-identical arms, repeated T=0 draws) are removed.
- **Intervals**: rates over scenario-clustered samples carry a cluster-robust CR1 95% interval with
  t on G−1 degrees of freedom; comparisons are paired over scenarios (t interval of the mean
  per-scenario difference, sign-flip permutation p, exact over all 2^G sign patterns up to 20 nonzero
  differences, else 20,000 random patterns; ratios with a cluster-robust delta-method interval).
  Figures from fewer than 10 scenarios say so. A run whose manifest lacks per-scenario random streams
  (`"streams": "scenario"`) gets no cluster interval at all: its scenarios share one stream, so its
  rows show counts only, with the command that reruns it, and pooled rows leave it out.
- **Verdicts** against the claimed effect stated in each spec (experiments/*.toml, `[findings]`), in
  this order: *interim* when an arm the row reads is not yet drawn in full over the scenarios its run
  planned (a run stopped mid-way, to be resumed): the figures are shown, the verdict waits for the
  planned n, and a complete run is read before a stopped one; *premise absent* when the reference arm (b) has no event where the claim needs some (a
  decrease, or any ratio); *by construction* when the row is an instrument check (the check is named:
  a closed grammar cannot write a key after newText), never counted as a reproduction; the claimed
  direction is *established* when the 95% interval on the claim's scale excludes no effect (ratio 1,
  difference 0) in the claimed direction **and** the sign-flip p ≤ 0.05 **and** the Holm-adjusted p ≤
  0.05 **and** there are ≥ 5 events in ≥ 3 scenarios (an L2 event: a draw showing the measure; an L3
  event: a scenario whose probability is above 0 in either arm). Then *reproduces* when the claimed size
  lies inside the interval (or no size is claimed; a bounded prediction such as "at least ×3" counts as
  inside unless the interval lies wholly on the wrong side of its bound), else *direction only — size
  contradicted*.
  Otherwise *contradicts* when the interval excludes the claimed size or lies wholly on the other side
  of no effect; otherwise *inconclusive*, with the minimum detectable effect at 80% power.
- **Multiplicity**: Holm's step-down correction (family-wise error 0.05) across the {family} effect rows
  that test a claim (instrument checks, interim rows, rows with a premise absent and rows without an
  interval are not in the family); every effect row shows the sign-flip p and the Holm-adjusted p.
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
DECISION = ("<!-- decision table: begin (make findings) -->", "<!-- decision table: end -->")
ORGANISMS = ("<!-- organisms table: begin (make findings) -->", "<!-- organisms table: end -->")
EXACT_KINDS = ("<!-- exact kinds table: begin (make findings) -->", "<!-- exact kinds table: end -->")


def with_summary(readme: str, bullets: str, markers: tuple[str, str] = (BEGIN, END)) -> str:
    """``readme`` with the text between ``markers`` replaced by ``bullets`` (by default the summary: the
    headline table and the figure; ``DECISION``'s markers hold the decision table)."""
    begin, end = markers
    if begin not in readme or end not in readme:
        raise SystemExit(f"README.md lacks the markers {begin!r} … {end!r}; put them around the block")
    head, rest = readme.split(begin, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{begin}\n{bullets}\n{end}{tail}"


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
        "--organisms-out",
        default=str(ROOT / "docs" / "organisms.md"),
        help="where to write docs/organisms.md with its closing table rebuilt and its row citations renumbered",
    )
    ap.add_argument(
        "--all-runs", action="store_true", help="also read run directories not committed to git (a preview)"
    )
    ap.add_argument("--no-figure", dest="figure", action="store_false", help=f"do not (re)write {FIGURE}")
    args = ap.parse_args()
    runs = load_runs(Path(args.runs))
    if not args.all_runs:
        tracked = committed_runs(Path(args.runs))
        if tracked is not None:
            runs = {k: v for k, v in runs.items() if k in tracked}
    rows = build_rows(runs)
    head = headline_table(rows)
    organisms = organism_table(runs)
    kinds = exact_kinds_table(runs)
    text = (
        "The questions in plain words, answered from the committed runs (Qwen2.5-Coder 0.5B unless named; "
        "L2: sampled after the gold `newText` was forced, L3: the exact probe); the full table below has "
        f"every row. Figure: [{FIGURE}]({FIGURE}).\n\n"
        + head
        + "\n"
        + PREAMBLE.replace("{family}", str(study.FAMILY[0]))
        + "\n## The organisms' closing table\n\n"
        + organisms
        + "\n### What follows the gold newText, exactly, by kind\n\n"
        + kinds
        + "\n## Runs read\n\n"
        + provenance(runs)
        + "\n\n## What remains to rerun\n\n"
        + reruns(rows, runs)
        + "\n\n## Table\n"
    )
    path = write_findings(rows, Path(args.out), preamble=text)
    if args.figure:
        write_figure(runs, ROOT)
    block = (
        head.replace("| row |", "| FINDINGS row |")
        + f"\n\n![What follows the gold newText, per model and arm]({FIGURE})\n\n"
        "Per model and arm, what the model writes after the gold `newText` (L2, distinct draws of the runs "
        "with per-scenario streams; whiskers: cluster-robust 95% interval of each class's share)."
    )
    readme = with_summary((ROOT / "README.md").read_text(encoding="utf-8"), block)
    readme = with_summary(
        readme,
        decision_block(runs)
        + "\n\n"
        + sampled_block(runs)
        + "\n\n"
        + comparison_block(runs, figure_root=ROOT if args.figure else None),
        DECISION,
    )
    readme = cite_rows(with_summary(readme, organisms, ORGANISMS), rows, "README.md")
    Path(args.readme_out).write_text(readme, encoding="utf-8")
    doc = with_summary((ROOT / "docs" / "organisms.md").read_text(encoding="utf-8"), organisms, ORGANISMS)
    doc = cite_rows(with_summary(doc, kinds, EXACT_KINDS), rows, "docs/organisms.md")
    Path(args.organisms_out).write_text(doc, encoding="utf-8")
    print(
        f"wrote {path} ({len(rows)} rows), the summary in {args.readme_out} and the closing table in {args.organisms_out}"
    )


if __name__ == "__main__":
    main()
