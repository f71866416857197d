"""The built-in tool catalog (``tooldecode/tools/*.json``), user tool files, and tool lists in the
shapes other stacks write them: OpenAI (chat-completions and responses), Anthropic, MCP ``tools/list``."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from tooldecode.errors import SchemaError

FAMILIES = ("nested", "flat")


NO_ARGUMENTS: dict[str, Any] = {"type": "object", "properties": {}}


def arguments_schema(params: Any, name: str = "tool") -> Any:
    """The schema a tool call's arguments are rendered from: always an object.

    A tool's arguments are a JSON object in every wire. A schema that does not say so (``{}``, ``true``,
    an annotation-only schema, or object keywords without ``type``) is read as ``type: object``; in strict
    mode such an object is then closed like any other, so ``{}`` is the closed empty object (no
    arguments), never "any JSON value". A ``type`` list keeps only ``object``.

    Parameters
    ----------
    params : Any
        The tool's arguments schema (``Tool.parameters``).
    name : str, default "tool"
        The tool's name, for the error message.

    Returns
    -------
    Any
        ``params`` with ``type: object`` (``false`` stays ``false``: no call is valid).

    Raises
    ------
    SchemaError
        A schema whose ``type`` admits no object (the arguments could never be an object).

    Examples
    --------
    >>> from tooldecode.grammar import arguments_schema
    >>> arguments_schema({})
    {'type': 'object'}
    """
    if params is True:
        return {"type": "object"}
    if not isinstance(params, dict):
        return params
    t = params.get("type")
    if t is None:
        return {**params, "type": "object"}
    types = [t] if isinstance(t, str) else list(t) if isinstance(t, list) else []
    if "object" not in types:
        raise SchemaError(
            f"tool {name!r}: its arguments schema has type {t!r}; a tool's arguments are a JSON object, "
            "so give 'type': 'object' (or {} for a tool without arguments)"
        )
    return params if t == "object" else {**params, "type": "object"}


@dataclass(frozen=True)
class Tool:
    """A tool: its name, family (``nested`` or ``flat``: the edit tool's shape, which only the study's
    tools need; ``flat`` by default), description, JSON Schema of the arguments (a tool without one
    takes no arguments), and the aliases a lenient client would accept per key (``"path"`` or
    ``"edits[].oldText"``)."""

    name: str
    family: str = "flat"
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=lambda: dict(NO_ARGUMENTS))
    aliases: dict[str, list[str]] = field(default_factory=dict)
    source: Path | None = None
    strict: bool | None = None  # the list's own per-tool ``strict`` (OpenAI), None where it gives none


PARAMETER_KEYS = ("parameters", "input_schema", "inputSchema")  # OpenAI / Anthropic / MCP spellings


def _unwrap(data: Any) -> Any:
    """``{"type": "function", "function": {...}}`` (OpenAI's chat-completions tool list entry) -> the
    inner object, and ``input_schema``/``inputSchema`` spelled as ``parameters``. An OpenAI function
    without ``parameters`` takes no arguments."""
    openai = isinstance(data, dict) and data.get("type") == "function"
    if openai and isinstance(data.get("function"), dict):
        data = data["function"]
    if isinstance(data, dict) and "parameters" not in data:
        for k in PARAMETER_KEYS[1:]:
            if k in data:
                data = {**{x: v for x, v in data.items() if x != k}, "parameters": data[k]}
                break
        else:
            if openai and isinstance(data.get("name"), str):
                data = {**data, "parameters": dict(NO_ARGUMENTS)}
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


def _from_data(data: Any, source: Path | None, where: str | None = None) -> Tool:
    where = where or (str(source) if source else "tool data")
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
    if params and not is_schema(params):  # only unknown keys: it would admit any JSON value, silently
        raise SchemaError(
            f"{where}: 'parameters' of tool {name!r} is {_seen(params)}, with no JSON Schema keyword; "
            'give the schema of its arguments (e.g. {"type": "object", "properties": {...}})'
        )
    family = data.get("family", "flat")
    if family not in FAMILIES:
        raise SchemaError(f"{where}: family {family!r} of tool {name!r} must be one of {', '.join(FAMILIES)}")
    aliases = data.get("aliases", {}) or {}
    if not isinstance(aliases, dict) or not all(
        isinstance(k, str) and isinstance(v, list) and all(isinstance(x, str) for x in v)
        for k, v in aliases.items()
    ):
        raise SchemaError(f"{where}: 'aliases' of tool {name!r} must map key paths to lists of names")
    desc = data.get("description") or ""
    if not isinstance(desc, str):
        raise SchemaError(f"{where}: 'description' of tool {name!r} must be a string")
    strict = data.get("strict")
    if strict is not None and not isinstance(strict, bool):
        raise SchemaError(f"{where}: 'strict' of tool {name!r} must be true or false")
    return Tool(
        name=name,
        family=family,
        description=desc,
        parameters=params,
        aliases={k: list(v) for k, v in aliases.items()},
        source=source,
        strict=strict,
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
    """Built-in tools by name (``edit``, ``read``, ``write``, ``bash``, ``Edit``, ``MultiEdit``, ...).

    Returns
    -------
    dict of str to Tool
        A new dict each call, holding the catalog's own (frozen) ``Tool`` objects.

    Examples
    --------
    >>> from tooldecode.grammar import tool_catalog
    >>> "edit" in tool_catalog() and "MultiEdit" in tool_catalog()
    True
    """
    return dict(_catalog())


def read_json(path: Path) -> Any:
    """The JSON document in file ``path``; ``SchemaError`` (one line) when it cannot be read or parsed."""
    from tooldecode.guard import parse_json, read_text

    if path.is_dir():
        raise SchemaError(f"{path}: is a directory; give a tool list, tool or JSON Schema file")
    # a regular UTF-8 file within bounds; nesting and integer size bounded before the parser runs
    text = read_text(path, "tool list or schema", error=SchemaError)
    return parse_json(text, str(path), "tool list or schema", error=SchemaError)


def is_schema(data: Any) -> bool:
    """Whether ``data`` reads as a JSON Schema: a boolean, the empty object, or an object with at least
    one keyword the builder knows (an annotation such as ``title`` counts). An object of unknown keys
    only would admit any JSON value, which is never what a caller means.

    Parameters
    ----------
    data : Any
        A parsed JSON value.

    Returns
    -------
    bool
        True when ``data`` is a schema by the rule above.

    Examples
    --------
    >>> from tooldecode.grammar import is_schema
    >>> is_schema({"type": "string"}), is_schema({"colour": "red"}), is_schema(True)
    (True, False, True)
    """
    from tooldecode.grammar.keywords import ANNOTATIONS, KNOWN, UNEXPRESSIBLE

    if isinstance(data, bool):
        return True
    if not isinstance(data, dict):
        return False
    return not data or any(k in KNOWN or k in ANNOTATIONS or k in UNEXPRESSIBLE for k in data)


def _seen(data: Any) -> str:
    if isinstance(data, dict):
        keys = list(data)
        shown = ", ".join(repr(k) for k in keys[:6]) + (", ..." if len(keys) > 6 else "")
        return f"an object with keys {shown}" if keys else "an empty object"
    if isinstance(data, list):
        return f"a list of {len(data)}"
    return "null" if data is None else f"a value of type {type(data).__name__}"


def provider_tool(item: Any) -> str | None:
    """The name (or type) of a provider's built-in tool in a request body, or None for a tool defined
    by its schema: an object whose ``type`` is neither ``function`` nor ``custom`` and that gives no
    parameters schema (Anthropic ``web_search_20250305``, ``text_editor_20250124``, ``bash_…``;
    OpenAI ``web_search_preview``, ``file_search``, ``code_interpreter``). The provider runs it; no
    grammar describes its calls."""
    if not isinstance(item, dict) or not isinstance(item.get("type"), str):
        return None
    schema_types = ("object", "array", "string", "number", "integer", "boolean", "null")
    if item["type"] in ("function", "custom", *schema_types) or any(k in item for k in PARAMETER_KEYS):
        return None
    return str(item.get("name") or item["type"])


def _tool_list(items: list[Any], where: str, source: Path | None) -> list[Tool]:
    out: list[Tool] = []
    skipped = [n for n in (provider_tool(x) for x in items) if n is not None]
    if skipped:
        import warnings

        from tooldecode.grammar.errors import GrammarWarning

        warnings.warn(
            f"{where}: skipped the provider's built-in tool(s) {', '.join(skipped)}: the provider runs "
            "them and no schema describes their calls",
            GrammarWarning,
            stacklevel=3,
        )
    for i, item in enumerate(items):
        at = f"{where}: tools[{i}]"
        if provider_tool(item) is not None:
            continue
        unwrapped = _unwrap(item)
        if not isinstance(unwrapped, dict) or "name" not in unwrapped or "parameters" not in unwrapped:
            raise SchemaError(
                f"{at}: {_seen(item)} is not a tool; a tool has a name and a parameters schema "
                "(OpenAI 'parameters', Anthropic 'input_schema', MCP 'inputSchema')"
            )
        out.append(_from_data(unwrapped, source, where=at))
    names = [t.name for t in out]
    dups = sorted({n for n in names if names.count(n) > 1})
    if dups:
        raise SchemaError(f"{where}: tool names {dups} occur more than once; tool names must be unique")
    if not out:
        raise SchemaError(f"{where}: the tool list is empty; give at least one tool")
    return out


def read_tools(data: Any, *, where: str = "tool data", source: Path | None = None) -> list[Tool] | None:
    """The tools a JSON document describes, or None when it is a bare JSON Schema of arguments.

    Accepted: a list of tools (OpenAI chat-completions ``{"type": "function", "function": {...}}``,
    OpenAI responses ``{"type": "function", "name", "parameters"}``, Anthropic ``{"name",
    "input_schema"}``, MCP ``{"name", "inputSchema"}``, or tooldecode's own ``{"name", "parameters"}``),
    an object holding such a list under ``tools`` (an MCP ``tools/list`` result, a request body), the
    same wrapped in a JSON-RPC response's ``result``, a single tool, or a JSON Schema. Anything else
    raises ``SchemaError`` naming what was seen.

    Parameters
    ----------
    data : Any
        A parsed JSON document.
    where : str, default "tool data"
        What ``data`` is, for error messages (a file name, an HTTP response).
    source : Path, optional
        The file ``data`` came from, kept on each ``Tool``.

    Returns
    -------
    list of Tool or None
        The tools in document order, or None for a bare JSON Schema of arguments.

    Raises
    ------
    SchemaError
        A JSON-RPC message without a result, a list item that is not a tool, duplicate tool names,
        an empty tool list, or a value that is neither a tool nor a schema.
    """
    if isinstance(data, dict) and "jsonrpc" in data:
        if "result" not in data:
            err = data.get("error")
            detail = f" (error: {err.get('message', err)})" if isinstance(err, dict) else ""
            raise SchemaError(
                f"{where}: a JSON-RPC message without a result{detail}; give a tools/list result"
            )
        data = data["result"]
        where = f"{where}: result"
    if isinstance(data, list):
        return _tool_list(data, where, source)
    if isinstance(data, dict) and isinstance(data.get("tools"), list):
        return _tool_list(data["tools"], where, source)
    try:
        tool = looks_like_tool(data)
    except SchemaError as e:
        raise SchemaError(f"{where}: {e}") from None
    if tool:
        return [_from_data(data, source, where=where)]
    if is_schema(data):
        return None
    raise SchemaError(
        f"{where}: {_seen(data)} is neither a JSON Schema (no schema keyword) nor a tool or a tool list "
        "(OpenAI, Anthropic, MCP tools/list); give one of those"
    )


def load_tools(obj_or_path: Any, *, name: str | None = None) -> list[Tool]:
    """Tools from any of the common shapes (see ``read_tools``): a parsed JSON document, a path to a
    JSON file, a built-in tool name, a ``Tool`` or a list of ``Tool``. A bare JSON Schema becomes one
    tool named ``name`` (default: its ``title``, the file's stem, or ``"tool"``).

    Parameters
    ----------
    obj_or_path : Any
        A parsed JSON document, a ``str`` or ``Path`` (built-in tool name or JSON file), a ``Tool``
        or a list of ``Tool``.
    name : str, optional
        Tool name of a bare schema.

    Returns
    -------
    list of Tool
        At least one tool.

    Raises
    ------
    SchemaError
        A path that is neither a file nor a built-in tool, a file that is not JSON, or data
        ``read_tools`` refuses.

    Examples
    --------
    >>> from tooldecode.grammar import load_tools
    >>> [t.name for t in load_tools({"type": "object", "title": "lookup"})]
    ['lookup']
    """
    if isinstance(obj_or_path, Tool):
        return [obj_or_path]
    if isinstance(obj_or_path, list) and obj_or_path and all(isinstance(t, Tool) for t in obj_or_path):
        return list(obj_or_path)
    source: Path | None = None
    where = "tool data"
    data = obj_or_path
    if isinstance(obj_or_path, (str, Path)):
        key = str(obj_or_path)
        if isinstance(obj_or_path, str) and (key in _catalog() or _by_stem(key) is not None):
            return [load_tool(key)]
        source = Path(key)
        if not source.exists():
            raise SchemaError(
                f"{key}: no such file or built-in tool; built-in tools: {', '.join(_catalog())}"
            )
        data = read_json(source)
        where = str(source)
    tools = read_tools(data, where=where, source=source)
    if tools is not None:
        return tools
    title = data.get("title") if isinstance(data, dict) else None
    if not (isinstance(title, str) and title and not any(c in title for c in ' "<>\n\t\\')):
        title = None
    tool_name = name or title or (source.stem if source else "tool")
    return [_from_data({"name": tool_name, "parameters": data}, source, where=where)]


def _by_stem(key: str) -> Tool | None:
    for tool in _catalog().values():
        if tool.source is not None and tool.source.stem == key:
            return tool
    return None


def load_tool(name_or_path: str | Path | dict[str, Any]) -> Tool:
    """A built-in tool by name (or file stem such as ``flat-Edit``), a tool JSON file, or a tool given
    as a dict in any shape ``read_tools`` accepts (a tool list of exactly one tool included).

    Parameters
    ----------
    name_or_path : str, Path or dict
        A built-in tool name or file stem (see ``tool_catalog``), a path to a tool JSON file, or
        tool data.

    Returns
    -------
    Tool
        The one tool.

    Raises
    ------
    SchemaError
        An unknown name, a missing or invalid file, or data holding other than one tool.

    Examples
    --------
    >>> from tooldecode.grammar import load_tool
    >>> load_tool("edit").name
    'edit'
    """
    if isinstance(name_or_path, (dict, list)):
        tools = load_tools(name_or_path)
        if len(tools) != 1:
            raise SchemaError(
                f"tool data holds {len(tools)} tools ({', '.join(t.name for t in tools)}); "
                "use load_tools for a tool list"
            )
        return tools[0]
    cat = _catalog()
    key = str(name_or_path)
    if isinstance(name_or_path, str) and key in cat:
        return cat[key]
    stem = _by_stem(key)
    if stem is not None:
        return stem
    path = Path(key)
    if len(key) < 4096 and (path.suffix == ".json" or path.exists()):
        if not path.is_file():
            raise SchemaError(
                f"tool file {path} does not exist; give a built-in name ({', '.join(cat)}) or a file"
            )
        return _from_data(read_json(path), path)
    raise SchemaError(
        f"unknown tool {key[:80]!r}; built-in tools: {', '.join(cat)} (or give a .json file or a dict)"
    )
