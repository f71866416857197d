"""``tooldecode grammar SCHEMA.json|TOOL_ID`` -- print the grammar of one tool call on stdout."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from tooldecode.errors import SchemaError


def register(sub: argparse._SubParsersAction) -> None:
    from tooldecode.grammar import FORMATS, MODES, ORDERS, WIRES, WS_POLICIES

    p = sub.add_parser(
        "grammar",
        help="print the grammar (GBNF, Lark or regex) of a tool call",
        description="Print the grammar of one call of a tool: a built-in tool name (edit, read, write, bash, "
        "Edit, MultiEdit, Read, Write, Grep, Glob, Bash), a tool JSON file {name, parameters, ...}, or a bare "
        "JSON Schema file of the arguments. Errors exit with status 2 and one line on stderr.",
    )
    p.add_argument("source", metavar="SCHEMA.json|TOOL_ID")
    p.add_argument("--format", choices=FORMATS, default="gbnf")
    p.add_argument("--wire", choices=WIRES, default="json")
    p.add_argument("--mode", choices=MODES, default="strict")
    p.add_argument("--order", choices=ORDERS, default="schema")
    p.add_argument("--ws", choices=WS_POLICIES, default="compact")
    p.add_argument(
        "--ws-max", type=int, default=None, help="whitespace bound (bounded: default 2, pretty: 16)"
    )
    p.add_argument("--name", help="tool name for a bare schema file in a wire that carries the name")
    p.add_argument(
        "--lenient",
        action="store_true",
        help="ignore keywords the builder knows but cannot express (listed on stderr) instead of failing",
    )
    p.add_argument(
        "--verbose",
        "-v",
        action="store_true",
        help="list on stderr the keywords read as annotations (unknown keywords, unasserted formats)",
    )
    p.set_defaults(func=run)


def _load(source: str) -> Any:
    from tooldecode.grammar import load_tool, tool_catalog
    from tooldecode.grammar.tools import looks_like_tool

    if source in tool_catalog():
        return load_tool(source)
    path = Path(source)
    if path.is_dir():
        raise SchemaError(
            f"{source}: is a directory; give a schema or tool JSON file, or a built-in tool name"
        )
    if not path.is_file():
        try:
            return load_tool(source)
        except SchemaError:
            raise SchemaError(
                f"{source}: no such file or built-in tool; built-in tools: {', '.join(tool_catalog())}"
            ) from None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise SchemaError(f"{path}: cannot read ({e})") from e
    except json.JSONDecodeError as e:
        raise SchemaError(f"{path}: not valid JSON ({e.msg} at line {e.lineno} column {e.colno})") from e
    except RecursionError:
        raise SchemaError(f"{path}: JSON nested too deeply to read; flatten the schema") from None
    try:
        is_tool = looks_like_tool(data)
    except SchemaError as e:
        raise SchemaError(f"{path}: {e}") from None
    if is_tool:
        return load_tool(path)
    return data


def run(args: argparse.Namespace) -> int:
    from tooldecode.grammar import Tool, build_grammar, compile_schema, render
    from tooldecode.grammar.regex import backtracking_safe

    target = _load(args.source)
    schema = target.parameters if isinstance(target, Tool) else target
    name = args.name
    if not isinstance(target, Tool) and args.wire != "json" and not name:
        name = Path(args.source).stem
    text = render(
        target,
        format=args.format,
        wire=args.wire,
        mode=args.mode,
        order=args.order,
        ws=args.ws,
        ws_max=args.ws_max,
        lenient=args.lenient,
        name=name,
    )
    sir = compile_schema(schema, mode=args.mode, order=args.order, lenient=args.lenient)
    if args.lenient or args.verbose:
        for kw, ptr in sir.ignored:
            print(f"tooldecode: ignored '{kw}' at {ptr or '(root)'}", file=sys.stderr)
    if args.verbose:
        for msg in sir.warnings:
            print(f"tooldecode: warning: {msg}", file=sys.stderr)
    if args.format == "regex":
        g = build_grammar([(name or "", sir)], wire=args.wire, ws=args.ws, ws_max=args.ws_max)
        if not backtracking_safe(g):
            print(
                "tooldecode: note: this regex is unambiguous per token but not deterministic; use an "
                "automaton-based engine (outlines/interegular, RE2, Rust regex) -- a backtracking "
                "engine (Python re, PCRE, JavaScript) may take super-linear time on a non-matching text",
                file=sys.stderr,
            )
    sys.stdout.write(text)
    return 0
