"""Grammar IR: named rules over literals, regular terminals, sequences, alternations, repetitions.

Terminals (``GTok``) are regular languages given as a regex AST; every JSON scalar and every piece
of punctuation (with its whitespace) is one terminal, so engines with a greedy lexer (llguidance)
see self-delimiting lexemes. Rules are shared: identical bodies get one name.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field

from tooldecode.grammar.automata import RNode, ast_literal, ast_nullable, cat, is_nothing, lit
from tooldecode.grammar.rast import cached_hash


class GExpr:
    __slots__ = ()


@dataclass(frozen=True, slots=True)
class GLit(GExpr):
    text: str


@cached_hash
@dataclass(frozen=True, slots=True)
class GTok(GExpr):
    ast: RNode
    hint: str = "tok"

    _hash: int = field(init=False, repr=False, compare=False, default=0)


@cached_hash
@dataclass(frozen=True, slots=True)
class GSeq(GExpr):
    items: tuple[GExpr, ...]

    _hash: int = field(init=False, repr=False, compare=False, default=0)


@cached_hash
@dataclass(frozen=True, slots=True)
class GAlt(GExpr):
    items: tuple[GExpr, ...]

    _hash: int = field(init=False, repr=False, compare=False, default=0)


@cached_hash
@dataclass(frozen=True, slots=True)
class GRep(GExpr):
    item: GExpr
    lo: int
    hi: int | None

    _hash: int = field(init=False, repr=False, compare=False, default=0)


@dataclass(frozen=True, slots=True)
class GRef(GExpr):
    name: str


EMPTY = GSeq(())
FAIL = GAlt(())


def tok(ast: RNode, hint: str = "tok") -> GExpr:
    if is_nothing(ast):
        return FAIL
    s = ast_literal(ast)
    if s is not None:
        return GLit(s) if s else EMPTY
    return GTok(ast, hint)


def gseq(*items: GExpr) -> GExpr:
    flat: list[GExpr] = []
    for it in items:
        if it == FAIL:
            return FAIL
        if isinstance(it, GSeq):
            flat.extend(it.items)
        elif isinstance(it, GLit) and not it.text:
            continue
        else:
            flat.append(it)
    # Fold a terminal that can be empty (optional whitespace) into its neighbour: engines such as
    # lark refuse zero-width terminals. Adjacent literals are NOT merged: each JSON token stays its
    # own lexeme, so that no lexeme is a proper prefix of a competing one (``{`` vs ``{"a":``),
    # which a greedy lexer (llguidance) could not undo.
    merged: list[GExpr] = []
    for it in flat:
        prev = merged[-1] if merged else None
        if isinstance(prev, GTok) and ast_nullable(prev.ast) and isinstance(it, (GLit, GTok)):
            merged[-1] = _join_tok(prev, it, it.hint if isinstance(it, GTok) else prev.hint)
        elif isinstance(it, GTok) and ast_nullable(it.ast) and isinstance(prev, (GLit, GTok)):
            merged[-1] = _join_tok(prev, it, prev.hint if isinstance(prev, GTok) else it.hint)
        else:
            merged.append(it)
    if len(merged) == 1:
        return merged[0]
    return GSeq(tuple(merged))


def _join_tok(a: GExpr, b: GExpr, hint: str) -> GExpr:
    def ast(x: GExpr) -> RNode:
        return lit(x.text) if isinstance(x, GLit) else x.ast  # type: ignore[attr-defined]

    lits = [x.text for x in (a, b) if isinstance(x, GLit)]
    if lits:
        hint = sanitize(lits[0]) or hint
    return tok(cat(ast(a), ast(b)), hint)


def expr_size(e: GExpr) -> int:
    if isinstance(e, (GSeq, GAlt)):
        return 1 + sum(expr_size(i) for i in e.items)
    if isinstance(e, GRep):
        return 1 + expr_size(e.item)
    return 1


def _as_list(e: GExpr) -> list[GExpr]:
    return list(e.items) if isinstance(e, GSeq) else [e]


def galt(*items: GExpr) -> GExpr:
    flat: list[GExpr] = []
    seen: set[GExpr] = set()
    for it in items:
        subs = it.items if isinstance(it, GAlt) else (it,)
        for s in subs:
            if s not in seen:
                seen.add(s)
                flat.append(s)
    if not flat:
        return FAIL
    if len(flat) == 1:
        return flat[0]
    flat = _factor(flat, -1)  # a c | b c → (a | b) c
    flat = _factor(flat, 0)  # a b | a c → a (b | c)
    if len(flat) == 1:
        return flat[0]
    if EMPTY in flat:
        rest = [f for f in flat if f != EMPTY]
        return gopt(galt(*rest))
    return GAlt(tuple(flat))


def _factor(items: list[GExpr], end: int) -> list[GExpr]:
    """Factor the item at ``end`` (0: first, -1: last) that most alternatives share out of them;
    the factored alternative stands where the first of them stood."""
    groups: dict[GExpr, list[int]] = {}
    for i, it in enumerate(items):
        lst = _as_list(it)
        if lst:
            groups.setdefault(lst[end], []).append(i)
    best = max(groups.items(), key=lambda kv: len(kv[1]), default=None)
    if best is None or len(best[1]) < 2:
        return items
    shared, idx = best
    if end == 0:
        combined = gseq(shared, galt(*(gseq(*_as_list(items[i])[1:]) for i in idx)))
    else:
        combined = gseq(galt(*(gseq(*_as_list(items[i])[:-1]) for i in idx)), shared)
    out = []
    for i, it in enumerate(items):
        if i == idx[0]:
            out.append(combined)
        elif i not in idx:
            out.append(it)
    return out


def grep(item: GExpr, lo: int, hi: int | None) -> GExpr:
    if hi is not None and hi < lo:
        return FAIL
    if item == EMPTY or hi == 0:
        return EMPTY
    if item == FAIL:
        return EMPTY if lo == 0 else FAIL
    if lo == 1 and hi == 1:
        return item
    if isinstance(item, GRep) and item.lo == 0 and item.hi == 1 and hi is None:
        return GRep(item.item, 0, None)
    return GRep(item, lo, hi)


def gopt(item: GExpr) -> GExpr:
    if isinstance(item, GRep) and item.lo == 0:
        return item
    return grep(item, 0, 1)


@dataclass
class Grammar:
    """Rules in definition order; ``root`` names the start rule."""

    rules: dict[str, GExpr]
    root: str

    def refs(self, e: GExpr) -> Iterable[str]:
        if isinstance(e, GRef):
            yield e.name
        elif isinstance(e, (GSeq, GAlt)):
            for it in e.items:
                yield from self.refs(it)
        elif isinstance(e, GRep):
            yield from self.refs(e.item)

    def is_recursive(self) -> bool:
        color: dict[str, int] = {}

        def dfs(n: str) -> bool:
            color[n] = 1
            for m in self.refs(self.rules[n]):
                c = color.get(m, 0)
                if c == 1 or (c == 0 and dfs(m)):
                    return True
            color[n] = 2
            return False

        return dfs(self.root)

    def productive(self) -> set[str]:
        """The rules that derive at least one finite string (the others only recurse forever)."""
        done: set[str] = set()

        def derives(e: GExpr) -> bool:
            if isinstance(e, GRef):
                return e.name in done
            if isinstance(e, GSeq):
                return all(derives(x) for x in e.items)
            if isinstance(e, GAlt):
                return any(derives(x) for x in e.items)
            if isinstance(e, GRep):
                return e.lo == 0 or derives(e.item)
            return True

        changed = True
        while changed:  # rules are mostly defined after what they use: a pass or two
            changed = False
            for name, body in self.rules.items():
                if name not in done and derives(body):
                    done.add(name)
                    changed = True
        return done

    def reachable(self) -> list[str]:
        seen = [self.root]
        i = 0
        while i < len(seen):
            for m in self.refs(self.rules[seen[i]]):
                if m not in seen:
                    seen.append(m)
            i += 1
        return seen


def sanitize(hint: str) -> str:
    """Rule name: lowercase letters, digits and single dashes, starting with a letter."""
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1-\2", hint)
    s = re.sub(r"[^A-Za-z0-9]+", "-", s).strip("-").lower()
    if not s:
        s = "r"
    if not s[0].isalpha():
        s = "r-" + s
    return s[:60].rstrip("-")


class RuleBook:
    """Collects rules with unique names; identical bodies share one rule."""

    def __init__(self) -> None:
        self.rules: dict[str, GExpr] = {}
        self.by_body: dict[GExpr, str] = {}
        self.reserved: set[str] = set()

    def fresh(self, hint: str) -> str:
        base = sanitize(hint)
        name = base
        i = 2
        while name in self.rules or name in self.reserved:
            name = f"{base}-{i}"
            i += 1
        self.reserved.add(name)
        return name

    def define(self, name: str, body: GExpr) -> None:
        from tooldecode.grammar.budget import MAX_RULES, tick, too_big

        if len(self.rules) >= MAX_RULES and name not in self.rules:
            raise too_big(f"the grammar grew past {MAX_RULES:,} rules")
        tick()
        self.rules[name] = body
        self.by_body.setdefault(body, name)

    def add(self, hint: str, body: GExpr) -> GRef:
        if body in self.by_body:
            return GRef(self.by_body[body])
        name = self.fresh(hint)
        self.define(name, body)
        return GRef(name)


INLINE_MAX = 12  # automaton states with smaller bodies are inlined rather than named


def emit_automaton(  # noqa: C901 -- one walk: collect, count references, inline or name
    book: RuleBook,
    start: Hashable,
    trans: Callable[[Hashable], list[tuple[GExpr, Hashable]]],
    accept: Callable[[Hashable], bool],
    hint: str,
) -> GExpr:
    """Expression for the language of a small automaton whose edges are labelled by expressions.

    The automaton must be a DAG apart from self-loops. States referenced from more than one place
    become rules (named ``hint-sN``); the others are inlined.
    """
    edges: dict[Hashable, list[tuple[GExpr, Hashable]]] = {}
    order = [start]
    stack = [start]
    seen = {start}
    while stack:
        s = stack.pop()
        es = [(lab_, t) for lab_, t in trans(s) if lab_ != FAIL]
        edges[s] = es
        for _, t in es:
            if t not in seen:
                seen.add(t)
                order.append(t)
                stack.append(t)
    # live states
    live = {s for s in order if accept(s)}
    preds: dict[Hashable, list[Hashable]] = {s: [] for s in order}
    for s in order:
        for _, t in edges[s]:
            preds[t].append(s)
    work = list(live)
    while work:  # backwards from the accepting states: linear, where a fixpoint over `order` is quadratic
        for s in preds[work.pop()]:
            if s not in live:
                live.add(s)
                work.append(s)
    if start not in live:
        return FAIL
    indeg: dict[Hashable, int] = {s: 0 for s in order}
    for s in order:
        if s not in live:
            continue
        for _, t in edges[s]:
            if t != s and t in live:
                indeg[t] += 1
    names: dict[Hashable, str] = {}
    bodies: dict[Hashable, GExpr] = {}

    def ref(t: Hashable) -> GExpr:
        b = bodies[t]
        if indeg[t] > 1 and isinstance(b, (GSeq, GAlt, GRep)) and expr_size(b) > INLINE_MAX:
            if t not in names:
                names[t] = book.fresh(f"{hint}-s{len(names) + 1}")
                book.define(names[t], b)
            return GRef(names[t])
        return b

    def body(s: Hashable) -> GExpr:
        loops = [lab_ for lab_, t in edges[s] if t == s]
        alts = [gseq(lab_, ref(t)) for lab_, t in edges[s] if t != s and t in live]
        if accept(s):
            alts.append(EMPTY)
        core = galt(*alts)
        if loops:
            core = gseq(grep(galt(*loops), 0, None), core)
        return core

    # bodies in post-order (successors first), without recursion: wide automata (an object of
    # hundreds of optional properties) are chains hundreds of states long
    post: list[Hashable] = []
    visiting = [(start, iter([t for _, t in edges[start] if t != start and t in live]))]
    placed = {start}
    while visiting:
        s, succ = visiting[-1]
        t = next((x for x in succ if x not in placed), None)
        if t is None:
            visiting.pop()
            post.append(s)
            continue
        placed.add(t)
        visiting.append((t, iter([u for _, u in edges[t] if u != t and u in live])))
    for s in post:
        bodies[s] = body(s)
    return bodies[start]
