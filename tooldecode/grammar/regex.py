"""Regex emitter: one pattern for ``re.fullmatch`` (Python) / outlines; recursive schemas are refused.

Backtracking engines (Python ``re``, PCRE, JavaScript) can take exponential time on an ambiguous
pattern such as ``(a|aa)+``. Every terminal whose regex is not deterministic (``deterministic``:
at each character at most one way to continue) is rewritten from its minimal DFA, which gives an
unambiguous regex (each text has one parse; a backtracking matcher then explores polynomially many
paths). ``backtracking_safe`` says whether the whole pattern is deterministic; when it is not (e.g.
two ``anyOf`` branches that admit the same value, or optional members that start alike) use an
automaton-based engine (outlines/interegular, RE2, Rust ``regex``).
"""

from __future__ import annotations

from functools import lru_cache

from tooldecode.grammar import automata as A
from tooldecode.grammar.automata import UNIVERSE, Cat, Chars, Charset, Or, Rep, RNode, Sym, cs_neg
from tooldecode.grammar.emit_common import CONTROL_ESCAPES, class_body, memoized, rep_suffix
from tooldecode.grammar.errors import GrammarError
from tooldecode.grammar.gir import GAlt, GExpr, GLit, Grammar, GRef, GRep, GSeq, GTok


def to_ast(g: Grammar) -> A.RNode:
    if g.is_recursive():
        raise GrammarError("the schema is recursive, so its language is not regular; use format gbnf or lark")
    memo: dict[str, A.RNode] = {}

    def go(e: GExpr) -> A.RNode:
        if isinstance(e, GLit):
            return A.lit(e.text)
        if isinstance(e, GTok):
            return _safe_token(e.ast)
        if isinstance(e, GRef):
            if e.name not in memo:
                memo[e.name] = go(g.rules[e.name])
            return memo[e.name]
        if isinstance(e, GSeq):
            return A.cat(*(go(i) for i in e.items))
        if isinstance(e, GAlt):
            return A.alt(*(go(i) for i in e.items))
        if isinstance(e, GRep):
            return A.rep(go(e.item), e.lo, e.hi)
        raise TypeError(e)

    return go(g.rules[g.root])


def emit_regex(g: Grammar) -> str:
    return regex_str(to_ast(g))


def backtracking_safe(g: Grammar) -> bool:
    """Whether the emitted regex is deterministic (linear time in backtracking engines too)."""
    return deterministic(to_ast(g))


_NONE: A.Charset = ()


def _info(
    n: A.RNode, memo: dict[int, tuple[bool, A.Charset, A.Charset, bool]]
) -> tuple[bool, A.Charset, A.Charset, bool]:
    """(nullable, first, follow-last, deterministic) of a regex AST over character classes."""
    key = id(n)
    if key in memo:
        return memo[key]
    if isinstance(n, A.Chars):
        r = (False, n.cs, _NONE, True)
    elif isinstance(n, A.Sym):
        r = _info(n.node, memo)
    elif isinstance(n, A.Or):
        parts = [_info(i, memo) for i in n.items]
        det = all(p[3] for p in parts) and sum(p[0] for p in parts) <= 1
        seen: A.Charset = _NONE
        for p in parts:
            if A.cs_inter(seen, p[1]):
                det = False
            seen = A.cs_union(seen, p[1])
        r = (any(p[0] for p in parts), seen, A.cs_union(*(p[2] for p in parts)) if parts else _NONE, det)
    elif isinstance(n, A.Cat):
        null, first, fl, det = True, _NONE, _NONE, True
        for i in n.items:
            n2, f2, l2, d2 = _info(i, memo)
            det = det and d2 and not A.cs_inter(fl, f2) and not (null and A.cs_inter(first, f2))
            first = A.cs_union(first, f2) if null else first
            fl = A.cs_union(l2, fl, f2) if n2 else l2
            null = null and n2
        r = (null, first, fl, det)
    elif isinstance(n, A.Rep):
        n2, f2, l2, d2 = _info(n.item, memo)
        again = n.hi is None or n.hi >= 2
        det = d2 and (not again or (not n2 and not A.cs_inter(l2, f2)))
        more = n.hi is None or (n.hi > n.lo and n.hi >= 2)
        r = (n.lo == 0 or n2, f2, A.cs_union(l2, f2) if more else l2, det)
    else:
        raise TypeError(n)
    memo[key] = r
    return r


def deterministic(n: A.RNode) -> bool:
    """Whether ``n`` is deterministic (one-unambiguous): reading left to right, each character
    has at most one place in the pattern to go. A backtracking matcher never backtracks further
    than one character on such a pattern."""
    return _info(n, {})[3]


def _safe_token(ast: A.RNode) -> A.RNode:
    if deterministic(ast):
        return ast
    try:
        return A.to_regex(A.to_dfa(ast))
    except A.TooComplex:
        return ast


# ---------------------------------------------------------------------------------------------
# printing a regex AST (Python ``re`` / Rust ``regex`` common syntax)


def _esc_cp_regex(cp: int, in_class: bool) -> str:
    c = chr(cp)
    if c.isascii() and c.isalnum():
        return c
    if 0x20 < cp < 0x7F:
        special = r"\.^$|?*+()[]{}/-&~#" if in_class else r"\.^$|?*+()[]{}/#&~-"
        return "\\" + c if c in special else c
    if cp == 0x20:
        return " "
    if cp in CONTROL_ESCAPES:
        return CONTROL_ESCAPES[cp]
    if cp < 0x100:
        return f"\\x{cp:02x}"
    if cp < 0x10000:
        return f"\\u{cp:04x}"
    return f"\\U{cp:08x}"


@lru_cache(maxsize=8192)
def _class_regex(cs: Charset) -> str:
    if len(cs) == 1 and cs[0][0] == cs[0][1]:
        return _esc_cp_regex(cs[0][0], False)
    neg = cs_neg(cs)
    if cs == UNIVERSE:
        return r"[\s\S]"
    if len(neg) < len(cs):
        return "[^" + class_body(neg, _esc_cp_regex) + "]"
    return "[" + class_body(cs, _esc_cp_regex) + "]"


@lru_cache(maxsize=1024)
def regex_str(n: RNode) -> str:
    """Print in the common subset of Python ``re`` and Rust ``regex`` syntax."""

    def go1(x: RNode, prec: int) -> str:
        # prec: 0 = alternation ok, 1 = inside concatenation, 2 = operand of a quantifier
        if isinstance(x, Chars):
            if not x.cs:
                return "[^\\s\\S]"
            return _class_regex(x.cs)
        if isinstance(x, Cat):
            if not x.items:
                return "(?:)"
            s = "".join(go(i, 1) for i in x.items)
            return f"(?:{s})" if prec >= 2 and len(x.items) > 1 else s
        if isinstance(x, Or):
            if not x.items:
                return "[^\\s\\S]"
            s = "|".join(go(i, 0) for i in x.items)
            return f"(?:{s})" if prec >= 1 else s
        if isinstance(x, Rep):
            inner = go(x.item, 2)
            if isinstance(x.item, Rep):
                inner = f"(?:{inner})"
            return inner + rep_suffix(x.lo, x.hi)
        if isinstance(x, Sym):
            return go(x.node, prec)
        raise TypeError(x)

    go = memoized(go1)
    return go(n, 0)
