"""Lark emitter: the subset read by the ``lark`` package (Earley) and by llguidance.

Rules are lowercase, terminals uppercase and regular (one ``/regex/`` each, in the common subset of
Python ``re`` and Rust ``regex``), no terminal matches the empty string, repetition of rules uses
``~`` ranges. The start rule is ``start``.
"""

from __future__ import annotations

from tooldecode.grammar.automata import RNode
from tooldecode.grammar.budget import MAX_UNROLL, too_big
from tooldecode.grammar.emit_common import Grouping, Names, collect_tokens, expr_printer, subexpressions
from tooldecode.grammar.errors import GrammarError
from tooldecode.grammar.gir import FAIL, Grammar
from tooldecode.grammar.regex import regex_str

MAX_TILDE_SPAN = 16
LARK_GROUPING = Grouping("(", ")", "NEVER")


def _lit(s: str) -> str:
    if not s:
        raise GrammarError("empty literal cannot be written in Lark")
    out = []
    for c in s:
        cp = ord(c)
        if c == "\\":
            out.append("\\\\")
        elif c == '"':
            out.append('\\"')
        elif c == "\n":
            out.append("\\n")
        elif c == "\t":
            out.append("\\t")
        elif c == "\r":
            out.append("\\r")
        elif cp < 0x20 or cp == 0x7F:
            out.append(f"\\x{cp:02x}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


def emit_lark(g: Grammar, header: str = "") -> str:
    order = g.reachable()
    rule_names = {n: ("start" if n == g.root else n.replace("-", "_")) for n in order}
    if len(set(rule_names.values())) != len(rule_names):
        raise GrammarError("rule names collide after conversion to Lark")
    toks = collect_tokens(g, order)
    names = Names({"never"})
    tok_names: dict[RNode, str] = {t.ast: names.get(t.hint).replace("-", "_").upper() for t in toks}

    def rep(item: str, lo: int, hi: int | None, prec: int) -> str:
        if (lo, hi) == (0, None):
            return item + "*"
        if (lo, hi) == (1, None):
            return item + "+"
        if (lo, hi) == (0, 1):
            return item + "?"
        if hi is None:
            s = f"{item}~{lo} {item}*"
        elif hi - lo <= MAX_TILDE_SPAN:
            s = f"{item}~{lo}" if lo == hi else f"{item}~{lo}..{hi}"
            return s
        else:
            # item{lo,hi} as item~lo followed by nested optionals (lark expands ~ ranges quadratically)
            if hi - lo > MAX_UNROLL:  # nested optionals: the text grows as the square of the span
                raise too_big(
                    f"a bounded repetition spanning {hi - lo:,} (maxItems, maxLength, ...) is more than Lark "
                    f"writes as nested optionals ({MAX_UNROLL:,}); use the gbnf or regex format"
                )
            tail = ""
            for _ in range(hi - lo):
                tail = f"({item} {tail})?" if tail else f"{item}?"
            s = (f"{item}~{lo} " if lo else "") + tail
        return f"({s})" if prec >= 1 else s

    expr = expr_printer("Lark", LARK_GROUPING, _lit, tok_names, rule_names.__getitem__, rep)
    lines = [header] if header else []
    for name in order:
        lines.append(f"{rule_names[name]}: {expr(g.rules[name], 0)}")
    for t in toks:
        rx = regex_str(t.ast)
        lines.append(f"{tok_names[t.ast]}: /{rx}/")
    if any(e == FAIL for e in subexpressions(g, order)):  # an alternation of nothing is printed NEVER
        lines.append("NEVER: /[^\\s\\S]/")
    return "\n".join(lines) + "\n"
