"""Arms and their statistics: samples grouped by arm, rates with intervals, one-field differences, noise floor, zoo, probe."""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from tooldecode.report.data import (
    COMPARED,
    DERIVED_FIELDS,
    HEADLINE,
    NEW_TEXT_KEYS,
    RunData,
    Sample,
    shows_metric,
    verdict_order,
)
from tooldecode.stats import (
    Diff,
    Rate,
    cluster_bootstrap_diff,
    cluster_rate,
    newcombe_diff,
    noise_floor,
    wilson,
)

FEW_CLUSTERS = 10  # below this many scenarios a cluster-bootstrap interval is too narrow
N_BOOT = 2000


# --- arms and statistics ---------------------------------------------------------------------------


def fmt_value(v: Any) -> str:
    """An arm field's value as a table cell."""
    if v is None:
        return "–"
    if isinstance(v, str):
        return v
    return json.dumps(v, sort_keys=True, ensure_ascii=False)


def freeze_arm(arm: dict) -> str:
    """An arm dict as a hashable, canonical string."""
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
        return [shows_metric(metric, s.verdict) for s in self.samples]


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
    """One invented key: how many samples, where in the call, in which arms."""

    key: str
    samples: int  # samples with this invented key
    where: Counter  # path pattern (indices as []) -> samples
    arms: Counter  # arm label -> samples


@dataclass
class ProbeArm:
    """The close-brace probe rows of one arm, with the mean P(continue) over scenarios."""

    label: str
    rows: list[dict]
    mean: tuple[float, float, float]  # P(continue): mean and cluster-robust interval over scenarios
    n_scenarios: int


@dataclass
class Summary:
    """Everything a report shows: runs, arms with their rates, differences, noise, zoo, probe."""

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
        key = tuple(fmt_value(a.get(b)) for b in by)
        if seen.setdefault(key, fmt_value(a.get(fld))) != fmt_value(a.get(fld)):
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
    varying = [k for k in keys if len({fmt_value(a.get(k)) for a in arms}) > 1]
    common = {k: arms[0].get(k) for k in keys if k not in varying} if arms else {}
    independent = [c for c in varying if c not in DERIVED_FIELDS]
    columns = [k for k in varying if not _determined(k, independent, arms)]
    labels = []
    for a, run in zip(arms, runs, strict=True):
        text = ", ".join(f"{k}={fmt_value(a.get(k))}" for k in columns if a.get(k) is not None)
        if several_runs:
            text = f"{run}: {text}" if text else run
        if not text and full_when_one:
            text = ", ".join(f"{k}={fmt_value(v)}" for k, v in a.items())
        labels.append(text or "all samples")
    return columns, labels, common


def _group_arms(runs: Sequence[RunData], order: tuple[str, ...]) -> tuple[list[Arm], list[str], dict]:
    groups: dict[tuple[str, str], list[Sample]] = {}
    for run in runs:
        for s in run.samples:
            groups.setdefault((run.name, freeze_arm(s.arm)), []).append(s)
    keys = list(groups)
    arm_dicts = [groups[k][0].arm for k in keys]
    columns, labels, common = _labels(arm_dicts, [k[0] for k in keys], len(runs) > 1)
    metrics = [m for m, _ in HEADLINE] + [v for v in order if v not in dict(HEADLINE)]
    arms = []
    for key, arm, label in zip(keys, arm_dicts, labels, strict=True):
        scored = [s for s in groups[key] if s.scored]
        rates = {m: wilson(sum(shows_metric(m, s.verdict) for s in scored), len(scored)) for m in metrics}
        arms.append(Arm(key[0], arm, label, scored, len(groups[key]) - len(scored), rates))
    return arms, columns, common


def _one_field_apart(a: dict, b: dict) -> str | None:
    keys = list(a) + [k for k in b if k not in a]
    differ = [k for k in keys if fmt_value(a.get(k)) != fmt_value(b.get(k))]
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
            a, b = (x, y) if fmt_value(x.arm.get(fld)) <= fmt_value(y.arm.get(fld)) else (y, x)
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
        by_arm[freeze_arm(arm.arm)].append(arm)
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
            else (", ".join(f"{k}={fmt_value(v)}" for k, v in group[0].arm.items()) or "all samples")
        )
        for metric in COMPARED[:2]:
            rates = [
                (name, wilson(sum(shows_metric(metric, s.verdict) for s in ss), len(ss)))
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
            key = (run.name, freeze_arm(arm))
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
        out.append(ProbeArm(label, rs, _cluster_mean(vals, clusters), len(set(clusters))))
    return out, columns


def _cluster_mean(vals: list[float], clusters: list[str]) -> tuple[float, float, float]:
    """Mean probability with a cluster-robust (CR1, t on G-1 df) interval over scenarios."""
    r = cluster_rate(vals, clusters)
    return (r.rate, r.lo, r.hi)


def summarize(runs: Sequence[RunData]) -> Summary:
    """All tables of a report: arms and their rates, one-field differences, noise floors, zoo, probe."""
    order = verdict_order()
    observed = {s.verdict.get("verdict") for run in runs for s in run.samples if s.scored}
    order = tuple(order) + tuple(sorted(str(v) for v in observed if v not in order))
    arms, columns, common = _group_arms(runs, order)
    probe, probe_columns = _probe(runs)
    return Summary(
        list(runs), arms, columns, common, order, _diffs(arms), _noise(arms), _zoo(arms), probe, probe_columns
    )
