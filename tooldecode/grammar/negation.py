"""Negation in the schema IR: ``complement`` (exact, or ``Inexact``) and ``difference`` (``x`` minus
``y``: exact where it can be, else -- when asked -- a subset of the exact difference, the reasons
recorded)."""

from __future__ import annotations

from fractions import Fraction

from tooldecode.grammar.ir import (
    ANY,
    NEVER,
    TOP,
    TYPES,
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
    alt_empty,
    inter_alt,
    node,
)
from tooldecode.grammar.strlang import StrLang


def complement(x: Node) -> Node:
    if x.is_any:
        return NEVER
    if x.is_never:
        return ANY
    out: list[Alt] = []
    for t in TYPES:
        alts = [a for a in x.alts if a.type == t]
        if any(isinstance(a, RefA) for a in x.alts):
            raise Inexact("'not' of a recursive $ref")
        cur: list[Alt] = [TOP[t]]
        for a in alts:
            comp = _complement_alt(a)
            nxt: list[Alt] = []
            for c in cur:
                for d in comp:
                    r = inter_alt(c, d)
                    if r is not None and not alt_empty(r):
                        nxt.append(r)
            cur = nxt
            if len(cur) > 64:
                raise Inexact("negation too large to expand")
        out.extend(cur)
    return node(*out)


def _complement_alt(a: Alt) -> list[Alt]:
    """Alternatives (of the same type) whose union is the complement of ``a`` within its type."""
    if isinstance(a, NullA):
        return []
    if isinstance(a, BoolA):
        return [BoolA(frozenset({True, False}) - a.values)]
    if isinstance(a, ConstA):
        v = a.value
        t = a.type
        if t == "null":
            return []
        if t == "boolean":
            return [BoolA(frozenset({not v}))]
        if t == "number":
            f = Fraction(v)
            return [NumA(hi=f, hi_x=True), NumA(lo=f, lo_x=True)]
        if t == "string":
            return [StrA(StrLang(excluded=frozenset({v})))]
        raise Inexact("'not' of an array or object constant")
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
    if isinstance(a, ArrA):
        out = []
        if a.min > 0:
            out.append(ArrA(max=a.min - 1))
        if a.max is not None:
            out.append(ArrA(min=a.max + 1))
        for i, p in enumerate(a.prefix):
            if not p.is_any:
                out.append(ArrA(prefix=tuple([ANY] * i + [complement(p)]), min=i + 1))
        if a.rest is not None and not a.rest.is_any:
            if a.prefix:
                raise Inexact("'not' of items after prefixItems")
            out.append(ArrA(contains=((complement(a.rest), 1, None),)))
        for c, lo, hi in a.contains:
            if lo > 0:
                out.append(ArrA(contains=((c, 0, lo - 1),)))
            if hi is not None:
                out.append(ArrA(contains=((c, hi + 1, None),)))
        if a.unique:
            raise Inexact("'not' of uniqueItems")
        return out
    if isinstance(a, ObjA):
        out = []
        for k in sorted(a.required):
            out.append(ObjA(keys=((k, NEVER),)))
        for k, n in a.keys:
            if not n.is_any:
                out.append(ObjA(keys=((k, complement(n)),), required=frozenset({k})))
        for _la, n in a.extras:
            if not n.is_any:
                raise Inexact("'not' of additionalProperties / patternProperties")
        if a.names is not None:
            raise Inexact("'not' of propertyNames")
        if a.min_p > 0:
            out.append(ObjA(max_p=a.min_p - 1))
        if a.max_p is not None:
            out.append(ObjA(min_p=a.max_p + 1))
        return out
    raise Inexact(f"'not' of {type(a).__name__}")
