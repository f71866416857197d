"""The schema IR: a JSON Schema compiled to a union of typed alternatives, closed under intersection.

A ``Node`` is the set of JSON values a (sub)schema accepts, written as a union of alternatives,
each of one JSON type with the constraints of that type (``ObjA``, ``ArrA``, ``StrA``, ``NumA``,
``BoolA``, ``NullA``), a single value (``ConstA``), any value (``AnyA``) or a reference to a named
recursive definition (``RefA``). ``intersect`` and ``complement`` are exact where they return;
where they cannot be exact they raise ``Inexact`` and the compiler reports the keyword.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from fractions import Fraction
from functools import cached_property
from typing import Any

from tooldecode.grammar.keywords import VALUE_TYPES, json_type
from tooldecode.grammar.strlang import ALL_STRINGS, StrLang


class Inexact(Exception):
    """An operation on the IR that has no exact result in this IR (the message says which)."""


# ---------------------------------------------------------------------------------------------
# JSON values: equality and canonical keys


def value_key(v: Any) -> Any:
    """Hashable key with JSON Schema equality (1 == 1.0, true != 1, key order ignored)."""
    t = json_type(v)
    if t == "number":
        return ("#", Fraction(v))
    if t == "array":
        return ("a", tuple(value_key(x) for x in v))
    if t == "object":
        return ("o", frozenset((k, value_key(x)) for k, x in v.items()))
    return (t[0], v)


def json_equal(a: Any, b: Any) -> bool:
    return value_key(a) == value_key(b)


def is_integral(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) or (isinstance(v, float) and v.is_integer())


# ---------------------------------------------------------------------------------------------
# alternatives


class Alt:
    __slots__ = ()
    type: str = ""


@dataclass(frozen=True)
class AnyA(Alt):
    type = "any"


@dataclass(frozen=True)
class NullA(Alt):
    type = "null"


@dataclass(frozen=True)
class BoolA(Alt):
    values: frozenset[bool] = frozenset({True, False})
    type = "boolean"


@dataclass(frozen=True)
class NumA(Alt):
    """kind: ``num`` any number, ``int`` integral values, ``nonint`` non-integral values."""

    kind: str = "num"
    lo: Fraction | None = None
    lo_x: bool = False
    hi: Fraction | None = None
    hi_x: bool = False
    mult: int | None = None
    residues: frozenset[int] | None = None
    type = "number"


def _memo_hash(self: Any) -> int:
    """A frozen node's hash, computed once: nodes share sub-nodes (a ``$ref`` used twice is one object),
    so an uncached hash would walk a shared sub-tree once per path to it, exponential in the nesting."""
    h = self.__dict__.get("_memo_hash")
    if h is None:
        h = hash((type(self), *(getattr(self, name) for name in self.__dataclass_fields__)))
        self.__dict__["_memo_hash"] = h
    return int(h)


@dataclass(frozen=True)
class StrA(Alt):
    lang: StrLang = ALL_STRINGS
    type = "string"


@dataclass(frozen=True)
class ArrA(Alt):
    prefix: tuple[Node, ...] = ()
    rest: Node | None = None  # None = any value
    min: int = 0
    max: int | None = None
    contains: tuple[tuple[Node, int, int | None], ...] = ()
    unique: str = ""  # JSON pointer of a uniqueItems: true still to be resolved ("" = none)
    eval_n: int = 0
    eval_all: bool = False
    type = "array"
    __hash__ = _memo_hash

    def item(self, i: int) -> Node:
        if i < len(self.prefix):
            return self.prefix[i]
        return self.rest if self.rest is not None else ANY


@dataclass(frozen=True)
class ObjA(Alt):
    """keys: declared keys in order, each with the full constraint on its value; ``extras``: rules
    (key language, value node) for every other key; ``names``: propertyNames."""

    keys: tuple[tuple[str, Node], ...] = ()
    required: frozenset[str] = frozenset()
    extras: tuple[tuple[StrLang, Node], ...] = ()
    names: Node | None = None
    min_p: int = 0
    max_p: int | None = None
    eval_names: frozenset[str] = frozenset()
    eval_pats: frozenset[str] = frozenset()
    eval_all: bool = False
    type = "object"
    __hash__ = _memo_hash

    @cached_property
    def keymap(self) -> dict[str, Node]:
        return dict(self.keys)

    def value_for(self, k: str) -> Node:
        if k in self.keymap:
            return self.keymap[k]
        return self.extra_value(k)

    def extra_value(self, k: str) -> Node:
        node = ANY
        for lang, n in self.extras:
            if lang.accepts(k):
                node = intersect(node, n)
        return node


@dataclass(frozen=True, eq=False)
class ConstA(Alt):
    value: Any = None

    @cached_property
    def key(self) -> Any:
        return value_key(self.value)

    @property
    def type(self) -> str:  # type: ignore[override]
        return json_type(self.value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ConstA) and self.key == other.key

    def __hash__(self) -> int:
        return hash(("const", self.key))


@dataclass(frozen=True)
class RefA(Alt):
    name: str
    type = "ref"


@dataclass(frozen=True)
class Node:
    alts: tuple[Alt, ...] = field(default=())
    __hash__ = _memo_hash

    @property
    def is_never(self) -> bool:
        return not self.alts

    @property
    def is_any(self) -> bool:
        return len(self.alts) == 1 and isinstance(self.alts[0], AnyA)

    def types(self) -> set[str]:
        out: set[str] = set()
        for a in self.alts:
            if isinstance(a, AnyA):
                return set(VALUE_TYPES)
            out.add(a.type)
        return out


def node(*alts: Alt) -> Node:
    out: list[Alt] = []
    seen: set[Alt] = set()
    for a in alts:
        if isinstance(a, AnyA):
            return ANY
        if a not in seen and not alt_empty(a):
            seen.add(a)
            out.append(a)
    return Node(tuple(out))


ANY = Node((AnyA(),))
NEVER = Node(())

TOP: dict[str, Alt] = {
    "null": NullA(),
    "boolean": BoolA(),
    "number": NumA(),
    "string": StrA(),
    "array": ArrA(),
    "object": ObjA(),
}


def union(*nodes: Node) -> Node:
    return node(*(a for n in nodes for a in n.alts))


def type_node(types: list[str]) -> Node:
    alts: list[Alt] = []
    for t in types:
        if t == "integer":
            alts.append(NumA(kind="int"))
        else:
            alts.append(TOP[t])
    return node(*alts)


# ---------------------------------------------------------------------------------------------
# emptiness


def alt_empty(a: Alt) -> bool:
    if isinstance(a, BoolA):
        return not a.values
    if isinstance(a, NumA):
        return num_empty(a)
    if isinstance(a, StrA):
        la = a.lang
        if la.max_len is not None and la.max_len < la.min_len:
            return True
        return la.values is not None and not la.values
    if isinstance(a, ArrA):
        if a.max is not None and a.max < a.min:
            return True
        # positions past the prefix all hold ``rest``: one of them stands for all (minItems may be huge)
        for i in range(min(a.min, len(a.prefix) + 1)):
            if a.item(i).is_never:
                return True
        return any(c[2] is not None and c[2] < c[1] for c in a.contains)
    if isinstance(a, ObjA):
        if a.max_p is not None and (a.max_p < a.min_p or a.max_p < len(a.required)):
            return True
        km = a.keymap
        return any(km.get(k, ANY).is_never for k in a.required)
    return False


def num_empty(a: NumA) -> bool:
    if a.lo is not None and a.hi is not None:
        if a.lo > a.hi or (a.lo == a.hi and (a.lo_x or a.hi_x)):
            return True
    if a.kind == "int" or a.mult is not None:
        lo, hi = int_bounds(a)
        if lo is not None and hi is not None and lo > hi:
            return True
        if a.mult is not None and a.residues is not None:
            if not a.residues:
                return True
            if lo is not None and hi is not None and hi - lo < a.mult:
                return not any((x % a.mult) in a.residues for x in range(lo, hi + 1))
    if a.kind == "nonint" and a.lo is not None and a.hi is not None and a.lo == a.hi:
        return True
    return False


def int_bounds(a: NumA) -> tuple[int | None, int | None]:
    lo = hi = None
    if a.lo is not None:
        lo = (math.floor(a.lo) + 1) if a.lo_x else math.ceil(a.lo)
    if a.hi is not None:
        hi = (math.ceil(a.hi) - 1) if a.hi_x else math.floor(a.hi)
    return lo, hi


# ---------------------------------------------------------------------------------------------
# intersection


def intersect(x: Node, y: Node) -> Node:
    if x.is_any:
        return y
    if y.is_any:
        return x
    if x.is_never or y.is_never:
        return NEVER
    if x == y:
        return x
    out: list[Alt] = []
    for a in x.alts:
        for b in y.alts:
            r = inter_alt(a, b)
            if r is not None:
                out.append(r)
    return node(*out)


def inter_alt(a: Alt, b: Alt) -> Alt | None:
    if isinstance(a, AnyA):
        return b
    if isinstance(b, AnyA):
        return a
    if isinstance(a, RefA) or isinstance(b, RefA):
        if a == b:
            return a
        raise Inexact("a recursive $ref cannot be combined with other constraints")
    if isinstance(a, ConstA):
        return a if accepts_alt(b, a.value) else None
    if isinstance(b, ConstA):
        return b if accepts_alt(a, b.value) else None
    if a.type != b.type:
        return None
    if isinstance(a, NullA):
        return a
    if isinstance(a, BoolA):
        assert isinstance(b, BoolA)
        return BoolA(a.values & b.values)
    if isinstance(a, NumA):
        assert isinstance(b, NumA)
        return inter_num(a, b)
    if isinstance(a, StrA):
        assert isinstance(b, StrA)
        return StrA(a.lang.inter(b.lang))
    if isinstance(a, ArrA):
        assert isinstance(b, ArrA)
        return _inter_arr(a, b)
    if isinstance(a, ObjA):
        assert isinstance(b, ObjA)
        return _inter_obj(a, b)
    raise TypeError(a)


def inter_num(a: NumA, b: NumA) -> NumA | None:
    kinds = {a.kind, b.kind}
    if kinds == {"int", "nonint"}:
        return None
    kind = "int" if "int" in kinds else ("nonint" if "nonint" in kinds else "num")
    lo, lo_x = a.lo, a.lo_x
    if b.lo is not None and (lo is None or b.lo > lo or (b.lo == lo and b.lo_x)):
        lo, lo_x = b.lo, b.lo_x
    hi, hi_x = a.hi, a.hi_x
    if b.hi is not None and (hi is None or b.hi < hi or (b.hi == hi and b.hi_x)):
        hi, hi_x = b.hi, b.hi_x
    mult, res = a.mult, a.residues
    if b.mult is not None:
        if mult is None:
            mult, res = b.mult, b.residues
        else:
            m = math.lcm(mult, b.mult)
            if m > 10000:
                raise Inexact("multipleOf values with a very large common multiple")
            assert res is not None and b.residues is not None
            res = frozenset(r for r in range(m) if r % mult in res and r % b.mult in b.residues)
            mult = m
    if mult is not None and kind == "nonint":
        return None
    return NumA(kind, lo, lo_x, hi, hi_x, mult, res)


def _inter_arr(a: ArrA, b: ArrA) -> ArrA:
    n = max(len(a.prefix), len(b.prefix))
    prefix = tuple(intersect(a.item(i), b.item(i)) for i in range(n))
    rest = _inter_opt(a.rest, b.rest)
    hi = a.max if b.max is None else (b.max if a.max is None else min(a.max, b.max))
    return norm_arr(
        ArrA(
            prefix,
            rest,
            max(a.min, b.min),
            hi,
            a.contains + b.contains,
            a.unique or b.unique,
            max(a.eval_n, b.eval_n),
            a.eval_all or b.eval_all,
        )
    )


def _inter_opt(x: Node | None, y: Node | None) -> Node | None:
    if x is None:
        return y
    if y is None:
        return x
    r = intersect(x, y)
    return None if r.is_any else r


def norm_arr(a: ArrA) -> ArrA:
    hi = a.max
    prefix = list(a.prefix)
    for i, p in enumerate(prefix):
        if p.is_never:
            hi = i if hi is None else min(hi, i)
            prefix = prefix[:i]
            break
    rest = a.rest
    if rest is not None and rest.is_never:
        hi = len(prefix) if hi is None else min(hi, len(prefix))
    if hi is not None:
        prefix = prefix[:hi]
        if len(prefix) >= hi:
            rest = NEVER if hi == len(prefix) else rest
    while prefix and rest is not None and prefix[-1] == rest and len(prefix) > a.eval_n:
        prefix.pop()
    while prefix and rest is None and prefix[-1].is_any and len(prefix) > a.eval_n:
        prefix.pop()
    return replace(a, prefix=tuple(prefix), rest=rest, max=hi)


def _inter_obj(a: ObjA, b: ObjA) -> ObjA:
    names = list(a.keymap)
    names += [k for k in b.keymap if k not in a.keymap]
    keys = tuple((k, intersect(a.value_for(k), b.value_for(k))) for k in names)
    if a.names is None:
        pn = b.names
    elif b.names is None:
        pn = a.names
    else:
        pn = intersect(a.names, b.names)
    hi = a.max_p if b.max_p is None else (b.max_p if a.max_p is None else min(a.max_p, b.max_p))
    return norm_obj(
        ObjA(
            keys,
            a.required | b.required,
            a.extras + b.extras,
            pn,
            max(a.min_p, b.min_p),
            hi,
            a.eval_names | b.eval_names,
            a.eval_pats | b.eval_pats,
            a.eval_all or b.eval_all,
        )
    )


def norm_obj(o: ObjA) -> ObjA:
    extras = tuple((la, n) for la, n in o.extras if not n.is_any)
    # dedupe extras rules
    seen: list[tuple[StrLang, Node]] = []
    for r in extras:
        if r not in seen:
            seen.append(r)
    keys = o.keys
    if o.names is not None:
        keys = tuple((k, n if accepts(o.names, k) else NEVER) for k, n in keys)
    return replace(o, extras=tuple(seen), keys=keys)


# ---------------------------------------------------------------------------------------------
# membership (used by intersection with constants, enum filtering and canonical serialization)


def accepts(n: Node, v: Any, defs: dict[str, Node] | None = None) -> bool:
    return any(accepts_alt(a, v, defs) for a in n.alts)


def accepts_alt(a: Alt, v: Any, defs: dict[str, Node] | None = None) -> bool:
    if isinstance(a, AnyA):
        return True
    if isinstance(a, RefA):
        if defs is None or a.name not in defs:
            raise Inexact("membership test through an unresolved recursive $ref")
        return accepts(defs[a.name], v, defs)
    if isinstance(a, ConstA):
        return json_equal(a.value, v)
    t = json_type(v)
    if a.type != t:
        return False
    if isinstance(a, NullA):
        return True
    if isinstance(a, BoolA):
        return v in a.values
    if isinstance(a, NumA):
        integral = is_integral(v)
        if a.kind == "int" and not integral:
            return False
        if a.kind == "nonint" and integral:
            return False
        f = Fraction(v)
        if a.lo is not None and (f < a.lo or (a.lo_x and f == a.lo)):
            return False
        if a.hi is not None and (f > a.hi or (a.hi_x and f == a.hi)):
            return False
        if a.mult is not None:
            if not integral:
                return False
            assert a.residues is not None
            return (int(f) % a.mult) in a.residues
        return True
    if isinstance(a, StrA):
        return a.lang.accepts(v)
    if isinstance(a, ArrA):
        if len(v) < a.min or (a.max is not None and len(v) > a.max):
            return False
        for i, x in enumerate(v):
            if not accepts(a.item(i), x, defs):
                return False
        for c, lo, hi in a.contains:
            cnt = sum(1 for x in v if accepts(c, x, defs))
            if cnt < lo or (hi is not None and cnt > hi):
                return False
        if a.unique:
            keys = [value_key(x) for x in v]
            if len(set(keys)) != len(keys):
                return False
        return True
    if isinstance(a, ObjA):
        if len(v) < a.min_p or (a.max_p is not None and len(v) > a.max_p):
            return False
        if not a.required <= set(v):
            return False
        for k, x in v.items():
            if a.names is not None and not accepts(a.names, k, defs):
                return False
            if not accepts(a.value_for(k), x, defs):
                return False
        return True
    raise TypeError(a)
