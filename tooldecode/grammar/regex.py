"""Regex emitter: one pattern for ``re.fullmatch`` (Python) / outlines; recursive schemas are refused."""

from __future__ import annotations

from tooldecode.grammar import automata as A
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
            return e.ast
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
    return A.regex_str(to_ast(g))
