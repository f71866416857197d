"""A call in its wire: the grammar of the frame around the arguments (``frame``) and the canonical text
of a call (``serialize``). The delimiters are the wire table's (``tooldecode.grammar.wire``).
"""

from __future__ import annotations

from typing import Any

from tooldecode.grammar import automata as A
from tooldecode.grammar import ir
from tooldecode.grammar.errors import GrammarError
from tooldecode.grammar.gir import EMPTY, FAIL, GExpr, GLit, galt, grep, gseq
from tooldecode.grammar.ir import AnyA, ArrA, BoolA, ConstA, Node, NullA, NumA, ObjA, RefA, StrA
from tooldecode.grammar.keywords import json_type
from tooldecode.grammar.lower import Lowerer
from tooldecode.grammar.schema import SchemaIR
from tooldecode.grammar.terminals import delimiter_narrowed, json_str, number_ast, number_text, ws_max_for
from tooldecode.grammar.wire import (
    ANTML_INVOKE,
    ANTML_INVOKE_CLOSE,
    ANTML_PARAMETER,
    ANTML_PARAMETER_CLOSE,
    ENVELOPE_KEYS,
    check_name,
    check_wire,
    wire_format,
)


def _antml_params(name: str, low: Lowerer, sir: SchemaIR, hint: str) -> GExpr:
    """The ``<parameter>`` elements of an antml call of tool ``name`` (an object schema's members)."""
    alts = []
    for a in sir.root.alts:
        if not isinstance(a, ObjA):
            raise GrammarError(f"the antml wire needs an object schema for the arguments of {name!r}")
        members, empty_ok = low.members(a, hint, ctx="antml")
        alts.append(galt(members, EMPTY) if empty_ok else members)
    return galt(*alts) if alts else FAIL


def frame(wire: str, name: str, low: Lowerer, sir: SchemaIR, hint: str) -> GExpr:
    """Grammar expression of one call of tool ``name`` in ``wire``."""
    w = wire_format(wire)
    p = low.p
    if wire == "antml":
        params = _antml_params(name, low, sir, hint)
        return gseq(
            GLit(w.open),
            p.gap,
            GLit(ANTML_INVOKE.format(name=name)),
            params,
            p.gap,
            GLit(ANTML_INVOKE_CLOSE),
            p.gap,
            GLit(w.close),
        )
    args = low.value(sir.root, hint, inline=(wire == "json"))
    if wire == "json":
        return args
    if not w.envelope:  # harmony: the arguments after the head
        return gseq(GLit(w.open.format(name=name)), args, GLit(w.close))
    call = _envelope(p, name, args)
    if wire == "call-list":
        call = [p.lbrack, *call, p.rbrack]
    return gseq(GLit(w.open + w.pad), *call, GLit(w.pad + w.close))


def call_body(wire: str, name: str, low: Lowerer, sir: SchemaIR, hint: str) -> GExpr:
    """One call of tool ``name`` without the wire's outer delimiters: the envelope object (call-json,
    hermes, call-list), the ``<invoke>`` block (antml); harmony's and json's calls are whole."""
    p = low.p
    if wire == "antml":
        params = _antml_params(name, low, sir, hint)
        return gseq(GLit(ANTML_INVOKE.format(name=name)), params, p.gap, GLit(ANTML_INVOKE_CLOSE))
    if wire in ("json", "harmony"):
        return frame(wire, name, low, sir, hint)
    return gseq(*_envelope(p, name, low.value(sir.root, hint, inline=False)))


def _envelope(p: Any, name: str, args: GExpr) -> list[GExpr]:
    """The call envelope ``{"name": <name>, "arguments": <args>}`` as a sequence of parts."""
    return [
        p.lbrace,
        GLit(json_str(ENVELOPE_KEYS[0])),
        p.colon,
        GLit(json_str(name)),
        p.comma,
        GLit(json_str(ENVELOPE_KEYS[1])),
        p.colon,
        args,
        p.rbrace,
    ]


def calls_frame(wire: str, bodies: list[GExpr], low: Lowerer, parallel: int) -> GExpr:
    """1..``parallel`` calls, each any of ``bodies`` (``call_body``), in ``wire``: hermes writes one
    ``<tool_call>`` block per call (a newline between), call-list a JSON list of calls, antml several
    ``<invoke>`` blocks in one ``<function_calls>``. json, call-json and harmony carry one call."""
    w = wire_format(wire)
    p = low.p
    one = galt(*bodies)
    more = parallel - 1
    if wire in ("json", "call-json", "harmony"):
        if parallel != 1:
            raise GrammarError(
                f"the {wire} wire carries one call; parallel calls need hermes, call-list or antml"
            )
        return one
    if wire == "antml":
        invokes = gseq(one, grep(gseq(p.gap, one), 0, more)) if more else one
        return gseq(GLit(w.open), p.gap, invokes, p.gap, GLit(w.close))
    if wire == "call-list":
        items = gseq(one, grep(gseq(p.comma, one), 0, more)) if more else one
        return gseq(GLit(w.open + w.pad), p.lbrack, items, p.rbrack, GLit(w.pad + w.close))
    block = gseq(GLit(w.open + w.pad), one, GLit(w.pad + w.close))  # hermes
    return gseq(block, grep(gseq(GLit("\n"), block), 0, more)) if more else block


# ---------------------------------------------------------------------------------------------
# canonical text


class Canon:
    """Canonical text of values under an IR: key order of the schema (or the order policy), the
    whitespace policy's canonical spacing, strings with short escapes and the wire's delimiter
    escaped. ``value`` returns None when the value is not in the node's language."""

    def __init__(self, sir: SchemaIR | None, *, ws: str, ws_max: int | None, forbid: str | None) -> None:
        self.sir = sir
        self.defs = sir.defs if sir is not None else {}
        self.order = sir.order if sir is not None else "schema"
        self.ws = ws
        self.n = ws_max_for(ws, ws_max)
        self.forbid = forbid

    # spacing
    def _indent(self, level: int) -> str:
        return " " * min(2 * level, self.n)

    def opening(self, ch: str, level: int) -> str:
        return ch + ("\n" + self._indent(level + 1) if self.ws == "pretty" else "")

    def closing(self, ch: str, level: int) -> str:
        return ("\n" + self._indent(level) if self.ws == "pretty" else "") + ch

    def comma(self, level: int) -> str:
        if self.ws == "pretty":
            return ",\n" + self._indent(level + 1)
        return ", " if self.ws == "bounded" and self.n >= 1 else ","

    def colon(self) -> str:
        return ": " if (self.ws == "pretty" or (self.ws == "bounded" and self.n >= 1)) else ":"

    def tag_gap(self) -> str:
        return "\n" if self.ws == "pretty" or (self.ws == "bounded" and self.n >= 1) else ""

    # values
    def any_value(self, v: Any, level: int) -> str:
        t = json_type(v)
        if t == "null":
            return "null"
        if t == "boolean":
            return "true" if v else "false"
        if t == "number":
            return number_text(v)
        if t == "string":
            return json_str(v, self.forbid)
        if t == "array":
            return self.container("[]", [self.any_value(x, level + 1) for x in v], level)
        return self.container(
            "{}", [self.member(k, self.any_value(x, level + 1)) for k, x in v.items()], level
        )

    def container(self, brackets: str, parts: list[str], level: int) -> str:
        """``parts`` inside ``brackets`` (``"[]"`` or ``"{}"``), spaced by the whitespace policy."""
        if not parts:
            return brackets
        return (
            self.opening(brackets[0], level)
            + self.comma(level).join(parts)
            + self.closing(brackets[1], level)
        )

    def member(self, key: str, text: str) -> str:
        """An object member: the key, the colon, the value's ``text``."""
        return json_str(key, self.forbid) + self.colon() + text

    def value(self, n: Node, v: Any, level: int = 0) -> str | None:
        for a in n.alts:
            out = self.alt(a, v, level)
            if out is not None:
                return out
        return None

    def alt(self, a: ir.Alt, v: Any, level: int) -> str | None:
        if isinstance(a, AnyA):
            return self.any_value(v, level)
        if isinstance(a, RefA):
            return self.value(self.defs[a.name], v, level)
        if isinstance(a, ConstA):
            return self.any_value(a.value, level) if ir.json_equal(a.value, v) else None
        try:
            if not isinstance(a, (ArrA, ObjA)) and not ir.accepts_alt(a, v, self.defs):
                return None
        except ir.Inexact:
            return None
        if isinstance(a, StrA) and self.forbid and delimiter_narrowed(a.lang, self.forbid):
            return json_str(v, self.forbid).replace(self.forbid[0], f"\\u{ord(self.forbid[0]):04x}")
        if isinstance(a, (NullA, BoolA, StrA)):
            return self.any_value(v, level)
        if isinstance(a, NumA):
            return self.number(a, v)
        if isinstance(a, ArrA):
            return self.array(a, v, level)
        if isinstance(a, ObjA):
            return self.object(a, v, level)
        raise TypeError(a)

    def array(self, a: ArrA, v: Any, level: int) -> str | None:
        """Canonical text of ``v`` under the array alternative ``a`` (None: not in its language)."""
        if json_type(v) != "array" or not ir.accepts_alt(a, v, self.defs):
            return None
        parts = []
        for i, x in enumerate(v):
            s = self.value(a.item(i), x, level + 1)
            if s is None:
                return None
            parts.append(s)
        return self.container("[]", parts, level)

    def object(self, a: ObjA, v: Any, level: int) -> str | None:
        """Canonical text of ``v`` under the object alternative ``a`` (None: not in its language)."""
        if json_type(v) != "object" or not ir.accepts_alt(a, v, self.defs):
            return None
        parts = []
        for k in self.key_order(a, v):
            s = self.value(a.value_for(k), v[k], level + 1)
            if s is None:
                return None
            parts.append(self.member(k, s))
        return self.container("{}", parts, level)

    def key_order(self, a: ObjA, v: dict[str, Any]) -> list[str]:
        if self.order == "any":
            return list(v)
        declared = [k for k, _ in a.keys]
        if self.order == "required-first":
            declared = [k for k in declared if k in a.required] + [k for k in declared if k not in a.required]
        return [k for k in declared if k in v] + [k for k in v if k not in a.keymap]

    def number(self, a: NumA, v: Any) -> str | None:
        text = number_text(v)
        try:
            d = A.to_dfa(number_ast(a))
        except (A.TooComplex, GrammarError):
            return text
        if d.accepts(text):
            return text
        if isinstance(v, float):
            from decimal import Decimal

            exact = format(Decimal(v), "f")
            if "." not in exact:
                exact += ".0"
            if d.accepts(exact):
                return exact
        return None

    # antml parameters
    def antml_params(self, n: Node, args: dict[str, Any]) -> str:
        gap = self.tag_gap()
        for a in n.alts:
            if not isinstance(a, ObjA):
                continue
            try:
                if not ir.accepts_alt(a, args, self.defs):
                    continue
            except ir.Inexact:
                continue
            return "".join(self._parameter(k, a.value_for(k), args[k], gap) for k in self.key_order(a, args))
        # not valid for the schema: best effort
        return "".join(self._parameter(k, ir.ANY, x, gap) for k, x in args.items())

    def _parameter(self, key: str, n: Node, v: Any, gap: str) -> str:
        return gap + ANTML_PARAMETER.format(name=key) + self.antml_value(n, v) + ANTML_PARAMETER_CLOSE

    def antml_value(self, n: Node, v: Any) -> str:
        string_only = bool(n.alts) and all(
            isinstance(x, StrA) or (isinstance(x, ConstA) and isinstance(x.value, str)) for x in n.alts
        )
        if string_only and isinstance(v, str):
            if ANTML_PARAMETER_CLOSE in v:
                raise GrammarError(
                    f"a raw antml parameter cannot contain {ANTML_PARAMETER_CLOSE!r}; this value cannot be "
                    "written in the antml wire"
                )
            if "<" in v and any(
                isinstance(x, StrA) and delimiter_narrowed(x.lang, ANTML_PARAMETER_CLOSE) for x in n.alts
            ):
                raise GrammarError(
                    "a raw antml parameter with length bounds or a pattern is written without '<' "
                    "(see docs/grammar.md); this value cannot be written in the antml wire"
                )
            return v
        s = self.value(n, v, 0)
        return s if s is not None else self.any_value(v, 0)


def serialize_args(
    sir: SchemaIR | None, args: Any, *, wire: str, ws: str, ws_max: int | None, level: int = 0
) -> str:
    """Canonical text of the arguments ``args`` under ``sir`` (None: any JSON value) in ``wire``."""
    canon = Canon(sir, ws=ws, ws_max=ws_max, forbid=wire_format(wire).forbid)
    node = sir.root if sir is not None else ir.ANY
    s = canon.value(node, args, level)
    return s if s is not None else canon.any_value(args, level)


def serialize(name: str, sir: SchemaIR | None, args: Any, *, wire: str, ws: str, ws_max: int | None) -> str:
    """Canonical text of one call of tool ``name`` with ``args`` in ``wire``."""
    check_wire(wire)
    check_name(name, wire)
    w = wire_format(wire)
    canon = Canon(sir, ws=ws, ws_max=ws_max, forbid=w.forbid)
    if wire == "antml":
        if not isinstance(args, dict):
            raise GrammarError("antml calls need an object of arguments")
        node = sir.root if sir is not None else ir.ANY
        gap = canon.tag_gap()
        params = canon.antml_params(node, args)
        invoke = ANTML_INVOKE.format(name=name) + params + gap + ANTML_INVOKE_CLOSE
        return w.open + gap + invoke + gap + w.close
    if not w.envelope:  # json, harmony
        return w.wrap(serialize_args(sir, args, wire=wire, ws=ws, ws_max=ws_max), name)
    body = serialize_args(sir, args, wire=wire, ws=ws, ws_max=ws_max, level=1)
    call = (
        canon.opening("{", 0)
        + json_str(ENVELOPE_KEYS[0])
        + canon.colon()
        + json_str(name)
        + canon.comma(0)
        + json_str(ENVELOPE_KEYS[1])
        + canon.colon()
        + body
        + canon.closing("}", 0)
    )
    if wire == "call-list":
        call = canon.opening("[", -1) + call + canon.closing("]", -1)
    return w.wrap(call)


__all__ = ["frame", "serialize", "serialize_args", "Canon"]
