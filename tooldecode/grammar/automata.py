"""Regular languages over Unicode code points: character sets, a regex AST, DFAs and back.

Everything here is exact: DFAs are built by subset construction over a partition of the code
point universe, products and complements are the textbook constructions, and ``to_regex`` is
state elimination. The emitters print the AST in Python ``re`` / Rust ``regex`` syntax (their
common subset) or as GBNF.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

MAXCP = 0x10FFFF
SURR_LO, SURR_HI = 0xD800, 0xDFFF
# Code points that can occur in a Python str decoded from UTF-8 (no surrogates).
UNIVERSE: tuple[tuple[int, int], ...] = ((0, SURR_LO - 1), (SURR_HI + 1, MAXCP))

Charset = tuple[tuple[int, int], ...]


# ---------------------------------------------------------------------------------------------
# character sets: sorted, merged tuples of inclusive (lo, hi) intervals


def cs_norm(ranges: Iterable[tuple[int, int]]) -> Charset:
    items = sorted((lo, hi) for lo, hi in ranges if lo <= hi)
    out: list[tuple[int, int]] = []
    for lo, hi in items:
        if out and lo <= out[-1][1] + 1:
            if hi > out[-1][1]:
                out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return tuple(out)


def cs_of(chars: str) -> Charset:
    return cs_norm((ord(c), ord(c)) for c in chars)


def cs_union(*sets: Charset) -> Charset:
    return cs_norm(r for s in sets for r in s)


def cs_inter(a: Charset, b: Charset) -> Charset:
    out = []
    i = j = 0
    while i < len(a) and j < len(b):
        lo = max(a[i][0], b[j][0])
        hi = min(a[i][1], b[j][1])
        if lo <= hi:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return tuple(out)


def cs_diff(a: Charset, b: Charset) -> Charset:
    return cs_inter(a, cs_neg(b, universe=((0, MAXCP),)))


def cs_neg(a: Charset, universe: Charset = UNIVERSE) -> Charset:
    out = []
    prev = 0
    for lo, hi in a:
        if lo > prev:
            out.append((prev, lo - 1))
        prev = hi + 1
    if prev <= MAXCP:
        out.append((prev, MAXCP))
    return cs_inter(tuple(out), universe)


def cs_has(a: Charset, cp: int) -> bool:
    for lo, hi in a:
        if lo <= cp <= hi:
            return True
        if cp < lo:
            return False
    return False


def cs_size(a: Charset) -> int:
    return sum(hi - lo + 1 for lo, hi in a)


# ---------------------------------------------------------------------------------------------
# regex AST


class RNode:
    __slots__ = ()


@dataclass(frozen=True, slots=True)
class Chars(RNode):
    cs: Charset


@dataclass(frozen=True, slots=True)
class Cat(RNode):
    items: tuple[RNode, ...]


@dataclass(frozen=True, slots=True)
class Or(RNode):
    items: tuple[RNode, ...]


@dataclass(frozen=True, slots=True)
class Rep(RNode):
    item: RNode
    lo: int
    hi: int | None


@dataclass(frozen=True, slots=True)
class Sym(RNode):
    """A named sub-expression: emitted as a rule (GBNF) or terminal (Lark) reference, inlined in regex."""

    name: str
    node: RNode


EPS = Cat(())
NOTHING = Or(())


def is_nothing(n: RNode) -> bool:
    return n == NOTHING or (isinstance(n, Chars) and not n.cs)


def chars(cs: Charset) -> RNode:
    return Chars(cs) if cs else NOTHING


def lit(text: str) -> RNode:
    return cat(*(Chars(((ord(c), ord(c)),)) for c in text))


def cat(*items: RNode) -> RNode:
    flat: list[RNode] = []
    for it in items:
        if is_nothing(it):
            return NOTHING
        if isinstance(it, Cat):
            flat.extend(it.items)
        else:
            flat.append(it)
    if len(flat) == 1:
        return flat[0]
    return Cat(tuple(flat))


def alt(*items: RNode) -> RNode:
    flat: list[RNode] = []
    seen: set[RNode] = set()
    has_eps = False
    for it in items:
        if is_nothing(it):
            continue
        subs = it.items if isinstance(it, Or) else (it,)
        for s in subs:
            if s == EPS:
                has_eps = True
                continue
            if isinstance(s, Rep) and s.lo == 0 and s.hi == 1:
                has_eps = True
                s = s.item
                subs2 = s.items if isinstance(s, Or) else (s,)
                for s2 in subs2:
                    if s2 not in seen:
                        seen.add(s2)
                        flat.append(s2)
                continue
            if s not in seen:
                seen.add(s)
                flat.append(s)
    # merge single-character alternatives into one class
    singles = [s for s in flat if isinstance(s, Chars)]
    if len(singles) > 1:
        merged = Chars(cs_union(*(s.cs for s in singles)))
        first = flat.index(singles[0])
        flat = [s for s in flat if not isinstance(s, Chars)]
        flat.insert(min(first, len(flat)), merged)
    flat = _factor_prefixes(flat)
    if not flat:
        return EPS if has_eps else NOTHING
    body = flat[0] if len(flat) == 1 else Or(tuple(flat))
    if has_eps:
        return rep(body, 0, 1)
    return body


def _head(n: RNode) -> RNode | None:
    if isinstance(n, Cat) and n.items:
        return n.items[0]
    if isinstance(n, Chars):
        return n
    return None


def _tail(n: RNode) -> RNode:
    if isinstance(n, Cat):
        return cat(*n.items[1:])
    return EPS


def _factor_prefixes(items: list[RNode]) -> list[RNode]:
    """Factor a common first element: ab|ac -> a(b|c). Keeps the alternative order."""
    if len(items) < 2:
        return items
    groups: dict[RNode, list[int]] = {}
    for i, it in enumerate(items):
        h = _head(it)
        if h is not None:
            groups.setdefault(h, []).append(i)
    if all(len(v) < 2 for v in groups.values()):
        return items
    out: list[RNode] = []
    done: set[int] = set()
    for i, it in enumerate(items):
        if i in done:
            continue
        h = _head(it)
        idx = groups.get(h, [i]) if h is not None else [i]
        if len(idx) < 2:
            out.append(it)
            done.add(i)
            continue
        assert h is not None
        tails = [_tail(items[j]) for j in idx]
        done.update(idx)
        out.append(cat(h, alt(*tails)))
    return out


def rep(item: RNode, lo: int, hi: int | None) -> RNode:
    if hi is not None and hi < lo:
        return NOTHING
    if is_nothing(item):
        return EPS if lo == 0 else NOTHING
    if item == EPS or hi == 0:
        return EPS
    if lo == 1 and hi == 1:
        return item
    if isinstance(item, Rep):
        # (x*)* = x*, (x?)* = x*, (x+)? = x*, (x{a,b}){c} with simple cases
        if item.lo in (0, 1) and item.hi is None and hi is None:
            return Rep(item.item, min(item.lo, lo) if lo else 0, None)
        if item.lo == 0 and item.hi == 1 and hi is None:
            return Rep(item.item, 0, None)
        if item.lo == 1 and item.hi is None and lo == 0 and hi == 1:
            return Rep(item.item, 0, None)
        if item.lo <= 1 and lo == 0 and hi == 1:
            return Rep(item.item, 0, item.hi)
    return Rep(item, lo, hi)


def opt(item: RNode) -> RNode:
    return rep(item, 0, 1)


def star(item: RNode) -> RNode:
    """``item*``; ``(c | x)*`` with one character class ``c`` is written ``c* (x c*)*`` (same language).

    The unrolled form lets grammar engines precompute the mask inside long runs of plain characters:
    xgrammar fills the mask for ``(class | escape)*`` in ~160 ms on a 262k vocabulary but for
    ``class* (escape class*)*`` in ~0.02 ms.
    """
    if isinstance(item, Or):
        classes = [i for i in item.items if isinstance(i, Chars)]
        others = [i for i in item.items if not isinstance(i, Chars)]
        if len(classes) == 1 and others and EPS not in item.items:
            c = Rep(classes[0], 0, None)
            return cat(c, Rep(cat(alt(*others), c), 0, None))
    return rep(item, 0, None)


def ast_size(n: RNode) -> int:
    if isinstance(n, (Chars, Sym)):
        return 1
    if isinstance(n, (Cat, Or)):
        return 1 + sum(ast_size(i) for i in n.items)
    if isinstance(n, Rep):
        return 1 + ast_size(n.item)
    raise TypeError(n)


def ast_nullable(n: RNode) -> bool:
    if isinstance(n, Chars):
        return False
    if isinstance(n, Cat):
        return all(ast_nullable(i) for i in n.items)
    if isinstance(n, Or):
        return any(ast_nullable(i) for i in n.items)
    if isinstance(n, Rep):
        return n.lo == 0 or ast_nullable(n.item)
    if isinstance(n, Sym):
        return ast_nullable(n.node)
    raise TypeError(n)


def ast_literal(n: RNode) -> str | None:
    """The single string a node matches, if it is a plain literal."""
    if isinstance(n, Chars):
        if len(n.cs) == 1 and n.cs[0][0] == n.cs[0][1]:
            return chr(n.cs[0][0])
        return None
    if isinstance(n, Cat):
        parts = []
        for it in n.items:
            s = ast_literal(it)
            if s is None:
                return None
            parts.append(s)
        return "".join(parts)
    if isinstance(n, Rep) and n.hi == n.lo:
        s = ast_literal(n.item)
        return None if s is None else s * n.lo
    return None


def substitute(n: RNode, fn: Callable[[Charset], RNode]) -> RNode:
    """Replace every character class by ``fn(class)`` (used to encode a decoded-string language)."""
    cache: dict[RNode, RNode] = {}

    def go(x: RNode) -> RNode:
        if x in cache:
            return cache[x]
        if isinstance(x, Chars):
            r = fn(x.cs)
        elif isinstance(x, Cat):
            r = cat(*(go(i) for i in x.items))
        elif isinstance(x, Or):
            r = alt(*(go(i) for i in x.items))
        elif isinstance(x, Rep):
            r = rep(go(x.item), x.lo, x.hi)
        elif isinstance(x, Sym):
            r = x
        else:
            raise TypeError(x)
        cache[x] = r
        return r

    return go(n)


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
        live = set(self.accept)
        stack = list(self.accept)
        while stack:
            q = stack.pop()
            for p in rev[q]:
                if p not in live:
                    live.add(p)
                    stack.append(p)
        return live

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
        seen = {q}
        stack = [q]
        while stack:
            x = stack.pop()
            for y in nfa.eps[x]:
                if y not in seen:
                    seen.add(y)
                    stack.append(y)
        fs = frozenset(seen)
        closure_cache[q] = fs
        return fs

    def closure(qs: Iterable[int]) -> frozenset[int]:
        out: set[int] = set()
        for q in qs:
            out |= closure1(q)
        return frozenset(out)

    s0 = closure([start])
    index: dict[frozenset[int], int] = {s0: 0}
    order = [s0]
    delta: list[list[int]] = []
    i = 0
    na = len(atoms)
    while i < len(order):
        cur = order[i]
        i += 1
        targets: list[set[int]] = [set() for _ in range(na)]
        for q in cur:
            for cs, t in nfa.trans[q]:
                for a in atom_idx[cs]:
                    targets[a].add(t)
        row = []
        for a in range(na):
            fs = closure(targets[a])
            j = index.get(fs)
            if j is None:
                j = len(order)
                index[fs] = j
                order.append(fs)
                if len(order) > MAX_DFA_STATES:
                    raise TooComplex("automaton exceeds the state limit")
            row.append(j)
        delta.append(row)
    accept = {k for k, fs in enumerate(order) if final in fs}
    return DFA(atoms, delta, accept, 0)


def _minimize(d: DFA) -> DFA:
    # remove unreachable states first
    reach = {d.start}
    stack = [d.start]
    while stack:
        q = stack.pop()
        for t in d.delta[q]:
            if t not in reach:
                reach.add(t)
                stack.append(t)
    states = sorted(reach)
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
    start = tuple(d.start for d in rd)
    index = {start: 0}
    order = [start]
    delta = []
    i = 0
    while i < len(order):
        cur = order[i]
        i += 1
        row = []
        for a in range(len(atoms)):
            t = tuple(d.delta[q][a] for d, q in zip(rd, cur, strict=True))
            j = index.get(t)
            if j is None:
                j = len(order)
                index[t] = j
                order.append(t)
                if len(order) > MAX_DFA_STATES:
                    raise TooComplex("product automaton exceeds the state limit")
            row.append(j)
        delta.append(row)
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


# ---------------------------------------------------------------------------------------------
# printing


def _esc_cp_regex(cp: int, in_class: bool) -> str:
    c = chr(cp)
    if c.isascii() and c.isalnum():
        return c
    if 0x20 < cp < 0x7F:
        special = r"\.^$|?*+()[]{}/-&~#" if in_class else r"\.^$|?*+()[]{}/#&~-"
        return "\\" + c if c in special else c
    if cp == 0x20:
        return " "
    if cp == 0x09:
        return r"\t"
    if cp == 0x0A:
        return r"\n"
    if cp == 0x0D:
        return r"\r"
    if cp < 0x100:
        return f"\\x{cp:02x}"
    if cp < 0x10000:
        return f"\\u{cp:04x}"
    return f"\\U{cp:08x}"


def _class_body(cs: Charset, esc: Callable[[int, bool], str]) -> str:
    parts = []
    for lo, hi in cs:
        if lo == hi:
            parts.append(esc(lo, True))
        elif hi == lo + 1:
            parts.append(esc(lo, True) + esc(hi, True))
        else:
            parts.append(esc(lo, True) + "-" + esc(hi, True))
    return "".join(parts)


@lru_cache(maxsize=8192)
def _class_regex(cs: Charset) -> str:
    if len(cs) == 1 and cs[0][0] == cs[0][1]:
        return _esc_cp_regex(cs[0][0], False)
    neg = cs_neg(cs)
    if cs == UNIVERSE:
        return r"[\s\S]"
    if len(neg) < len(cs):
        return "[^" + _class_body(neg, _esc_cp_regex) + "]"
    return "[" + _class_body(cs, _esc_cp_regex) + "]"


def _rep_suffix(lo: int, hi: int | None) -> str:
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


@lru_cache(maxsize=1024)
def regex_str(n: RNode) -> str:
    """Print in the common subset of Python ``re`` and Rust ``regex`` syntax."""
    memo: dict[tuple[int, int], str] = {}

    def go(x: RNode, prec: int) -> str:
        key = (id(x), prec)
        r = memo.get(key)
        if r is None:
            r = memo[key] = go1(x, prec)
        return r

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
            return inner + _rep_suffix(x.lo, x.hi)
        if isinstance(x, Sym):
            return go(x.node, prec)
        raise TypeError(x)

    return go(n, 0)


def _esc_cp_gbnf(cp: int, in_class: bool) -> str:
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
    if cp == 0x09:
        return r"\t"
    if cp == 0x0A:
        return r"\n"
    if cp == 0x0D:
        return r"\r"
    if cp < 0x10000:
        return f"\\u{cp:04x}"
    return f"\\U{cp:08x}"


GBNF_MAX_REP = 1000
GBNF_NEVER = "[^\\u0000-\\U0010ffff]"  # a class no character is in


def gbnf_str(n: RNode, sym_name: Callable[[Sym], str] | None = None) -> str:
    """Print a regex AST as a GBNF expression (llama.cpp / xgrammar syntax).

    ``sym_name`` maps a ``Sym`` to the rule name that stands for it (the caller defines that rule).
    """

    cls = _gbnf_class
    memo: dict[tuple[int, int], str] = {}

    def go(x: RNode, prec: int) -> str:
        key = (id(x), prec)
        r = memo.get(key)
        if r is None:
            r = memo[key] = go1(x, prec)
        return r

    def go1(x: RNode, prec: int) -> str:
        s = ast_literal(x)
        if s is not None and s and not (isinstance(x, Rep)):
            return '"' + "".join(_esc_cp_gbnf(ord(c), False) for c in s) + '"'
        if isinstance(x, Chars):
            if not x.cs:
                return GBNF_NEVER
            return cls(x.cs)
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
                    parts.append('"' + "".join(_esc_cp_gbnf(ord(ch), False) for ch in run) + '"')
                    run = ""
                parts.append(go(it, 1))
            if run:
                parts.append('"' + "".join(_esc_cp_gbnf(ord(ch), False) for ch in run) + '"')
            if not parts:
                return '""'
            s = " ".join(parts)
            return f"( {s} )" if prec >= 2 and len(parts) > 1 else s
        if isinstance(x, Or):
            if not x.items:
                return GBNF_NEVER
            s = " | ".join(go(i, 0) for i in x.items)
            return f"( {s} )" if prec >= 1 and len(x.items) > 1 else s
        if isinstance(x, Rep):
            inner = go(x.item, 2)
            if isinstance(x.item, Rep):
                inner = f"( {inner} )"
            return gbnf_rep(inner, x.lo, x.hi)
        if isinstance(x, Sym):
            return sym_name(x) if sym_name is not None else go(x.node, prec)
        raise TypeError(x)

    return go(n, 0)


@lru_cache(maxsize=8192)
def _gbnf_class(cs: Charset) -> str:
    neg = cs_neg(cs)
    if len(neg) < len(cs) and neg:
        return "[^" + _class_body(neg, _esc_cp_gbnf) + "]"
    return "[" + _class_body(cs, _esc_cp_gbnf) + "]"


def gbnf_rep(item: str, lo: int, hi: int | None) -> str:
    """``item{lo,hi}`` split so that no count exceeds GBNF_MAX_REP (llama.cpp refuses > 2000)."""
    if hi is not None and hi <= GBNF_MAX_REP:
        return item + _rep_suffix(lo, hi)
    if hi is None and lo <= GBNF_MAX_REP:
        return item + _rep_suffix(lo, hi)
    parts = []
    rest_lo, rest_hi = lo, hi
    while rest_lo > GBNF_MAX_REP:
        parts.append(item + f"{{{GBNF_MAX_REP}}}")
        rest_lo -= GBNF_MAX_REP
        if rest_hi is not None:
            rest_hi -= GBNF_MAX_REP
    if rest_hi is None:
        parts.append(item + _rep_suffix(rest_lo, None))
    else:
        # item{a,b} with b large == item{a,1000} item{0,1000} ... (same language)
        first_hi = min(rest_hi, GBNF_MAX_REP)
        parts.append(item + _rep_suffix(rest_lo, first_hi))
        remaining = rest_hi - first_hi
        while remaining > 0:
            k = min(remaining, GBNF_MAX_REP)
            parts.append(item + _rep_suffix(0, k))
            remaining -= k
    return "( " + " ".join(parts) + " )"
