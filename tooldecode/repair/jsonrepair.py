"""The ``json-repair`` stage: the text-level repair tolerant clients run before parsing, recorded and accounted apart."""

from __future__ import annotations

import functools
import json
from collections import defaultdict
from collections.abc import Iterable, Sequence

from tooldecode.grammar import Tool, wire_format
from tooldecode.jsontext import brackets
from tooldecode.records import SampleRecord
from tooldecode.repair.arguments import harness_errors
from tooldecode.repair.memo import repair_memo
from tooldecode.repair.rescue import format_rate, rate_record
from tooldecode.scoring import (
    MAX_JSON_DEPTH,
    check_payload,
    extract_calls,
    primary_call,
    record_context,
)

# The text-level stage tolerant clients run before parsing: the ``json-repair`` library (PyPI) on the raw
# call text. Switchable (``tooldecode repair --no-json-repair``) and recorded per sample under
# ``json_repair`` (``json_repair_row``); its accounting is kept apart from the argument repairs.
JSON_REPAIR = "json_repair"


@functools.cache
def json_repair_version() -> str | None:
    """The installed ``json-repair`` version, or None when it is not installed (read once per process)."""
    from importlib import metadata

    try:
        return metadata.version("json-repair")
    except metadata.PackageNotFoundError:
        return None


def _json_repair_candidate(text: str, wire: str | None, tools: Sequence[Tool], expected: str | None) -> str:
    """The raw text a client hands to json-repair: the primary call's own text where the scorer found one
    (parsed or broken), else the text from its first ``{``."""
    calls = extract_calls(text, wire=wire, tools=list(tools), expected_tool=expected)
    call = primary_call(calls, expected)
    if call is not None and call.raw:
        raw = call.raw
    else:
        k = text.find("{")
        raw = text[k:] if k >= 0 else text
    hermes = wire_format("hermes")
    for tag in (hermes.open, hermes.close):
        raw = raw.replace(tag, "")
    return raw.strip()


def _nesting(text: str, limit: int) -> int:
    """The bracket nesting depth of ``text`` (outside JSON strings), counted up to ``limit + 1``, in one pass."""
    depth = deepest = 0
    for ch in brackets(text):
        if ch in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > limit:
                    return deepest
        else:
            depth = max(0, depth - 1)
    return deepest


@functools.lru_cache(maxsize=8192)
def _repaired(raw: str) -> tuple[str, str | None]:
    """``json_repair.repair_json(raw)`` as JSON text, or its failure: a pure function of ``raw``, kept for
    the copies of a draw (an arm that renders like another, a repeated greedy draw) that a report pools,
    and on disk where ``TOOLDECODE_JSONREPAIR_MEMO`` names a folder (``tooldecode.repair.memo``)."""
    import json_repair

    memo = repair_memo(json_repair_version())
    if memo is not None and (hit := memo.get(raw)) is not None:
        return hit
    try:
        value = json_repair.repair_json(raw, return_objects=True)
        out: tuple[str, str | None] = (json.dumps(value, ensure_ascii=False), None)
    except (Exception, RecursionError) as err:
        out = ("", str(err)[:160])
    if memo is not None:
        memo.put(raw, *out)
    return out


def json_repair_call(
    text: str, tools: Sequence[Tool], *, wire: str | None = None, expected_tool: str | None = None
) -> dict:
    """What a tolerant client gets from ``json_repair.repair_json`` on a call's raw text.

    Returns ``{"tool", "arguments", "valid", "changed", "error"}``: ``valid`` means the repaired arguments of
    the expected tool pass its strictified schema; ``changed`` that the library altered the text (the call
    did not parse as it was). A valid result may still carry a cut or altered payload: callers compare it
    with the gold (``repair_record`` counts those as silent corruptions, not rescues).
    """
    raw = _json_repair_candidate(text, wire, tools, expected_tool)
    depth = _nesting(raw, MAX_JSON_DEPTH)
    if depth > MAX_JSON_DEPTH:  # the parsers recurse: a bounded outcome instead of a RecursionError
        error = f"nested deeper than {MAX_JSON_DEPTH} levels; not handed to json-repair"
        return {"tool": None, "arguments": None, "valid": False, "changed": True, "error": error}
    try:
        json.loads(raw)
        changed = False
    except (ValueError, RecursionError):
        changed = True
    repaired, failure = _repaired(raw)
    if failure is not None:  # the library's own failure is an outcome, not a crash
        return {"tool": None, "arguments": None, "valid": False, "changed": changed, "error": failure}
    value = json.loads(repaired)
    if isinstance(value, list) and value and isinstance(value[0], dict):
        value = value[0]
    name, args = None, None
    if isinstance(value, dict) and "arguments" in value:
        name, args = value.get("name"), value.get("arguments")
    elif isinstance(value, dict) and wire == "json":
        name, args = expected_tool, value
    by_name = {t.name: t for t in tools}
    if name not in by_name or (expected_tool is not None and name != expected_tool):
        return {
            "tool": name,
            "arguments": args,
            "valid": False,
            "changed": changed,
            "error": "no call to the tool",
        }
    errors = harness_errors(args, by_name[name])
    return {
        "tool": name,
        "arguments": args,
        "valid": not errors,
        "changed": changed,
        "error": errors[0] if errors else None,
    }


def json_repair_row(record: SampleRecord, manifest: dict) -> dict:
    """The json-repair stage of one sample (``json_repair_call`` plus payload check and version)."""
    tools, wire, expected, scenario = record_context(record, manifest)
    out = json_repair_call(record.call_text, tools, wire=wire, expected_tool=expected)
    by_name = {t.name: t for t in tools}
    payload = None
    if out["valid"] and scenario is not None:
        payload = check_payload(out["arguments"], by_name[out["tool"]], scenario)
    out["payload_ok"] = bool(payload and payload["file_correct"])
    out["version"] = json_repair_version()
    return out


def json_repair_summary(rows: Iterable[dict]) -> dict:
    """Per model: loose calls failing strict validation, and what the project's own repairs and the
    json-repair stage make of them — rescued (valid, payload byte-correct) vs silent corruption (valid-looking,
    payload cut or wrong) — next to strict decoding's valid + payload-correct rate. Wilson 95% intervals."""
    by_model: dict[str, dict[str, list[dict]]] = defaultdict(lambda: {"loose": [], "strict": []})
    for r in rows:
        if "skipped" in r:
            continue
        side = "strict" if r.get("mode") in ("strict", "strict-spec", "strict-aligned") else "loose"
        by_model[str((r.get("arm") or {}).get("model"))][side].append(r)
    out = {}
    for model, sides in sorted(by_model.items()):
        loose = sides["loose"]
        failing = [r for r in loose if r["strict_verdict"] != "valid"]
        jr = [r for r in failing if JSON_REPAIR in r]
        out[model] = {
            "n_loose": len(loose),
            "n_failing": len(failing),
            "own_rescued": rate_record(sum(r["valid"] and r["payload_ok"] for r in failing), len(failing)),
            "own_silent": rate_record(sum(r["valid"] and not r["payload_ok"] for r in failing), len(failing)),
            "json_repair_rescued": rate_record(
                sum(r[JSON_REPAIR]["valid"] and r[JSON_REPAIR]["payload_ok"] for r in jr), len(jr)
            ),
            "json_repair_silent": rate_record(
                sum(r[JSON_REPAIR]["valid"] and not r[JSON_REPAIR]["payload_ok"] for r in jr), len(jr)
            ),
            "loose_json_repair_ok": rate_record(
                sum(
                    (r["strict_verdict"] == "valid" and r["strict_payload_ok"])
                    or (r["strict_verdict"] != "valid" and r.get(JSON_REPAIR, {}).get("payload_ok", False))
                    for r in loose
                ),
                len(loose),
            ),
            "strict_ok": rate_record(
                sum(r["strict_verdict"] == "valid" and r["strict_payload_ok"] for r in sides["strict"]),
                len(sides["strict"]),
            ),
        }
    return out


def format_json_repair(summary: dict) -> str:
    """The json-repair stage's accounting as Markdown, apart from the project's own repairs."""
    lines = [
        f"json-repair stage ({JSON_REPAIR}, json-repair {json_repair_version() or 'not installed'}): "
        "loose calls failing strict validation",
        "",
        "| model | failing | own repairs: rescued | own repairs: silent corruption | json-repair: rescued "
        "| json-repair: silent corruption | loose + json-repair valid & payload | strict valid & payload |",
        "|---|---:|---|---|---|---|---|---|",
    ]
    for model, s in summary.items():
        lines.append(
            f"| {model} | {s['n_failing']} | {format_rate(s['own_rescued'])} | {format_rate(s['own_silent'])} | "
            f"{format_rate(s['json_repair_rescued'])} | {format_rate(s['json_repair_silent'])} | "
            f"{format_rate(s['loose_json_repair_ok'])} | {format_rate(s['strict_ok'])} |"
        )
    return "\n".join(lines)
