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
from functools import cached_property, lru_cache
from typing import Any

from tooldecode.grammar import automata as A
from tooldecode.grammar.ecma import pattern_ast

TYPES = ("null", "boolean", "number", "string", "array", "object")


class Inexact(Exception):
    """An operation on the IR that has no exact result in this IR (the message says which)."""


# ---------------------------------------------------------------------------------------------
# JSON values: equality and canonical keys


def json_type(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    if isinstance(v, dict):
        return "object"
    raise TypeError(f"not a JSON value: {type(v).__name__}")


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
# string languages (decoded strings)

FORMAT_PATTERNS = {
    "date": (
        r"^(?:\d{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\d|30)"
        r"|02-(?:0[1-9]|1\d|2[0-8]))|(?:\d\d(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)"
        r"-02-29)$"
    ),
    "uuid": r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$",
    # RFC 3339 full-time: upper-case Z, no leap second (a sound subset: 23:59:60 is valid only in UTC)
    "time": r"^(?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d(?:\.\d+)?(?:Z|[+-](?:[01]\d|2[0-3]):[0-5]\d)$",
    "ipv4": r"^(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)$",
}
_U = r"A-Za-z0-9\-._~"  # unreserved
_PCT = r"%[0-9A-Fa-f]{2}"
_SUB = r"!$&'()*+,;="
_PCHAR = rf"(?:[{_U}{_SUB}:@]|{_PCT})"
_AUTH = rf"(?:(?:[{_U}{_SUB}:]|{_PCT})*@)?(?:[{_U}{_SUB}]|{_PCT})*(?::\d*)?"  # no IP literals (a subset)
_QF = rf"(?:\?(?:{_PCHAR}|[/?])*)?(?:#(?:{_PCHAR}|[/?])*)?"
_SEGS = rf"(?:/{_PCHAR}*)*"
# a label of 1..30 characters whose third character is not '-' (so never an "xn--" style label)
_LTAIL = r"(?:[A-Za-z0-9]|[A-Za-z0-9-][A-Za-z0-9](?:[A-Za-z0-9-]{0,26}[A-Za-z0-9])?)?"
_LABEL = rf"[A-Za-z0-9]{_LTAIL}"
_TLD = rf"[A-Za-z]{_LTAIL}"
# at most 8 labels of at most 30 characters: never longer than 253 characters (a subset of RFC 1123)
_HOST = rf"(?:{_LABEL}\.){{0,7}}{_TLD}"
_DUR_T = r"T(?:\d+H(?:\d+M(?:\d+S)?)?|\d+M(?:\d+S)?|\d+S)"
FORMAT_PATTERNS.update(
    {
        # RFC 3986 URI (ASCII, no IP-literal hosts)
        "uri": rf"^[A-Za-z][A-Za-z0-9+\-.]*:(?://{_AUTH}{_SEGS}|/(?:{_PCHAR}+{_SEGS})?|{_PCHAR}+{_SEGS}|){_QF}$",
        "uri-reference": (
            rf"^(?:[A-Za-z][A-Za-z0-9+\-.]*:(?://{_AUTH}{_SEGS}|/(?:{_PCHAR}+{_SEGS})?|{_PCHAR}+{_SEGS}|)"
            rf"|//{_AUTH}{_SEGS}|/(?:{_PCHAR}+{_SEGS})?|(?:[{_U}{_SUB}@]|{_PCT})+{_SEGS}|){_QF}$"
        ),
        "hostname": rf"^{_HOST}$",
        # RFC 5321 dot-atom local part at a host name (a subset: no quoted local parts, no literals)
        "email": rf"^[A-Za-z0-9!#$%&'*+/=?^_`{{|}}~-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{{|}}~-]+)*@{_HOST}$",
        # RFC 3339 appendix A
        "duration": rf"^P(?:(?:\d+D|\d+M(?:\d+D)?|\d+Y(?:\d+M(?:\d+D)?)?)(?:{_DUR_T})?|{_DUR_T}|\d+W)$",
        "json-pointer": r"^(?:/(?:[^~/]|~[01])*)*$",
        "relative-json-pointer": r"^(?:0|[1-9]\d*)(?:#|(?:/(?:[^~/]|~[01])*)*)$",
    }
)
FORMAT_PATTERNS["date-time"] = (
    FORMAT_PATTERNS["date"][:-1] + "T" + FORMAT_PATTERNS["time"][1:]
)  # RFC 3339 date-time: upper-case T


@dataclass(frozen=True)
class StrLang:
    """Decoded strings s with min_len <= len(s) <= max_len, every pattern found in s, every format
    matched, s in ``values`` (when given), s not in ``excluded`` and s in no language of ``negs``."""

    min_len: int = 0
    max_len: int | None = None
    patterns: frozenset[str] = frozenset()
    formats: frozenset[str] = frozenset()
    values: frozenset[str] | None = None
    excluded: frozenset[str] = frozenset()
    negs: frozenset[StrLang] = frozenset()

    def is_all(self) -> bool:
        return self == ALL_STRINGS

    def inter(self, o: StrLang) -> StrLang:
        vals = (
            self.values if o.values is None else (o.values if self.values is None else self.values & o.values)
        )
        hi = (
            self.max_len
            if o.max_len is None
            else (o.max_len if self.max_len is None else min(self.max_len, o.max_len))
        )
        out = StrLang(
            max(self.min_len, o.min_len),
            hi,
            self.patterns | o.patterns,
            self.formats | o.formats,
            vals,
            self.excluded | o.excluded,
            self.negs | o.negs,
        )
        if out.values is not None:
            out = StrLang(values=frozenset(v for v in out.values if out.accepts(v)))
        return out

    def accepts(self, s: str) -> bool:
        n = len(s)
        if n < self.min_len or (self.max_len is not None and n > self.max_len):
            return False
        if self.values is not None and s not in self.values:
            return False
        if s in self.excluded:
            return False
        for p in self.patterns:
            if not _pattern_dfa(p).accepts(s):
                return False
        for f in self.formats:
            if not _pattern_dfa(FORMAT_PATTERNS[f]).accepts(s):
                return False
        return not any(n_.accepts(s) for n_ in self.negs)

    def simple_ast(self) -> A.RNode | None:
        """A regex AST over decoded characters when no automaton construction is needed."""
        if self.negs or self.excluded:
            return None
        if self.values is not None:
            return A.alt(*(A.lit(v) for v in sorted(self.values)))
        regs = [pattern_ast(p) for p in sorted(self.patterns)] + [
            pattern_ast(FORMAT_PATTERNS[f]) for f in sorted(self.formats)
        ]
        has_len = self.min_len > 0 or self.max_len is not None
        if not regs:
            return A.rep(A.Chars(A.UNIVERSE), self.min_len, self.max_len)
        if len(regs) == 1 and not has_len:
            return regs[0]
        return None

    @cached_property
    def dfa(self) -> A.DFA:
        parts: list[A.DFA] = []
        if self.min_len > 0 or self.max_len is not None:
            parts.append(A.length_dfa(self.min_len, self.max_len))
        for p in sorted(self.patterns):
            parts.append(_pattern_dfa(p))
        for f in sorted(self.formats):
            parts.append(_pattern_dfa(FORMAT_PATTERNS[f]))
        if self.values is not None:
            parts.append(A.finite_dfa(self.values))
        if self.excluded:
            parts.append(A.finite_dfa(self.excluded).complement())
        for n in sorted(self.negs, key=repr):
            parts.append(n.dfa.complement())
        if not parts:
            return A.to_dfa(A.star(A.Chars(A.UNIVERSE)))
        if len(parts) == 1:
            return parts[0]
        return A.product(parts)

    def complement(self) -> list[StrLang]:
        """Union of languages equal to the complement (within strings)."""
        out: list[StrLang] = []
        if self.min_len > 0:
            out.append(StrLang(max_len=self.min_len - 1))
        if self.max_len is not None:
            out.append(StrLang(min_len=self.max_len + 1))
        for p in self.patterns:
            out.append(StrLang(negs=frozenset({StrLang(patterns=frozenset({p}))})))
        for f in self.formats:
            out.append(StrLang(negs=frozenset({StrLang(formats=frozenset({f}))})))
        if self.values is not None:
            out.append(StrLang(excluded=self.values))
        if self.excluded:
            out.append(StrLang(values=self.excluded))
        for n in self.negs:
            out.append(n)
        return out

    def is_empty(self) -> bool:
        if self.max_len is not None and self.max_len < self.min_len:
            return True
        if self.values is not None:
            return not self.values
        if self.is_all() or (
            not self.patterns
            and not self.formats
            and not self.negs
            and (self.max_len is None or self.max_len > 0 or "" not in self.excluded)
        ):
            return False
        try:
            return self.dfa.is_empty()
        except A.TooComplex:
            return False


ALL_STRINGS = StrLang()


@lru_cache(maxsize=256)
def _pattern_dfa(p: str) -> A.DFA:
    return A.to_dfa(pattern_ast(p))


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
                return set(TYPES)
            out.add(a.type)
        return out


def node(*alts: Alt) -> Node:
    out: list[Alt] = []
    seen: set[Alt] = set()
    for a in alts:
        if isinstance(a, AnyA):
            return ANY
        if a not in seen and not _alt_empty(a):
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


def _alt_empty(a: Alt) -> bool:
    if isinstance(a, BoolA):
        return not a.values
    if isinstance(a, NumA):
        return _num_empty(a)
    if isinstance(a, StrA):
        la = a.lang
        if la.max_len is not None and la.max_len < la.min_len:
            return True
        return la.values is not None and not la.values
    if isinstance(a, ArrA):
        if a.max is not None and a.max < a.min:
            return True
        for i in range(a.min):
            if a.item(i).is_never:
                return True
        return any(c[2] is not None and c[2] < c[1] for c in a.contains)
    if isinstance(a, ObjA):
        if a.max_p is not None and (a.max_p < a.min_p or a.max_p < len(a.required)):
            return True
        km = a.keymap
        return any(km.get(k, ANY).is_never for k in a.required)
    return False


def _num_empty(a: NumA) -> bool:
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
            r = _inter_alt(a, b)
            if r is not None:
                out.append(r)
    return node(*out)


def _inter_alt(a: Alt, b: Alt) -> Alt | None:
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
        return _inter_num(a, b)
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


def _inter_num(a: NumA, b: NumA) -> NumA | None:
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
    return _norm_arr(
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


def _norm_arr(a: ArrA) -> ArrA:
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
    return _norm_obj(
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


def _norm_obj(o: ObjA) -> ObjA:
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
# complement


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
                    r = _inter_alt(c, d)
                    if r is not None and not _alt_empty(r):
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
