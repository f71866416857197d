"""Tool-call wire formats: the framing around the arguments, and the canonical text of a call.

=============  ==========================================================================================
``json``       the bare arguments object
``call-json``  ``{"name": "edit", "arguments": {...}}``
``hermes``     ``<tool_call>\\n{"name": "edit", "arguments": {...}}\\n</tool_call>``
``antml``      ``<function_calls><invoke name="edit"><parameter name="path">a.py</parameter>...``
               ``</invoke></function_calls>``; a parameter whose schema admits only strings is raw text,
               any other parameter is JSON
``harmony``    ``<|start|>assistant<|channel|>commentary to=functions.edit <|constrain|>json<|message|>``
               ``{...}<|call|>``
``call-list``  ``<tool_call>[{"name": "edit", "arguments": {...}}]</tool_call>`` (SmolLM2's tool-call
               format: a JSON list of calls; the grammar admits a list of one call)
=============  ==========================================================================================

Each wire but ``json``/``call-json`` has a closing delimiter (``</tool_call>``, ``</parameter>``,
``<|call|>``). The grammar never lets that delimiter occur raw inside a JSON string (the canonical
text writes its ``<`` as ``\\u003c``) nor inside a raw antml parameter (a raw value that contains
``</parameter>`` cannot be written in the antml wire).
"""

from __future__ import annotations

from typing import Any

from tooldecode.grammar import automata as A
from tooldecode.grammar import ir
from tooldecode.grammar.errors import GrammarError
from tooldecode.grammar.gir import EMPTY, FAIL, GExpr, GLit, galt, gseq
from tooldecode.grammar.ir import AnyA, ArrA, BoolA, ConstA, Node, NullA, NumA, ObjA, RefA, StrA
from tooldecode.grammar.lower import Lowerer
from tooldecode.grammar.schema import SchemaIR
from tooldecode.grammar.terminals import delimiter_narrowed, json_str, number_ast, number_text, ws_max_for

WIRES = ("json", "call-json", "hermes", "antml", "harmony", "call-list")
# the keys of the JSON envelope around the arguments (call-json, hermes, call-list)
ENVELOPE_KEYS = ("name", "arguments")
FORBID: dict[str, str | None] = {
    "json": None,
    "call-json": None,
    "hermes": "</tool_call>",
    "antml": "</parameter>",
    "harmony": "<|call|>",
    "call-list": "</tool_call>",
}
HARMONY_HEAD = "<|start|>assistant<|channel|>commentary to=functions.{name} <|constrain|>json<|message|>"
ANTML_CLOSE = "</parameter>"


def check_wire(wire: str) -> None:
    if wire not in WIRES:
        raise GrammarError(f"unknown wire format {wire!r}; use one of {', '.join(WIRES)}")


def check_name(name: str, wire: str) -> None:
    if wire != "json" and (not name or any(c in name for c in ' "<>\n\t\\')):
        raise GrammarError(f"tool name {name!r} cannot be framed in the {wire} wire")


def frame(wire: str, name: str, low: Lowerer, sir: SchemaIR, hint: str) -> GExpr:
    """Grammar expression of one call of tool ``name`` in ``wire``."""
    p = low.p
    if wire == "antml":
        alts = []
        for a in sir.root.alts:
            if not isinstance(a, ObjA):
                raise GrammarError(f"the antml wire needs an object schema for the arguments of {name!r}")
            members, empty_ok = low.members(a, hint, ctx="antml")
            alts.append(galt(members, EMPTY) if empty_ok else members)
        params = galt(*alts) if alts else FAIL
        return gseq(
            GLit("<function_calls>"),
            p.gap,
            GLit(f'<invoke name="{name}">'),
            params,
            p.gap,
            GLit("</invoke>"),
            p.gap,
            GLit("</function_calls>"),
        )
    args = low.value(sir.root, hint, inline=(wire == "json"))
    if wire == "json":
        return args
    if wire == "harmony":
        return gseq(GLit(HARMONY_HEAD.format(name=name)), args, GLit("<|call|>"))
    call = gseq(
        p.lbrace,
        GLit(json_str(ENVELOPE_KEYS[0])),
        p.colon,
        GLit(json_str(name)),
        p.comma,
        GLit(json_str(ENVELOPE_KEYS[1])),
        p.colon,
        args,
        p.rbrace,
    )
    if wire == "call-json":
        return call
    if wire == "call-list":
        return gseq(GLit("<tool_call>"), p.lbrack, call, p.rbrack, GLit("</tool_call>"))
    return gseq(GLit("<tool_call>\n"), call, GLit("\n</tool_call>"))


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

    def _open(self, ch: str, level: int) -> str:
        return ch + ("\n" + self._indent(level + 1) if self.ws == "pretty" else "")

    def _close(self, ch: str, level: int) -> str:
        return ("\n" + self._indent(level) if self.ws == "pretty" else "") + ch

    def _comma(self, level: int) -> str:
        if self.ws == "pretty":
            return ",\n" + self._indent(level + 1)
        return ", " if self.ws == "bounded" and self.n >= 1 else ","

    def colon(self) -> str:
        return ": " if (self.ws == "pretty" or (self.ws == "bounded" and self.n >= 1)) else ":"

    def tag_gap(self) -> str:
        return "\n" if self.ws == "pretty" or (self.ws == "bounded" and self.n >= 1) else ""

    # values
    def any_value(self, v: Any, level: int) -> str:
        t = ir.json_type(v)
        if t == "null":
            return "null"
        if t == "boolean":
            return "true" if v else "false"
        if t == "number":
            return number_text(v)
        if t == "string":
            return json_str(v, self.forbid)
        if t == "array":
            if not v:
                return "[]"
            return (
                self._open("[", level)
                + self._comma(level).join(self.any_value(x, level + 1) for x in v)
                + self._close("]", level)
            )
        if not v:
            return "{}"
        return (
            self._open("{", level)
            + self._comma(level).join(
                json_str(k, self.forbid) + self.colon() + self.any_value(x, level + 1) for k, x in v.items()
            )
            + self._close("}", level)
        )

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
            if ir.json_type(v) != "array" or not ir.accepts_alt(a, v, self.defs):
                return None
            if not v:
                return "[]"
            parts = []
            for i, x in enumerate(v):
                s = self.value(a.item(i), x, level + 1)
                if s is None:
                    return None
                parts.append(s)
            return self._open("[", level) + self._comma(level).join(parts) + self._close("]", level)
        if isinstance(a, ObjA):
            if ir.json_type(v) != "object" or not ir.accepts_alt(a, v, self.defs):
                return None
            if not v:
                return "{}"
            parts = []
            for k in self.key_order(a, v):
                s = self.value(a.value_for(k), v[k], level + 1)
                if s is None:
                    return None
                parts.append(json_str(k, self.forbid) + self.colon() + s)
            return self._open("{", level) + self._comma(level).join(parts) + self._close("}", level)
        raise TypeError(a)

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
            parts = []
            for k in self.key_order(a, args):
                parts.append(
                    gap + f'<parameter name="{k}">' + self.antml_value(a.value_for(k), args[k]) + ANTML_CLOSE
                )
            return "".join(parts)
        # not valid for the schema: best effort
        return "".join(
            gap + f'<parameter name="{k}">' + self.antml_value(ir.ANY, x) + ANTML_CLOSE
            for k, x in args.items()
        )

    def antml_value(self, n: Node, v: Any) -> str:
        string_only = bool(n.alts) and all(
            isinstance(x, StrA) or (isinstance(x, ConstA) and isinstance(x.value, str)) for x in n.alts
        )
        if string_only and isinstance(v, str):
            if ANTML_CLOSE in v:
                raise GrammarError(
                    "a raw antml parameter cannot contain '</parameter>'; this value cannot be "
                    "written in the antml wire"
                )
            if "<" in v and any(
                isinstance(x, StrA) and delimiter_narrowed(x.lang, ANTML_CLOSE) for x in n.alts
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
    canon = Canon(sir, ws=ws, ws_max=ws_max, forbid=FORBID[wire])
    node = sir.root if sir is not None else ir.ANY
    s = canon.value(node, args, level)
    return s if s is not None else canon.any_value(args, level)


def serialize(name: str, sir: SchemaIR | None, args: Any, *, wire: str, ws: str, ws_max: int | None) -> str:
    check_wire(wire)
    check_name(name, wire)
    canon = Canon(sir, ws=ws, ws_max=ws_max, forbid=FORBID[wire])
    if wire == "antml":
        if not isinstance(args, dict):
            raise GrammarError("antml calls need an object of arguments")
        node = sir.root if sir is not None else ir.ANY
        gap = canon.tag_gap()
        params = canon.antml_params(node, args)
        return f'<function_calls>{gap}<invoke name="{name}">{params}{gap}</invoke>{gap}</function_calls>'
    if wire in ("json", "harmony"):
        body = serialize_args(sir, args, wire=wire, ws=ws, ws_max=ws_max)
        return body if wire == "json" else HARMONY_HEAD.format(name=name) + body + "<|call|>"
    body = serialize_args(sir, args, wire=wire, ws=ws, ws_max=ws_max, level=1)
    call = (
        canon._open("{", 0)
        + '"name"'
        + canon.colon()
        + json_str(name)
        + canon._comma(0)
        + '"arguments"'
        + canon.colon()
        + body
        + canon._close("}", 0)
    )
    if wire == "call-json":
        return call
    if wire == "call-list":
        return "<tool_call>" + canon._open("[", -1) + call + canon._close("]", -1) + "</tool_call>"
    return "<tool_call>\n" + call + "\n</tool_call>"


__all__ = ["WIRES", "FORBID", "frame", "serialize", "serialize_args", "Canon", "check_wire"]
