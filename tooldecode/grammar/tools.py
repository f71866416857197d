"""The built-in tool catalog (``tooldecode/tools/*.json``) and user tool files."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from tooldecode.errors import SchemaError

FAMILIES = ("nested", "flat")


@dataclass(frozen=True)
class Tool:
    """A tool: its name, family (``nested`` or ``flat``), description, JSON Schema of the arguments,
    and the aliases a lenient client would accept per key (``"path"`` or ``"edits[].oldText"``)."""

    name: str
    family: str
    description: str
    parameters: dict[str, Any]
    aliases: dict[str, list[str]] = field(default_factory=dict)
    source: Path | None = None


PARAMETER_KEYS = ("parameters", "input_schema", "inputSchema")  # OpenAI / Anthropic / MCP spellings


def _unwrap(data: Any) -> Any:
    """``{"type": "function", "function": {...}}`` (OpenAI's tool list entry) -> the inner object,
    and ``input_schema``/``inputSchema`` spelled as ``parameters``."""
    if isinstance(data, dict) and data.get("type") == "function" and isinstance(data.get("function"), dict):
        data = data["function"]
    if isinstance(data, dict) and "parameters" not in data:
        for k in PARAMETER_KEYS[1:]:
            if k in data:
                data = {**{x: v for x, v in data.items() if x != k}, "parameters": data[k]}
                break
    return data


def looks_like_tool(data: Any) -> bool:
    """Whether a JSON document is a tool definition rather than a bare arguments schema: an object
    with a ``name`` and a parameters schema (any of ``PARAMETER_KEYS``, or OpenAI's
    ``{"type": "function", "function": {...}}``); ``SchemaError`` for an object that names a tool
    but has no parameters and no schema keyword."""
    from tooldecode.grammar.schema import KNOWN

    data = _unwrap(data)
    if not isinstance(data, dict) or "name" not in data:
        return False
    if "parameters" in data:
        return True
    if isinstance(data.get("name"), str) and not any(k in KNOWN for k in data):
        raise SchemaError(
            f"tool {data['name']!r} has no 'parameters' (nor input_schema/inputSchema); "
            "add the JSON Schema of its arguments as 'parameters'"
        )
    return False


def _from_data(data: Any, source: Path | None) -> Tool:
    where = str(source) if source else "tool data"
    data = _unwrap(data)
    if not isinstance(data, dict):
        raise SchemaError(
            f"{where}: a tool file must hold a JSON object with name, family, description, parameters"
        )
    for key in ("name", "parameters"):
        if key not in data:
            raise SchemaError(f"{where}: missing field '{key}'; a tool needs name and parameters")
    name = data["name"]
    if not isinstance(name, str) or not name or any(c in name for c in ' "<>\n\t'):
        raise SchemaError(
            f"{where}: tool name {name!r} must be a non-empty string without spaces, quotes or '<>'"
        )
    params = data["parameters"]
    if not isinstance(params, dict):
        raise SchemaError(f"{where}: 'parameters' of tool {name!r} must be a JSON Schema object")
    family = data.get("family", "flat")
    if family not in FAMILIES:
        raise SchemaError(f"{where}: family {family!r} of tool {name!r} must be one of {', '.join(FAMILIES)}")
    aliases = data.get("aliases", {}) or {}
    if not isinstance(aliases, dict) or not all(
        isinstance(k, str) and isinstance(v, list) and all(isinstance(x, str) for x in v)
        for k, v in aliases.items()
    ):
        raise SchemaError(f"{where}: 'aliases' of tool {name!r} must map key paths to lists of names")
    desc = data.get("description", "")
    if not isinstance(desc, str):
        raise SchemaError(f"{where}: 'description' of tool {name!r} must be a string")
    return Tool(
        name=name,
        family=family,
        description=desc,
        parameters=params,
        aliases={k: list(v) for k, v in aliases.items()},
        source=source,
    )


@lru_cache(maxsize=1)
def _catalog() -> dict[str, Tool]:
    out: dict[str, Tool] = {}
    root = resources.files("tooldecode") / "tools"
    for entry in sorted(root.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".json"):
            continue
        path = Path(str(entry))
        tool = _from_data(json.loads(entry.read_text(encoding="utf-8")), path)
        out[tool.name] = tool
    return out


def tool_catalog() -> dict[str, Tool]:
    """Built-in tools by name (``edit``, ``read``, ``write``, ``bash``, ``Edit``, ``MultiEdit``, ...)."""
    return dict(_catalog())


def load_tool(name_or_path: str | Path) -> Tool:
    """A built-in tool by name (or file stem such as ``flat-Edit``), or a tool JSON file."""
    cat = _catalog()
    key = str(name_or_path)
    if isinstance(name_or_path, str) and key in cat:
        return cat[key]
    for tool in cat.values():
        if tool.source is not None and tool.source.stem == key:
            return tool
    path = Path(key)
    if path.suffix == ".json" or path.exists():
        if not path.is_file():
            raise SchemaError(
                f"tool file {path} does not exist; give a built-in name ({', '.join(cat)}) or a file"
            )
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise SchemaError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from e
        return _from_data(data, path)
    raise SchemaError(f"unknown tool {key!r}; built-in tools: {', '.join(cat)} (or give a .json file)")
