"""Reports over runs: ``summary.md`` (tables) and a self-contained ``report.html`` (tables, plots, samples).

Every number comes from the raw samples of the runs, scored by the current scorer: a run's
``verdicts-<SCORER_VERSION>.jsonl`` is used when it covers exactly the run's samples, otherwise the run
is scored again and that file is (re)written, exactly as ``tooldecode rescore`` writes it. Samples are
grouped by arm (the record's ``arm`` dict); the fields that differ between arms label them.

Public surface: ``load_run``, ``summarize``, ``summary_markdown``, ``summary_html``, the ``plot_*``
functions (matplotlib figures, Agg backend) and ``report(runs, out)``. docs/report.md has the details.
"""

from __future__ import annotations

import argparse
import base64
import html
import io
import json
import math
import os
import re
import shlex
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tooldecode import __version__
from tooldecode.errors import ToolDecodeError
from tooldecode.runstore import RunStore, rescore
from tooldecode.stats import (
    Diff,
    Rate,
    cluster_bootstrap_diff,
    cluster_rate,
    newcombe_diff,
    noise_floor,
    wilson,
)

__all__ = [
    "Arm",
    "ReportError",
    "RunData",
    "Summary",
    "load_run",
    "plot_probe",
    "plot_rates",
    "plot_zoo",
    "register",
    "report",
    "summarize",
    "summary_html",
    "summary_markdown",
]

# Fields of a record's arm dict that do not define the arm (they vary within it).
NOT_ARM_FIELDS = ("seed", "index")
# Arm fields that follow from others (conditioning <-> level, engine <- mode, wire <- call format and model,
# expected_tool <- toolset): they do not count as a second difference between two arms, and they are left
# out of labels where the other varying fields determine them.
DERIVED_FIELDS = ("conditioning", "engine", "wire", "expected_tool")
# Headline metrics: (name, column title). Verdict classes come from tooldecode.scoring.
HEADLINE = (
    ("invented_key", "invented key"),
    ("valid", "valid"),
    ("payload_correct", "payload correct"),
    ("payload_correct_schema_invalid", "payload correct, schema-invalid"),
)
# Metrics compared between arms that differ in one field, and plotted with their intervals.
COMPARED = ("invented_key", "valid", "payload_correct")
MAX_SAMPLE_ROWS = 500  # per run in report.html
FEW_CLUSTERS = 10  # below this many scenarios a cluster-bootstrap interval is too narrow
N_BOOT = 2000
PROBE_FILE = "probe.jsonl"
NEW_TEXT_KEYS = ("newText", "new_string", "new_str", "newString")


class ReportError(ToolDecodeError):
    """Runs that cannot be reported (none given, unreadable verdict or probe files)."""


# --- loading ---------------------------------------------------------------------------------------


@dataclass
class Sample:
    """What the report keeps of one raw sample (token-level arrays are dropped) and its verdict."""

    run: str
    key: str
    arm: dict
    scenario: str
    seed: Any
    index: Any
    prefill: str
    text: str
    finish_reason: str | None
    error: str | None
    verdict: dict

    @property
    def scored(self) -> bool:
        return self.verdict.get("verdict") is not None


@dataclass
class RunData:
    """One run as the report sees it."""

    path: Path
    name: str
    manifest: dict
    samples: list[Sample]
    verdict_file: Path | None  # None: scored in memory (the run directory was not writable)
    verdicts_written: bool  # the report (re)wrote verdict_file
    probe: list[dict] = field(default_factory=list)
    # tooldecode.repair's rescue accounting as Markdown, when the run has loose samples
    rescue: str | None = None

    @property
    def command(self) -> str | None:
        cmd = self.manifest.get("command")
        if isinstance(cmd, list):
            return shlex.join(str(c) for c in cmd)
        return str(cmd) if cmd else None


def _scorer() -> tuple[str, Callable[[dict, dict], dict], tuple[str, ...]]:
    from tooldecode import scoring

    return scoring.SCORER_VERSION, scoring.score_record, tuple(scoring.PRECEDENCE)


def _read_jsonl(path: Path) -> list[dict]:
    out: list[dict] = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as err:
                raise ReportError(
                    f"{path} line {lineno}: not valid JSON ({err.msg}); delete the file "
                    "and run the report again"
                ) from None
            if not isinstance(rec, dict):
                raise ReportError(f"{path} line {lineno}: not a JSON object; delete the file and run again")
            out.append(rec)
    return out


def _verdicts_of(store: RunStore, keys: set[str]) -> tuple[dict[str, dict], Path | None, bool]:
    """Verdicts by key: from ``verdicts-<version>.jsonl`` if it covers exactly ``keys``, else scored now."""
    version, score_record, _ = _scorer()
    path = store.derived_path(f"verdicts-{version}.jsonl")
    if path.is_file():
        try:
            records = _read_jsonl(path)
        except (ReportError, OSError, UnicodeDecodeError):
            records = []
        by_key = {r.get("key"): r for r in records}
        if len(by_key) == len(records) and set(by_key) == keys:
            return by_key, path, False
    try:
        written = rescore(store, score_record, version)
    except OSError:  # read-only run directory: score in memory only
        scored = {
            r["key"]: {"key": r["key"], **score_record(r, store.manifest)} for r in store.sample_records()
        }
        return scored, None, False
    return {r["key"]: r for r in _read_jsonl(written)}, written, True


def load_run(path: str | os.PathLike[str]) -> RunData:
    """Read a run's manifest, samples, verdicts (scoring and writing them if needed) and probe rows."""
    store = RunStore.open(path)
    samples: list[Sample] = []
    for r in store.sample_records():  # keep what the report shows, not the token-level arrays
        arm = r.get("arm") if isinstance(r.get("arm"), dict) else {}
        samples.append(
            Sample(
                run=store.name,
                key=r["key"],
                arm={k: v for k, v in arm.items() if k not in NOT_ARM_FIELDS},
                scenario=str(r.get("scenario") or "-"),
                seed=r.get("seed", arm.get("seed")),
                index=r.get("index", arm.get("index")),
                prefill=r.get("prefill") or "",
                text=r.get("text") or "",
                finish_reason=r.get("finish_reason"),
                error=r.get("error"),
                verdict={},
            )
        )
    verdicts, vpath, written = _verdicts_of(store, {s.key for s in samples})
    for s in samples:
        s.verdict = verdicts[s.key]
    probe_path = store.derived_path(PROBE_FILE)
    probe = _read_jsonl(probe_path) if probe_path.is_file() else []
    return RunData(
        store.path, store.name, store.manifest, samples, vpath, written, probe, _rescue(store, verdicts)
    )


def _rescue(store: RunStore, verdicts: dict[str, dict]) -> str | None:
    """The lenient-harness rescue accounting of a run (Markdown), or None without loose samples."""
    from tooldecode.repair import format_rescue, rescue_accounting

    summary = rescue_accounting(store.sample_records(), store.manifest, verdicts=verdicts)
    return format_rescue(summary) if summary.get("n_loose") else None


# --- outcomes --------------------------------------------------------------------------------------


def _payload_correct(v: dict) -> bool:
    payload = v.get("payload")
    return isinstance(payload, dict) and bool(payload.get("file_correct"))


def outcome(metric: str, verdict: dict) -> bool:
    """Whether a (scored) sample's verdict counts for ``metric``: a verdict class or a headline metric."""
    if metric == "payload_correct":
        return _payload_correct(verdict)
    if metric == "payload_correct_schema_invalid":
        return _payload_correct(verdict) and verdict.get("verdict") != "valid"
    return verdict.get("verdict") == metric


def metric_title(metric: str) -> str:
    return dict(HEADLINE).get(metric, metric.replace("_", " "))


# --- arms and statistics ---------------------------------------------------------------------------


def _fmt_value(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, str):
        return v
    return json.dumps(v, sort_keys=True, ensure_ascii=False)


def _freeze(arm: dict) -> str:
    return json.dumps(arm, sort_keys=True, ensure_ascii=False, default=str)


@dataclass
class Arm:
    """The scored samples of one arm of one run, with a rate for every verdict class and headline metric."""

    run: str
    arm: dict
    label: str
    samples: list[Sample]  # scored samples only
    n_errors: int  # samples with a sampling error (not scored)
    rates: dict[str, Rate]

    @property
    def n(self) -> int:
        return len(self.samples)

    @property
    def scenarios(self) -> list[str]:
        return sorted({s.scenario for s in self.samples})

    @property
    def seeds(self) -> list[Any]:
        return sorted({s.seed for s in self.samples}, key=str)

    def values(self, metric: str) -> list[bool]:
        return [outcome(metric, s.verdict) for s in self.samples]


@dataclass
class DiffRow:
    """Arms ``a`` and ``b`` that differ in one field: ``a - b`` for one metric."""

    field: str
    a: Arm
    b: Arm
    metric: str
    diff: Diff
    boot: tuple[float, float, float]  # cluster bootstrap over scenarios: (diff, lo, hi)
    n_clusters: int
    paired: bool


@dataclass
class NoiseRow:
    """One arm repeated (several seeds, or the same arm in several runs): spread of a rate across repeats."""

    label: str
    metric: str
    repeats: list[tuple[str, Rate]]  # (repeat name, rate)
    floor: dict  # stats.noise_floor


@dataclass
class ZooKey:
    key: str
    samples: int  # samples with this invented key
    where: Counter  # path pattern (indices as []) -> samples
    arms: Counter  # arm label -> samples


@dataclass
class ProbeArm:
    label: str
    rows: list[dict]
    mean: tuple[float, float, float]  # P(continue): mean and cluster-robust interval over scenarios
    n_scenarios: int


@dataclass
class Summary:
    runs: list[RunData]
    arms: list[Arm]
    columns: list[str]  # arm fields that vary between arms (table columns)
    common: dict  # arm fields equal in every arm
    verdict_order: tuple[str, ...]
    diffs: list[DiffRow]
    noise: list[NoiseRow]
    zoo: list[ZooKey]
    probe: list[ProbeArm]
    probe_columns: list[str]


def _determined(fld: str, by: Sequence[str], arms: Sequence[dict]) -> bool:
    """A derived field whose value, across ``arms``, is a function of the fields ``by``."""
    if fld not in DERIVED_FIELDS or not by:
        return False
    seen: dict[tuple[str, ...], str] = {}
    for a in arms:
        key = tuple(_fmt_value(a.get(b)) for b in by)
        if seen.setdefault(key, _fmt_value(a.get(fld))) != _fmt_value(a.get(fld)):
            return False
    return True


def _labels(
    arms: Sequence[dict],
    runs: Sequence[str],
    several_runs: bool,
    *,
    full_when_one: bool = False,
) -> tuple[list[str], list[str], dict]:
    """(varying fields, a label per arm, fields common to all arms)."""
    keys: list[str] = []
    for a in arms:
        keys.extend(k for k in a if k not in keys)
    varying = [k for k in keys if len({_fmt_value(a.get(k)) for a in arms}) > 1]
    common = {k: arms[0].get(k) for k in keys if k not in varying} if arms else {}
    independent = [c for c in varying if c not in DERIVED_FIELDS]
    columns = [k for k in varying if not _determined(k, independent, arms)]
    labels = []
    for a, run in zip(arms, runs, strict=True):
        text = ", ".join(f"{k}={_fmt_value(a.get(k))}" for k in columns if a.get(k) is not None)
        if several_runs:
            text = f"{run}: {text}" if text else run
        if not text and full_when_one:
            text = ", ".join(f"{k}={_fmt_value(v)}" for k, v in a.items())
        labels.append(text or "all samples")
    return columns, labels, common


def _group_arms(runs: Sequence[RunData], order: tuple[str, ...]) -> tuple[list[Arm], list[str], dict]:
    groups: dict[tuple[str, str], list[Sample]] = {}
    for run in runs:
        for s in run.samples:
            groups.setdefault((run.name, _freeze(s.arm)), []).append(s)
    keys = list(groups)
    arm_dicts = [groups[k][0].arm for k in keys]
    columns, labels, common = _labels(arm_dicts, [k[0] for k in keys], len(runs) > 1)
    metrics = [m for m, _ in HEADLINE] + [v for v in order if v not in dict(HEADLINE)]
    arms = []
    for key, arm, label in zip(keys, arm_dicts, labels, strict=True):
        scored = [s for s in groups[key] if s.scored]
        rates = {m: wilson(sum(outcome(m, s.verdict) for s in scored), len(scored)) for m in metrics}
        arms.append(Arm(key[0], arm, label, scored, len(groups[key]) - len(scored), rates))
    return arms, columns, common


def _one_field_apart(a: dict, b: dict) -> str | None:
    keys = list(a) + [k for k in b if k not in a]
    differ = [k for k in keys if _fmt_value(a.get(k)) != _fmt_value(b.get(k))]
    main = [k for k in differ if k not in DERIVED_FIELDS]
    if len(main) == 1:
        return main[0]
    return differ[0] if not main and len(differ) == 1 else None


def _diffs(arms: Sequence[Arm]) -> list[DiffRow]:
    rows: list[DiffRow] = []
    for i, x in enumerate(arms):
        for y in arms[i + 1 :]:
            fld = _one_field_apart(x.arm, y.arm)
            if fld is None or not x.n or not y.n:
                continue
            a, b = (x, y) if _fmt_value(x.arm.get(fld)) <= _fmt_value(y.arm.get(fld)) else (y, x)
            paired = set(a.scenarios) == set(b.scenarios)
            for metric in COMPARED:
                va, vb = a.values(metric), b.values(metric)
                d = newcombe_diff(sum(va), len(va), sum(vb), len(vb))
                boot = cluster_bootstrap_diff(
                    va,
                    [s.scenario for s in a.samples],
                    vb,
                    [s.scenario for s in b.samples],
                    paired=paired,
                    n_boot=N_BOOT,
                )
                n_clusters = len(set(a.scenarios) | set(b.scenarios))
                rows.append(DiffRow(fld, a, b, metric, d, boot, n_clusters, paired))
    return rows


def _noise(arms: Sequence[Arm]) -> list[NoiseRow]:
    """Repeats of an arm: its seeds within a run, or the same arm dict in several runs."""
    by_arm: dict[str, list[Arm]] = defaultdict(list)
    for arm in arms:
        by_arm[_freeze(arm.arm)].append(arm)
    rows: list[NoiseRow] = []
    for group in by_arm.values():
        repeats: dict[str, list[Sample]] = {}
        several_runs = len(group) > 1
        for arm in group:
            for s in arm.samples:
                name = f"{arm.run}/seed {s.seed}" if several_runs else f"seed {s.seed}"
                repeats.setdefault(name, []).append(s)
        if len(repeats) < 2:
            continue
        label = (
            group[0].label
            if not several_runs
            else (", ".join(f"{k}={_fmt_value(v)}" for k, v in group[0].arm.items()) or "all samples")
        )
        for metric in COMPARED[:2]:
            rates = [
                (name, wilson(sum(outcome(metric, s.verdict) for s in ss), len(ss)))
                for name, ss in repeats.items()
            ]
            rows.append(NoiseRow(label, metric, rates, noise_floor([r.rate for _, r in rates])))
    return rows


_INDEX = re.compile(r"\[\d+\]")


def _zoo(arms: Sequence[Arm]) -> list[ZooKey]:
    found: dict[str, ZooKey] = {}
    for arm in arms:
        for s in arm.samples:
            seen: dict[str, str] = {}
            for item in s.verdict.get("invented_keys") or []:
                key = str(item.get("key"))
                path = str(item.get("path") or key)
                where = _INDEX.sub("[]", path)
                where = where[: -len(key)].rstrip(".") if where.endswith(key) else where
                seen.setdefault(key, where or "$")
            for key, where in seen.items():
                z = found.setdefault(key, ZooKey(key, 0, Counter(), Counter()))
                z.samples += 1
                z.where[where] += 1
                z.arms[arm.label] += 1
    return sorted(found.values(), key=lambda z: (-z.samples, z.key))


def _probe_arm(row: dict) -> dict:
    """The condition of a probe row: its ``arm`` dict, else its model and transcript variant."""
    if isinstance(row.get("arm"), dict):
        return row["arm"]
    if row.get("arm") is not None:
        return {"arm": row["arm"]}
    arm = {"model": row.get("model")} if row.get("model") else {}
    variant = row.get("variant")
    if isinstance(variant, dict):
        arm.update(variant)
    elif row.get("variant_label"):
        arm["variant"] = row["variant_label"]
    return arm


def probe_rows(rows: Iterable[dict]) -> list[dict]:
    """The decision points the report shows: after a new-text key (the close of an edit item) when the
    rows have any, else every point where the object closes, else all rows."""
    rows = [r for r in rows if isinstance(r.get("p_continue"), int | float)]
    after_new = [r for r in rows if r.get("after") in NEW_TEXT_KEYS]
    if after_new:
        return after_new
    closes = [
        r for r in rows if r.get("container", "object") == "object" and r.get("actual", "close") == "close"
    ]
    return closes or rows


def _probe(runs: Sequence[RunData]) -> tuple[list[ProbeArm], list[str]]:
    groups: dict[tuple[str, str], list[dict]] = {}
    first: dict[tuple[str, str], dict] = {}
    for run in runs:
        for r in probe_rows(run.probe):
            arm = _probe_arm(r)
            key = (run.name, _freeze(arm))
            groups.setdefault(key, []).append(r)
            first.setdefault(key, arm)
    if not groups:
        return [], []
    keys = list(groups)
    arm_dicts = [first[k] for k in keys]
    columns, labels, _ = _labels(arm_dicts, [k[0] for k in keys], len(runs) > 1, full_when_one=True)
    out = []
    for key, label in zip(keys, labels, strict=True):
        rs = groups[key]
        vals = [float(r["p_continue"]) for r in rs]
        clusters = [str(r.get("scenario")) for r in rs]
        out.append(
            ProbeArm(label, rs, _cluster_mean(vals, clusters), len(set(clusters)))
        )
    return out, columns


def _cluster_mean(vals: list[float], clusters: list[str]) -> tuple[float, float, float]:
    """Mean probability with a cluster-robust (CR1, t on G-1 df) interval over scenarios."""
    r = cluster_rate(vals, clusters)
    return (r.rate, r.lo, r.hi)


def summarize(runs: Sequence[RunData]) -> Summary:
    """All tables of a report: arms and their rates, one-field differences, noise floors, zoo, probe."""
    _, _, order = _scorer()
    observed = {s.verdict.get("verdict") for run in runs for s in run.samples if s.scored}
    order = tuple(order) + tuple(sorted(str(v) for v in observed if v not in order))
    arms, columns, common = _group_arms(runs, order)
    probe, probe_columns = _probe(runs)
    return Summary(
        list(runs), arms, columns, common, order, _diffs(arms), _noise(arms), _zoo(arms), probe, probe_columns
    )


# --- tables (shared by Markdown and HTML) ----------------------------------------------------------


@dataclass
class Table:
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


def _arm_cells(s: Summary, arm: Arm) -> list[str]:
    cells = [arm.run] if len(s.runs) > 1 else []
    return cells + [_fmt_value(arm.arm.get(c)) for c in s.columns]


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


def diffs_table(s: Summary) -> Table:
    rows = []
    few = False
    for d in s.diffs:
        boot = f"{_pts(d.boot[0])} pts [{_pts(d.boot[1])}, {_pts(d.boot[2])}]"
        boot += f" ({d.n_clusters} scenarios, {'paired' if d.paired else 'unpaired'})"
        if d.n_clusters < FEW_CLUSTERS:
            boot += " †"
            few = True
        rows.append(
            [
                d.field,
                d.a.label,
                d.b.label,
                metric_title(d.metric),
                str(d.diff.a),
                str(d.diff.b),
                str(d.diff),
                boot,
            ]
        )
    note = (
        "Pairs of arms that differ in exactly one field; difference a − b in percentage points with "
        "Newcombe's 95% interval and Fisher's exact p, and a 95% cluster-bootstrap interval that resamples "
        f"scenarios ({N_BOOT} replicates, seed 0)."
    )
    if few:
        note += f" † fewer than {FEW_CLUSTERS} scenarios: the bootstrap interval is too narrow."
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
    few = False
    for p in s.probe:
        pc = [float(r["p_continue"]) for r in p.rows]
        pclose = [float(r["p_close"]) for r in p.rows if isinstance(r.get("p_close"), int | float)]
        ent = [float(r["entropy"]) for r in p.rows if isinstance(r.get("entropy"), int | float)]
        und = [float(r["p_undetermined"]) for r in p.rows if isinstance(r.get("p_undetermined"), int | float)]
        mean, lo, hi = p.mean
        interval = f"{_pct(mean)} [{_pct(lo)}, {_pct(hi)}]"
        if p.n_scenarios < FEW_CLUSTERS:
            interval += " †"
            few = True
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
    if few:
        note += f" † fewer than {FEW_CLUSTERS} scenarios."
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


def _common_line(s: Summary) -> str:
    if not s.common:
        return ""
    return "Common to all arms: " + ", ".join(f"{k}={_fmt_value(v)}" for k, v in s.common.items())


def _commands(s: Summary) -> list[tuple[str, str]]:
    return [(run.name, run.command or "(not recorded in the manifest)") for run in s.runs]


def summary_markdown(s: Summary) -> str:
    """The report's tables as Markdown: every rate with its n and 95% interval."""
    cmds = "\n".join(f"- `{name}`: `{cmd}`" for name, cmd in _commands(s))
    blocks = [
        "# tooldecode report",
        f"Made by tooldecode {__version__} from {len(s.runs)} run(s).",
        "## Runs",
        _md_table(runs_table(s)),
        "Commands that re-create the runs:\n\n" + cmds,
        "## Arms",
        _common_line(s),
        _md_table(arms_table(s)),
        "## All verdicts",
        _md_table(verdicts_table(s)),
        "## Differences between arms that differ in one field",
        _md_table(diffs_table(s)),
        "## Noise floor",
        _md_table(noise_table(s)),
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


# --- plots -----------------------------------------------------------------------------------------


def _figure(figsize: tuple[float, float]):
    """A matplotlib Figure on the Agg canvas (no pyplot: the caller's backend and state are left alone)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize)
    FigureCanvasAgg(fig)
    return fig


def plot_rates(s: Summary, metrics: Sequence[str] = COMPARED):
    """Rates with their Wilson 95% intervals, one panel per metric, one row per arm (None without samples)."""
    arms = [a for a in s.arms if a.n]
    if not arms:
        return None
    height = 1.2 + 0.32 * max(1, len(arms))
    longest = max(len(a.label) for a in arms)
    fig = _figure((4.2 * len(metrics) + max(2.5, 0.075 * longest), height))
    axes = fig.subplots(1, len(metrics), sharey=True, squeeze=False)
    ys = list(range(len(arms)))[::-1]
    for ax, metric in zip(axes[0], metrics, strict=True):
        rates = [a.rates[metric] for a in arms]
        x = [100 * r.rate for r in rates]
        err = [[100 * (r.rate - r.lo) for r in rates], [100 * (r.hi - r.rate) for r in rates]]
        ax.errorbar(x, ys, xerr=err, fmt="o", capsize=3, color="#1f5fa8")
        ax.set_xlim(-2, 102)
        ax.set_title(metric_title(metric))
        ax.set_xlabel("% of samples (Wilson 95%)")
        ax.grid(axis="x", alpha=0.3)
    axes[0][0].set_yticks(ys, [a.label for a in arms])
    axes[0][0].set_ylim(-0.6, len(arms) - 0.4)
    fig.tight_layout()
    return fig


def plot_zoo(s: Summary, top: int = 40):
    """The invented-key zoo: samples per invented key name (None when there are none)."""
    if not s.zoo:
        return None
    zoo = s.zoo[:top]
    fig = _figure((7.5, 1.0 + 0.28 * len(zoo)))
    ax = fig.subplots()
    ax.barh(range(len(zoo))[::-1], [z.samples for z in zoo], color="#c2452d")
    ax.set_yticks(range(len(zoo))[::-1], [z.key for z in zoo])
    ax.set_xlabel("samples with the key")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_title("Invented keys" + (f" (top {top} of {len(s.zoo)})" if len(s.zoo) > top else ""))
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig


def plot_probe(s: Summary):
    """P(continue) at each decision point against the length of the preceding newText (None without rows)."""
    if not s.probe:
        return None
    fig = _figure((11, 4.2))
    axes = fig.subplots(1, 2, sharey=True)
    for p in s.probe:
        y = [max(float(r["p_continue"]), 1e-9) for r in p.rows]
        for ax, fld in zip(axes, ("newtext_lines", "newtext_chars"), strict=True):
            x = [_num(r, fld) for r in p.rows]
            ax.scatter(x, y, s=14, alpha=0.7, label=p.label)
    for ax, title in zip(axes, ("newText lines", "newText characters"), strict=True):
        ax.set_yscale("log")
        ax.set_xlabel(title)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("P(continue) at the close of the item")
    axes[1].legend(fontsize=8, loc="best")
    fig.tight_layout()
    return fig


def _num(row: dict, fld: str) -> float:
    v = row.get(fld, row.get(fld.replace("newtext_", "value_")))
    return float(v) if isinstance(v, int | float) else math.nan


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    return base64.b64encode(buf.getvalue()).decode("ascii")


# --- HTML ------------------------------------------------------------------------------------------

_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:1.5em auto;max-width:1400px;padding:0 1em;color:#222}
h1{font-size:1.6em}h2{margin-top:1.8em;border-bottom:1px solid #ccc}
table{border-collapse:collapse;margin:.5em 0;font-size:13px}
th,td{border:1px solid #ddd;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#f3f3f3}.note{color:#555;font-size:12px;max-width:1100px}
code{background:#f4f4f4;padding:0 3px}img{max-width:100%}
table.samples tr.s{cursor:pointer}table.samples tr.s:hover{background:#eef4ff}
tr.detail{display:none}tr.detail.open{display:table-row}
pre.raw{white-space:pre-wrap;word-break:break-all;max-width:1300px;margin:0;font-size:12px}
pre.raw .pf{color:#777;background:#f1f1f1}mark{background:#ffb3a7;font-weight:bold}
.v-valid{color:#17733a}.v-invented_key{color:#b3261e;font-weight:bold}
input.filter{margin:.3em 0;padding:2px 5px;width:22em}
"""

_JS = """
document.querySelectorAll('table.samples').forEach(function(t){
  t.addEventListener('click',function(e){var r=e.target.closest('tr.s');if(!r)return;
    var d=r.nextElementSibling;if(d&&d.classList.contains('detail'))d.classList.toggle('open');});
});
document.querySelectorAll('input.filter').forEach(function(inp){
  inp.addEventListener('input',function(){var q=inp.value.toLowerCase();
    var t=document.getElementById(inp.dataset.table);
    t.querySelectorAll('tr.s').forEach(function(r){var show=r.textContent.toLowerCase().indexOf(q)>=0;
      r.style.display=show?'':'none';var d=r.nextElementSibling;
      if(!show&&d&&d.classList.contains('detail'))d.classList.remove('open');});});
});
"""

_SURROGATE = re.compile("[\ud800-\udfff]")


def _clean(text: str) -> str:
    """Text that encodes as UTF-8 (lone surrogates from undecodable model output become U+FFFD)."""
    return _SURROGATE.sub("\ufffd", text)


def _esc(text: Any) -> str:
    return html.escape(_clean(str(text)), quote=True)


def _html_table(t: Table, cls: str = "") -> str:
    if not t.rows:
        return f"<p><em>{_esc(t.empty)}</em></p>"
    head = "".join(f"<th>{_esc(h)}</th>" for h in t.header)
    body = "".join("<tr>" + "".join(f"<td>{_esc(c)}</td>" for c in row) + "</tr>" for row in t.rows)
    note = f'<p class="note">{_esc(t.note)}</p>' if t.note else ""
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{note}'


def _md_to_html(text: str) -> str:
    """The small Markdown subset of other modules' summaries: paragraphs, ``-`` lists, pipe tables."""
    out = []
    for block in re.split(r"\n\s*\n", text.strip()):
        lines = [ln.strip() for ln in block.splitlines() if ln.strip()]
        if lines and all(ln.startswith("|") for ln in lines):
            cells = [
                [c.strip() for c in ln.strip("|").split("|")]
                for ln in lines
                if not re.fullmatch(r"\|[\s:|-]+\|", ln)
            ]
            out.append(_html_table(Table(cells[0], cells[1:])))
        elif lines and all(ln.startswith("- ") for ln in lines):
            out.append("<ul>" + "".join(f"<li>{_esc(ln[2:])}</li>" for ln in lines) + "</ul>")
        else:
            out.append(f"<p>{_esc(' '.join(lines))}</p>")
    return "".join(out)


def highlight(text: str, keys: Iterable[str]) -> str:
    """``text`` as escaped HTML with every quoted occurrence of the given keys wrapped in ``<mark>``."""
    keys = sorted({k for k in keys if k}, key=len, reverse=True)
    if not keys:
        return _esc(text)
    pattern = re.compile("([\"'])(?:" + "|".join(re.escape(k) for k in keys) + ")\\1")
    out, pos = [], 0
    for m in pattern.finditer(text):
        out.append(_esc(text[pos : m.start()]))
        out.append(f"<mark>{_esc(m.group())}</mark>")
        pos = m.end()
    out.append(_esc(text[pos:]))
    return "".join(out)


def _raw_html(s: Sample) -> str:
    keys = [str(i.get("key")) for i in s.verdict.get("invented_keys") or []]
    whole = s.prefill + s.text
    marked = highlight(whole, keys)
    if not s.prefill:
        return marked
    # Split the marked text back at the prefill boundary only when no mark straddles it.
    pre = highlight(s.prefill, keys)
    if marked.startswith(pre):
        return f'<span class="pf" title="prefill">{pre}</span>{marked[len(pre) :]}'
    return marked


def _sample_priority(s: Sample) -> int:
    v = s.verdict.get("verdict")
    return 0 if v == "invented_key" else 2 if v == "valid" else 1


def _samples_section(run: RunData, labels: dict[tuple[str, str], str], table_id: str) -> str:
    ordered = sorted(run.samples, key=_sample_priority)  # stable: file order within each class
    shown = ordered[:MAX_SAMPLE_ROWS]
    note = (
        f"Showing {len(shown)} of {len(run.samples)} samples: invented-key samples first, then other "
        "verdicts, then valid ones."
        if len(shown) < len(run.samples)
        else f"All {len(run.samples)} samples."
    )
    rows = []
    for s in shown:
        v = s.verdict
        verdict = v.get("verdict") or f"not scored ({s.error})"
        inv = ", ".join(str(i.get("path")) for i in v.get("invented_keys") or [])
        pay = "–" if not isinstance(v.get("payload"), dict) else ("yes" if _payload_correct(v) else "no")
        label = labels.get((s.run, _freeze(s.arm)), "")
        rows.append(
            f'<tr class="s"><td>{_esc(s.key)}</td><td>{_esc(label)}</td><td>{_esc(s.scenario)}</td>'
            f'<td>{_esc(s.seed)}</td><td class="v-{_esc(v.get("verdict"))}">{_esc(verdict)}</td>'
            f"<td>{_esc(inv)}</td><td>{pay}</td><td>{_esc(s.finish_reason)}</td></tr>"
        )
        extra = []
        if v.get("flags"):
            extra.append("flags: " + ", ".join(map(str, v["flags"])))
        if v.get("errors"):
            extra.append("errors: " + "; ".join(map(str, v["errors"][:5])))
        info = "".join(f"<div>{_esc(e)}</div>" for e in extra)
        rows.append(
            f'<tr class="detail"><td colspan="8">{info}<pre class="raw">{_raw_html(s)}</pre></td></tr>'
        )
    head = "".join(
        f"<th>{h}</th>"
        for h in ("key", "arm", "scenario", "seed", "verdict", "invented keys", "payload correct", "finish")
    )
    return (
        f'<h3>{_esc(run.name)}</h3><p class="note">{_esc(note)} Click a row for the raw output '
        "(prefill grey, invented keys marked).</p>"
        f'<input class="filter" data-table="{table_id}" placeholder="filter rows (e.g. invented_key)">'
        f'<table class="samples" id="{table_id}"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}'
        "</tbody></table>"
    )


def _img(fig, alt: str) -> str:
    if fig is None:
        return ""
    return f'<img alt="{_esc(alt)}" src="data:image/png;base64,{_png(fig)}">'


def summary_html(s: Summary, command: str | None = None) -> str:
    labels = {(a.run, _freeze(a.arm)): a.label for a in s.arms}
    cmds = "".join(f"<li><code>{_esc(n)}</code>: <code>{_esc(c)}</code></li>" for n, c in _commands(s))
    common = _common_line(s).strip()
    parts = [
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
        "<title>tooldecode report</title>",
        f"<style>{_CSS}</style></head><body>",
        "<h1>tooldecode report</h1>",
        f'<p class="note">Made by tooldecode {_esc(__version__)}'
        + (f" with <code>{_esc(command)}</code>" if command else "")
        + ".</p>",
        "<h2>Runs</h2>",
        _html_table(runs_table(s)),
        f"<p>Commands that re-create the runs:</p><ul>{cmds}</ul>",
        "<h2>Arms</h2>",
        f"<p>{_esc(common)}</p>" if common else "",
        _html_table(arms_table(s)),
    ]
    parts.append(_img(plot_rates(s), "rates per arm with 95% intervals"))
    parts += [
        "<h2>All verdicts</h2>",
        _html_table(verdicts_table(s)),
        "<h2>Differences between arms that differ in one field</h2>",
        _html_table(diffs_table(s)),
        "<h2>Noise floor</h2>",
        _html_table(noise_table(s)),
        "<h2>Invented keys</h2>",
        _img(plot_zoo(s), "invented keys"),
        _html_table(zoo_table(s)),
    ]
    if s.probe:
        parts += [
            "<h2>Close-brace probe</h2>",
            _img(plot_probe(s), "P(continue) against newText length"),
            _html_table(probe_table(s)),
        ]
    rescues = [(run.name, run.rescue) for run in s.runs if run.rescue]
    if rescues:
        parts.append("<h2>Lenient-harness repair</h2>")
        parts += [f"<h3>{_esc(name)}</h3>{_md_to_html(text)}" for name, text in rescues]
    parts += distortion_parts(s)
    parts.append("<h2>Samples</h2>")
    parts += [_samples_section(run, labels, f"samples-{i}") for i, run in enumerate(s.runs)]
    parts.append(f"<script>{_JS}</script></body></html>")
    return _clean("\n".join(parts))


# --- distortion of masked sampling -----------------------------------------------------------------

DISTORTION_RATES = ("close", "string goes on", "payload correct")


def distortion_results(s: Summary) -> list[tuple[str, list[Any] | str]]:
    """Per run with a masked arm: ``tooldecode.distortion.analyse_run``'s figures (the reference from
    the replay cache that ``tooldecode distortion`` writes; none without it), or why there are none."""
    from tooldecode.distortion import DistortionError, analyse_run, cached_validity, has_masked_arm

    out: list[tuple[str, list[Any] | str]] = []
    for run in s.runs:
        if not has_masked_arm(run.manifest):
            continue
        try:
            out.append((run.name, analyse_run(run.path, validity=cached_validity(run.path))))
        except DistortionError as err:
            out.append((run.name, str(err)))
    return out


def distortion_table(results: list[tuple[str, list[Any] | str]]) -> Table:
    rows = []
    for name, res in results:
        if isinstance(res, str):
            rows.append([name, res] + [""] * 7)
            continue
        for r in res:
            checks = [c for c in r.checks if c.agree is not None]
            agree = f"{sum(1 for c in checks if c.agree)}/{len(checks)}" if checks else "no reference"
            sgo = r.rates_q.get("string goes on")
            sgo_pl = r.rates_pl.get("string goes on")
            ref = next((c.reference for c in r.checks if c.name == "string goes on"), None)
            rows.append(
                [
                    name,
                    f"{r.model} {r.mode}",
                    f"{r.n} ({r.n_scenarios} scen.)",
                    r.p_valid.fmt(3, pct=True),
                    r.kl_q_pl.fmt(2),
                    f"{r.ess:.1f}/{r.n_weights}",
                    f"{sgo.fmt(3, pct=True)} → {sgo_pl.fmt(3, pct=True)}" if sgo and sgo_pl else "",
                    ref.fmt(3, pct=True) if ref is not None and math.isfinite(ref.point) else "n/a",
                    agree,
                ]
            )
    return Table(
        [
            "run",
            "arm",
            "n",
            "P(valid) = E_Q[w]",
            "KL(Q‖P_L) nats",
            "ESS",
            "string goes on: arm → under P_L",
            "reference (loose, grammar-valid)",
            "checks agree",
        ],
        rows,
        note="Intervals: bootstrap over scenarios (95%). 'under P_L': strict samples reweighted by w (strict), the "
        "samples themselves (strict-aligned). KL with ≥: some stored weights are censored (lower bound). "
        "`tooldecode distortion RUN` prints every check.",
    )


def plot_distortion(results: list[tuple[str, list[Any] | str]]):
    """Per masked arm and rate: the arm's own rate, the rate under P_L it implies, and the rejection
    reference, with 95% scenario-bootstrap intervals (None without a masked arm)."""
    arms = [(name, r) for name, res in results if not isinstance(res, str) for r in res]
    if not arms:
        return None
    fig = _figure((4.2 * len(DISTORTION_RATES) + 3.0, 1.4 + 0.55 * len(arms)))
    axes = fig.subplots(1, len(DISTORTION_RATES), sharey=True, squeeze=False)
    ys = [float(len(arms) - 1 - i) for i in range(len(arms))]
    series = (("arm (Q)", "#999999", -0.2), ("under P_L", "#1f5fa8", 0.0), ("reference", "#c0392b", 0.2))
    for ax, rate in zip(axes[0], DISTORTION_RATES, strict=True):
        for label, color, dy in series:
            pts = []
            for y, (_, r) in zip(ys, arms, strict=True):
                if label == "arm (Q)":
                    e = r.rates_q.get(rate)
                elif label == "under P_L":
                    e = r.rates_pl.get(rate)
                else:
                    e = next((c.reference for c in r.checks if c.name == rate), None)
                if e is not None and math.isfinite(e.point):
                    pts.append((y + dy, e))
            if pts:
                ax.errorbar(
                    [100 * e.point for _, e in pts],
                    [y for y, _ in pts],
                    xerr=[
                        [100 * max(e.point - e.lo, 0) for _, e in pts],
                        [100 * max(e.hi - e.point, 0) for _, e in pts],
                    ],
                    fmt="o",
                    capsize=3,
                    color=color,
                    label=label,
                )
        ax.set_xlim(-2, 102)
        ax.set_title(rate)
        ax.set_xlabel("% (scenario bootstrap 95%)")
        ax.grid(axis="x", alpha=0.3)
    axes[0][0].set_yticks(ys, [f"{name}: {r.model.split('-instruct')[0]} {r.mode}" for name, r in arms])
    axes[0][-1].legend(loc="lower right", fontsize="small")
    fig.tight_layout()
    return fig


def distortion_parts(s: Summary) -> list[str]:
    """The HTML of the distortion section (empty without a masked arm)."""
    results = distortion_results(s)
    if not results:
        return []
    return [
        "<h2>Distortion of masked sampling</h2>",
        "<p>A token mask samples from Q(y) = Π P(y_t | y_&lt;t) / Z_t; the model conditioned on a valid call is "
        "P_L(y) ∝ P(y)·1[valid]. Importance weights w = Π Z_t give P(valid) = E_Q[w], KL(Q‖P_L) = log E_Q[w] − "
        "E_Q[log w] and the rates under P_L; loose samples the grammar accepts are exact draws of P_L "
        "(docs/distortion.md).</p>",
        _img(plot_distortion(results), "rates under the mask, under P_L and in the rejection reference"),
        _html_table(distortion_table(results)),
    ]


# --- writing ---------------------------------------------------------------------------------------


def _write_text(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def report(
    runs: Sequence[str | os.PathLike[str]], out: str | os.PathLike[str] | None = None
) -> dict[str, Path]:
    """Write ``summary.md`` and ``report.html`` for ``runs`` into ``out`` and return the paths written.

    ``out`` defaults to the run's own directory for one run and ``./report`` for several. Verdict files
    that had to be (re)written are returned too, as ``verdicts:<run name>``.
    """
    paths: list[Path] = []
    for r in runs:
        p = Path(r)
        if p.resolve() not in [q.resolve() for q in paths]:
            paths.append(p)
    if not paths:
        raise ReportError("no runs given; pass one or more run directories, e.g. runs/e1")
    data = [load_run(p) for p in paths]
    names = Counter(d.name for d in data)
    for d in data:
        if names[d.name] > 1:
            d.name = str(d.path)
            for x in d.samples:
                x.run = d.name
    s = summarize(data)
    target = Path(out) if out is not None else (paths[0] if len(paths) == 1 else Path("report"))
    command = shlex.join(
        ["tooldecode", "report", *[str(p) for p in paths]] + (["--out", str(out)] if out is not None else [])
    )
    md = _clean(summary_markdown(s) + f"\nThis report: `{command}`\n")
    page = summary_html(s, command)
    written: dict[str, Path] = {}
    own = next((d for d in data if target.resolve() == d.path.resolve()), None)
    if own is not None:
        store = RunStore.open(own.path)
        written["summary"] = store.write_derived("summary.md", md)
        written["html"] = store.write_derived("report.html", page)
    else:
        if target.exists() and not target.is_dir():
            raise ReportError(f"{target} exists and is not a directory; choose another --out")
        written["summary"] = _write_text(target / "summary.md", md)
        written["html"] = _write_text(target / "report.html", page)
    for d in data:
        if d.verdicts_written and d.verdict_file is not None:
            written[f"verdicts:{d.name}"] = d.verdict_file
    return written


# --- CLI -------------------------------------------------------------------------------------------


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report",
        help="write summary.md and a self-contained report.html for runs",
        description="Score the runs' raw samples (using verdicts-<scorer>.jsonl when it is current, else "
        "writing it) and write summary.md and report.html: rates with Wilson intervals per arm, "
        "differences between arms that differ in one field, noise floor, invented keys, probe plots.",
    )
    p.add_argument("runs", nargs="+", metavar="RUN", help="run directory, e.g. runs/e1")
    p.add_argument(
        "--out",
        metavar="DIR",
        default=None,
        help="output folder (default: the run's directory for one run, ./report for several)",
    )
    p.set_defaults(func=cmd_report)


def cmd_report(args: argparse.Namespace) -> int:
    for what, path in report(args.runs, args.out).items():
        print(f"{what}: {path}")
    return 0
