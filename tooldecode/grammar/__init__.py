"""Tool schemas -> grammars: JSON Schema -> IR -> GBNF / Lark / regex, in a tool-call wire format.

>>> from tooldecode.grammar import load_tool, render
>>> text = render(load_tool("edit"), format="gbnf", wire="hermes", mode="strict")

Imports nothing heavy (no torch, transformers or llama_cpp).
"""

from __future__ import annotations

import json
import warnings
from functools import lru_cache
from typing import Any

from tooldecode.grammar.errors import GrammarError, GrammarWarning, InvalidSchemaError, UnsupportedSchemaError
from tooldecode.grammar.gbnf import emit_gbnf
from tooldecode.grammar.gir import FAIL, Grammar, RuleBook, galt, sanitize
from tooldecode.grammar.lark import emit_lark
from tooldecode.grammar.lower import DUPLICATES, Lowerer
from tooldecode.grammar.regex import emit_regex
from tooldecode.grammar.schema import MODES, ORDERS, SchemaIR, compile_schema, strictify
from tooldecode.grammar.terminals import WS_POLICIES, ws_max_for
from tooldecode.grammar.tools import Tool, is_schema, load_tool, load_tools, read_tools, tool_catalog
from tooldecode.grammar.wire import FORBID, WIRES, check_name, check_wire, frame, serialize

FORMATS = ("gbnf", "lark", "regex")

__all__ = [
    "DUPLICATES",
    "render",
    "render_toolset",
    "compile_schema",
    "strictify",
    "load_tool",
    "load_tools",
    "read_tools",
    "is_schema",
    "tool_catalog",
    "serialize_call",
    "build_grammar",
    "Tool",
    "SchemaIR",
    "UnsupportedSchemaError",
    "InvalidSchemaError",
    "GrammarError",
    "GrammarWarning",
    "WIRES",
    "FORMATS",
    "MODES",
    "ORDERS",
    "WS_POLICIES",
]


def _check(format: str, wire: str, ws: str, ws_max: int | None) -> int:
    if format not in FORMATS:
        raise GrammarError(f"unknown grammar format {format!r}; use one of {', '.join(FORMATS)}")
    check_wire(wire)
    return ws_max_for(ws, ws_max)


def build_grammar(
    items: list[tuple[str, SchemaIR]],
    *,
    wire: str = "json",
    ws: str = "compact",
    ws_max: int | None = None,
    allow_empty: bool = False,
    duplicates: str = "forbid",
) -> Grammar:
    """The grammar IR of one call of any of ``items`` (tool name, compiled arguments schema).

    A schema that admits no value raises GrammarError, unless ``allow_empty`` (then the grammar
    matches nothing). ``duplicates`` applies to open objects (mode "spec"): "forbid" keeps every
    extra member's name off the declared keys (no key twice), "admit" lets an extra member reuse a
    declared name, as JSON allows (its value then follows the extra members' schema)."""
    check_wire(wire)
    n = ws_max_for(ws, ws_max)
    if wire == "json" and len(items) != 1:
        raise GrammarError(
            "the json wire carries no tool name; render a tool set with call-json, hermes, antml or harmony"
        )
    book = RuleBook()
    book.reserved.update({"root", "start"})  # GBNF and Lark start rules
    low = Lowerer(
        book,
        ws=ws,
        ws_max=n,
        forbid=FORBID[wire],
        order=items[0][1].order if items else "schema",
        duplicates=duplicates,
    )
    alts = []
    for name, sir in items:
        check_name(name, wire)
        prefix = sanitize(name) if len(items) > 1 else ""
        low.set_ir(sir, prefix)
        alts.append(frame(wire, name, low, sir, prefix))
    root = galt(*alts)
    if low.narrowed:
        first = FORBID[wire][0]  # type: ignore[index]
        warnings.warn(
            f"in the {wire} wire, the constrained string(s) at {', '.join(dict.fromkeys(low.narrowed))} "
            f"never hold a raw {first!r}: JSON strings write it as \\u{ord(first):04x}, raw antml "
            f"parameters go without it (the exact exclusion of {FORBID[wire]!r} is too large to render)",
            GrammarWarning,
            stacklevel=3,
        )
    if root == FAIL and not allow_empty:
        raise GrammarError(
            "the schema admits no value (e.g. false, an empty enum, contradictory keywords), "
            "so there is no grammar to render"
        )
    book.define("root", root)
    return Grammar(book.rules, "root")


def _emit(g: Grammar, format: str) -> str:
    if format == "gbnf":
        return emit_gbnf(g)
    if format == "lark":
        return emit_lark(g)
    return emit_regex(g)


def _as_tool(schema_or_tool: Any, name: str | None) -> tuple[str, Any]:
    if isinstance(schema_or_tool, Tool):
        return schema_or_tool.name, schema_or_tool.parameters
    if isinstance(schema_or_tool, (dict, bool, list)):
        tools = read_tools(schema_or_tool, where="render")
        if tools is None:
            return name or "", schema_or_tool
        if len(tools) != 1:
            raise GrammarError(
                f"render: the tool list holds {len(tools)} tools ({', '.join(t.name for t in tools)}); "
                "use render_toolset for a call of any of them"
            )
        return tools[0].name, tools[0].parameters
    raise GrammarError(f"render needs a Tool or a JSON Schema dict, not {type(schema_or_tool).__name__}")


@lru_cache(maxsize=512)
def _render_cached(
    schema_json: str,
    name: str,
    format: str,
    wire: str,
    mode: str,
    order: str,
    ws: str,
    ws_max: int | None,
    lenient: bool,
) -> str:
    schema = json.loads(schema_json)
    sir = compile_schema(schema, mode=mode, order=order, lenient=lenient)
    return _emit(build_grammar([(name, sir)], wire=wire, ws=ws, ws_max=ws_max), format)


def render(
    schema_or_tool: Tool | dict[str, Any] | bool,
    *,
    format: str = "gbnf",
    wire: str = "json",
    mode: str = "strict",
    order: str = "schema",
    ws: str = "compact",
    ws_max: int | None = None,
    lenient: bool = False,
    name: str | None = None,
) -> str:
    """Grammar text of one call. ``schema_or_tool`` is a ``Tool``, a tool in any shape ``load_tools``
    reads (OpenAI, Anthropic, MCP; a list of one tool), or a bare arguments schema (then ``name`` is
    needed for every wire but ``json``). A dict that is neither a schema nor a tool raises
    ``SchemaError`` (it would otherwise admit any JSON value)."""
    _check(format, wire, ws, ws_max)
    tool_name, schema = _as_tool(schema_or_tool, name)
    if wire != "json" and not tool_name:
        raise GrammarError(f"the {wire} wire carries the tool name; pass a Tool or name=...")
    return _render_cached(json.dumps(schema), tool_name, format, wire, mode, order, ws, ws_max, lenient)


def render_toolset(
    tools: list[Tool] | list[dict[str, Any]] | dict[str, Any] | str,
    *,
    format: str = "gbnf",
    wire: str = "call-json",
    mode: str = "strict",
    order: str = "schema",
    ws: str = "compact",
    ws_max: int | None = None,
    lenient: bool = False,
    duplicates: str = "forbid",
) -> str:
    """Grammar text of one call of any tool in ``tools`` (an alternation; the wire carries the name).
    ``tools`` is a list of ``Tool`` or anything ``load_tools`` reads (an OpenAI, Anthropic or MCP tool
    list, a path). ``duplicates`` ("forbid" / "admit"): see ``build_grammar``."""
    _check(format, wire, ws, ws_max)
    if not tools:
        raise GrammarError("render_toolset needs at least one tool")
    tools = load_tools(tools)
    names = [t.name for t in tools]
    if len(set(names)) != len(names):
        raise GrammarError(f"duplicate tool names in the tool set: {names}")
    items = [(t.name, compile_schema(t.parameters, mode=mode, order=order, lenient=lenient)) for t in tools]
    return _emit(build_grammar(items, wire=wire, ws=ws, ws_max=ws_max, duplicates=duplicates), format)


def serialize_call(
    tool_name: str | Tool,
    args: Any,
    *,
    wire: str = "json",
    ws: str = "compact",
    ws_max: int | None = None,
    order: str = "schema",
    mode: str = "strict",
) -> str:
    """Canonical text of one call, accepted by the grammar rendered with the same options when ``args``
    is valid for the tool's (strict) schema. A name not in the catalog keeps the key order of ``args``."""
    if isinstance(tool_name, Tool):
        tool: Tool | None = tool_name
    else:
        tool = tool_catalog().get(tool_name)
    name = tool.name if tool is not None else str(tool_name)
    sir = compile_schema(tool.parameters, mode=mode, order=order, lenient=True) if tool is not None else None
    return serialize(name, sir, args, wire=wire, ws=ws, ws_max=ws_max)
