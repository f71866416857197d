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

from tooldecode.grammar import textlang as T
from tooldecode.grammar.budget import MAX_OUTPUT_BYTES, budget, too_big
from tooldecode.grammar.errors import GrammarError, GrammarWarning, InvalidSchemaError, UnsupportedSchemaError
from tooldecode.grammar.framing import call_body, calls_frame, frame, serialize
from tooldecode.grammar.gbnf import emit_gbnf
from tooldecode.grammar.gir import FAIL, GLit, Grammar, RuleBook, galt, gopt, gseq, sanitize, tok
from tooldecode.grammar.keywords import ECHO_KEYWORDS, JSON_TYPES, json_type
from tooldecode.grammar.lark import emit_lark
from tooldecode.grammar.lower import DUPLICATES, Lowerer
from tooldecode.grammar.regex import emit_regex
from tooldecode.grammar.schema import MODES, ORDERS, SchemaIR, check_budget, compile_schema, strictify
from tooldecode.grammar.terminals import WS_POLICIES, ws_max_for
from tooldecode.grammar.tools import (
    Tool,
    arguments_schema,
    is_schema,
    load_tool,
    load_tools,
    read_tools,
    tool_catalog,
)
from tooldecode.grammar.wire import (
    THINK_CLOSE,
    THINK_OPEN,
    TOOL_CHOICES,
    WIRE_FORMATS,
    WIRES,
    WireFormat,
    check_name,
    check_wire,
    wire_format,
)

FORMATS = ("gbnf", "lark", "regex")

__all__ = [
    "DUPLICATES",
    "render",
    "render_toolset",
    "compile_schema",
    "strictify",
    "arguments_schema",
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
    "WIRE_FORMATS",
    "TOOL_CHOICES",
    "JSON_TYPES",
    "ECHO_KEYWORDS",
    "json_type",
    "WireFormat",
    "wire_format",
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
    single_terminals: bool = False,
    tool_choice: str = "required",
    parallel: int = 1,
    reasoning: bool = False,
) -> Grammar:
    """The grammar IR of one call of any of ``items``, before it is printed in a format.

    ``render`` and ``render_toolset`` call it; use it directly to print one grammar in several formats
    or to inspect its rules.

    Parameters
    ----------
    items : list of (str, SchemaIR)
        Tool name and compiled arguments schema (``compile_schema``) of each tool the call may name;
        the compiled schemas share one key order (the first item's ``order``).
    wire : str, default "json"
        Wire format of the call (one of ``WIRES``); ``json`` carries no tool name, so it takes one item.
    ws : str, default "compact"
        Whitespace between JSON tokens (one of ``WS_POLICIES``): ``compact`` none, ``bounded`` up to
        ``ws_max`` spaces, tabs or newlines, ``pretty`` one space or a newline and an indentation.
    ws_max : int, optional
        Bound of the whitespace policy, 0..64 (default per policy: compact 0, bounded 2, pretty 16).
    allow_empty : bool, default False
        Return a grammar that matches nothing where the schema admits no value, instead of raising.
    duplicates : str, default "forbid"
        For open objects (mode ``spec``, one of ``DUPLICATES``): ``forbid`` keeps every extra member's
        name off the declared keys (no key twice); ``admit`` lets an extra member reuse a declared name,
        as JSON allows (its value then follows the extra members' schema).
    single_terminals : bool, default False
        Every string a single terminal (the regex format): a bounded string language whose regex grows
        too large raises ``GrammarError`` instead of becoming one rule per automaton state.
    tool_choice : str, default "required"
        ``required``: a call of any tool; a tool's name: a call of that tool; ``auto``: text (never
        holding the wire's opening tag), then optionally the call(s); ``none``: text only. ``auto``
        and ``none`` need a wire with an opening tag (hermes, call-list, antml).
    parallel : int, default 1
        The most calls in one turn (hermes: one block per call, a newline between; call-list: a list;
        antml: several ``<invoke>``); json, call-json and harmony carry one.
    reasoning : bool, default False
        An optional ``<think>…</think>`` block (any text without ``</think>``, then an optional
        newline) before the call or text, for model families that reason first.

    Returns
    -------
    Grammar
        The rules, with start rule ``root``; print it with the format's emitter.

    Raises
    ------
    GrammarError
        An unknown wire or whitespace policy, several items on the ``json`` wire, a tool name the wire
        cannot carry, or a schema that admits no value (unless ``allow_empty``).

    Examples
    --------
    >>> from tooldecode.grammar import build_grammar, compile_schema
    >>> g = build_grammar([("edit", compile_schema({"type": "object"}))], wire="hermes")
    >>> g.root
    'root'
    """
    with budget():
        try:
            return _build_grammar(
                items,
                wire,
                ws,
                ws_max,
                allow_empty,
                duplicates,
                single_terminals,
                tool_choice,
                parallel,
                reasoning,
            )
        except RecursionError:
            raise too_big("the grammar's rules nest too deep to build") from None


def _build_grammar(
    items: list[tuple[str, SchemaIR]],
    wire: str,
    ws: str,
    ws_max: int | None,
    allow_empty: bool,
    duplicates: str,
    single_terminals: bool,
    tool_choice: str = "required",
    parallel: int = 1,
    reasoning: bool = False,
) -> Grammar:
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
        forbid=wire_format(wire).forbid,
        order=items[0][1].order if items else "schema",
        duplicates=duplicates,
    )
    low.single_terminals = single_terminals
    if tool_choice not in TOOL_CHOICES:
        names = [n for n, _ in items]
        if tool_choice not in names:
            raise GrammarError(
                f"tool_choice {tool_choice!r} is neither one of {', '.join(TOOL_CHOICES)} nor a tool of the "
                f"set ({', '.join(names)})"
            )
        items = [(n, s) for n, s in items if n == tool_choice]
    if not isinstance(parallel, int) or isinstance(parallel, bool) or parallel < 1:
        raise GrammarError(f"parallel must be a whole number of calls >= 1, not {parallel!r}")
    plain = tool_choice not in ("auto", "none") and parallel == 1
    alts = []
    for name, sir in items:
        check_name(name, wire)
        prefix = sanitize(name) if len(items) > 1 else ""
        low.set_ir(sir, prefix)
        alts.append(frame(wire, name, low, sir, prefix) if plain else call_body(wire, name, low, sir, prefix))
    root = galt(*alts) if plain else calls_frame(wire, alts, low, parallel)
    if tool_choice in ("auto", "none"):
        opening = wire_format(wire).open
        if not opening or "{" in opening:
            raise GrammarError(
                f"tool_choice {tool_choice!r} needs a wire whose call opens with a tag (hermes, call-list, "
                f"antml), not {wire}"
            )
        text = tok(T.any_string_content("raw", opening), "free-text")
        root = text if tool_choice == "none" else gseq(text, gopt(root))
    if reasoning:
        think = tok(T.any_string_content("raw", THINK_CLOSE), "thinking")
        block = gseq(GLit(THINK_OPEN), think, GLit(THINK_CLOSE), gopt(GLit("\n")))
        root = gseq(gopt(block), root)
    if low.narrowed:
        forbid = wire_format(wire).forbid or ""
        first = forbid[0]
        warnings.warn(
            f"in the {wire} wire, the constrained string(s) at {', '.join(dict.fromkeys(low.narrowed))} "
            f"never hold a raw {first!r}: JSON strings write it as \\u{ord(first):04x}, raw antml "
            f"parameters go without it (the exact exclusion of {forbid!r} is too large to render)",
            GrammarWarning,
            stacklevel=4,  # the caller of build_grammar (through _build_grammar)
        )
    if root == FAIL and not allow_empty:
        raise GrammarError(
            "the schema admits no value (e.g. false, an empty enum, contradictory keywords), "
            "so there is no grammar to render"
        )
    book.define("root", root)
    g = Grammar(book.rules, "root")
    if not allow_empty and "root" not in g.productive():
        raise GrammarError(
            "the schema admits no value: every instance would be infinitely deep (e.g. a required "
            "property whose schema is the object itself), so there is no grammar to render"
        )
    return g


def _emit(g: Grammar, format: str) -> str:
    with budget():
        try:
            text = emit_gbnf(g) if format == "gbnf" else emit_lark(g) if format == "lark" else emit_regex(g)
        except RecursionError:
            raise too_big(f"the grammar nests too deep to print as {format}") from None
    if len(text) > MAX_OUTPUT_BYTES:
        raise too_big(f"the {format} grammar is {len(text):,} bytes, more than {MAX_OUTPUT_BYTES:,}")
    return text


def _as_tool(schema_or_tool: Any, name: str | None) -> tuple[str, Any, bool]:
    """(tool name, schema, whether the schema is a tool's arguments)."""
    if isinstance(schema_or_tool, Tool):
        return schema_or_tool.name, schema_or_tool.parameters, True
    if isinstance(schema_or_tool, (dict, bool, list)):
        tools = read_tools(schema_or_tool, where="render")
        if tools is None:
            return name or "", schema_or_tool, False
        if len(tools) != 1:
            raise GrammarError(
                f"render: the tool list holds {len(tools)} tools ({', '.join(t.name for t in tools)}); "
                "use render_toolset for a call of any of them"
            )
        return tools[0].name, tools[0].parameters, True
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
    with budget():  # one clock for the whole build: compile, lower, print
        sir = compile_schema(schema, mode=mode, order=order, lenient=lenient)
        g = build_grammar([(name, sir)], wire=wire, ws=ws, ws_max=ws_max, single_terminals=format == "regex")
        return _emit(g, format)


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
    """Grammar text of one call of one tool: what a constrained decoder (llama.cpp, xgrammar,
    llguidance, a regex engine) reads to admit exactly the calls the schema allows.

    Parameters
    ----------
    schema_or_tool : Tool, dict or bool
        A ``Tool``, a tool in any shape ``load_tools`` reads (OpenAI, Anthropic, MCP; a list of one
        tool), or a bare arguments JSON Schema (then ``name`` is needed for every wire but ``json``).
    format : str, default "gbnf"
        Grammar format (one of ``FORMATS``): ``gbnf`` (llama.cpp, xgrammar), ``lark`` (lark,
        llguidance) or ``regex`` (no recursive schemas).
    wire : str, default "json"
        Wire format of the call (one of ``WIRES``): ``json`` the bare arguments, ``call-json``,
        ``hermes``, ``antml``, ``harmony`` or ``call-list`` around them (``tooldecode.grammar.wire``).
    mode : str, default "strict"
        ``strict`` closes every object (no key the schema does not declare, whatever its
        ``additionalProperties``); ``spec`` follows the schema as written (one of ``MODES``).
    order : str, default "schema"
        Key order of objects (one of ``ORDERS``): ``schema`` (as declared), ``required-first``, or
        ``any`` (each key at most once, in any order).
    ws : str, default "compact"
        Whitespace between JSON tokens (one of ``WS_POLICIES``; see ``build_grammar``).
    ws_max : int, optional
        Bound of the whitespace policy, 0..64 (default per policy).
    lenient : bool, default False
        Skip keywords that have no exact rendering instead of raising ``UnsupportedSchemaError``
        (the grammar then admits more than the schema).
    name : str, optional
        Tool name of a bare schema (ignored for a ``Tool``).

    Returns
    -------
    str
        The grammar text, start rule ``root`` (GBNF, Lark) or one anchored pattern (regex). Equal
        arguments give equal text (rendered once per process and cached).

    Raises
    ------
    GrammarError
        An unknown format, wire, mode, order or whitespace policy, a wire that needs a name without
        one, a tool list of more than one tool, or a schema that admits no value.
    UnsupportedSchemaError
        A keyword with no exact rendering (keyword and JSON pointer named), unless ``lenient``.
    InvalidSchemaError
        A schema that is not valid JSON Schema.
    SchemaError
        A dict that is neither a schema nor a tool (it would otherwise admit any JSON value).

    Examples
    --------
    >>> from tooldecode.grammar import load_tool, render
    >>> text = render(load_tool("edit"), format="gbnf", wire="hermes")
    >>> text.startswith("root ::=")
    True
    >>> render({"type": "boolean"}, format="regex")
    'true|false'
    """
    _check(format, wire, ws, ws_max)
    tool_name, schema, is_tool = _as_tool(schema_or_tool, name)
    if wire != "json" and not tool_name:
        raise GrammarError(f"the {wire} wire carries the tool name; pass a Tool or name=...")
    if is_tool or wire != "json":  # a tool call's arguments: always an object ({} takes no arguments)
        schema = arguments_schema(schema, tool_name or "tool")
    check_budget(schema)  # before json.dumps: an integer past Python's digit limit is named, not raised
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
    tool_choice: str = "required",
    parallel: int = 1,
    reasoning: bool = False,
) -> str:
    """Grammar text of one call of any tool in ``tools``: an alternation of the tools' calls, the
    wire carrying the tool's name.

    Parameters
    ----------
    tools : list of Tool, list of dict, dict or str
        A list of ``Tool``, or anything ``load_tools`` reads: an OpenAI, Anthropic or MCP tool list, a
        path to a JSON file, a built-in tool name. Names must be distinct.
    format, mode, order, ws, ws_max, lenient
        As in ``render``.
    wire : str, default "call-json"
        Wire format of the call (one of ``WIRES`` but ``json``, which carries no name).
    duplicates : str, default "forbid"
        Whether an open object's extra member may reuse a declared key (``admit``) or not
        (``forbid``); see ``build_grammar``.
    tool_choice, parallel, reasoning
        Which tool (``required``, ``auto``, ``none`` or a tool's name), how many calls in one turn, and
        an optional reasoning block first; see ``build_grammar``. A tool whose list entry says
        ``"strict": false`` (OpenAI's per-tool flag) is rendered as written (mode ``spec``) even in
        strict mode; ``"strict": true`` or no flag follows ``mode``.

    Returns
    -------
    str
        The grammar text (start rule ``root``).

    Raises
    ------
    GrammarError
        No tools, duplicate tool names, the ``json`` wire, or any error of ``render``.
    UnsupportedSchemaError, InvalidSchemaError, SchemaError
        As in ``render``, for any tool of the set.

    Examples
    --------
    >>> from tooldecode.grammar import load_tool, render_toolset
    >>> text = render_toolset([load_tool("edit"), load_tool("read")], wire="hermes")
    >>> "read-read ::=" in text and text.startswith('root ::= "<tool_call>')
    True
    """
    _check(format, wire, ws, ws_max)
    if not tools:
        raise GrammarError("render_toolset needs at least one tool")
    tools = load_tools(tools)
    names = [t.name for t in tools]
    if len(set(names)) != len(names):
        raise GrammarError(f"duplicate tool names in the tool set: {names}")
    with budget():  # one clock for the whole tool set
        items = [
            (
                t.name,
                compile_schema(
                    arguments_schema(t.parameters, t.name),
                    mode="spec" if t.strict is False else mode,
                    order=order,
                    lenient=lenient,
                ),
            )
            for t in tools
        ]
        g = build_grammar(
            items,
            wire=wire,
            ws=ws,
            ws_max=ws_max,
            duplicates=duplicates,
            single_terminals=format == "regex",
            tool_choice=tool_choice,
            parallel=parallel,
            reasoning=reasoning,
        )
        return _emit(g, format)


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
    """Canonical text of one call: the text a grammar rendered with the same options accepts when
    ``args`` is valid for the tool's (strict) schema.

    Parameters
    ----------
    tool_name : str or Tool
        The tool: a ``Tool``, or the name of one in the built-in catalog. A name not in the catalog
        keeps the key order of ``args`` (there is no schema to order them by).
    args : Any
        The arguments (a JSON value; an object for every tool in the catalog).
    wire, ws, ws_max, order, mode
        As in ``render``.

    Returns
    -------
    str
        The call in the wire format, its JSON in canonical form (keys in the schema's order, the
        whitespace policy's first choice, strings with short escapes and ``<`` escaped where the wire
        has a closing delimiter).

    Raises
    ------
    GrammarError
        An unknown wire or whitespace policy, or a value the wire cannot write (an antml raw
        parameter holding ``</parameter>``).

    Examples
    --------
    >>> from tooldecode.grammar import serialize_call
    >>> serialize_call("read", {"path": "a.py"}, wire="call-json")
    '{"name":"read","arguments":{"path":"a.py"}}'
    """
    if isinstance(tool_name, Tool):
        tool: Tool | None = tool_name
    else:
        tool = tool_catalog().get(tool_name)
    name = tool.name if tool is not None else str(tool_name)
    sir = (
        compile_schema(arguments_schema(tool.parameters, name), mode=mode, order=order, lenient=True)
        if tool is not None
        else None
    )
    return serialize(name, sir, args, wire=wire, ws=ws, ws_max=ws_max)
