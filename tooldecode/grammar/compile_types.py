"""The per-type keyword groups of the compiler (numbers, strings, arrays, objects),
``unevaluated*`` applied to one alternative, and the ``uniqueItems`` pass over the finished IR."""

from __future__ import annotations

import math
from dataclasses import replace
from fractions import Fraction
from typing import Any

from tooldecode.grammar import ir
from tooldecode.grammar.ecma import PatternError, pattern_ast
from tooldecode.grammar.errors import InvalidSchemaError, UnsupportedSchemaError, pointer_join
from tooldecode.grammar.ir import (
    ANY,
    ArrA,
    BoolA,
    ConstA,
    Node,
    NullA,
    NumA,
    ObjA,
    StrA,
    intersect,
    node,
)
from tooldecode.grammar.keywords import FORMATS, MAX_UNIQUE_ENUM
from tooldecode.grammar.strlang import FORMAT_PATTERNS, StrLang

# the longest string length a grammar counts: a larger maxLength is rendered unbounded (docs/grammar.md)
MAX_LENGTH_BOUND = 100_000


class TypeKeywords:
    """Mixed into the compiler: what each type's keywords compile to."""

    assert_format: bool
    ignored: list[tuple[str, str]]
    warnings: list[str]
    defs: dict[str, Node]

    def compile(self, s: Any, ptr: str, resolver: Any, depth: int) -> Node:
        raise NotImplementedError

    def unsupported(self, keyword: str, ptr: str, detail: str = "") -> None:
        raise NotImplementedError

    def narrowed(self, keyword: str, ptr: str, why: list[str] | str) -> None:
        raise NotImplementedError

    # -- per-type keyword groups
    def _num_value(self, s: dict[str, Any], kw: str, ptr: str) -> Fraction | None:
        if kw not in s:
            return None
        v = s[kw]
        if (
            isinstance(v, bool)
            or not isinstance(v, (int, float))
            or (isinstance(v, float) and not math.isfinite(v))
        ):
            raise InvalidSchemaError(kw, pointer_join(ptr, kw), "must be a finite number")
        return Fraction(v)

    def _count(self, s: dict[str, Any], kw: str, ptr: str) -> int | None:
        if kw not in s:
            return None
        v = s[kw]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 or not float(v).is_integer():
            raise InvalidSchemaError(kw, pointer_join(ptr, kw), "must be a non-negative integer")
        return int(v)

    def _number(self, s: dict[str, Any], ptr: str) -> NumA:
        a = NumA()
        lo, hi = self._num_value(s, "minimum", ptr), self._num_value(s, "maximum", ptr)
        xlo, xhi = self._num_value(s, "exclusiveMinimum", ptr), self._num_value(s, "exclusiveMaximum", ptr)
        if lo is not None:
            a = ir.inter_num(a, NumA(lo=lo)) or a
        if xlo is not None:
            a = ir.inter_num(a, NumA(lo=xlo, lo_x=True)) or a
        if hi is not None:
            a = ir.inter_num(a, NumA(hi=hi)) or a
        if xhi is not None:
            a = ir.inter_num(a, NumA(hi=xhi, hi_x=True)) or a
        m = self._num_value(s, "multipleOf", ptr)
        if m is not None:
            if m <= 0:
                raise InvalidSchemaError("multipleOf", pointer_join(ptr, "multipleOf"), "must be > 0")
            if m.denominator != 1 and (ints := float_multiple_integers(s["multipleOf"])) is not None:
                # a fractional divisor: only integers are rendered (a subset; see float_multiple_integers)
                step, bound = ints
                r = ir.inter_num(
                    a,
                    NumA(
                        kind="int",
                        lo=Fraction(-bound),
                        hi=Fraction(bound),
                        mult=step,
                        residues=frozenset({0}),
                    ),
                )
                a = r if r is not None else NumA(kind="int", lo=Fraction(1), hi=Fraction(0))
                self.narrowed(
                    "multipleOf",
                    pointer_join(ptr, "multipleOf"),
                    f"only integers that are multiples of {s['multipleOf']!r} are rendered",
                )
            elif m.denominator != 1 or m > 10000:
                self.unsupported(
                    "multipleOf",
                    pointer_join(ptr, "multipleOf"),
                    "only integer divisors up to 10000 and decimal divisors whose multiples include integers are expressible",
                )
            else:
                r = ir.inter_num(a, NumA(mult=int(m), residues=frozenset({0})))
                a = r if r is not None else NumA(kind="int", lo=Fraction(1), hi=Fraction(0))
        return a

    def _string(self, s: dict[str, Any], ptr: str) -> StrA:
        lang = StrLang()
        lo, hi = self._count(s, "minLength", ptr), self._count(s, "maxLength", ptr)
        if hi is not None and hi > MAX_LENGTH_BOUND:  # no call holds that much: rendered unbounded
            self.warnings.append(
                f"maxLength {hi} at {pointer_join(ptr, 'maxLength')} is past {MAX_LENGTH_BOUND} characters: "
                "rendered unbounded (rendered wider than the schema)"
            )
            hi = None
        if lo is not None and lo > MAX_LENGTH_BOUND:
            self.unsupported(
                "minLength",
                pointer_join(ptr, "minLength"),
                f"{lo} characters is past the {MAX_LENGTH_BOUND} a grammar bounds; no call can be written",
            )
            lo = None
        if lo is not None or hi is not None:
            lang = lang.inter(StrLang(lo or 0, hi))
        if "pattern" in s:
            p = s["pattern"]
            kptr = pointer_join(ptr, "pattern")
            if not isinstance(p, str):
                raise InvalidSchemaError("pattern", kptr, "must be a string")
            try:
                pattern_ast(p)
                lang = lang.inter(StrLang(patterns=frozenset({p})))
            except PatternError as e:
                self.unsupported("pattern", kptr, str(e))
        if "format" in s and self.assert_format:
            f = s["format"]
            if f in FORMAT_PATTERNS:
                lang = lang.inter(StrLang(formats=frozenset({f})))
            else:
                fptr = pointer_join(ptr, "format")
                self.ignored.append(("format", fptr))
                self.warnings.append(
                    f"format {f!r} at {fptr} is not a regular language here, so it is not asserted "
                    f"(asserted formats: {', '.join(FORMATS)})"
                )
        return StrA(lang)

    def _array(self, s: dict[str, Any], ptr: str, resolver: Any, depth: int) -> ArrA:
        prefix: tuple[Node, ...] = ()
        if "prefixItems" in s:
            items = s["prefixItems"]
            if not isinstance(items, list):
                raise InvalidSchemaError("prefixItems", pointer_join(ptr, "prefixItems"), "must be an array")
            prefix = tuple(
                self.compile(x, pointer_join(ptr, "prefixItems", i), resolver, depth + 1)
                for i, x in enumerate(items)
            )
        rest: Node | None = None
        if "items" in s:
            if isinstance(s["items"], list):
                raise UnsupportedSchemaError(
                    "items",
                    pointer_join(ptr, "items"),
                    "an array of schemas is draft-07 syntax; use prefixItems",
                )
            r = self.compile(s["items"], pointer_join(ptr, "items"), resolver, depth + 1)
            rest = None if r.is_any else r
        lo = self._count(s, "minItems", ptr) or 0
        hi = self._count(s, "maxItems", ptr)
        contains: tuple[tuple[Node, int, int | None], ...] = ()
        if "contains" in s:
            c = self.compile(s["contains"], pointer_join(ptr, "contains"), resolver, depth + 1)
            cmin = self._count(s, "minContains", ptr)
            cmax = self._count(s, "maxContains", ptr)
            cmin = 1 if cmin is None else cmin
            if cmin > 0 or cmax is not None:
                contains = ((c, cmin, cmax),)
        unique = pointer_join(ptr, "uniqueItems") if s.get("uniqueItems") is True else ""
        a = ArrA(prefix, rest, lo, hi, contains, unique, len(prefix), "items" in s)
        return ir.norm_arr(a)

    def _object(self, s: dict[str, Any], ptr: str, resolver: Any, depth: int) -> ObjA:
        props = s.get("properties", {})
        if not isinstance(props, dict):
            raise InvalidSchemaError("properties", pointer_join(ptr, "properties"), "must be an object")
        pats = s.get("patternProperties", {})
        if not isinstance(pats, dict):
            raise InvalidSchemaError(
                "patternProperties", pointer_join(ptr, "patternProperties"), "must be an object"
            )
        pat_nodes: list[tuple[str, Node]] = []
        for p, sub in pats.items():
            kptr = pointer_join(ptr, "patternProperties", p)
            try:
                pattern_ast(p)
            except PatternError as e:
                self.unsupported("patternProperties", kptr, str(e))
                continue
            pat_nodes.append((p, self.compile(sub, kptr, resolver, depth + 1)))
        extras: list[tuple[StrLang, Node]] = [(StrLang(patterns=frozenset({p})), n) for p, n in pat_nodes]
        if "additionalProperties" in s:
            kptr = pointer_join(ptr, "additionalProperties")
            addn = self.compile(s["additionalProperties"], kptr, resolver, depth + 1)
            negs = frozenset(StrLang(patterns=frozenset({p})) for p, _ in pat_nodes)
            extras.append((StrLang(excluded=frozenset(props), negs=negs), addn))
        keys: list[tuple[str, Node]] = []
        for k, sub in props.items():
            n = self.compile(sub, pointer_join(ptr, "properties", k), resolver, depth + 1)
            for p, pn in pat_nodes:
                if StrLang(patterns=frozenset({p})).accepts(k):
                    n = intersect(n, pn)
            keys.append((k, n))
        req = s.get("required", [])
        if not isinstance(req, list) or not all(isinstance(x, str) for x in req):
            raise InvalidSchemaError("required", pointer_join(ptr, "required"), "must be an array of strings")
        o = ObjA(keys=tuple(keys), extras=tuple(extras))
        extra_keys = [k for k in dict.fromkeys(req) if k not in props]
        if extra_keys:
            o = replace(o, keys=o.keys + tuple((k, o.extra_value(k)) for k in extra_keys))
        o = replace(o, required=frozenset(req))
        names = None
        if "propertyNames" in s:
            names = self.compile(s["propertyNames"], pointer_join(ptr, "propertyNames"), resolver, depth + 1)
            if names.is_any:
                names = None
        o = replace(
            o,
            names=names,
            min_p=self._count(s, "minProperties", ptr) or 0,
            max_p=self._count(s, "maxProperties", ptr),
            eval_names=frozenset(props),
            eval_pats=frozenset(p for p, _ in pat_nodes),
            eval_all="additionalProperties" in s,
        )
        return ir.norm_obj(o)

    # -- unevaluated*
    def _apply_uneval_props(self, a: ObjA, u: Node) -> ObjA:
        if a.eval_all:
            return a
        pats = [StrLang(patterns=frozenset({p})) for p in a.eval_pats]

        def evaluated(k: str) -> bool:
            return k in a.eval_names or any(pl.accepts(k) for pl in pats)

        keys = tuple((k, n if evaluated(k) else intersect(n, u)) for k, n in a.keys)
        rule = (StrLang(excluded=a.eval_names, negs=frozenset(pats)), u)
        return ir.norm_obj(replace(a, keys=keys, extras=a.extras + (rule,), eval_all=True))

    def _apply_uneval_items(self, a: ArrA, u: Node) -> ArrA:
        if a.eval_all:
            return a
        n = a.eval_n
        prefix = list(a.prefix)
        while len(prefix) < n:
            prefix.append(a.item(len(prefix)))
        prefix = [p if i < n else intersect(p, u) for i, p in enumerate(prefix)]
        rest = a.rest if a.rest is not None else ANY
        rest = intersect(rest, u)
        return ir.norm_arr(
            replace(a, prefix=tuple(prefix), rest=None if rest.is_any else rest, eval_all=True)
        )

    # -- whole-IR post-processing (uniqueItems)
    def finalize(self, root: Node) -> Node:
        memo: dict[int, Node] = {}

        def walk(n: Node) -> Node:
            if id(n) in memo:
                return memo[id(n)]
            memo[id(n)] = n
            out = []
            for a in n.alts:
                out.extend(walk_alt(a))
            r = node(*out) if out != list(n.alts) else n
            memo[id(n)] = r
            return r

        def walk_alt(a: ir.Alt) -> list[ir.Alt]:
            if isinstance(a, ArrA):
                a2 = replace(
                    a,
                    prefix=tuple(walk(p) for p in a.prefix),
                    rest=walk(a.rest) if a.rest is not None else None,
                    contains=tuple((walk(c), lo, hi) for c, lo, hi in a.contains),
                )
                if a2.unique:
                    return self._unique(a2)
                return [a2 if a2 != a else a]
            if isinstance(a, ObjA):
                a2 = replace(
                    a,
                    keys=tuple((k, walk(v)) for k, v in a.keys),
                    extras=tuple((la, walk(v)) for la, v in a.extras),
                )
                return [a2 if a2 != a else a]
            return [a]

        for name in list(self.defs):
            self.defs[name] = walk(self.defs[name])
        return walk(root)

    def _unique(self, a: ArrA) -> list[ir.Alt]:
        if a.max is not None and a.max <= 1:
            return [replace(a, unique="")]
        # enumerate when every position has a small finite domain
        domains: list[list[Any]] = []
        limit = a.max if a.max is not None else len(a.prefix) + 64
        for i in range(limit):
            vals = _finite_values(a.item(i))
            if vals is None:
                if i >= a.min and a.item(i).is_never:
                    break
                return self._unique_narrowed(a, "items that are not a small finite set")
            if not vals:
                break
            domains.append(vals)
            if i >= len(a.prefix) and a.rest is not None:
                # remaining positions share the rest domain; uniqueness bounds the length
                total = len(vals)
                limit = min(limit, i + total)
        seqs: list[list[Any]] = []
        plain = replace(a, unique="")

        def go(prefix: list[Any], keys: set[Any]) -> None:
            if len(seqs) > MAX_UNIQUE_ENUM:
                return
            if len(prefix) >= a.min and ir.accepts_alt(plain, prefix, self.defs):
                seqs.append(list(prefix))
            i = len(prefix)
            if i >= len(domains) or (a.max is not None and i >= a.max):
                return
            for v in domains[i]:
                k = ir.value_key(v)
                if k in keys:
                    continue
                prefix.append(v)
                keys.add(k)
                go(prefix, keys)
                keys.discard(k)
                prefix.pop()

        go([], set())
        if len(seqs) > MAX_UNIQUE_ENUM:
            return self._unique_narrowed(a, "too many unique arrays to enumerate")
        return [ConstA(sq) for sq in seqs]

    def _unique_narrowed(self, a: ArrA, why: str) -> list[ir.Alt]:
        """uniqueItems without an exact rendering: arrays of at most one item (a subset: they are unique)."""
        self.narrowed("uniqueItems", a.unique, f"{why}: arrays of at most one item are rendered")
        return [ir.norm_arr(replace(a, unique="", max=1 if a.max is None else min(a.max, 1)))]


def float_multiple_integers(m: float | int) -> tuple[int, int] | None:
    """``(step, bound)``: the integers n with ``step | n`` and ``|n| <= bound`` pass ``multipleOf: m``
    for a fractional ``m`` as validators check it in floating point (``n / m`` is integral), or None.

    With ``m``'s shortest decimal ``P/Q`` (``0.01`` -> 1/100) and the double ``m = (P/Q)(1 + d)``:
    for ``P | n`` the exact quotient ``N = nQ/P`` is an integer, ``n / m = N / (1 + d)`` lies within
    ``|N| |d| / (1 + d)`` of it, and ``|d| <= 2**-54`` with ``|N| < 2**52`` keeps that under half a unit in the
    last place of ``N``, so the division rounds to ``N`` exactly. Other integers and all non-integral
    numbers are left out (a subset of the multiples; ``0.07 / 0.01`` is not integral in binary)."""
    from decimal import Decimal

    if isinstance(m, bool) or not isinstance(m, (int, float)) or not math.isfinite(m) or m <= 0:
        return None
    q = Fraction(Decimal(repr(float(m))))
    if q.denominator == 1 or q.numerator > 10000:
        return None
    d = Fraction(m) / q - 1
    if abs(d) > Fraction(1, 2**54):
        return None
    bound = min((2**52 - 1) * q.numerator // q.denominator, 2**52)
    return q.numerator, bound


def _finite_values(n: Node) -> list[Any] | None:
    out: list[Any] = []
    for a in n.alts:
        if isinstance(a, ConstA):
            out.append(a.value)
        elif isinstance(a, NullA):
            out.append(None)
        elif isinstance(a, BoolA):
            out.extend(sorted(a.values))
        else:
            return None
    uniq: dict[Any, Any] = {}
    for v in out:
        uniq.setdefault(ir.value_key(v), v)
    return list(uniq.values())
