"""Shared by the emitters: walk a grammar, name its terminals."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from tooldecode.grammar.automata import Charset, RNode, Sym
from tooldecode.grammar.errors import GrammarError
from tooldecode.grammar.gir import GAlt, GExpr, GLit, Grammar, GRef, GRep, GSeq, GTok, sanitize


def subexpressions(g: Grammar, order: list[str]) -> Iterator[GExpr]:
    """Every expression of the rules named in ``order``, depth first (a shared one once per use)."""

    def walk(e: GExpr) -> Iterator[GExpr]:
        yield e
        if isinstance(e, (GSeq, GAlt)):
            for it in e.items:
                yield from walk(it)
        elif isinstance(e, GRep):
            yield from walk(e.item)

    for name in order:
        yield from walk(g.rules[name])


def collect_tokens(g: Grammar, order: list[str]) -> list[GTok]:
    """Distinct terminals (by AST) in order of first use."""
    seen: dict[RNode, GTok] = {}
    for e in subexpressions(g, order):
        if isinstance(e, GTok):
            seen.setdefault(e.ast, e)
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

# the short escapes of tab, newline and carriage return (the same in GBNF and regex syntax)
CONTROL_ESCAPES = {0x09: r"\t", 0x0A: r"\n", 0x0D: r"\r"}


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


# -- printing expressions (shared by the GBNF, Lark and regex printers)


@dataclass(frozen=True)
class Grouping:
    """How a grammar syntax writes sequences, alternatives and repetition operands.

    ``prec`` is where an expression stands: 0 where an alternation may stand bare, 1 inside a
    sequence, 2 as the operand of a repetition. ``never`` is the expression no text matches.
    """

    open: str
    close: str
    never: str

    def group(self, s: str) -> str:
        return self.open + s + self.close

    def seq(self, parts: Sequence[str], prec: int) -> str:
        s = " ".join(parts)
        return self.group(s) if prec >= 2 and len(parts) > 1 else s

    def alt(self, parts: Sequence[str], prec: int) -> str:
        if not parts:
            return self.never
        s = " | ".join(parts)
        return self.group(s) if prec >= 1 and len(parts) > 1 else s

    def operand(self, inner: str, nested_rep: bool) -> str:
        """A repetition's operand (a repetition of a repetition is grouped)."""
        return self.group(inner) if nested_rep else inner


def expr_printer(
    syntax: str,
    grouping: Grouping,
    lit: Callable[[str], str],
    tok_names: Mapping[RNode, str],
    rule_name: Callable[[str], str],
    rep: Callable[[str, int, int | None, int], str],
) -> Callable[[GExpr, int], str]:
    """A printer of grammar-IR expressions in one syntax (GBNF, Lark): ``print(e, prec)``.

    ``lit`` writes a literal, ``tok_names`` names each terminal, ``rule_name`` maps a rule to its name
    in the syntax, ``rep(operand, lo, hi, prec)`` writes a repetition of an (already grouped) operand.
    """

    def expr(e: GExpr, prec: int) -> str:
        if isinstance(e, GLit):
            return lit(e.text)
        if isinstance(e, GTok):
            return tok_names[e.ast]
        if isinstance(e, GRef):
            return rule_name(e.name)
        if isinstance(e, GSeq):
            if not e.items:
                raise GrammarError(f"empty sequence cannot be written in {syntax}")
            return grouping.seq([expr(i, 1) for i in e.items], prec)
        if isinstance(e, GAlt):
            return grouping.alt([expr(i, 0) for i in e.items], prec)
        if isinstance(e, GRep):
            return rep(grouping.operand(expr(e.item, 2), isinstance(e.item, GRep)), e.lo, e.hi, prec)
        raise TypeError(e)

    return expr


def memoized(go1: Callable[[RNode, int], str]) -> Callable[[RNode, int], str]:
    """``go1`` with its results kept by (node identity, precedence): a shared subtree is printed once."""
    memo: dict[tuple[int, int], str] = {}

    def go(x: RNode, prec: int) -> str:
        key = (id(x), prec)
        r = memo.get(key)
        if r is None:
            r = memo[key] = go1(x, prec)
        return r

    return go
