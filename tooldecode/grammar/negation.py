"""Negation in the schema IR: ``difference(x, y)`` (the values of ``x`` not in ``y``) and
``complement(y)`` (= ``difference(ANY, y)``).

Both are exact where they return, unless a ``loss`` list is passed: then a part that has no exact
form here (an open object's unknown keys, ``uniqueItems``, a recursive ``$ref`` still being
compiled, ...) is left out -- the result is a subset of the exact difference, never a superset --
and the reason is appended to ``loss``. Without ``loss`` such a part raises ``Inexact``.

The difference is taken alternative by alternative of ``x``, so that what ``x`` already fixes
narrows the negation: a value of a closed object minus an object schema violates it only through
the keys the closed object may hold (a finite set), which makes ``additionalProperties`` and
``propertyNames`` exact to negate there.
"""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

from tooldecode.grammar.budget import tick
from tooldecode.grammar.ir import (
    ANY,
    NEVER,
    TOP,
    Alt,
    ArrA,
    BoolA,
    ConstA,
    Inexact,
    Node,
    NullA,
    NumA,
    ObjA,
    RefA,
    StrA,
    accepts,
    accepts_alt,
    alt_empty,
    inter_alt,
    node,
    norm_arr,
    norm_obj,
)
from tooldecode.grammar.keywords import VALUE_TYPES
from tooldecode.grammar.strlang import StrLang

MAX_PIECES = 64  # alternatives one difference may grow to (more: Inexact, or cut under ``loss``)
MAX_UNFOLD = 3  # how deep a recursive definition is unfolded to be negated
MAX_POSITIONS = 8  # array positions negated one by one (items after prefixItems)

Loss = list[str] | None
Defs = dict[str, Node] | None


def complement(y: Node, loss: Loss = None, defs: Defs = None) -> Node:
    """The JSON values not in ``y`` (a subset of them when ``loss`` is given; see the module)."""
    return difference(ANY, y, loss, defs)


def difference(x: Node, y: Node, loss: Loss = None, defs: Defs = None, depth: int = 0) -> Node:
    """The values of ``x`` that are not in ``y`` (a subset of them when ``loss`` is given)."""
    tick()  # a difference can grow as a product: bounded by the build's budget
    if x.is_never or y.is_never:
        return x
    if y.is_any:
        return NEVER
    xs = tuple(TOP[t] for t in VALUE_TYPES) if x.is_any else x.alts
    out: list[Alt] = []
    for a in xs:
        out.extend(_minus(a, y, loss, defs, depth))
    return node(*out)


def _give_up(loss: Loss, why: str) -> None:
    if loss is None:
        raise Inexact(why)
    loss.append(why)


def _unfold(name: str, defs: Defs, depth: int) -> Node | None:
    if defs is None or depth >= MAX_UNFOLD:
        return None
    return defs.get(name)


def _minus(a: Alt, y: Node, loss: Loss, defs: Defs, depth: int) -> list[Alt]:
    """Alternatives whose union is ``a`` minus ``y``."""
    if isinstance(a, RefA):
        target = _unfold(a.name, defs, depth)
        if target is None:
            _give_up(loss, "'not' of a recursive $ref")
            return []
        return list(difference(target, y, loss, defs, depth + 1).alts)
    cur = [a]
    for b in y.alts:
        nxt: list[Alt] = []
        if isinstance(b, RefA):
            target = _unfold(b.name, defs, depth)
            if target is None:
                _give_up(loss, "'not' of a recursive $ref")
                return []
            for c in cur:
                nxt.extend(_minus(c, target, loss, defs, depth + 1))
        else:
            for c in cur:
                nxt.extend(_minus_alt(c, b, loss, defs, depth))
        seen: set[Alt] = set()
        cur = []
        for r in nxt:
            if r not in seen and not alt_empty(r):
                seen.add(r)
                cur.append(r)
        if len(cur) > MAX_PIECES:
            _give_up(loss, "negation too large to expand")
            cur = cur[:MAX_PIECES]
        if not cur:
            break
    return cur


def _minus_alt(a: Alt, b: Alt, loss: Loss, defs: Defs, depth: int) -> list[Alt]:
    """``a`` minus ``b`` (``a`` not a reference, ``b`` not a reference)."""
    if isinstance(a, ConstA):
        try:
            return [] if accepts_alt(b, a.value, defs) else [a]
        except Inexact as e:
            _give_up(loss, str(e))
            return []
    if a.type != b.type:
        return [a]
    if a == b:
        return []
    if isinstance(a, ObjA):
        if isinstance(b, ConstA):
            return _obj_minus_const(a, b.value, loss, defs, depth)
        assert isinstance(b, ObjA)
        return _obj_minus(a, b, loss, defs, depth)
    if isinstance(a, ArrA):
        if isinstance(b, ConstA):
            return _arr_minus_const(a, b.value, loss, defs, depth)
        assert isinstance(b, ArrA)
        return _arr_minus(a, b, loss, defs, depth)
    out = []
    for p in _scalar_complement(b):
        r = inter_alt(a, p)
        if r is not None:
            out.append(r)
    return out


def _scalar_complement(a: Alt) -> list[Alt]:
    """Alternatives (of the same type) whose union is the complement of a scalar ``a`` in its type."""
    if isinstance(a, ConstA):
        v, t = a.value, a.type
        if t == "boolean":
            return [BoolA(frozenset({not v}))]
        if t == "number":
            f = Fraction(v)
            return [NumA(hi=f, hi_x=True), NumA(lo=f, lo_x=True)]
        if t == "string":
            return [StrA(StrLang(excluded=frozenset({v})))]
        return []  # null
    if isinstance(a, NullA):
        return []
    if isinstance(a, BoolA):
        return [BoolA(frozenset({True, False}) - a.values)]
    if isinstance(a, NumA):
        out: list[Alt] = []
        if a.kind == "int" or a.mult is not None:
            out.append(NumA(kind="nonint"))
        if a.kind == "nonint":
            out.append(NumA(kind="int"))
        if a.lo is not None:
            out.append(NumA(hi=a.lo, hi_x=not a.lo_x))
        if a.hi is not None:
            out.append(NumA(lo=a.hi, lo_x=not a.hi_x))
        if a.mult is not None and a.residues is not None:
            out.append(NumA(kind="int", mult=a.mult, residues=frozenset(range(a.mult)) - a.residues))
        return out
    if isinstance(a, StrA):
        return [StrA(la) for la in a.lang.complement()]
    raise TypeError(a)


# ---------------------------------------------------------------------------------------------
# objects


def closed_keys(a: ObjA) -> list[str] | None:
    """The keys an object of ``a`` may hold when ``a`` rejects every undeclared key, else None."""
    for la, n in a.extras:
        if n.is_never and la.excluded <= set(a.keymap) and replace(la, excluded=frozenset()) == StrLang():
            return [k for k, v in a.keys if not v.is_never]
    return None


def _with_key(a: ObjA, k: str, value: Node, required: bool) -> ObjA:
    """``a`` with key ``k``'s value narrowed to ``value`` (a subset of ``a.value_for(k)``)."""
    if k in a.keymap:
        keys = tuple((kk, value if kk == k else v) for kk, v in a.keys)
    else:
        keys = a.keys + ((k, value),)
    return norm_obj(replace(a, keys=keys, required=a.required | {k} if required else a.required))


def _count_pieces(a: ObjA | ArrA, lo: int, hi: int | None) -> list[Alt]:
    """``a`` with its member / item count below ``lo`` or above ``hi``."""
    out: list[Alt] = []
    if isinstance(a, ObjA):
        if lo > 0:
            out.append(replace(a, max_p=lo - 1 if a.max_p is None else min(a.max_p, lo - 1)))
        if hi is not None:
            out.append(replace(a, min_p=max(a.min_p, hi + 1)))
        return out
    if lo > 0:
        out.append(norm_arr(replace(a, max=lo - 1 if a.max is None else min(a.max, lo - 1))))
    if hi is not None:
        out.append(replace(a, min=max(a.min, hi + 1)))
    return out


def _obj_minus(a: ObjA, b: ObjA, loss: Loss, defs: Defs, depth: int) -> list[Alt]:
    out = _count_pieces(a, b.min_p, b.max_p)
    for k in sorted(b.required):
        out.append(_with_key(a, k, NEVER, False))
    for k, n in b.keys:
        if not n.is_any:
            out.append(_with_key(a, k, difference(a.value_for(k), n, loss, defs, depth), True))
    keys = closed_keys(a)
    if any(not n.is_any for _, n in b.extras):
        if keys is not None:
            for k in keys:
                if k not in b.keymap:
                    ev = b.extra_value(k)
                    if not ev.is_any:
                        out.append(_with_key(a, k, difference(a.value_for(k), ev, loss, defs, depth), True))
        else:
            _give_up(loss, "'not' of additionalProperties / patternProperties on an open object")
            bk = closed_keys(b)
            if bk is not None:  # more members than b can hold: one of them is not b's
                out.extend(_count_pieces(a, 0, len(b.keys)))
    if b.names is not None:
        if keys is not None:
            for k in keys:
                if not accepts(b.names, k, defs):
                    out.append(_with_key(a, k, a.value_for(k), True))
        else:
            _give_up(loss, "'not' of propertyNames on an open object")
    return out


def _obj_minus_const(a: ObjA, v: dict, loss: Loss, defs: Defs, depth: int) -> list[Alt]:
    # an object differs from v: a key of v is missing, has another value, or there is another key
    out = _count_pieces(a, 0, len(v))
    for k, x in v.items():
        out.append(_with_key(a, k, NEVER, False))
        d = difference(a.value_for(k), node(ConstA(x)), loss, defs, depth)
        out.append(_with_key(a, k, d, True))
    return out


# ---------------------------------------------------------------------------------------------
# arrays


def _with_item(a: ArrA, i: int, value: Node) -> ArrA:
    """``a`` with at least ``i + 1`` items and item ``i`` narrowed to ``value`` (within ``a.item(i)``)."""
    prefix = [a.item(j) for j in range(max(len(a.prefix), i + 1))]
    prefix[i] = value
    return norm_arr(replace(a, prefix=tuple(prefix), min=max(a.min, i + 1)))


def _arr_minus(a: ArrA, b: ArrA, loss: Loss, defs: Defs, depth: int) -> list[Alt]:
    out = _count_pieces(a, b.min, b.max)
    for i, p in enumerate(b.prefix):
        if not p.is_any:
            out.append(_with_item(a, i, difference(a.item(i), p, loss, defs, depth)))
    if b.rest is not None and not b.rest.is_any:
        start = len(b.prefix)
        if start == 0:  # some item is not in b.rest
            ctx = node(
                *(x for j in range(len(a.prefix)) for x in a.prefix[j].alts), *a.item(len(a.prefix)).alts
            )
            bad = difference(ctx, b.rest, loss, defs, depth)
            out.append(replace(a, contains=a.contains + ((bad, 1, None),)))
        else:
            stop = a.max if a.max is not None and a.max - start <= MAX_POSITIONS else None
            if stop is None:
                _give_up(loss, "'not' of items after prefixItems (only the first positions)")
                stop = start + MAX_POSITIONS // 2
            for i in range(start, stop):
                out.append(_with_item(a, i, difference(a.item(i), b.rest, loss, defs, depth)))
    for c, lo, hi in b.contains:
        if lo > 0:
            out.append(replace(a, contains=a.contains + ((c, 0, lo - 1),)))
        if hi is not None:
            out.append(replace(a, contains=a.contains + ((c, hi + 1, None),)))
    if b.unique:
        _give_up(loss, "'not' of uniqueItems (arrays with a repeated item)")
    return out


def _arr_minus_const(a: ArrA, v: list, loss: Loss, defs: Defs, depth: int) -> list[Alt]:
    out = _count_pieces(a, len(v), len(v))
    for i, x in enumerate(v):
        out.append(_with_item(a, i, difference(a.item(i), node(ConstA(x)), loss, defs, depth)))
    return out
