"""GBNF emitter (llama.cpp grammar syntax; also read by ``xgrammar.Grammar.from_ebnf``)."""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

from tooldecode.grammar.automata import Cat, Chars, Charset, Or, Rep, RNode, Sym, ast_literal, cs_neg
from tooldecode.grammar.emit_common import (
    CONTROL_ESCAPES,
    Grouping,
    Names,
    class_body,
    collect_syms,
    collect_tokens,
    expr_printer,
    memoized,
    rep_suffix,
)
from tooldecode.grammar.errors import GrammarError
from tooldecode.grammar.gir import Grammar


def gbnf_literal(s: str) -> str:
    """A GBNF string literal of ``s`` (``""`` for the empty string)."""
    return '"' + "".join(esc_cp_gbnf(ord(c), False) for c in s) + '"'


def _lit(s: str) -> str:
    if not s:
        raise GrammarError("empty literal cannot be written in GBNF")
    return gbnf_literal(s)


def emit_gbnf(g: Grammar, header: str = "") -> str:
    order = g.reachable()
    names = Names(set(order))
    toks = collect_tokens(g, order)
    tok_names: dict[RNode, str] = {}
    for t in toks:
        tok_names[t.ast] = names.get(t.hint)
    syms = collect_syms([t.ast for t in toks])
    sym_names = {s: names.get(s.name) for s in syms}

    def sym_name(s: Sym) -> str:
        return sym_names[s]

    expr = expr_printer(
        "GBNF",
        GBNF_GROUPING,
        _lit,
        tok_names,
        lambda name: name,
        lambda item, lo, hi, _prec: gbnf_rep(item, lo, hi),
    )

    lines = [header] if header else []
    for name in order:
        lines.append(f"{name} ::= {expr(g.rules[name], 0)}")
    for t in toks:
        lines.append(f"{tok_names[t.ast]} ::= {gbnf_str(t.ast, sym_name)}")
    for s in syms:
        lines.append(f"{sym_names[s]} ::= {gbnf_str(s.node, sym_name)}")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------
# printing a regex AST as a GBNF expression


def esc_cp_gbnf(cp: int, in_class: bool) -> str:
    """GBNF escapes use the fixed-width ``\\uHHHH`` form: xgrammar reads ``\\x`` greedily
    (``\\x5cb`` would be U+5CB), llama.cpp reads exactly 2/4/8 hex digits."""
    c = chr(cp)
    if c.isascii() and c.isalnum():
        return c
    if cp == 0x20:
        return " "
    if 0x20 < cp < 0x7F:
        if in_class:
            return f"\\u{cp:04x}"
        if c == '"':
            return '\\"'
        if c == "\\":
            return "\\\\"
        return c
    if cp in CONTROL_ESCAPES:
        return CONTROL_ESCAPES[cp]
    if cp < 0x10000:
        return f"\\u{cp:04x}"
    return f"\\U{cp:08x}"


GBNF_MAX_REP = 1000
GBNF_NEVER = "[^\\u0000-\\U0010ffff]"  # a class no character is in
GBNF_GROUPING = Grouping("( ", " )", GBNF_NEVER)


def gbnf_str(n: RNode, sym_name: Callable[[Sym], str] | None = None) -> str:
    """Print a regex AST as a GBNF expression (llama.cpp / xgrammar syntax).

    ``sym_name`` maps a ``Sym`` to the rule name that stands for it (the caller defines that rule).
    """

    def go1(x: RNode, prec: int) -> str:
        s = ast_literal(x)
        if s is not None and s and not (isinstance(x, Rep)):
            return gbnf_literal(s)
        if isinstance(x, Chars):
            return _gbnf_class(x.cs) if x.cs else GBNF_NEVER
        if isinstance(x, Cat):
            # merge runs of single literal chars into one string literal
            parts: list[str] = []
            run = ""
            for it in x.items:
                c = ast_literal(it) if isinstance(it, Chars) else None
                if c is not None:
                    run += c
                    continue
                if run:
                    parts.append(gbnf_literal(run))
                    run = ""
                parts.append(go(it, 1))
            if run:
                parts.append(gbnf_literal(run))
            return GBNF_GROUPING.seq(parts, prec) if parts else '""'
        if isinstance(x, Or):
            return GBNF_GROUPING.alt([go(i, 0) for i in x.items], prec)
        if isinstance(x, Rep):
            return gbnf_rep(GBNF_GROUPING.operand(go(x.item, 2), isinstance(x.item, Rep)), x.lo, x.hi)
        if isinstance(x, Sym):
            return sym_name(x) if sym_name is not None else go(x.node, prec)
        raise TypeError(x)

    go = memoized(go1)
    return go(n, 0)


@lru_cache(maxsize=8192)
def _gbnf_class(cs: Charset) -> str:
    neg = cs_neg(cs)
    if len(neg) < len(cs) and neg:
        return "[^" + class_body(neg, esc_cp_gbnf) + "]"
    return "[" + class_body(cs, esc_cp_gbnf) + "]"


def gbnf_rep(item: str, lo: int, hi: int | None) -> str:
    """``item{lo,hi}`` with no count above ``GBNF_MAX_REP`` (llama.cpp refuses > 2000), unambiguous.

    A count past the limit is written in blocks of ``GBNF_MAX_REP`` so that every text has one parse:
    ``lo`` exact repetitions, then up to ``hi - lo`` more as "k full blocks and fewer than a block"
    or "all full blocks and the remainder" (``_upto``). Overlapping ``{0,1000} {0,1000}`` ranges would
    give a text of n items n+1 parses, which an Earley matcher (xgrammar) pays for on every character.
    """
    if hi is not None and hi <= GBNF_MAX_REP:
        return item + rep_suffix(lo, hi)
    if hi is None and lo <= GBNF_MAX_REP:
        return item + rep_suffix(lo, hi)
    parts = [_exact(item, lo)] if lo else []
    if hi is None:
        parts.append(item + "*")
    elif hi > lo:
        parts.append(_upto(item, hi - lo))
    return "( " + " ".join(parts) + " )"


def _exact(item: str, n: int) -> str:
    """``item`` exactly ``n`` times, no count above ``GBNF_MAX_REP`` (blocks of blocks for large n)."""
    if n <= GBNF_MAX_REP:
        return item + rep_suffix(n, n)
    q, r = divmod(n, GBNF_MAX_REP)
    block = f"( {item}{{{GBNF_MAX_REP}}} )"
    return " ".join([_exact(block, q), *([item + rep_suffix(r, r)] if r else [])])


def _upto(item: str, n: int) -> str:
    """``item`` 0..``n`` times, every count parsed one way: with B = ``GBNF_MAX_REP`` and n = qB + r,
    either fewer than q full blocks and fewer than B items, or q full blocks and at most r items."""
    if n <= GBNF_MAX_REP:
        return item + rep_suffix(0, n)
    q, r = divmod(n, GBNF_MAX_REP)
    block = f"( {item}{{{GBNF_MAX_REP}}} )"
    below = ([_upto(block, q - 1)] if q > 1 else []) + [item + rep_suffix(0, GBNF_MAX_REP - 1)]
    top = [_exact(block, q), *([item + rep_suffix(0, r)] if r else [])]
    return "( " + " ".join(below) + " | " + " ".join(top) + " )"
