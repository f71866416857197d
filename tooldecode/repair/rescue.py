"""Rescue accounting over a run: of the loose calls that fail strict validation, how many a lenient harness rescues, against strict decoding and one retry."""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import asdict
from typing import Any

from tooldecode.records import SampleRecord, VerdictRecord
from tooldecode.repair.arguments import REPAIR_VERSION, REPAIRS
from tooldecode.repair.text import repair_text
from tooldecode.scoring import (
    SCORER_VERSION,
    check_payload,
    record_context,
    score_record,
)
from tooldecode.stats import wilson


def repair_record(
    record: SampleRecord,
    manifest: dict,
    *,
    enabled: Collection[str] = REPAIRS,
    verdict: VerdictRecord | None = None,
) -> dict:
    """One line of ``repaired-<REPAIR_VERSION>.jsonl``: the strict verdict of a raw sample and what a
    lenient harness makes of it.

    Parameters
    ----------
    record, manifest
        A sample and its run's manifest.
    enabled
        The repairs to apply (:data:`REPAIRS` order).
    verdict
        The sample's ``score_record`` line when the caller already has it (a report scores each
        sample once); scored here otherwise.
    """
    arm = record.arm.to_json()
    head = {
        "key": record.key,
        "repair": REPAIR_VERSION,
        "scorer": SCORER_VERSION,
        "arm": arm,
        "scenario": record.scenario,
        "seed": record.seed,
        "index": record.index,
    }
    if record.error:
        return {**head, "skipped": str(record.error)}
    tools, wire, expected, scenario = record_context(record, manifest)
    if verdict is None or verdict.scorer != SCORER_VERSION:
        verdict = score_record(record, scenario)
    if verdict.verdict == "too_deep":  # nothing a harness could repair; never walk it
        return {
            **head,
            "mode": arm.get("mode", "loose"),
            "strict_verdict": "too_deep",
            "strict_payload_ok": False,
            "valid": False,
            "payload_ok": False,
            "retry_signal": False,
            "tool": None,
            "wrapping": verdict.wrapping,
            "kinds": [],
            "changes": [],
            "errors": list(verdict.errors or []),
            "payload": None,
            "arguments": None,
        }
    result = repair_text(record.call_text, tools, wire=wire, expected_tool=expected, enabled=enabled)
    strict_payload = verdict.payload or {}
    payload = None
    by_name = {t.name: t for t in tools}
    if scenario is not None and result.tool in by_name and result.arguments is not None:
        payload = check_payload(result.arguments, by_name[result.tool], scenario)
    return {
        **head,
        "mode": arm.get("mode", "loose"),
        "strict_verdict": verdict.verdict,
        "strict_payload_ok": bool(strict_payload.get("file_correct")),
        "valid": result.valid,
        "payload_ok": bool(payload and payload["file_correct"]),
        "retry_signal": result.retry_signal,
        "tool": result.tool,
        "wrapping": result.wrapping,
        "kinds": result.kinds,
        "changes": [asdict(c) for c in result.changes],
        "errors": result.errors,
        "payload": payload,
        "arguments": result.arguments,
    }


# Arm fields that only strict decoding has; an arm without them names the condition strict and loose share.
CONDITION_IGNORES = ("mode", "engine", "mask_engine", "masking", "grammar", "grammar_mode", "strict_engine")


def _condition(arm: dict) -> str:
    return json.dumps(
        {k: v for k, v in arm.items() if k not in CONDITION_IGNORES}, sort_keys=True, default=str
    )


def rate_record(k: int, n: int) -> dict:
    """``k`` of ``n`` as a JSON-able rate with its Wilson interval (all None when ``n`` is 0)."""
    if n == 0:
        return {"k": 0, "n": 0, "rate": None, "lo": None, "hi": None}
    r = wilson(k, n)
    return {"k": r.k, "n": r.n, "rate": r.rate, "lo": r.lo, "hi": r.hi}


def _retry_pairs(rows: list[dict]) -> list[tuple[dict, dict]]:
    """Consecutive samples of the same arm and scenario, paired: (first try, the retry)."""
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in rows:
        groups[(json.dumps(r["arm"], sort_keys=True, default=str), str(r["scenario"]))].append(r)
    pairs = []
    for group in groups.values():
        group.sort(key=lambda r: (_num(r.get("seed")), _num(r.get("index")), str(r.get("key"))))
        pairs.extend((group[i], group[i + 1]) for i in range(0, len(group) - 1, 2))
    return pairs


def _num(x: Any) -> float:
    return float(x) if isinstance(x, int | float) and not isinstance(x, bool) else math.inf


def _table_rows(condition: str, strict: list[dict], loose: list[dict]) -> list[dict]:
    if strict and loose:  # compare on the same scenarios
        common = {r["scenario"] for r in strict} & {r["scenario"] for r in loose}
        strict = [r for r in strict if r["scenario"] in common]
        loose = [r for r in loose if r["scenario"] in common]
    out = []

    def row(method: str, k_valid: int, k_payload: int, n: int) -> None:
        out.append(
            {
                "condition": condition,
                "method": method,
                "valid": rate_record(k_valid, n),
                "valid_payload": rate_record(k_payload, n),
            }
        )

    for method, rows in (("strict", strict), ("loose", loose)):
        if rows:  # the text as drawn
            row(
                method,
                sum(r["strict_verdict"] == "valid" for r in rows),
                sum(r["strict_verdict"] == "valid" and r["strict_payload_ok"] for r in rows),
                len(rows),
            )
    if loose:
        row(
            "loose+repair",
            sum(r["valid"] for r in loose),
            sum(r["valid"] and r["payload_ok"] for r in loose),
            len(loose),
        )
        pairs = _retry_pairs(loose)
        k_valid = k_payload = 0
        for first, second in pairs:
            final = first if first["strict_verdict"] == "valid" else second
            k_valid += final["strict_verdict"] == "valid"
            k_payload += final["strict_verdict"] == "valid" and final["strict_payload_ok"]
        row("loose+retry", k_valid, k_payload, len(pairs))
    return out


def rescue_summary(rows: Iterable[dict]) -> dict:
    """The rescue accounting of ``repair_record`` rows (see ``rescue_accounting``)."""
    rows = [r for r in rows if "skipped" not in r]
    loose = [r for r in rows if r["mode"] != "strict"]
    strict = [r for r in rows if r["mode"] == "strict"]
    failing = [r for r in loose if r["strict_verdict"] != "valid"]
    rescued = [r for r in failing if r["valid"]]
    rescued_payload = [r for r in rescued if r["payload_ok"]]
    kinds: dict[str, dict[str, int]] = {k: {"samples": 0, "changes": 0, "rescued": 0} for k in REPAIRS}
    for r in loose:
        counts = Counter(c["kind"] for c in r["changes"])
        for kind, n in counts.items():
            kinds[kind]["samples"] += 1
            kinds[kind]["changes"] += n
            kinds[kind]["rescued"] += r["strict_verdict"] != "valid" and r["valid"]
    by_verdict: dict[str, dict[str, int]] = {}
    for r in failing:
        v = by_verdict.setdefault(str(r["strict_verdict"]), {"n": 0, "rescued": 0, "rescued_payload": 0})
        v["n"] += 1
        v["rescued"] += r["valid"]
        v["rescued_payload"] += r["valid"] and r["payload_ok"]
    conditions: dict[str, tuple[list[dict], list[dict]]] = defaultdict(lambda: ([], []))
    for r in rows:
        conditions[_condition(r["arm"])][0 if r["mode"] == "strict" else 1].append(r)
    table = _table_rows("all", strict, loose)
    if len(conditions) > 1:
        for cond, (s, lo) in sorted(conditions.items()):
            table.extend(_table_rows(cond, s, lo))
    return {
        "repair": REPAIR_VERSION,
        "scorer": SCORER_VERSION,
        "n_loose": len(loose),
        "n_strict": len(strict),
        "n_failing_strict": len(failing),
        "n_rescued": len(rescued),
        "n_rescued_payload": len(rescued_payload),
        "rescued_share": rate_record(len(rescued), len(failing)),
        "rescued_payload_share": rate_record(len(rescued_payload), len(rescued)),
        "n_retry_signal": sum(r["retry_signal"] for r in loose),
        "kinds": kinds,
        "by_verdict": by_verdict,
        "table": table,
    }


def rescue_accounting(
    records: Iterable[SampleRecord], manifest: dict, *, verdicts: Mapping[str, VerdictRecord] | None = None
) -> dict:
    """Over a run's raw samples: loose samples failing strict validation, how many repair makes valid, how
    many of those carry a byte-correct payload, counts per repair kind, and a table comparing strict
    decoding, loose + repair and loose + one retry (consecutive samples of an arm and scenario pair up),
    rates with Wilson 95% intervals. ``verdicts`` (sample key → ``score_record`` line) spares scoring
    every sample a second time."""
    given = verdicts or {}
    return rescue_summary(repair_record(r, manifest, verdict=given.get(r.key)) for r in records)


def format_rate(r: dict) -> str:
    """A ``rate_record`` as ``k/n = rate% [lo, hi]``."""
    if r["rate"] is None:
        return f"{r['k']}/{r['n']} = n/a"
    return f"{r['k']}/{r['n']} = {100 * r['rate']:.1f}% [{100 * r['lo']:.1f}, {100 * r['hi']:.1f}]"


def format_rescue(summary: dict) -> str:
    """The accounting as Markdown (for the terminal, the report and FINDINGS.md)."""
    lines = [
        f"Rescue accounting (repair {summary['repair']}, scorer {summary['scorer']})",
        "",
        f"- loose samples: {summary['n_loose']}; failing strict validation: {summary['n_failing_strict']}",
        f"- rescued by repair: {format_rate(summary['rescued_share'])}",
        f"- of those, payload byte-correct: {format_rate(summary['rescued_payload_share'])}",
        f"- retry signals (leaked markup): {summary['n_retry_signal']}",
        "",
        "| repair | samples | changes | in rescued samples |",
        "|---|---:|---:|---:|",
    ]
    for kind, c in summary["kinds"].items():
        lines.append(f"| {kind} | {c['samples']} | {c['changes']} | {c['rescued']} |")
    if summary["by_verdict"]:
        lines += ["", "| strict verdict | n | rescued | rescued, payload correct |", "|---|---:|---:|---:|"]
        for verdict, c in sorted(summary["by_verdict"].items()):
            lines.append(f"| {verdict} | {c['n']} | {c['rescued']} | {c['rescued_payload']} |")
    lines += ["", "| condition | method | valid | valid + payload correct |", "|---|---|---|---|"]
    labels = _condition_labels([row["condition"] for row in summary["table"]])
    for row in summary["table"]:
        lines.append(
            f"| {labels[row['condition']]} | {row['method']} | {format_rate(row['valid'])} | "
            f"{format_rate(row['valid_payload'])} |"
        )
    return "\n".join(lines)


def _condition_labels(conditions: list[str]) -> dict[str, str]:
    """Short labels for condition keys: only the fields that differ between conditions."""
    parsed: dict[str, dict] = {}
    for c in conditions:
        try:
            value = json.loads(c)
        except (TypeError, ValueError):
            value = None
        if isinstance(value, dict):
            parsed[c] = value
    varying = {
        k
        for d in parsed.values()
        for k in d
        if len({json.dumps(p.get(k), sort_keys=True) for p in parsed.values()}) > 1
    }
    out = {}
    for c in conditions:
        d = parsed.get(c)
        out[c] = ", ".join(f"{k}={d[k]}" for k in sorted(varying) if k in d) if d else c
        out[c] = out[c] or c
    return out
