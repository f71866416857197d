"""GBNF emitter (llama.cpp grammar syntax; also read by ``xgrammar.Grammar.from_ebnf``)."""

from __future__ import annotations

from tooldecode.grammar.automata import GBNF_NEVER, RNode, Sym, _esc_cp_gbnf, gbnf_rep, gbnf_str
from tooldecode.grammar.emit_common import Names, collect_syms, collect_tokens
from tooldecode.grammar.errors import GrammarError
from tooldecode.grammar.gir import GAlt, GExpr, GLit, Grammar, GRef, GRep, GSeq, GTok


def _lit(s: str) -> str:
    if not s:
        raise GrammarError("empty literal cannot be written in GBNF")
    return '"' + "".join(_esc_cp_gbnf(ord(c), False) for c in s) + '"'


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

    def expr(e: GExpr, prec: int) -> str:
        if isinstance(e, GLit):
            return _lit(e.text)
        if isinstance(e, GTok):
            return tok_names[e.ast]
        if isinstance(e, GRef):
            return e.name
        if isinstance(e, GSeq):
            if not e.items:
                raise GrammarError("empty sequence cannot be written in GBNF")
            s = " ".join(expr(i, 1) for i in e.items)
            return f"( {s} )" if prec >= 2 and len(e.items) > 1 else s
        if isinstance(e, GAlt):
            if not e.items:
                return GBNF_NEVER
            s = " | ".join(expr(i, 0) for i in e.items)
            return f"( {s} )" if prec >= 1 and len(e.items) > 1 else s
        if isinstance(e, GRep):
            inner = expr(e.item, 2)
            if isinstance(e.item, GRep):
                inner = f"( {inner} )"
            return gbnf_rep(inner, e.lo, e.hi)
        raise TypeError(e)

    lines = [header] if header else []
    for name in order:
        lines.append(f"{name} ::= {expr(g.rules[name], 0)}")
    for t in toks:
        lines.append(f"{tok_names[t.ast]} ::= {gbnf_str(t.ast, sym_name)}")
    for s in syms:
        lines.append(f"{sym_names[s]} ::= {gbnf_str(s.node, sym_name)}")
    return "\n".join(lines) + "\n"
