"""Tool look-ups for scoring: the catalog, tool sets, a tool's argument keys, ``$ref`` and type helpers."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from tooldecode.grammar import Tool, tool_catalog
from tooldecode.scoring.records import ScoringError
from tooldecode.toolsets import TOOLSETS


def render_path(path: Sequence[Any]) -> str:
    """JSON path as ``edits[0].requireUnique``; the root is ``$``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif re.fullmatch(r"[A-Za-z_$][\w$\-]*", part):
            out += f".{part}" if out else part
        else:
            out += f"[{json.dumps(part)}]"
    return out or "$"


# ---------------------------------------------------------------------------------------------- catalog

_CATALOG: dict[str, Tool] | None = None


def catalog_by_name() -> dict[str, Tool]:
    """The built-in tool catalog by tool name (read once)."""
    global _CATALOG
    if _CATALOG is None:
        cat = tool_catalog()
        _CATALOG = dict(cat) if isinstance(cat, dict) else {t.name: t for t in cat}
    return _CATALOG


def toolset_tools(toolset: str) -> list[Tool]:
    """The tools a tool-set variant offers (``nested``, ``flat-edit``, ``multiedit``)."""
    if toolset not in TOOLSETS:
        raise ScoringError(f"unknown tool set {toolset!r}; known: {', '.join(TOOLSETS)}")
    return [tool_by_name(name) for name in TOOLSETS[toolset]]


def tool_by_name(name: str) -> Tool:
    """The catalog's tool ``name`` (``ScoringError`` for an unknown one)."""
    cat = catalog_by_name()
    if name not in cat:
        raise ScoringError(f"unknown tool {name!r} in the tool catalog; known: {', '.join(sorted(cat))}")
    return cat[name]


def schema_properties(schema: Any, root: Any) -> dict:
    """The ``properties`` of an object schema, ``$ref`` resolved (empty for anything else)."""
    schema = resolve_schema(schema, root)
    props = schema.get("properties") if isinstance(schema, dict) else None
    return props if isinstance(props, dict) else {}


def resolve_schema(schema: Any, root: Any) -> Any:
    """``schema`` with a local ``$ref`` followed (against ``root``)."""
    for _ in range(32):
        if not (isinstance(schema, dict) and isinstance(schema.get("$ref"), str)):
            return schema
        ref = schema["$ref"]
        if not ref.startswith("#"):
            return schema
        target: Any = root
        for part in [p for p in ref[1:].split("/") if p]:
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(target, dict) or part not in target:
                return {}
            target = target[part]
        schema = target
    return schema


def tool_keys(tool: Tool) -> tuple[set[str], set[str]]:
    """(top-level property names and aliases, property names and aliases at any depth)."""
    params = tool.parameters
    top = set(schema_properties(params, params))
    every: set[str] = set()

    def walk(s: Any, depth: int) -> None:
        if depth > 20 or not isinstance(s, dict):
            return
        for k, v in (s.get("properties") or {}).items():
            every.add(k)
            walk(v, depth + 1)
        for key in ("items", "additionalProperties"):
            walk(s.get(key), depth + 1)
        for key in ("anyOf", "oneOf", "allOf", "prefixItems"):
            for sub in s.get(key) or []:
                walk(sub, depth + 1)
        for sub in (s.get("$defs") or {}).values():
            walk(sub, depth + 1)

    walk(params, 0)
    for pattern, names in (tool.aliases or {}).items():
        every.update(names)
        if "." not in pattern and "[" not in pattern:
            top.update(names)
    return top, every | top


def schema_types(schema: Any) -> set[str] | None:
    """The JSON types a schema admits, or None when it does not say."""
    if not isinstance(schema, dict):
        return None
    t = schema.get("type")
    if isinstance(t, str):
        return {t}
    if isinstance(t, list):
        return {x for x in t if isinstance(x, str)}
    if "enum" in schema and all(isinstance(x, str) for x in schema["enum"]):
        return {"string"}
    if "properties" in schema:
        return {"object"}
    if "items" in schema:
        return {"array"}
    return None
