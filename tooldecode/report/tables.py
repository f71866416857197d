"""The report's tables (shared by Markdown and HTML) and ``summary.md``."""

from __future__ import annotations

import math
from dataclasses import dataclass

from tooldecode import __version__
from tooldecode.report.data import HEADLINE, metric_title
from tooldecode.report.summary import FEW_CLUSTERS, N_BOOT, Arm, DiffRow, Summary, fmt_value
from tooldecode.stats import (
    wilson,
)


@dataclass
class Table:
    """A table shared by Markdown and HTML: header, rows, a note, what to say when empty."""

    header: list[str]
    rows: list[list[str]]
    note: str = ""
    empty: str = "none"  # said instead of a table without rows


def _pct(x: float) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{100 * x:.3g}%"


def _pts(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{100 * x:+.1f}"


def _few(n_scenarios: int) -> str:
    """The mark of a figure from fewer than ``FEW_CLUSTERS`` scenarios (`` †``; else "")."""
    return " †" if n_scenarios < FEW_CLUSTERS else ""


def _few_note(n_scenarios: list[int], why: str = ".") -> str:
    """The note's line for the mark (``why`` ends it), when some figure of the table has it."""
    return f" † fewer than {FEW_CLUSTERS} scenarios{why}" if any(_few(n) for n in n_scenarios) else ""


def _arm_cells(s: Summary, arm: Arm) -> list[str]:
    cells = [arm.run] if len(s.runs) > 1 else []
    return cells + [fmt_value(arm.arm.get(c)) for c in s.columns]


def _arm_header(s: Summary) -> list[str]:
    head = ["run"] if len(s.runs) > 1 else []
    return head + list(s.columns) if (head or s.columns) else ["arm"]


def _arm_row_cells(s: Summary, arm: Arm) -> list[str]:
    cells = _arm_cells(s, arm)
    return cells if cells else [arm.label]


def runs_table(s: Summary) -> Table:
    rows = []
    for run in s.runs:
        model = run.manifest.get("model")
        model_id = model.get("id") if isinstance(model, dict) else None
        if not model_id:
            model_id = ", ".join(sorted({str(x.arm["model"]) for x in run.samples if x.arm.get("model")}))
        tool = run.manifest.get("tooldecode") if isinstance(run.manifest.get("tooldecode"), dict) else {}
        sha = str(tool.get("git_sha") or "-")[:12] + (" (dirty)" if tool.get("git_dirty") else "")
        n_err = sum(not x.scored for x in run.samples)
        rows.append(
            [
                run.name,
                str(len(run.samples)),
                str(n_err),
                str(model_id or "-"),
                str(run.manifest.get("created") or "-"),
                sha,
                run.verdict_file.name if run.verdict_file else "scored in memory",
            ]
        )
    return Table(
        ["run", "samples", "sampling errors (not scored)", "model", "created", "git sha", "verdicts"], rows
    )


def arms_table(s: Summary) -> Table:
    header = _arm_header(s) + ["n"] + [title for _, title in HEADLINE]
    rows = [_arm_row_cells(s, a) + [str(a.n)] + [str(a.rates[m]) for m, _ in HEADLINE] for a in s.arms]
    note = (
        "Each rate: k/n = rate% [Wilson 95% interval]; n counts scored samples (samples with a sampling "
        "error are left out). Payload correct: the call's edits turn the file into the expected file."
    )
    return Table(header, rows, note, "no scored samples")


def verdicts_table(s: Summary) -> Table:
    header = _arm_header(s) + ["n"] + [v.replace("_", " ") for v in s.verdict_order]
    rows = [_arm_row_cells(s, a) + [str(a.n)] + [str(a.rates[v]) for v in s.verdict_order] for a in s.arms]
    return Table(
        header,
        rows,
        "Every sample gets exactly one verdict (docs/scoring.md gives the precedence).",
        "no scored samples",
    )


def _boot_cell(d: DiffRow) -> str:
    """A difference's cluster-bootstrap interval, its scenarios (paired or not) and their mark."""
    boot = f"{_pts(d.boot[0])} pts [{_pts(d.boot[1])}, {_pts(d.boot[2])}]"
    return boot + f" ({d.n_clusters} scenarios, {'paired' if d.paired else 'unpaired'}){_few(d.n_clusters)}"


def diffs_table(s: Summary) -> Table:
    rows = [
        [
            d.field,
            d.a.label,
            d.b.label,
            metric_title(d.metric),
            str(d.diff.a),
            str(d.diff.b),
            str(d.diff),
            _boot_cell(d),
        ]
        for d in s.diffs
    ]
    note = (
        "Pairs of arms that differ in exactly one field; difference a − b in percentage points with "
        "Newcombe's 95% interval and Fisher's exact p, and a 95% cluster-bootstrap interval that resamples "
        f"scenarios ({N_BOOT} replicates, seed 0)."
    )
    note += _few_note([d.n_clusters for d in s.diffs], ": the bootstrap interval is too narrow.")
    return Table(
        [
            "field",
            "a",
            "b",
            "metric",
            "a rate",
            "b rate",
            "a − b [Newcombe 95%], Fisher p",
            "cluster bootstrap 95%",
        ],
        rows,
        note,
        "no two arms with samples differ in exactly one field",
    )


def noise_table(s: Summary) -> Table:
    rows = []
    for r in s.noise:
        per = "; ".join(f"{name}: {rate}" for name, rate in r.repeats)
        sd = r.floor["sd"]
        rows.append(
            [
                r.label,
                metric_title(r.metric),
                str(r.floor["n_runs"]),
                per,
                "n/a" if math.isnan(sd) else f"{100 * sd:.1f} pts",
                f"{100 * r.floor['max_abs_diff']:.1f} pts",
            ]
        )
    note = (
        "An arm repeated with different seeds (or in several runs): the spread of its rate. A difference "
        "between arms smaller than this is not a finding."
    )
    return Table(
        ["arm", "metric", "repeats", "rate per repeat", "sd", "max gap"],
        rows,
        note,
        "no arm was repeated (one seed per arm, and no arm in two runs)",
    )


def zoo_table(s: Summary) -> Table:
    n_total = sum(a.n for a in s.arms)
    rows = []
    for z in s.zoo:
        where = ", ".join(f"{w} ({n})" for w, n in z.where.most_common(3))
        arms = "; ".join(f"{lab} ({n})" for lab, n in z.arms.most_common(4))
        rows.append([z.key, str(wilson(z.samples, n_total)), where, arms])
    return Table(
        ["key", "samples with it (of all scored samples)", "where (object holding it)", "arms"],
        rows,
        "Invented keys: names the schema does not define, counted once per sample.",
        "no invented keys in any sample",
    )


def probe_table(s: Summary) -> Table:
    rows = []
    for p in s.probe:
        pc = [float(r["p_continue"]) for r in p.rows]
        pclose = [float(r["p_close"]) for r in p.rows if isinstance(r.get("p_close"), int | float)]
        ent = [float(r["entropy"]) for r in p.rows if isinstance(r.get("entropy"), int | float)]
        und = [float(r["p_undetermined"]) for r in p.rows if isinstance(r.get("p_undetermined"), int | float)]
        mean, lo, hi = p.mean
        interval = f"{_pct(mean)} [{_pct(lo)}, {_pct(hi)}]{_few(p.n_scenarios)}"
        rows.append(
            [
                p.label,
                str(len(p.rows)),
                str(p.n_scenarios),
                interval,
                _pct(max(pc)),
                _pct(sum(pclose) / len(pclose)) if pclose else "n/a",
                _pct(sum(und) / len(und)) if und else "n/a",
                f"{sum(ent) / len(ent):.3f}" if ent else "n/a",
            ]
        )
    note = (
        "Exact probabilities at the decision point after each edit item's newText (where the gold call "
        "closes the item): P(continue) is the mass on continuing the object (`,` and another key), P(close) "
        "on closing it, P(undetermined) what the probe could not attribute. Interval: cluster-robust CR1 95% "
        "over scenarios (t, G-1 df)."
    )
    note += _few_note([p.n_scenarios for p in s.probe])
    return Table(
        [
            "arm",
            "decision points",
            "scenarios",
            "mean P(continue) [95%]",
            "max P(continue)",
            "mean P(close)",
            "mean P(undetermined)",
            "mean entropy (nats)",
        ],
        rows,
        note,
    )


# --- Markdown --------------------------------------------------------------------------------------


def _md_cell(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _md_table(t: Table) -> str:
    if not t.rows:
        return f"_{t.empty}_"
    lines = [
        "| " + " | ".join(_md_cell(h) for h in t.header) + " |",
        "|" + "|".join("---" for _ in t.header) + "|",
    ]
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in t.rows]
    return "\n".join(lines) + (f"\n\n{t.note}" if t.note else "")


def common_line(s: Summary) -> str:
    """The arm fields every arm shares, as one line."""
    if not s.common:
        return ""
    return "Common to all arms: " + ", ".join(f"{k}={fmt_value(v)}" for k, v in s.common.items())


def report_commands(s: Summary) -> list[tuple[str, str]]:
    """(run name, the command that made it) per run."""
    return [(run.name, run.command or "(not recorded in the manifest)") for run in s.runs]


def verdict_sections(s: Summary) -> list[tuple[str, Table]]:
    """(title, table) of the sections after the arms that summary.md and report.html both show, in order."""
    return [
        ("All verdicts", verdicts_table(s)),
        ("Differences between arms that differ in one field", diffs_table(s)),
        ("Noise floor", noise_table(s)),
    ]


def summary_markdown(s: Summary) -> str:
    """The report's tables as Markdown: every rate with its n and 95% interval."""
    cmds = "\n".join(f"- `{name}`: `{cmd}`" for name, cmd in report_commands(s))
    blocks = [
        "# tooldecode report",
        f"Made by tooldecode {__version__} from {len(s.runs)} run(s).",
        "## Runs",
        _md_table(runs_table(s)),
        "Commands that re-create the runs:\n\n" + cmds,
        "## Arms",
        common_line(s),
        _md_table(arms_table(s)),
        *(part for title, table in verdict_sections(s) for part in (f"## {title}", _md_table(table))),
        "## Invented keys",
        _md_table(zoo_table(s)),
    ]
    if s.probe:
        blocks += ["## Close-brace probe", _md_table(probe_table(s))]
    rescues = [(run.name, run.rescue) for run in s.runs if run.rescue]
    if rescues:
        blocks.append("## Lenient-harness repair")
        for name, text in rescues:
            blocks += [f"### {name}", text]
    return "\n\n".join(b.strip() for b in blocks if b.strip()) + "\n"
