"""Lenient-harness repairs: what a tolerant client does to a sloppy tool call before running it.

Each repair is named, switchable and recorded on the call it changed with the JSON path it touched.
``rescue_accounting`` answers, over a run: of the loose calls that fail strict validation, how many would
a lenient harness rescue, how many of those with a byte-correct payload, and how that compares with strict
decoding and with one retry. Imports neither torch, transformers nor llama_cpp.
"""

from __future__ import annotations

import copy
import json
import math
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from tooldecode.errors import ToolDecodeError
from tooldecode.grammar import Tool
from tooldecode.scoring import (
    SCORER_VERSION,
    ExtractedCall,
    JSONParseError,
    check_payload,
    extract_calls,
    parse_json,
    primary_call,
    record_context,
    render_path,
    resolve_schema,
    schema_properties,
    schema_types,
    score_record,
    strict_schema,
    validate_arguments,
)
from tooldecode.stats import wilson

REPAIR_VERSION = "r1"

# Order of application; each one can be switched off.
REPAIRS = (
    "parse_string_container",
    "wrap_single_object",
    "fold_flat_edit",
    "aliases",
    "coerce_types",
    "fix_escapes",
    "drop_unknown_keys",
)

_MAX_PASSES = 8
_MAX_DEPTH = 200


class RepairError(ToolDecodeError):
    """An unknown repair name."""


@dataclass
class Change:
    kind: str  # one of REPAIRS
    path: str  # JSON path of what changed, e.g. ``edits[0].old_str``; ``$`` is the root
    before: Any
    after: Any


@dataclass
class RepairResult:
    arguments: Any
    changes: list[Change]
    valid: bool  # the repaired arguments pass the tool's strictified schema and encode as UTF-8
    retry_signal: bool  # tool-call markup leaked into visible text: a tolerant client asks for a retry
    errors: list[str]
    tool: str | None = None
    wrapping: str | None = None

    @property
    def kinds(self) -> list[str]:
        return sorted({c.kind for c in self.changes}, key=REPAIRS.index)


def _enabled(enabled: Collection[str]) -> frozenset[str]:
    unknown = sorted(set(enabled) - set(REPAIRS))
    if unknown:
        raise RepairError(f"unknown repair {', '.join(unknown)}; known: {', '.join(REPAIRS)}")
    return frozenset(enabled)


# ------------------------------------------------------------------------------------------------ walking

_Step = Callable[[Any, Any, list, "_Run"], Any]


@dataclass
class _Run:
    tool: Tool
    root: dict
    kinds: frozenset[str]
    changes: list[Change] = field(default_factory=list)

    def record(self, kind: str, path: Sequence[Any], before: Any, after: Any) -> None:
        self.changes.append(Change(kind, render_path(path), copy.deepcopy(before), copy.deepcopy(after)))


def _transform(value: Any, schema: Any, path: list, run: _Run, step: _Step, depth: int = 0) -> Any:
    """Apply ``step`` to every node that has a schema, parents before children."""
    schema = resolve_schema(schema, run.root)
    value = step(value, schema, path, run)
    if depth > _MAX_DEPTH or not isinstance(schema, dict):
        return value
    if isinstance(value, dict):
        props = schema_properties(schema, run.root)
        extra = schema.get("additionalProperties")
        for key in list(value):
            sub = props.get(key) if key in props else (extra if isinstance(extra, dict) else None)
            if sub is not None:
                value[key] = _transform(value[key], sub, [*path, key], run, step, depth + 1)
    elif isinstance(value, list):
        items = schema.get("items")
        prefix = schema.get("prefixItems") if isinstance(schema.get("prefixItems"), list) else []
        for i, item in enumerate(value):
            sub = prefix[i] if i < len(prefix) else items
            if isinstance(sub, dict):
                value[i] = _transform(item, sub, [*path, i], run, step, depth + 1)
    return value


def _pattern(path: Sequence[Any]) -> str:
    """Alias-table form of a container path: ``["edits", 0]`` → ``edits[]``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += "[]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _aliases_at(tool: Tool, container: str) -> dict[str, list[str]]:
    """Canonical key → alias names, for the keys of objects at ``container`` (``""`` is the root)."""
    out: dict[str, list[str]] = {}
    for pattern, names in (tool.aliases or {}).items():
        head, _, key = pattern.rpartition(".")
        if head == container and isinstance(names, list):
            out[key] = [n for n in names if isinstance(n, str)]
    return out


def _norm(key: str) -> str:
    return re.sub(r"[\s_\-]", "", key).lower()


def _rename(obj: dict, old: str, new: str) -> dict:
    return {(new if k == old else k): v for k, v in obj.items()}


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _type_ok(value: Any, types: set[str]) -> bool:
    t = _json_type(value)
    return (
        t in types
        or (t == "integer" and "number" in types)
        or (t == "number" and "integer" in types and float(value).is_integer())
    )


# ------------------------------------------------------------------------------------------------ repairs


def _parse_string_container(value: Any, schema: Any, path: list, run: _Run) -> Any:
    types = schema_types(schema)
    if not isinstance(value, str) or not types or "string" in types or not types & {"array", "object"}:
        return value
    try:
        parsed = parse_json(value.strip(), lenient="fix_escapes" in run.kinds)
    except JSONParseError:
        return value
    if not isinstance(parsed.value, dict | list):
        return value
    run.record("parse_string_container", path, value, parsed.value)
    for sub, before, after in parsed.fixes:
        run.record("fix_escapes", [*path, *sub], before, after)
    return parsed.value


def _wrap_single_object(value: Any, schema: Any, path: list, run: _Run) -> Any:
    types = schema_types(schema)
    if isinstance(value, dict) and types and "array" in types and "object" not in types:
        run.record("wrap_single_object", path, value, [value])
        return [value]
    return value


def _fold_flat_edit(value: Any, schema: Any, path: list, run: _Run) -> Any:
    if path or not isinstance(value, dict):
        return value
    props = schema_properties(schema, run.root)
    for array_key, sub in props.items():
        sub = resolve_schema(sub, run.root)
        if not isinstance(sub, dict) or "array" not in (schema_types(sub) or set()):
            continue
        item_props = schema_properties(sub.get("items"), run.root)
        if not item_props or value.get(array_key) not in (None, []):
            continue
        names = {k: k for k in item_props}
        for canonical, aliases in _aliases_at(run.tool, f"{array_key}[]").items():
            for alias in aliases:
                names.setdefault(alias, canonical)
        norms = {_norm(k): k for k in item_props}
        moved = [k for k in value if k not in props and (k in names or _norm(k) in norms)]
        if not moved:
            continue
        item = {k: value[k] for k in moved}
        run.record("fold_flat_edit", [array_key], item, [item])
        rest = {k: v for k, v in value.items() if k not in moved and k != array_key}
        rest[array_key] = [item]
        return rest
    return value


def _aliases(value: Any, schema: Any, path: list, run: _Run) -> Any:
    if not isinstance(value, dict):
        return value
    props = schema_properties(schema, run.root)
    if not props:
        return value
    for canonical, aliases in _aliases_at(run.tool, _pattern(path)).items():
        if canonical in value or canonical not in props:
            continue
        alias = next((a for a in aliases if a in value and a not in props), None)
        if alias is not None:
            run.record("aliases", [*path, alias], alias, canonical)
            value = _rename(value, alias, canonical)
    norms: dict[str, str] = {}
    for prop in props:
        norms.setdefault(_norm(prop), prop)
    for key in list(value):
        target = norms.get(_norm(key))
        if key not in props and target is not None and target not in value:
            run.record("aliases", [*path, key], key, target)
            value = _rename(value, key, target)
    return value


_INT = re.compile(r"\s*[-+]?\d+(?:\.0*)?\s*")
_NUM = re.compile(r"\s*[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?\s*")


def _coerce_types(value: Any, schema: Any, path: list, run: _Run) -> Any:
    types = schema_types(schema)
    if not types or _type_ok(value, types) or isinstance(value, dict | list):
        return value
    new: Any = value
    if isinstance(value, str):
        word = value.strip().lower()
        if "boolean" in types and word in ("true", "false"):
            new = word == "true"
        elif "integer" in types and _INT.fullmatch(value):
            new = int(float(value)) if "." in value else int(value)
        elif "number" in types and _NUM.fullmatch(value) and math.isfinite(float(value)):
            new = int(value) if re.fullmatch(r"\s*[-+]?\d+\s*", value) else float(value)
        elif "null" in types and word == "null":
            new = None
    elif isinstance(value, int | float) and not isinstance(value, bool) and "string" in types:
        new = json.dumps(value)
    if new is value or (new == value and type(new) is type(value)):
        return value
    run.record("coerce_types", path, value, new)
    return new


_SURROGATE = re.compile(r"[\ud800-\udfff]")


def _fix_escapes(value: Any, path: list, run: _Run, depth: int = 0) -> Any:
    """Lone surrogates (from a broken ``\\uXXXX`` pair) become U+FFFD, in keys and values at any depth."""
    if depth > _MAX_DEPTH:
        return value
    if isinstance(value, str):
        if _SURROGATE.search(value):
            new = _SURROGATE.sub("\ufffd", value)
            run.record("fix_escapes", path, value, new)
            return new
        return value
    if isinstance(value, list):
        return [_fix_escapes(v, [*path, i], run, depth + 1) for i, v in enumerate(value)]
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            key = k
            if _SURROGATE.search(k):
                key = _SURROGATE.sub("\ufffd", k)
                if key in value or key in out:
                    key = k
                else:
                    run.record("fix_escapes", [*path, k], k, key)
            out[key] = _fix_escapes(v, [*path, key], run, depth + 1)
        return out
    return value


def _drop_unknown_keys(value: Any, schema: Any, path: list, run: _Run) -> Any:
    if not isinstance(value, dict) or not isinstance(schema, dict):
        return value
    if "object" not in (schema_types(schema) or set()):
        return value
    extra = schema.get("additionalProperties", False)
    if extra is True or isinstance(extra, dict):
        return value
    props = schema_properties(schema, run.root)
    patterns = [p for p in (schema.get("patternProperties") or {}) if isinstance(p, str)]
    keep = {}
    for k, v in value.items():
        if k in props or any(_search(p, k) for p in patterns):
            keep[k] = v
        else:
            run.record("drop_unknown_keys", [*path, k], v, None)
    return keep


def _search(pattern: str, key: str) -> bool:
    try:
        return re.search(pattern, key) is not None
    except re.error:
        return False


def _step(kind: str) -> Callable[[Any, _Run], Any]:
    if kind == "fix_escapes":
        return lambda value, run: _fix_escapes(value, [], run)
    fn = {
        "parse_string_container": _parse_string_container,
        "wrap_single_object": _wrap_single_object,
        "fold_flat_edit": _fold_flat_edit,
        "aliases": _aliases,
        "coerce_types": _coerce_types,
        "drop_unknown_keys": _drop_unknown_keys,
    }[kind]
    return lambda value, run: _transform(value, run.root, [], run, fn)


# --------------------------------------------------------------------------------------------- public API


def repair_arguments(args: Any, tool: Tool, *, enabled: Collection[str] = REPAIRS) -> RepairResult:
    """Repair one call's arguments for ``tool``. Arguments that already pass the strictified schema are
    returned unchanged; otherwise the enabled repairs run in ``REPAIRS`` order until nothing changes."""
    kinds = _enabled(enabled)
    errors = _errors(args, tool)
    if not errors:
        return RepairResult(args, [], True, False, [], tool=tool.name)
    run = _Run(tool, strict_schema(tool), kinds)
    try:
        value = copy.deepcopy(args)
        for _ in range(_MAX_PASSES):
            before = len(run.changes)
            for kind in REPAIRS:
                if kind in kinds:
                    value = _step(kind)(value, run)
            if len(run.changes) == before:
                break
    except RecursionError:
        return RepairResult(
            args, [], False, False, [*errors, "$: arguments nested too deep to repair"], tool=tool.name
        )
    errors = _errors(value, tool)
    return RepairResult(value, run.changes, not errors, False, errors, tool=tool.name)


def _errors(args: Any, tool: Tool) -> list[str]:
    """Schema violations, plus strings a client cannot encode (lone surrogates): such a call is not valid
    for a harness even though the schema accepts it."""
    errors = validate_arguments(args, tool)
    bad: list[str] = []

    def walk(v: Any, path: list, depth: int) -> None:
        if depth > _MAX_DEPTH:
            return
        if isinstance(v, str):
            if _SURROGATE.search(v):
                bad.append(f"{render_path(path)}: lone surrogate; the text cannot be encoded as UTF-8")
        elif isinstance(v, list):
            for i, x in enumerate(v):
                walk(x, [*path, i], depth + 1)
        elif isinstance(v, dict):
            for k, x in v.items():
                if _SURROGATE.search(k):
                    bad.append(
                        f"{render_path(path)}: key with a lone surrogate; it cannot be encoded as UTF-8"
                    )
                walk(x, [*path, k], depth + 1)

    try:
        walk(args, [], 0)
    except RecursionError:
        pass
    return errors + bad


# Markup of each wire family, and the wire formats whose servers parse it.
_MARKUP = {
    "hermes": (re.compile(r"</?tool_call>"), {"hermes", "call-list"}),
    "antml": (re.compile(r"</?(?:antml:)?(?:function_calls|invoke|parameter)\b"), {"antml"}),
    "harmony": (re.compile(r"<\|(?:channel|message|constrain|call)\|>|\bto=functions\.[\w\-]"), {"harmony"}),
}


def leaked_markup(text: str, calls: Sequence[ExtractedCall], wire: str | None) -> bool:
    """Tool-call markup in visible text: outside every parsed call, or of a wire format other than ``wire``
    (a server for that wire would have shown it as text)."""
    for rx, wires in _MARKUP.values():
        for m in rx.finditer(text):
            inside = any(c.error is None and c.span[0] <= m.start() < c.span[1] for c in calls)
            if not inside or (wire is not None and wire not in wires):
                return True
    return False


def repair_text(
    text: str,
    tools: Sequence[Tool],
    *,
    wire: str | None = None,
    expected_tool: str | None = None,
    enabled: Collection[str] = REPAIRS,
) -> RepairResult:
    """Extract the primary call from raw text (escapes repaired while parsing when ``fix_escapes`` is on)
    and repair its arguments."""
    kinds = _enabled(enabled)
    tools = list(tools)
    calls = extract_calls(
        text, wire=wire, tools=tools, expected_tool=expected_tool, lenient="fix_escapes" in kinds
    )
    retry = leaked_markup(text, calls, wire)
    call = primary_call(calls, expected_tool)
    if call is None:
        return RepairResult(None, [], False, retry, ["no tool call found"])
    if call.error is not None:
        return RepairResult(None, [], False, retry, [call.error], tool=call.name, wrapping=call.wrapping)
    by_name = {t.name: t for t in tools}
    name = call.name if call.name is not None else expected_tool
    tool = by_name.get(name) if name is not None else None
    if tool is None or (expected_tool is not None and name != expected_tool):
        return RepairResult(
            call.arguments,
            [],
            False,
            retry,
            [f"tool {name!r} is not the expected tool"],
            tool=name,
            wrapping=call.wrapping,
        )
    fixes = [Change("fix_escapes", path, before, after) for path, before, after in call.fixes]
    result = repair_arguments(call.arguments, tool, enabled=kinds)
    result.changes = fixes + result.changes
    result.retry_signal = retry
    result.wrapping = call.wrapping
    return result


# ------------------------------------------------------------------------------------------ rescue accounting


def repair_record(
    record: dict, manifest: dict, *, enabled: Collection[str] = REPAIRS, verdict: dict | None = None
) -> dict:
    """One line of ``repaired-<REPAIR_VERSION>.jsonl``: the strict verdict of a raw sample and what a
    lenient harness makes of it.

    Parameters
    ----------
    record, manifest
        A raw sample record and its run's manifest.
    enabled
        The repairs to apply (:data:`REPAIRS` order).
    verdict
        The sample's ``score_record`` line when the caller already has it (a report scores each
        sample once); scored here otherwise.
    """
    arm = record.get("arm") or {}
    head = {
        "key": record.get("key"),
        "repair": REPAIR_VERSION,
        "scorer": SCORER_VERSION,
        "arm": arm,
        "scenario": record.get("scenario"),
        "seed": record.get("seed"),
        "index": record.get("index"),
    }
    if record.get("error"):
        return {**head, "skipped": str(record["error"])}
    if verdict is None or verdict.get("scorer") != SCORER_VERSION:
        verdict = score_record(record, manifest)
    if verdict["verdict"] == "too_deep":  # nothing a harness could repair; never walk it
        return {
            **head,
            "mode": arm.get("mode", "loose"),
            "strict_verdict": "too_deep",
            "strict_payload_ok": False,
            "valid": False,
            "payload_ok": False,
            "retry_signal": False,
            "tool": None,
            "wrapping": verdict.get("wrapping"),
            "kinds": [],
            "changes": [],
            "errors": list(verdict.get("errors") or []),
            "payload": None,
            "arguments": None,
        }
    tools, wire, expected, scenario = record_context(record, manifest)
    text = (record.get("prefill") or "") + (record.get("text") or "")
    result = repair_text(text, tools, wire=wire, expected_tool=expected, enabled=enabled)
    strict_payload = verdict.get("payload") or {}
    payload = None
    by_name = {t.name: t for t in tools}
    if scenario is not None and result.tool in by_name and result.arguments is not None:
        payload = check_payload(result.arguments, by_name[result.tool], scenario)
    return {
        **head,
        "mode": arm.get("mode", "loose"),
        "strict_verdict": verdict["verdict"],
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


def _rate(k: int, n: int) -> dict:
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
                "valid": _rate(k_valid, n),
                "valid_payload": _rate(k_payload, n),
            }
        )

    if strict:
        row(
            "strict",
            sum(r["strict_verdict"] == "valid" for r in strict),
            sum(r["strict_verdict"] == "valid" and r["strict_payload_ok"] for r in strict),
            len(strict),
        )
    if loose:
        row(
            "loose",
            sum(r["strict_verdict"] == "valid" for r in loose),
            sum(r["strict_verdict"] == "valid" and r["strict_payload_ok"] for r in loose),
            len(loose),
        )
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
        "rescued_share": _rate(len(rescued), len(failing)),
        "rescued_payload_share": _rate(len(rescued_payload), len(rescued)),
        "n_retry_signal": sum(r["retry_signal"] for r in loose),
        "kinds": kinds,
        "by_verdict": by_verdict,
        "table": table,
    }


def rescue_accounting(
    records: Iterable[dict], manifest: dict, *, verdicts: Mapping[str, dict] | None = None
) -> dict:
    """Over a run's raw samples: loose samples failing strict validation, how many repair makes valid, how
    many of those carry a byte-correct payload, counts per repair kind, and a table comparing strict
    decoding, loose + repair and loose + one retry (consecutive samples of an arm and scenario pair up),
    rates with Wilson 95% intervals. ``verdicts`` (sample key → ``score_record`` line) spares scoring
    every sample a second time."""
    given = verdicts or {}
    return rescue_summary(repair_record(r, manifest, verdict=given.get(r["key"])) for r in records)


def _fmt_rate(r: dict) -> str:
    if r["rate"] is None:
        return f"{r['k']}/{r['n']} = n/a"
    return f"{r['k']}/{r['n']} = {100 * r['rate']:.1f}% [{100 * r['lo']:.1f}, {100 * r['hi']:.1f}]"


def format_rescue(summary: dict) -> str:
    """The accounting as Markdown (for the terminal, the report and FINDINGS.md)."""
    lines = [
        f"Rescue accounting (repair {summary['repair']}, scorer {summary['scorer']})",
        "",
        f"- loose samples: {summary['n_loose']}; failing strict validation: {summary['n_failing_strict']}",
        f"- rescued by repair: {_fmt_rate(summary['rescued_share'])}",
        f"- of those, payload byte-correct: {_fmt_rate(summary['rescued_payload_share'])}",
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
            f"| {labels[row['condition']]} | {row['method']} | {_fmt_rate(row['valid'])} | "
            f"{_fmt_rate(row['valid_payload'])} |"
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


# ------------------------------------------------------------------------------------------ json-repair stage

# The text-level stage tolerant clients run before parsing: the ``json-repair`` library (PyPI) on the raw
# call text. Switchable (``tooldecode repair --no-json-repair``) and recorded per sample under
# ``json_repair`` (``json_repair_row``); its accounting is kept apart from the repairs above.
JSON_REPAIR = "json_repair"


def json_repair_version() -> str | None:
    """The installed ``json-repair`` version, or None when it is not installed."""
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
    for tag in ("<tool_call>", "</tool_call>"):
        raw = raw.replace(tag, "")
    return raw.strip()


def json_repair_call(
    text: str, tools: Sequence[Tool], *, wire: str | None = None, expected_tool: str | None = None
) -> dict:
    """What a tolerant client gets from ``json_repair.repair_json`` on a call's raw text.

    Returns ``{"tool", "arguments", "valid", "changed", "error"}``: ``valid`` means the repaired arguments of
    the expected tool pass its strictified schema; ``changed`` that the library altered the text (the call
    did not parse as it was). A valid result may still carry a cut or altered payload: callers compare it
    with the gold (``repair_record`` counts those as silent corruptions, not rescues).
    """
    import json_repair

    raw = _json_repair_candidate(text, wire, tools, expected_tool)
    try:
        json.loads(raw)
        changed = False
    except ValueError:
        changed = True
    try:
        value = json_repair.repair_json(raw, return_objects=True)
    except Exception as err:  # the library's own failure is an outcome, not a crash of the accounting
        return {"tool": None, "arguments": None, "valid": False, "changed": changed, "error": str(err)[:160]}
    if isinstance(value, list) and value and isinstance(value[0], dict):
        value = value[0]
    name, args = None, None
    if isinstance(value, dict) and "arguments" in value:
        name, args = value.get("name"), value.get("arguments")
    elif isinstance(value, dict) and wire == "json":
        name, args = expected_tool, value
    by_name = {t.name: t for t in tools}
    if name not in by_name or (expected_tool is not None and name != expected_tool):
        return {"tool": name, "arguments": args, "valid": False, "changed": changed, "error": "no call to the tool"}
    errors = _errors(args, by_name[name])
    return {
        "tool": name,
        "arguments": args,
        "valid": not errors,
        "changed": changed,
        "error": errors[0] if errors else None,
    }


def json_repair_row(record: dict, manifest: dict) -> dict:
    """The json-repair stage of one raw sample (``json_repair_call`` plus payload check and version)."""
    tools, wire, expected, scenario = record_context(record, manifest)
    text = (record.get("prefill") or "") + (record.get("text") or "")
    out = json_repair_call(text, tools, wire=wire, expected_tool=expected)
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
            "own_rescued": _rate(sum(r["valid"] and r["payload_ok"] for r in failing), len(failing)),
            "own_silent": _rate(sum(r["valid"] and not r["payload_ok"] for r in failing), len(failing)),
            "json_repair_rescued": _rate(
                sum(r[JSON_REPAIR]["valid"] and r[JSON_REPAIR]["payload_ok"] for r in jr), len(jr)
            ),
            "json_repair_silent": _rate(
                sum(r[JSON_REPAIR]["valid"] and not r[JSON_REPAIR]["payload_ok"] for r in jr), len(jr)
            ),
            "loose_json_repair_ok": _rate(
                sum(
                    (r["strict_verdict"] == "valid" and r["strict_payload_ok"])
                    or (r["strict_verdict"] != "valid" and r.get(JSON_REPAIR, {}).get("payload_ok", False))
                    for r in loose
                ),
                len(loose),
            ),
            "strict_ok": _rate(
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
            f"| {model} | {s['n_failing']} | {_fmt_rate(s['own_rescued'])} | {_fmt_rate(s['own_silent'])} | "
            f"{_fmt_rate(s['json_repair_rescued'])} | {_fmt_rate(s['json_repair_silent'])} | "
            f"{_fmt_rate(s['loose_json_repair_ok'])} | {_fmt_rate(s['strict_ok'])} |"
        )
    return "\n".join(lines)
