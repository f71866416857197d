"""``tooldecode grammar SCHEMA.json|TOOL_ID`` -- print the grammar of one tool call on stdout."""

from __future__ import annotations

import argparse
import dataclasses
import sys
import warnings
from pathlib import Path
from typing import Any

from tooldecode.cli.options import add_command, add_switch
from tooldecode.errors import SchemaError


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``grammar`` to the command line."""
    from tooldecode.grammar import FORMATS, MODES, ORDERS, WIRES, WS_POLICIES

    p = add_command(sub, "grammar", run)
    p.add_argument("source", metavar="SCHEMA.json|TOOLS.json|TOOL_ID")
    p.add_argument("--format", choices=FORMATS, default="gbnf")
    p.add_argument("--wire", choices=WIRES, default="json")
    p.add_argument("--mode", choices=MODES, default="strict")
    p.add_argument("--order", choices=ORDERS, default="schema")
    p.add_argument("--ws", choices=WS_POLICIES, default="compact")
    p.add_argument(
        "--ws-max", type=int, default=None, help="whitespace bound (bounded: default 2, pretty: 16)"
    )
    p.add_argument(
        "--name",
        help="the tool of a tool list to render (a list of one: its new name); the tool name of a bare "
        "schema file in a wire that carries the name",
    )
    add_switch(
        p,
        "--lenient",
        "ignore keywords the builder knows but cannot express (listed on stderr) instead of failing",
    )
    p.add_argument(
        "--verbose",
        "-v",
        action="store_true",
        help="list on stderr the keywords read as annotations (unknown keywords, unasserted formats)",
    )


def _load(source: str) -> tuple[list[Any], Any]:
    """(tools, None) for a built-in tool or a file of tools in any shape ``load_tools`` reads, or
    ([], schema) for a bare JSON Schema file."""
    from tooldecode.grammar import load_tool, read_tools, tool_catalog
    from tooldecode.grammar.tools import load_tools, read_json

    if source in tool_catalog():
        return [load_tool(source)], None
    path = Path(source)
    if path.is_dir():
        raise SchemaError(
            f"{source}: is a directory; give a schema or tool JSON file, or a built-in tool name"
        )
    if not path.is_file():
        return load_tools(source), None  # a built-in file stem, or one line naming the missing file
    data = read_json(path)
    tools = read_tools(data, where=str(path), source=path)
    if tools is None:
        return [], data
    return tools, None


def run(args: argparse.Namespace) -> int:
    """print the grammar (GBNF, Lark or regex) of a tool call

    Print the grammar of one call of a tool: a built-in tool name (edit, read, write, bash, Edit,
    MultiEdit, Read, Write, Grep, Glob, Bash), a tool JSON file {name, parameters, ...}, a tool list
    (OpenAI chat-completions or responses tools, Anthropic tools, an MCP tools/list result; a list
    of several renders a call of any of them), or a bare JSON Schema file of the arguments. Errors
    exit with status 2 and one line on stderr.
    """
    from tooldecode.grammar import GrammarWarning, build_grammar
    from tooldecode.grammar.regex import backtracking_safe

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", GrammarWarning)
        text, sirs = _render(args)
    for w in caught:
        if issubclass(w.category, GrammarWarning):
            print(f"tooldecode: warning: {w.message}", file=sys.stderr)
    for tool_name, sir in sirs:
        where = f"{tool_name}: " if len(sirs) > 1 else ""
        if args.lenient or args.verbose:
            for kw, ptr in sir.ignored:
                print(f"tooldecode: {where}ignored '{kw}' at {ptr or '(root)'}", file=sys.stderr)
        for msg in sir.warnings:  # a narrowing always (the grammar admits less than the schema)
            if args.verbose or "rendered narrower than the schema" in msg or "rendered wider" in msg:
                print(f"tooldecode: {where}warning: {msg}", file=sys.stderr)
    if args.format == "regex":
        g = build_grammar(sirs, wire=args.wire, ws=args.ws, ws_max=args.ws_max)
        if not backtracking_safe(g):
            print(
                "tooldecode: note: this regex is unambiguous per token but not deterministic; use an "
                "automaton-based engine (outlines/interegular, RE2, Rust regex) -- a backtracking "
                "engine (Python re, PCRE, JavaScript) may take super-linear time on a non-matching text",
                file=sys.stderr,
            )
    sys.stdout.write(text)
    return 0


def _render(args: argparse.Namespace) -> tuple[str, list[Any]]:
    """The grammar text and the compiled (tool name, schema IR) of each tool."""
    from tooldecode.grammar import arguments_schema, compile_schema, render, render_toolset

    tools, schema = _load(args.source)
    if args.name and tools:  # --name picks one tool of a list (or renames the only one)
        named = [t for t in tools if t.name == args.name]
        if named:
            tools = named
        elif len(tools) == 1:
            tools = [dataclasses.replace(tools[0], name=args.name)]
        else:
            raise SchemaError(
                f"{args.source}: no tool named {args.name!r}; the list holds {', '.join(t.name for t in tools)}"
            )
    opts: dict[str, Any] = dict(
        format=args.format, wire=args.wire, mode=args.mode, order=args.order, ws=args.ws, ws_max=args.ws_max
    )
    if len(tools) > 1:
        text = render_toolset(tools, lenient=args.lenient, **opts)
        items = [(t.name, t.parameters) for t in tools]
    else:
        name = args.name
        if tools:
            name = tools[0].name
        elif args.wire != "json" and not name:
            name = Path(args.source).stem
        text = render(tools[0] if tools else schema, lenient=args.lenient, name=name, **opts)
        items = [(name or "", tools[0].parameters if tools else schema)]
    is_tool = bool(tools) or args.wire != "json"
    sirs = [
        (
            n,
            compile_schema(
                arguments_schema(s, n) if is_tool else s,
                mode=args.mode,
                order=args.order,
                lenient=args.lenient,
            ),
        )
        for n, s in items
    ]
    return text, sirs
