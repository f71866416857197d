"""Turning one parsed region (JSON envelope, antml ``<invoke>``, Python call) into ``ExtractedCall`` records."""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tooldecode.grammar.wire import ANTML_PARAMETER_RE
from tooldecode.scoring.jsonparse import JSONParseError, ParsedJSON, parse_json
from tooldecode.scoring.records import ARGS_KEYS, NAME_KEYS, ExtractedCall
from tooldecode.scoring.scan import CallContext, TakenSpans
from tooldecode.scoring.schemas import (
    catalog_by_name,
    render_path,
    resolve_schema,
    schema_properties,
    schema_types,
    tool_keys,
)


def interpret_parsed(
    parsed: ParsedJSON, ctx: CallContext, *, must: bool, force_args: bool
) -> list[ExtractedCall]:
    """The calls in one parsed JSON value: a call envelope, a list of them, or bare arguments (``force_args``)."""
    value = parsed.value
    if force_args:
        return [make_call(None, value, (), parsed, "args", [], ctx.lenient)]
    if isinstance(value, list):
        out: list[ExtractedCall] = []
        for i, item in enumerate(value):
            if isinstance(item, dict):
                out.extend(interpret_object(item, (i,), parsed, ctx, must=False))
        if not out and must:
            out = [ExtractedCall(None, None, "", "", (0, 0), error="the JSON list holds no call")]
        return out
    if isinstance(value, dict):
        return interpret_object(value, (), parsed, ctx, must=must)
    if must:
        return [ExtractedCall(None, None, "", "", (0, 0), error="the call is not a JSON object")]
    return []


def interpret_object(
    obj: dict, prefix: tuple, parsed: ParsedJSON, ctx: CallContext, *, must: bool
) -> list[ExtractedCall]:
    """The calls in one JSON object at ``prefix``: an envelope (name and arguments), else arguments when ``must``."""
    env = _envelope(obj, ctx, strong=must)
    if env is not None:
        if env.args_path:
            args: Any = obj
            for part in env.args_path:
                args = args[part]
        else:  # flat envelope: the arguments are the other keys
            args = {k: v for k, v in obj.items() if k != env.name_key}
        return [
            make_call(env.name, args, (*prefix, *env.args_path), parsed, env.shape, env.flags, ctx.lenient)
        ]
    if must or ctx.wire == "json" or _looks_like_args(obj, ctx):
        return [make_call(None, obj, prefix, parsed, "args", [], ctx.lenient)]
    return []


def make_call(
    name: str | None,
    args: Any,
    args_path: tuple,
    parsed: ParsedJSON,
    shape: str,
    flags: list[str],
    lenient: bool,
) -> ExtractedCall:
    """An ``ExtractedCall`` for ``name`` and ``args``, with the duplicate keys and repaired strings under ``args_path``."""
    fixes = []
    for path, before, after in parsed.fixes:
        if tuple(path[: len(args_path)]) == tuple(args_path):
            fixes.append((render_path(path[len(args_path) :]), before, after))
    call = ExtractedCall(
        name=name,
        arguments=args,
        raw="",
        wrapping="",
        span=(0, 0),
        shape=shape,
        duplicate_keys=list(parsed.dups),
        flags=list(flags),
        fixes=fixes,
    )
    if isinstance(args, str) and args.strip()[:1] in ("{", "["):
        try:
            inner = parse_json(args.strip(), lenient=lenient)
        except JSONParseError as err:
            call.error = f"arguments given as a string that is not JSON: {err}"
        else:
            call.arguments = inner.value
            call.duplicate_keys += inner.dups
            call.fixes += [(render_path(p), b, a) for p, b, a in inner.fixes]
            call.flags.append("arguments_as_string")
    return call


@dataclass
class _Envelope:
    name: str
    args_path: tuple  # () for a flat envelope (arguments beside the name)
    shape: str
    flags: list[str]
    name_key: str


def _envelope(obj: dict, ctx: CallContext, *, strong: bool) -> _Envelope | None:
    """How ``obj`` wraps a call (name and where the arguments are), or None when it is not an envelope."""
    exp = ctx.tool(ctx.expected)
    own = set(schema_properties(exp.parameters, exp.parameters)) if exp is not None else set()
    if ctx.wire == "json" and own & set(obj):
        return None
    for key in ("function", "tool", "tool_call", "call"):
        inner = obj.get(key)
        if isinstance(inner, dict) and isinstance(inner.get("name"), str):
            sub = _envelope(inner, ctx, strong=True)
            if sub is None or not sub.args_path:
                return None
            return _Envelope(sub.name, (key, *sub.args_path), "openai", sub.flags, sub.name_key)
    name_key = next((k for k in NAME_KEYS if isinstance(obj.get(k), str)), None)
    if name_key is None:
        return None
    name = obj[name_key]
    flags = [] if name_key == "name" else ["name_key_variant"]
    args_key = next((k for k in ARGS_KEYS if k in obj), None)
    known = name in ctx.names() or name in catalog_by_name()
    if args_key is not None:
        if not (strong or known or isinstance(obj[args_key], dict | str)):
            return None
        if args_key != "arguments":
            flags.append("arguments_key_variant")
        return _Envelope(name, (args_key,), "call-json", flags, name_key)
    if not (strong or known):
        return None
    return _Envelope(name, (), "flat", [*flags, "flat_envelope"], name_key)


def _looks_like_args(obj: dict, ctx: CallContext) -> bool:
    keys = set(obj)
    if not keys:
        return False
    for t in ctx.candidates():
        top, every = tool_keys(t)
        if keys & top and 2 * len(keys & every) >= len(keys):
            return True
    return False


def nested_envelopes(parsed: ParsedJSON, ctx: CallContext) -> list[ExtractedCall]:
    """Call envelopes inside a JSON value that is not itself a call (``{"tool_calls": [...]}``)."""
    out: list[ExtractedCall] = []

    def walk(v: Any, path: tuple, depth: int) -> None:
        if depth > 4:
            return
        if isinstance(v, dict):
            env = _envelope(v, ctx, strong=False) if depth else None
            if env is not None and env.args_path:
                args: Any = v
                for part in env.args_path:
                    args = args[part]
                out.append(
                    make_call(
                        env.name, args, (*path, *env.args_path), parsed, "nested", env.flags, ctx.lenient
                    )
                )
                return
            for k, sub in v.items():
                walk(sub, (*path, k), depth + 1)
        elif isinstance(v, list):
            for i, sub in enumerate(v):
                walk(sub, (*path, i), depth + 1)

    walk(parsed.value, (), 0)
    return out


def call_from_invoke(m: re.Match, offset: int, ctx: CallContext) -> ExtractedCall:
    """The call of one antml ``<invoke>`` element, its parameters typed by the tool's schema."""
    name, body = m.group(1), m.group(2)
    tool = ctx.tool(name) or catalog_by_name().get(name)
    props = schema_properties(tool.parameters, tool.parameters) if tool is not None else {}
    root = tool.parameters if tool is not None else {}
    args: dict[str, Any] = {}
    dups: list[str] = []
    fixes: list[tuple[str, Any, Any]] = []
    error = None
    unbalanced = False
    params = list(ANTML_PARAMETER_RE.finditer(body))
    for pm in params:
        key, raw = pm.group(1), pm.group(2)
        if pm.group(3) is None:
            unbalanced = True
            error = error or f"parameter {key!r} is not closed"
        if key in args:
            dups.append(key)
        types = schema_types(resolve_schema(props.get(key), root)) if key in props else None
        if types == {"string"}:
            args[key] = raw
            continue
        try:
            parsed = parse_json(raw.strip(), lenient=ctx.lenient)
        except JSONParseError as err:
            if types is None or "string" in types:
                args[key] = raw
            else:
                error = error or f"parameter {key!r} is not JSON: {err}"
                args[key] = raw
            continue
        if types is None and not isinstance(parsed.value, dict | list):
            args[key] = raw if not isinstance(parsed.value, bool | int | float) else parsed.value
        else:
            args[key] = parsed.value
        dups += parsed.dups
        fixes += [(render_path((key, *p)), b, a) for p, b, a in parsed.fixes]
    if not params and body.strip():
        error = error or "no <parameter> inside <invoke>"
    flags = []
    if m.group(3) is None:
        tail = body[params[-1].end() :] if params else body
        if error is None and params and not tail.strip():
            flags.append("unclosed_wrapper")  # complete parameters, closing tag missing (a stop string?)
        else:
            error = error or "<invoke> is not closed"
    start = offset + m.start()
    return ExtractedCall(
        name=name,
        arguments=args,
        raw=m.group(),
        wrapping="antml",
        span=(start, offset + m.end()),
        shape="markup",
        error=error,
        unbalanced=unbalanced or m.group(3) is None,
        duplicate_keys=dups,
        fixes=fixes,
        flags=flags,
    )


_PY_MAX_TRIES = 64


def python_calls(
    text: str, ctx: CallContext, free: Any, taken: TakenSpans | list[tuple[int, int]], wrapping: str
) -> list[ExtractedCall]:
    """Python-style calls (``edit(path=..., edits=[...])``) of offered tools in the free parts of ``text``."""
    names = sorted(ctx.names(), key=len, reverse=True)
    if not names:
        return []
    rx = re.compile(r"(?<![\w.])(" + "|".join(re.escape(n) for n in names) + r")\s*\(")
    out: list[ExtractedCall] = []
    for m in rx.finditer(text):
        if not free(m.start(), m.end()) or any(c.span[0] <= m.start() < c.span[1] for c in out):
            continue
        node = None
        pos = m.end()
        for _ in range(_PY_MAX_TRIES):
            close = text.find(")", pos)
            if close < 0:
                break
            try:
                tree = ast.parse(text[m.start() : close + 1], mode="eval")
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                pos = close + 1
                continue
            node = (tree.body, close + 1)
            break
        if node is None:
            continue
        call, end = node
        if not isinstance(call, ast.Call) or call.args or not call.keywords:
            continue
        if any(kw.arg is None for kw in call.keywords):
            continue
        args: dict[str, Any] = {}
        error = None
        dups = []
        for kw in call.keywords:
            try:
                value = _literal(kw.value, 0)
            except ValueError as err:
                error = error or f"argument {kw.arg!r} is not a literal: {err}"
                value = None
            if kw.arg in args:
                dups.append(kw.arg)
            args[str(kw.arg)] = value
        span = (m.start(), end)
        taken.append(span)
        out.append(
            ExtractedCall(
                name=m.group(1),
                arguments=args if error is None else None,
                raw=text[span[0] : end],
                wrapping=wrapping,
                span=span,
                shape="python",
                error=error,
                duplicate_keys=dups,
            )
        )
    return out


def _literal(node: ast.AST, depth: int) -> Any:
    if depth > 100:
        raise ValueError("nested too deep")
    if isinstance(node, ast.Constant) and isinstance(node.value, str | int | float | bool | type(None)):
        return node.value
    if isinstance(node, ast.Name) and node.id in ("true", "false", "null", "True", "False", "None"):
        return {"true": True, "True": True, "false": False, "False": False}.get(node.id)
    if isinstance(node, ast.List | ast.Tuple):
        return [_literal(e, depth + 1) for e in node.elts]
    if isinstance(node, ast.Dict):
        out = {}
        for k, v in zip(node.keys, node.values, strict=True):
            if not (isinstance(k, ast.Constant) and isinstance(k.value, str)):
                raise ValueError("dict keys must be strings")
            out[k.value] = _literal(v, depth + 1)
        return out
    if (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.USub)
        and isinstance(node.operand, ast.Constant)
        and isinstance(node.operand.value, int | float)
        and not isinstance(node.operand.value, bool)
    ):
        return -node.operand.value
    raise ValueError(type(node).__name__)


def primary_call(calls: Sequence[ExtractedCall], expected_tool: str | None) -> ExtractedCall | None:
    """The call a sample is scored on: a parsed call to the expected tool, else a broken call that may be one,
    else a parsed call to another tool, else the first call."""
    if not calls:
        return None

    def targets(c: ExtractedCall) -> bool:
        return expected_tool is None or c.name is None or c.name == expected_tool

    for c in calls:
        if c.error is None and targets(c):
            return c
    for c in calls:
        if c.error is not None and targets(c):
            return c
    for c in calls:
        if c.error is None:
            return c
    return calls[0]
