"""The argument repairs: each named, switchable, applied along the tool's schema and recorded with the JSON path it touched (``repair_arguments``)."""

from __future__ import annotations

import copy
import json
import math
import re
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from tooldecode.errors import ToolDecodeError
from tooldecode.grammar import Tool, json_type
from tooldecode.scoring import (
    JSONParseError,
    parse_json,
    render_path,
    resolve_schema,
    schema_properties,
    schema_types,
    strict_schema,
    validate_arguments,
)

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
    """One repair applied: which, where (JSON path), before and after."""

    kind: str  # one of REPAIRS
    path: str  # JSON path of what changed, e.g. ``edits[0].old_str``; ``$`` is the root
    before: Any
    after: Any


@dataclass
class RepairResult:
    """Repaired arguments, the changes made, and whether a harness would accept them."""

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


def check_repairs(enabled: Collection[str]) -> frozenset[str]:
    """``enabled`` as a set, every name a known repair (``RepairError`` otherwise)."""
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
        raw_prefix = schema.get("prefixItems")
        prefix: list[Any] = raw_prefix if isinstance(raw_prefix, list) else []
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


def _type_ok(value: Any, types: set[str]) -> bool:
    t = json_type(value, integer=True)
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
    kinds = check_repairs(enabled)
    errors = harness_errors(args, tool)
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
    errors = harness_errors(value, tool)
    return RepairResult(value, run.changes, not errors, False, errors, tool=tool.name)


def harness_errors(args: Any, tool: Tool) -> list[str]:
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
