"""Regular expressions over Unicode code points: character sets (sorted, merged intervals) and a
hash-consed regex AST with simplifying constructors. Automata over them are in ``automata``."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

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


_N = TypeVar("_N")


def cached_hash(cls: type[_N]) -> type[_N]:
    """Give a frozen dataclass node (one that nests other nodes) a hash computed once, at construction.

    A frozen dataclass hashes its fields on every call, so a deep node rehashes its whole subtree each
    time it is a dict key: quadratic in the builder's loops. The class declares ``_hash: int =
    field(init=False, repr=False, compare=False, default=0)``; pickling rebuilds the node from its fields,
    since string hashes differ per process.
    """
    names = tuple(f.name for f in fields(cls) if f.init)  # type: ignore[arg-type]
    init = cls.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:  # noqa: N807
        init(self, *args, **kwargs)
        object.__setattr__(self, "_hash", hash((cls, *(getattr(self, n) for n in names))))

    def __hash__(self: Any) -> int:  # noqa: N807
        return int(self._hash)

    def __reduce__(self: Any) -> tuple[Any, tuple[Any, ...]]:  # noqa: N807
        return (cls, tuple(getattr(self, n) for n in names))

    cls.__init__ = __init__  # type: ignore[method-assign]
    cls.__hash__ = __hash__  # type: ignore[method-assign]
    cls.__reduce__ = __reduce__  # type: ignore[method-assign]
    return cls


class RNode:
    __slots__ = ()


@dataclass(frozen=True, slots=True)
class Chars(RNode):
    cs: Charset


@cached_hash
@dataclass(frozen=True, slots=True)
class Cat(RNode):
    items: tuple[RNode, ...]

    _hash: int = field(init=False, repr=False, compare=False, default=0)


@cached_hash
@dataclass(frozen=True, slots=True)
class Or(RNode):
    items: tuple[RNode, ...]

    _hash: int = field(init=False, repr=False, compare=False, default=0)


@cached_hash
@dataclass(frozen=True, slots=True)
class Rep(RNode):
    item: RNode
    lo: int
    hi: int | None

    _hash: int = field(init=False, repr=False, compare=False, default=0)


@cached_hash
@dataclass(frozen=True, slots=True)
class Sym(RNode):
    """A named sub-expression: emitted as a rule (GBNF) or terminal (Lark) reference, inlined in regex."""

    name: str
    node: RNode

    _hash: int = field(init=False, repr=False, compare=False, default=0)


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
