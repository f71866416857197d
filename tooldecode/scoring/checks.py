"""Checks of a call's arguments: closed-schema validation, schema echo, and the edit payload against gold."""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import jsonschema

from tooldecode.errors import ScenarioError
from tooldecode.grammar import ECHO_KEYWORDS, JSON_TYPES, Tool, strictify
from tooldecode.scenarios import Edit, Scenario, apply_edits
from tooldecode.scoring.schemas import render_path, resolve_schema, schema_properties

_VALIDATORS: dict[tuple[str, str], tuple[Any, dict]] = {}


def _validator(tool: Tool) -> tuple[Any, dict]:
    key = (tool.name, json.dumps(tool.parameters, sort_keys=True, default=str))
    if key not in _VALIDATORS:
        schema = strictify(tool.parameters)
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        _VALIDATORS[key] = (cls(schema), schema)
    return _VALIDATORS[key]


@dataclass
class ArgumentCheck:
    """Violations of a tool's closed schema, by class: invented keys, missing required keys, the rest."""

    invented: list[dict]
    invented_errors: list[str]
    missing: list[str]
    other: list[str]

    @property
    def errors(self) -> list[str]:
        return self.invented_errors + self.missing + self.other


def _short(message: str, limit: int = 240) -> str:
    message = " ".join(message.split())
    return message if len(message) <= limit else message[: limit - 1] + "…"


def _path_key(path: Sequence[Any]) -> tuple:
    return tuple((0, p, "") if isinstance(p, int) else (1, 0, str(p)) for p in path)


def check_arguments(arguments: Any, tool: Tool) -> ArgumentCheck:
    """``arguments`` validated against the strictified schema of ``tool``, violations by class."""
    validator, schema = _validator(tool)
    invented: list[tuple[tuple, dict]] = []
    missing: list[tuple[tuple, str]] = []
    other: list[tuple[tuple, str]] = []
    inv_err: list[tuple[tuple, str]] = []
    try:
        errors = list(validator.iter_errors(arguments))
    except RecursionError:
        return ArgumentCheck([], [], [], ["$: arguments nested too deep"])
    for err in errors:
        path = list(err.absolute_path)
        where = render_path(path)
        if err.validator == "additionalProperties" and isinstance(err.instance, dict):
            props = err.schema.get("properties") or {}
            patterns = list(err.schema.get("patternProperties") or {})
            for k, v in err.instance.items():
                if k in props or any(re.search(p, k) for p in patterns):
                    continue
                invented.append(
                    (_path_key([*path, k]), {"path": render_path([*path, k]), "key": k, "value": v})
                )
            inv_err.append((_path_key(path), f"{where}: {_short(err.message)}"))
        elif err.validator == "unevaluatedProperties" and isinstance(err.instance, dict):
            for k in _unexpected_keys(err.message):
                if k in err.instance:
                    invented.append(
                        (
                            _path_key([*path, k]),
                            {"path": render_path([*path, k]), "key": k, "value": err.instance[k]},
                        )
                    )
            inv_err.append((_path_key(path), f"{where}: {_short(err.message)}"))
        elif err.validator == "required":
            missing.append((_path_key(path), f"{where}: {_short(err.message)}"))
        else:
            other.append((_path_key(path), f"{where}: {_short(err.message)}"))

    def ordered(items: list[tuple[tuple, Any]]) -> list:
        return [x for _, x in sorted(items, key=lambda t: t[0])]

    unique = {item["path"]: (key, item) for key, item in reversed(invented)}  # one entry per path
    return ArgumentCheck(ordered(list(unique.values())), ordered(inv_err), ordered(missing), ordered(other))


def strict_schema(tool: Tool) -> dict:
    """The tool's parameters schema with every object closed (what strict decoding enforces)."""
    return _validator(tool)[1]


def _unexpected_keys(message: str) -> list[str]:
    """Key names from jsonschema's "... ('a', 'b' were unexpected)" message."""
    m = re.search(r"\((.*) (?:was|were) unexpected\)", message, re.S)
    if not m:
        return []
    try:
        keys = ast.literal_eval("(" + m.group(1) + ",)")
    except (ValueError, SyntaxError):
        return []
    return [k for k in keys if isinstance(k, str)]


def validate_arguments(arguments: Any, tool: Tool) -> list[str]:
    """Messages (``path: message``) of every violation of the tool's strictified schema; empty when valid."""
    return check_arguments(arguments, tool).errors


# ----------------------------------------------------------------------------------------- schema echo


def _descriptions(tool: Tool) -> set[str]:
    out = {tool.description.strip()} if isinstance(tool.description, str) else set()

    def walk(s: Any, depth: int) -> None:
        if depth > 30:
            return
        if isinstance(s, dict):
            d = s.get("description")
            if isinstance(d, str):
                out.add(d.strip())
            for v in s.values():
                walk(v, depth + 1)
        elif isinstance(s, list):
            for v in s:
                walk(v, depth + 1)

    walk(tool.parameters, 0)
    return {d for d in out if len(d) >= 8}


def schema_echo(arguments: Any, tool: Tool, invented: Sequence[dict]) -> list[str]:
    """Paths where the arguments copy the tool's schema: schema keywords as invented keys, a property's
    type or schema as its value, a value equal to a description."""
    hits: list[str] = []
    descriptions = _descriptions(tool)
    for item in invented:
        key, value = item["key"], item["value"]
        if (
            key in ECHO_KEYWORDS
            or (key == "type" and (value in JSON_TYPES or isinstance(value, dict)))
            or (key in ("description", "title") and isinstance(value, str) and value.strip() in descriptions)
        ):
            hits.append(item["path"])

    def walk(v: Any, path: list, depth: int) -> None:
        if depth > 50:
            return
        if isinstance(v, str):
            if v.strip() in descriptions:
                hits.append(render_path(path))
        elif isinstance(v, dict):
            t = v.get("type")
            if (
                isinstance(t, str)
                and t in JSON_TYPES
                and path
                and (len(v) == 1 or {"description", "properties", "items"} & set(v))
            ):
                hits.append(render_path(path))
                return
            for k, sub in v.items():
                walk(sub, [*path, k], depth + 1)
        elif isinstance(v, list):
            for i, sub in enumerate(v):
                walk(sub, [*path, i], depth + 1)

    walk(arguments, [], 0)
    return sorted(set(hits))


# --------------------------------------------------------------------------------------------- payload


def edit_keys(tool: Tool) -> tuple[str | None, str | None, str | None]:
    """(array property holding edits or None for a flat tool, old-text key, new-text key)."""
    props = schema_properties(tool.parameters, tool.parameters)

    def pick(names: Sequence[str]) -> tuple[str | None, str | None]:
        old = next((n for n in names if n.lower().startswith("old")), None)
        new = next((n for n in names if n.lower().startswith("new")), None)
        return old, new

    for key, sub in props.items():
        item_props = schema_properties(
            resolve_schema(sub, tool.parameters).get("items") if isinstance(sub, dict) else None,
            tool.parameters,
        )
        old, new = pick(list(item_props))
        if old and new:
            return key, old, new
    old, new = pick(list(props))
    return None, old, new


def path_key(tool: Tool) -> str | None:
    """The tool's path argument (``path``, ``file_path``, ...), or None."""
    props = schema_properties(tool.parameters, tool.parameters)
    return next((k for k in ("path", "file_path", "filePath", "file") if k in props), None)


def is_edit_tool(tool: Tool) -> bool:
    """Whether ``tool`` takes edits (an old-text and a new-text key)."""
    _, old, new = edit_keys(tool)
    return bool(old and new)


def _occurrences(haystack: str, needle: str) -> int:
    """Occurrences of ``needle`` (overlapping ones too), capped at 2."""
    if not needle:
        return 2
    first = haystack.find(needle)
    if first < 0:
        return 0
    return 1 if haystack.find(needle, first + 1) < 0 else 2


def edit_pairs(arguments: Any, tool: Tool) -> tuple[list[tuple[Any, Any]], Any] | None:
    """(the call's ``(old, new)`` pairs, its path argument), or None when the call carries no edits."""
    if not isinstance(arguments, dict):
        return None
    array_key, old_key, new_key = edit_keys(tool)
    if not (old_key and new_key):
        return None
    if array_key is not None:
        items = arguments.get(array_key)
        if not isinstance(items, list):
            return None
        pairs = [(i.get(old_key), i.get(new_key)) if isinstance(i, dict) else (None, None) for i in items]
    else:
        if old_key not in arguments and new_key not in arguments:
            return None
        pairs = [(arguments.get(old_key), arguments.get(new_key))]
    pk = path_key(tool)
    return pairs, arguments.get(pk) if pk else None


def check_payload(arguments: Any, tool: Tool, scenario: Scenario) -> dict | None:
    """The edits of a call against the scenario's gold; None when the call carries no edits."""
    if not is_edit_tool(tool):
        return None
    found = edit_pairs(arguments, tool)
    if found is None:
        return None
    pairs = found[0]
    content = scenario.content
    strings = all(isinstance(o, str) and isinstance(n, str) for o, n in pairs)
    old_unique = bool(pairs) and strings and all(_occurrences(content, o) == 1 for o, _ in pairs)
    applies = False
    result = None
    if pairs and strings:
        try:
            result = apply_edits(content, tuple(Edit(old_text=o, new_text=n) for o, n in pairs))
            applies = True
        except ScenarioError:
            applies = False
    gold_new = [e.new_text for e in scenario.edits]
    pkey = path_key(tool)
    return {
        "old_unique": old_unique,
        "applies": applies,
        "file_correct": bool(applies and result == scenario.expected),
        "newtext_equal": [n for _, n in pairs] == gold_new,
        "path_equal": pkey is not None and arguments.get(pkey) == scenario.path,
        "n_edits": len(pairs),
        "n_gold": len(scenario.edits),
    }
