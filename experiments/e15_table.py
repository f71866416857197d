"""E15 engines: per engine setting at L2, what follows the forced newText content, and samples/s.

    .venv/bin/python experiments/e15_table.py runs/e15-engines-qwen0.5b [runs/e15-engines-outlines ...]

Rates are pooled over samples with cluster-robust 95% intervals over scenarios (``stats.cluster_rate``,
CR1 with t on G-1 df), except for a run drawn with shared random streams (no ``"streams": "scenario"`` in
its manifest: its scenarios are not independent clusters), which gets counts only; kinds are the key-resolved continuation classes
(``tooldecode.measures.sample_continuation``). The kind columns (what follows the forced newText) apply to L2 runs
only: an L1 run shows "—" there and is read by its scorer columns. Raw samples are only read.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

from tooldecode.measures import sample_continuation
from tooldecode.runs import RunStore
from tooldecode.scoring import score_record
from tooldecode.stats import cluster_rate

COLUMNS = (
    ("close", lambda c, v: c.kind == "close"),
    ("repeat", lambda c, v: c.kind == "repeat"),
    ("schema word", lambda c, v: c.kind == "schema_word"),
    ("invented name", lambda c, v: c.kind == "invented"),
    ("string goes on", lambda c, v: c.kind == "string_goes_on"),
    ("invented key (scorer)", lambda c, v: bool(v["invented_keys"])),
    ("valid (strict schema)", lambda c, v: v["verdict"] == "valid"),
    (
        "payload correct",
        lambda c, v: v["verdict"] == "valid" and bool((v.get("payload") or {}).get("file_correct")),
    ),
)


KIND_COLUMNS = ("close", "repeat", "schema word", "invented name", "string goes on")


def shared_streams(run: Path) -> bool:
    """A run whose manifest lacks per-scenario streams: its scenarios share one random stream, so they
    are not independent clusters and get counts without an interval."""
    return RunStore.open(run).manifest.get("config", {}).get("streams") != "scenario"


def rows(run: Path) -> dict[str, list[tuple]]:
    store = RunStore.open(run)
    out: dict[str, list[tuple]] = defaultdict(list)
    for rec in store.sample_records():
        engine = rec["arm"].get("engine") or "loose"
        if rec.get("error"):
            out[engine].append((rec["scenario"], None, None, rec))
            continue
        out[engine].append(
            (rec["scenario"], sample_continuation(rec), score_record(rec, store.manifest), rec)
        )
    return out


def table(runs: list[Path]) -> str:
    lines = [
        "| engine setting | n (errors) | " + " | ".join(name for name, _ in COLUMNS) + " | samples/s |",
        "|---|---|" + "---|" * (len(COLUMNS) + 1),
    ]
    for run in runs:
        shared = shared_streams(run)
        for engine, items in rows(run).items():
            ok = [(sc, c, v) for sc, c, v, _ in items if c is not None]
            errors = len(items) - len(ok)
            cells = []
            # the decision after a forced newText (the kind columns) exists only at L2
            at_l2 = all(rec["arm"].get("level") == "L2" for _, _, _, rec in items)
            for name, fn in COLUMNS:
                if name in KIND_COLUMNS and not at_l2:
                    cells.append("—")
                    continue
                hits = [fn(c, v) for _, c, v in ok]
                if shared:
                    cells.append(f"{sum(hits)}/{len(hits)} = {100 * sum(hits) / max(1, len(hits)):.0f}%")
                    continue
                r = cluster_rate(hits, [sc for sc, _, _ in ok])
                cells.append(f"{r.k}/{r.n} = {100 * r.rate:.0f}% [{100 * r.lo:.0f}, {100 * r.hi:.0f}]")
            # samples/s from the run's own timings: samples over the summed wall time of their batches
            spans: dict[tuple, float] = {}
            for sc, _, _, rec in items:
                t = rec.get("timing") or {}
                key = (sc, rec.get("seed"))
                spans[key] = max(spans.get(key, 0.0), float(t.get("end_s", 0.0)))
            rate = len(items) / sum(spans.values()) if sum(spans.values()) > 0 else float("nan")
            g = len({sc for sc, _, _ in ok})
            lines.append(
                f"| {run.name}: {engine} | {len(ok)} ({errors}), {g} scenarios"
                + (" (shared streams: counts only)" if shared else "")
                + " | "
                + " | ".join(cells)
                + f" | {rate:.2f} |"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    print(table([Path(p) for p in sys.argv[1:]] or [Path("runs/e15-engines-qwen0.5b")]))
