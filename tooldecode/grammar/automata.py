"""Regular languages over Unicode code points: character sets, a regex AST, DFAs and back.

Everything here is exact: DFAs are built by subset construction over a partition of the code
point universe, products and complements are the textbook constructions, and ``to_regex`` is
state elimination. The emitters print the AST (``regex`` and ``gbnf``).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TypeVar

from tooldecode.grammar.rast import (  # re-exported: the regex AST is used with the automata
    EPS,
    MAXCP,
    NOTHING,
    SURR_HI,
    SURR_LO,
    UNIVERSE,
    Cat,
    Chars,
    Charset,
    Or,
    Rep,
    RNode,
    Sym,
    alt,
    ast_literal,
    ast_nullable,
    ast_size,
    cat,
    chars,
    cs_diff,
    cs_has,
    cs_inter,
    cs_neg,
    cs_norm,
    cs_of,
    cs_size,
    cs_union,
    is_nothing,
    lit,
    opt,
    rep,
    star,
    substitute,
)

__all__ = [
    "Cat",
    "Chars",
    "Charset",
    "DFA",
    "EPS",
    "MAXCP",
    "MAX_DFA_STATES",
    "MAX_REGEX_SIZE",
    "NOTHING",
    "Or",
    "RNode",
    "Rep",
    "SURR_HI",
    "SURR_LO",
    "Sym",
    "TooComplex",
    "UNIVERSE",
    "alt",
    "ast_literal",
    "ast_nullable",
    "ast_size",
    "cat",
    "chars",
    "common_atoms",
    "cs_diff",
    "cs_has",
    "cs_inter",
    "cs_neg",
    "cs_norm",
    "cs_of",
    "cs_size",
    "cs_union",
    "eliminate",
    "finite_dfa",
    "is_nothing",
    "length_dfa",
    "lit",
    "opt",
    "product",
    "rep",
    "star",
    "substitute",
    "to_dfa",
    "to_regex",
    "to_regex_longest",
]


# ---------------------------------------------------------------------------------------------
# NFA -> DFA


class TooComplex(Exception):
    """An automaton or expression grew past the configured limit."""


MAX_DFA_STATES = 6000


def _partition(sets: Iterable[Charset]) -> list[Charset]:
    """Coarsest partition of UNIVERSE such that every given set is a union of blocks."""
    sets = [s for s in set(sets) if s]
    cuts = {0, MAXCP + 1, SURR_LO, SURR_HI + 1}
    for s in sets:
        for lo, hi in s:
            cuts.add(lo)
            cuts.add(hi + 1)
    points = sorted(cuts)
    elems = [(a, b - 1) for a, b in zip(points, points[1:], strict=False) if not (SURR_LO <= a <= SURR_HI)]
    if not sets:
        return [UNIVERSE]
    # signature of each elementary interval
    sig_of: dict[tuple[int, ...], list[tuple[int, int]]] = {}
    # sweep: for each set, mark elementary intervals it contains
    member: list[list[int]] = [[] for _ in elems]
    starts = [e[0] for e in elems]
    import bisect

    for si, s in enumerate(sets):
        for lo, hi in s:
            k = bisect.bisect_left(starts, lo)
            while k < len(elems) and elems[k][1] <= hi:
                member[k].append(si)
                k += 1
    for e, m in zip(elems, member, strict=True):
        sig_of.setdefault(tuple(m), []).append(e)
    return [cs_norm(v) for v in sig_of.values()]


class _NFA:
    def __init__(self) -> None:
        self.eps: list[list[int]] = []
        self.trans: list[list[tuple[Charset, int]]] = []

    def new(self) -> int:
        self.eps.append([])
        self.trans.append([])
        return len(self.eps) - 1

    def build(self, n: RNode, budget: list[int]) -> tuple[int, int]:
        budget[0] -= 1
        if budget[0] < 0:
            raise TooComplex("regular expression too large to determinize")
        s = self.new()
        if isinstance(n, Chars):
            e = self.new()
            if n.cs:
                self.trans[s].append((n.cs, e))
            return s, e
        if isinstance(n, Cat):
            cur = s
            for it in n.items:
                a, b = self.build(it, budget)
                self.eps[cur].append(a)
                cur = b
            return s, cur
        if isinstance(n, Or):
            e = self.new()
            for it in n.items:
                a, b = self.build(it, budget)
                self.eps[s].append(a)
                self.eps[b].append(e)
            return s, e
        if isinstance(n, Rep):
            cur = s
            for _ in range(n.lo):
                a, b = self.build(n.item, budget)
                self.eps[cur].append(a)
                cur = b
            if n.hi is None:
                a, b = self.build(n.item, budget)
                e = self.new()
                self.eps[cur].append(a)
                self.eps[cur].append(e)
                self.eps[b].append(a)
                self.eps[b].append(e)
                return s, e
            e = self.new()
            self.eps[cur].append(e)
            for _ in range(n.hi - n.lo):
                a, b = self.build(n.item, budget)
                self.eps[cur].append(a)
                self.eps[b].append(e)
                cur = b
            return s, e
        if isinstance(n, Sym):
            a, b = self.build(n.node, budget)
            self.eps[s].append(a)
            return s, b
        raise TypeError(n)


@dataclass
class DFA:
    """A complete DFA over a partition of UNIVERSE (``atoms``); state -1 never appears (dead is explicit)."""

    atoms: list[Charset]
    delta: list[list[int]]  # delta[state][atom] -> state
    accept: set[int]
    start: int = 0

    @property
    def n(self) -> int:
        return len(self.delta)

    def atom_of(self, cp: int) -> int:
        for i, a in enumerate(self.atoms):
            if cs_has(a, cp):
                return i
        return -1

    def accepts(self, text: str) -> bool:
        q = self.start
        for ch in text:
            a = self.atom_of(ord(ch))
            if a < 0:
                return False
            q = self.delta[q][a]
        return q in self.accept

    def live_states(self) -> set[int]:
        """States from which an accepting state is reachable."""
        rev: list[set[int]] = [set() for _ in range(self.n)]
        for q, row in enumerate(self.delta):
            for t in row:
                rev[t].add(q)
        return reachable(self.accept, rev.__getitem__)

    def is_empty(self) -> bool:
        return self.start not in self.live_states()

    def complement(self) -> DFA:
        return DFA(self.atoms, [list(r) for r in self.delta], set(range(self.n)) - self.accept, self.start)

    def minimize(self) -> DFA:
        return _minimize(self)

    def is_finite(self) -> bool:
        live = self.live_states()
        # cycle among live states reachable from start?
        color: dict[int, int] = {}

        def dfs(q: int) -> bool:
            color[q] = 1
            for t in set(self.delta[q]):
                if t not in live:
                    continue
                c = color.get(t, 0)
                if c == 1:
                    return True
                if c == 0 and dfs(t):
                    return True
            color[q] = 2
            return False

        import sys

        old = sys.getrecursionlimit()
        sys.setrecursionlimit(max(old, 4 * self.n + 100))
        try:
            return self.start not in live or not dfs(self.start)
        finally:
            sys.setrecursionlimit(old)


_State = TypeVar("_State", bound=Hashable)


def reachable(starts: Iterable[_State], succ: Callable[[_State], Iterable[_State]]) -> set[_State]:
    """The states reachable from ``starts`` (``starts`` included) by the successor function ``succ``."""
    seen = set(starts)
    stack = list(seen)
    while stack:
        for t in succ(stack.pop()):
            if t not in seen:
                seen.add(t)
                stack.append(t)
    return seen


def _explore(
    start: _State, step: Callable[[_State], Iterable[_State]], what: str
) -> tuple[list[_State], list[list[int]]]:
    """The states reachable from ``start`` in discovery order, and their transition rows.

    ``step(state)`` gives a state's successor on each atom in turn; states are numbered as they
    are found (``start`` is 0). Raises ``TooComplex`` past ``MAX_DFA_STATES`` states.
    """
    index: dict[_State, int] = {start: 0}
    order = [start]
    delta: list[list[int]] = []
    i = 0
    while i < len(order):
        row = []
        for t in step(order[i]):
            j = index.get(t)
            if j is None:
                j = len(order)
                index[t] = j
                order.append(t)
                if len(order) > MAX_DFA_STATES:
                    raise TooComplex(f"{what} exceeds the state limit")
            row.append(j)
        delta.append(row)
        i += 1
    return order, delta


def _determinize(nfa: _NFA, start: int, final: int) -> DFA:
    all_sets = [cs for row in nfa.trans for cs, _ in row]
    atoms = _partition(all_sets)
    # map each transition charset to the atom indices it covers
    atom_idx: dict[Charset, list[int]] = {}
    for cs in set(all_sets):
        atom_idx[cs] = [i for i, a in enumerate(atoms) if cs_inter(a, cs)]

    closure_cache: dict[int, frozenset[int]] = {}

    def closure1(q: int) -> frozenset[int]:
        if q in closure_cache:
            return closure_cache[q]
        fs = frozenset(reachable([q], nfa.eps.__getitem__))
        closure_cache[q] = fs
        return fs

    def closure(qs: Iterable[int]) -> frozenset[int]:
        out: set[int] = set()
        for q in qs:
            out |= closure1(q)
        return frozenset(out)

    def step(cur: frozenset[int]) -> Iterator[frozenset[int]]:
        targets: list[set[int]] = [set() for _ in atoms]
        for q in cur:
            for cs, t in nfa.trans[q]:
                for a in atom_idx[cs]:
                    targets[a].add(t)
        return (closure(ts) for ts in targets)

    order, delta = _explore(closure([start]), step, "automaton")
    accept = {k for k, fs in enumerate(order) if final in fs}
    return DFA(atoms, delta, accept, 0)


def _minimize(d: DFA) -> DFA:
    # remove unreachable states first
    states = sorted(reachable([d.start], d.delta.__getitem__))
    # Moore refinement
    block = {q: (1 if q in d.accept else 0) for q in states}
    nblocks = len(set(block.values()))
    while True:
        sig = {}
        new_block = {}
        for q in states:
            key = (block[q], tuple(block[t] for t in d.delta[q]))
            if key not in sig:
                sig[key] = len(sig)
            new_block[q] = sig[key]
        if len(sig) == nblocks:
            block = new_block
            break
        block, nblocks = new_block, len(sig)
    # renumber with start = 0, BFS order for stable output
    order: dict[int, int] = {}
    queue = [block[d.start]]
    order[block[d.start]] = 0
    rep_of: dict[int, int] = {}
    for q in states:
        rep_of.setdefault(block[q], q)
    k = 0
    while k < len(queue):
        b = queue[k]
        k += 1
        for t in d.delta[rep_of[b]]:
            bt = block[t]
            if bt not in order:
                order[bt] = len(order)
                queue.append(bt)
    delta = [[0] * len(d.atoms) for _ in order]
    accept = set()
    for b, newq in order.items():
        q = rep_of[b]
        delta[newq] = [order[block[t]] for t in d.delta[q]]
        if q in d.accept:
            accept.add(newq)
    out = DFA(list(d.atoms), delta, accept, 0)
    return _merge_atoms(out)


def _merge_atoms(d: DFA) -> DFA:
    """Merge atoms that behave identically in every state (keeps labels small)."""
    cols: dict[tuple[int, ...], list[int]] = {}
    for a in range(len(d.atoms)):
        cols.setdefault(tuple(row[a] for row in d.delta), []).append(a)
    if len(cols) == len(d.atoms):
        return d
    groups = list(cols.values())
    atoms = [cs_union(*(d.atoms[a] for a in g)) for g in groups]
    delta = [[row[g[0]] for g in groups] for row in d.delta]
    return DFA(atoms, delta, set(d.accept), d.start)


@lru_cache(maxsize=512)
def to_dfa(n: RNode) -> DFA:
    nfa = _NFA()
    s, e = nfa.build(n, [40000])
    return _minimize(_determinize(nfa, s, e))


def _refine(d: DFA, atoms: list[Charset]) -> DFA:
    """Re-express d over a finer partition ``atoms``."""
    mapping = []
    for a in atoms:
        for i, b in enumerate(d.atoms):
            if cs_inter(a, b):
                mapping.append(i)
                break
        else:
            raise AssertionError("partition does not cover")
    return DFA(atoms, [[row[i] for i in mapping] for row in d.delta], set(d.accept), d.start)


def common_atoms(*ds: DFA) -> list[Charset]:
    atoms = [UNIVERSE]
    for d in ds:
        new = []
        for a in atoms:
            for b in d.atoms:
                c = cs_inter(a, b)
                if c:
                    new.append(c)
        atoms = new
    return atoms


def product(ds: Sequence[DFA], mode: str = "and") -> DFA:
    """Intersection (``and``) or union (``or``) of complete DFAs."""
    atoms = common_atoms(*ds)
    rd = [_refine(d, atoms) for d in ds]

    def step(cur: tuple[int, ...]) -> Iterator[tuple[int, ...]]:
        return (tuple(d.delta[q][a] for d, q in zip(rd, cur, strict=True)) for a in range(len(atoms)))

    order, delta = _explore(tuple(d.start for d in rd), step, "product automaton")
    if mode == "and":
        accept = {k for k, t in enumerate(order) if all(q in d.accept for d, q in zip(rd, t, strict=True))}
    else:
        accept = {k for k, t in enumerate(order) if any(q in d.accept for d, q in zip(rd, t, strict=True))}
    return _minimize(DFA(atoms, delta, accept, 0))


def finite_dfa(words: Iterable[str]) -> DFA:
    return to_dfa(alt(*(lit(w) for w in sorted(set(words)))) if words else NOTHING)


def length_dfa(lo: int, hi: int | None) -> DFA:
    return to_dfa(rep(Chars(UNIVERSE), lo, hi))


# ---------------------------------------------------------------------------------------------
# DFA -> regex (state elimination)

MAX_REGEX_SIZE = 30000


def to_regex(d: DFA, label: Callable[[Charset], RNode] | None = None) -> RNode:
    """Regex AST for the language of ``d``; ``label`` maps an atom to the AST that replaces it."""
    label = label or chars
    live = d.live_states()
    if d.start not in live:
        return NOTHING
    edges: dict[int, dict[int, list[Charset]]] = {}
    for q in live:
        out: dict[int, list[Charset]] = {}
        for a, t in enumerate(d.delta[q]):
            if t in live:
                out.setdefault(t, []).append(d.atoms[a])
        edges[q] = out
    g: dict[int, dict[int, RNode]] = {}
    for q, out in edges.items():
        g[q] = {t: label(cs_union(*sets)) for t, sets in out.items()}
    return eliminate(g, d.start, set(q for q in d.accept if q in live))


def to_regex_longest(d: DFA, fallback: RNode | None = None, limit: int = 4000) -> RNode:
    """A regex for ``d`` shaped like the DFA (each state: its self-loop, then its transitions, then
    stop), so that a backtracking matcher's first match is the longest one. Python's ``re.match``
    (used by the lark package's lexer) returns the first match, which for an arbitrary regex may be a
    shorter one. Needs a DFA whose live part is acyclic apart from self-loops; otherwise returns
    ``fallback`` (or the state-elimination regex)."""
    live = d.live_states()
    if d.start not in live:
        return NOTHING
    color: dict[int, int] = {}
    order: list[int] = []

    def acyclic(q: int) -> bool:
        color[q] = 1
        for t in set(d.delta[q]):
            if t == q or t not in live:
                continue
            c = color.get(t, 0)
            if c == 1 or (c == 0 and not acyclic(t)):
                return False
        color[q] = 2
        order.append(q)
        return True

    if not acyclic(d.start):
        return fallback if fallback is not None else to_regex(d)
    memo: dict[int, RNode] = {}
    for q in order:  # post-order: successors first
        loop: list[Charset] = []
        outs: dict[int, list[Charset]] = {}
        for a, t in enumerate(d.delta[q]):
            if t not in live:
                continue
            if t == q:
                loop.append(d.atoms[a])
            else:
                outs.setdefault(t, []).append(d.atoms[a])
        alts = [cat(Chars(cs_union(*cs)), memo[t]) for t, cs in outs.items()]
        if q in d.accept:
            alts.append(EPS)
        body = alt(*alts)
        if loop:
            body = cat(star(Chars(cs_union(*loop))), body)
        memo[q] = body
        if ast_size(body) > limit:
            return fallback if fallback is not None else to_regex(d)
    return memo[d.start]


def eliminate(g: dict[int, dict[int, RNode]], start: int, accept: set[int]) -> RNode:
    """State elimination over a generalized NFA ``g[p][q] = label``."""
    S, F = -1, -2
    g = {p: dict(out) for p, out in g.items()}
    g[S] = {start: EPS}
    g[F] = {}
    for q in accept:
        g[q][F] = alt(g[q].get(F, NOTHING), EPS)
    inc: dict[int, set[int]] = {q: set() for q in g}
    for p, out in g.items():
        for q in out:
            inc.setdefault(q, set()).add(p)
    remaining = set(g) - {S, F}
    while remaining:
        # pick the state with the fewest paths through it (ties: highest number for stable output)
        q = min(remaining, key=lambda x: ((len(inc[x] - {x})) * (len(set(g[x]) - {x})), -x))
        remaining.discard(q)
        loop = g[q].get(q)
        mid = star(loop) if loop is not None else EPS
        preds = [p for p in inc[q] if p != q]
        succs = [(t, lab) for t, lab in g[q].items() if t != q]
        for p in preds:
            lp = g[p].pop(q)
            for t, lt in succs:
                new = cat(lp, mid, lt)
                old = g[p].get(t)
                g[p][t] = new if old is None else alt(old, new)
                inc[t].add(p)
                if ast_size(g[p][t]) > MAX_REGEX_SIZE:
                    raise TooComplex("regular expression grew past the size limit")
        for t, _ in succs:
            inc[t].discard(q)
        del g[q]
        del inc[q]
    return g[S].get(F, NOTHING)
