"""Shared by the emitters: walk a grammar, name its terminals."""

from __future__ import annotations

from collections.abc import Callable

from tooldecode.grammar.automata import Charset, RNode, Sym
from tooldecode.grammar.gir import GAlt, GExpr, Grammar, GRep, GSeq, GTok, sanitize


def collect_tokens(g: Grammar, order: list[str]) -> list[GTok]:
    """Distinct terminals (by AST) in order of first use."""
    seen: dict[RNode, GTok] = {}

    def walk(e: GExpr) -> None:
        if isinstance(e, GTok):
            seen.setdefault(e.ast, e)
        elif isinstance(e, (GSeq, GAlt)):
            for it in e.items:
                walk(it)
        elif isinstance(e, GRep):
            walk(e.item)

    for name in order:
        walk(g.rules[name])
    return list(seen.values())


def collect_syms(asts: list[RNode]) -> list[Sym]:
    out: dict[Sym, None] = {}

    def walk(n: RNode) -> None:
        if isinstance(n, Sym):
            if n not in out:
                walk(n.node)
                out[n] = None
            return
        items = getattr(n, "items", None)
        if items is not None:
            for it in items:
                walk(it)
        item = getattr(n, "item", None)
        if item is not None:
            walk(item)

    for a in asts:
        walk(a)
    return list(out)


class Names:
    """Unique names in one namespace."""

    def __init__(self, taken: set[str] | None = None) -> None:
        self.taken = set(taken or ())

    def get(self, hint: str) -> str:
        base = sanitize(hint)
        name = base
        i = 2
        while name in self.taken:
            name = f"{base}-{i}"
            i += 1
        self.taken.add(name)
        return name


# -- printing terminals (shared by the regex and GBNF printers)


def class_body(cs: Charset, esc: Callable[[int, bool], str]) -> str:
    parts = []
    for lo, hi in cs:
        if lo == hi:
            parts.append(esc(lo, True))
        elif hi == lo + 1:
            parts.append(esc(lo, True) + esc(hi, True))
        else:
            parts.append(esc(lo, True) + "-" + esc(hi, True))
    return "".join(parts)


def rep_suffix(lo: int, hi: int | None) -> str:
    if lo == 0 and hi is None:
        return "*"
    if lo == 1 and hi is None:
        return "+"
    if lo == 0 and hi == 1:
        return "?"
    if hi is None:
        return f"{{{lo},}}"
    if lo == hi:
        return f"{{{lo}}}"
    return f"{{{lo},{hi}}}"
