"""Schema IR -> grammar IR, under a whitespace policy and a string-delimiter policy."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from tooldecode.grammar import automata as A
from tooldecode.grammar import ir
from tooldecode.grammar import numtext as N
from tooldecode.grammar import textlang as T
from tooldecode.grammar.errors import GrammarError, pointer_join
from tooldecode.grammar.gir import (
    EMPTY,
    FAIL,
    GExpr,
    GLit,
    GRef,
    RuleBook,
    emit_automaton,
    galt,
    gopt,
    grep,
    gseq,
    tok,
)
from tooldecode.grammar.keywords import json_type
from tooldecode.grammar.negation import difference
from tooldecode.grammar.schema import SchemaIR
from tooldecode.grammar.strlang import ALL_STRINGS, StrLang
from tooldecode.grammar.terminals import (
    delimiter_narrowed,
    json_str,
    large_bounded,
    make_punct,
    number_ast,
    number_text,
    string_content,
    string_rules,
)
from tooldecode.grammar.wire import ANTML_PARAMETER, ANTML_PARAMETER_CLOSE

ANY_ORDER_MAX_KEYS = 8
MAX_EXTRA_RULES = 6


# what an open object's extra members may be named: never a declared key ("forbid"), or any name ("admit")
DUPLICATES = ("forbid", "admit")


@dataclass
class _Members:
    """An object's members as ``Lowerer.members`` writes them: declared names and their member
    expressions, the extra members' expression, the separator, and the count bounds of ``a``."""

    a: ir.ObjA
    names: list[str]
    mem: list[GExpr]
    extra: GExpr | None
    sep: GExpr
    antml: bool

    def lab(self, first: bool, body: GExpr) -> GExpr:
        if self.antml:
            return gseq(self.sep, body)
        return body if first else gseq(self.sep, body)

    def inc(self, c: int) -> int | None:
        """The member count after one more member (capped; None: over maxProperties)."""
        a = self.a
        if a.min_p == 0 and a.max_p is None:
            return 0
        c2 = c + 1
        if a.max_p is not None:
            return c2 if c2 <= a.max_p else None
        return min(c2, a.min_p)

    def ok_count(self, c: int) -> bool:
        a = self.a
        return (a.min_p == 0 and a.max_p is None) or c >= a.min_p


class Lowerer:
    """Lowers schema IR nodes into rules of a ``RuleBook``."""

    def __init__(
        self,
        book: RuleBook,
        *,
        ws: str,
        ws_max: int,
        forbid: str | None,
        order: str,
        duplicates: str = "forbid",
    ) -> None:
        if duplicates not in DUPLICATES:
            raise GrammarError(
                f"unknown duplicates option {duplicates!r}; use one of {', '.join(DUPLICATES)}"
            )
        self.duplicates = duplicates
        self.book = book
        self.ws = ws
        self.ws_max = ws_max
        self.forbid = forbid
        self.order = order
        self.p = make_punct(ws, ws_max)
        self.memo: dict[int, GExpr] = {}
        self._keep: list[Any] = []
        self.defs: dict[str, ir.Node] = {}
        self.def_rules: dict[str, str] = {}
        self.prefix = ""
        self.ptr = ""  # JSON pointer of the schema being lowered (for errors and narrowing warnings)
        self.narrowed: list[str] = []  # pointers of strings narrowed in a delimited wire (see textlang)
        self.single_terminals = (
            False  # the regex emitter: no per-state string rules (they inline to a blow-up)
        )

    @contextmanager
    def at(self, *tokens: object) -> Iterator[None]:
        saved = self.ptr
        self.ptr = pointer_join(saved, *tokens)
        try:
            yield
        finally:
            self.ptr = saved

    def set_ir(self, sir: SchemaIR, prefix: str = "") -> None:
        self.defs = sir.defs
        self.order = sir.order
        self.prefix = prefix
        self.def_rules = {}
        for name in sir.defs:
            self.def_rules[name] = self.book.fresh(self._hint(name))
        for name, n in sir.defs.items():
            with self.at("$defs", name):
                body = self.value(n, name, inline=True)
            self.book.define(self.def_rules[name], body)

    def _hint(self, h: str) -> str:
        if self.prefix:
            return f"{self.prefix}-{h}" if h else f"{self.prefix}-arguments"
        return h or "arguments"

    # -- values
    def value(self, n: ir.Node, hint: str, inline: bool = False) -> GExpr:
        if n.is_any:
            return self.json_value()
        key = id(n)
        if not inline and key in self.memo:
            return self.memo[key]
        parts = [self.alt_expr(a, hint) for a in n.alts]
        body = galt(*parts) if parts else FAIL
        if inline:
            return body
        if isinstance(body, (GLit,)) or _is_tok(body) or isinstance(body, GRef):
            out = body
        else:
            out = self.book.add(self._hint(hint), body)
        self._keep.append(n)
        self.memo[key] = out
        return out

    def alt_expr(self, a: Any, hint: str) -> GExpr:
        if isinstance(a, ir.AnyA):
            return self.json_value()
        if isinstance(a, ir.NullA):
            return GLit("null")
        if isinstance(a, ir.BoolA):
            return galt(*(GLit("true" if v else "false") for v in sorted(a.values, reverse=True)))
        if isinstance(a, ir.NumA):
            hint2 = (
                "number" if a == ir.NumA() else ("integer" if a == ir.NumA(kind="int") else f"{hint}-number")
            )
            return tok(number_ast(a), self._hint(hint2) if hint2.startswith(hint) else hint2)
        if isinstance(a, ir.StrA):
            return self.string(a.lang, hint)
        if isinstance(a, ir.ConstA):
            return self.const(a.value)
        if isinstance(a, ir.RefA):
            if a.name not in self.def_rules:
                raise GrammarError(f"reference to an unknown definition {a.name!r}")
            return GRef(self.def_rules[a.name])
        if isinstance(a, ir.ObjA):
            return self.object(a, hint)
        if isinstance(a, ir.ArrA):
            return self.array(a, hint)
        raise TypeError(a)

    def _string_expr(self, lang: StrLang, mode: str, forbid: str | None, close: str, name: str) -> GExpr:
        """The text of a string of ``lang`` followed by ``close`` (after the opening quote in JSON mode):
        one terminal, or, for a bounded language whose regex grows too large, one rule per automaton
        state (``string_rules``)."""
        where = f"{self.prefix}: {self.ptr or '(root)'}" if self.prefix else (self.ptr or "(root)")
        opening = '"' if mode == "json" else ""
        try:
            try:
                if not self.single_terminals and large_bounded(lang):
                    raise GrammarError("a large bounded automaton") from A.TooComplex("skip the regex")
                content = string_content(lang, mode, forbid)
                expr = tok(A.cat(A.lit(opening), content, A.lit(close)), name)
            except GrammarError as e:
                if lang.max_len is None or not isinstance(e.__cause__, A.TooComplex):
                    raise
                if self.single_terminals:
                    raise GrammarError(
                        f"{e}; format gbnf or lark renders it (one rule per automaton state)"
                    ) from None
                expr = gseq(GLit(opening), string_rules(self.book, lang, mode, forbid, name), GLit(close))
        except GrammarError as e:
            raise GrammarError(f"{e} (at {where})") from None
        if forbid and delimiter_narrowed(lang, forbid):
            self.narrowed.append(where)
        return expr

    def string(self, lang: StrLang, hint: str) -> GExpr:
        name = "string" if lang.is_all() else self._hint(f"{hint}-string")
        return self._string_expr(lang, "json", self.forbid, '"', name)

    def key_lit(self, k: str) -> GLit:
        return GLit(json_str(k, self.forbid))

    def const(self, v: Any) -> GExpr:
        t = json_type(v)
        if t == "null":
            return GLit("null")
        if t == "boolean":
            return GLit("true" if v else "false")
        if t == "number":
            return GLit(number_text(v))
        if t == "string":
            return GLit(json_str(v, self.forbid))
        p = self.p
        if t == "array":
            if not v:
                return p.empty_arr
            items: list[GExpr] = []
            for i, x in enumerate(v):
                if i:
                    items.append(p.comma)
                items.append(self.const(x))
            return gseq(p.lbrack, *items, p.rbrack)
        if not v:
            return p.empty_obj
        members: list[GExpr] = []
        for i, (k, x) in enumerate(v.items()):
            if i:
                members.append(p.comma)
            members.extend([self.key_lit(k), p.colon, self.const(x)])
        return gseq(p.lbrace, *members, p.rbrace)

    # -- generic JSON
    def json_value(self) -> GExpr:
        name = "json-value"
        if name in self.book.rules or name in self.book.reserved:
            return GRef(name)
        self.book.reserved.add(name)
        p = self.p
        sref = self.string(ALL_STRINGS, "string")
        obj_name, arr_name = self.book.fresh("json-object"), self.book.fresh("json-array")
        member = gseq(sref, p.colon, GRef(name))
        self.book.define(
            obj_name,
            galt(p.empty_obj, gseq(p.lbrace, member, grep(gseq(p.comma, member), 0, None), p.rbrace)),
        )
        self.book.define(
            arr_name,
            galt(p.empty_arr, gseq(p.lbrack, GRef(name), grep(gseq(p.comma, GRef(name)), 0, None), p.rbrack)),
        )
        self.book.define(
            name,
            galt(
                GRef(obj_name),
                GRef(arr_name),
                sref,
                tok(N.NUMBER_ANY, "number"),
                GLit("true"),
                GLit("false"),
                GLit("null"),
            ),
        )
        return GRef(name)

    # -- objects
    def object(self, a: ir.ObjA, hint: str) -> GExpr:
        members, empty_ok = self.members(a, hint, ctx="json")
        p = self.p
        # FAIL drops out of galt (and out of gseq, taking the brackets with it)
        return galt(p.empty_obj if empty_ok else FAIL, gseq(p.lbrace, members, p.rbrace))

    def members(self, a: ir.ObjA, hint: str, ctx: str) -> tuple[GExpr, bool]:
        """(expression for >= 1 members, whether zero members is valid)."""
        p = self.p
        keys = [(k, n) for k, n in a.keys if not n.is_never]
        if self.order == "required-first":
            keys = [kn for kn in keys if kn[0] in a.required] + [kn for kn in keys if kn[0] not in a.required]
        regions = self.extra_regions(a, hint)
        if ctx == "antml" and regions:
            raise GrammarError(
                "the antml wire needs a closed top-level object (extra parameters cannot be "
                "framed); use mode='strict' or additionalProperties: false"
            )

        def member(k: str, n: ir.Node) -> GExpr:
            with self.at("properties", k):
                if ctx == "antml":
                    if '"' in k:
                        raise GrammarError(f"parameter name {k!r} cannot be written in the antml wire")
                    return gseq(GLit(ANTML_PARAMETER.format(name=k)), self.antml_value(n, f"{hint}-{k}"))
                return gseq(self.key_lit(k), p.colon, self.value(n, f"{hint}-{k}"))

        extra = (
            galt(*(gseq(kt, p.colon, self.value(vn, f"{hint}-extra")) for kt, vn in regions))
            if regions
            else None
        )
        plan = _Members(
            a,
            [k for k, _ in keys],
            [member(k, v) for k, v in keys],
            extra,
            p.comma if ctx == "json" else p.gap,
            ctx == "antml",
        )
        if self.order == "any":
            return self._members_any(plan, hint)
        return self._members_in_order(plan, hint)

    def _members_any(self, m: _Members, hint: str) -> tuple[GExpr, bool]:
        """Members in any order: the state is (keys written, count, first)."""
        n = len(m.names)
        if n > ANY_ORDER_MAX_KEYS:
            raise GrammarError(
                f"order='any' supports objects with at most {ANY_ORDER_MAX_KEYS} declared keys "
                f"({n} at {hint}); use order='schema'"
            )

        def trans(s: Hashable) -> list[tuple[GExpr, Hashable]]:
            seen, c, first = s  # type: ignore[misc]
            out: list[tuple[GExpr, Hashable]] = []
            c2 = m.inc(c)
            if c2 is None:
                return out
            for j in range(n):
                if m.names[j] not in seen:
                    out.append((m.lab(first, m.mem[j]), (seen | {m.names[j]}, c2, False)))
            if m.extra is not None:
                out.append((m.lab(first, m.extra), (seen, c2, False)))
            return out

        def acc(s: Hashable) -> bool:
            seen, c, first = s  # type: ignore[misc]
            return m.a.required <= seen and m.ok_count(c)

        return self._emit_members((frozenset(), 0, True), trans, acc, hint)

    def _members_in_order(self, m: _Members, hint: str) -> tuple[GExpr, bool]:
        """Declared members in their order ("d" states), then the extra members ("x" states)."""
        n = len(m.names)

        def trans(s: Hashable) -> list[tuple[GExpr, Hashable]]:
            phase = s[0]  # type: ignore[index]
            out: list[tuple[GExpr, Hashable]] = []
            if phase == "d":
                _, i, c, first = s  # type: ignore[misc]
                if i == n:
                    return [(EMPTY, ("x", c, first))]
                c2 = m.inc(c)
                if c2 is not None:
                    out.append((m.lab(first, m.mem[i]), ("d", i + 1, c2, False)))
                if m.names[i] not in m.a.required:
                    out.append((EMPTY, ("d", i + 1, c, first)))
                return out
            _, c, first = s  # type: ignore[misc]
            c2 = m.inc(c)
            if m.extra is not None and c2 is not None:
                out.append((m.lab(first, m.extra), ("x", c2, False)))
            return out

        def acc(s: Hashable) -> bool:
            return s[0] == "x" and m.ok_count(s[1])  # type: ignore[index]

        return self._emit_members(("d", 0, 0, True), trans, acc, hint)

    def _emit_members(
        self,
        start: Hashable,
        trans: Callable[[Hashable], list[tuple[GExpr, Hashable]]],
        accept: Callable[[Hashable], bool],
        hint: str,
    ) -> tuple[GExpr, bool]:
        # first-flag is the last component of every state
        def nonempty_accept(s: Hashable) -> bool:
            return accept(s) and not s[-1]  # type: ignore[index]

        by_empty = A.reachable([start], lambda s: (t for lab_, t in trans(s) if lab_ == EMPTY))
        empty_ok = any(accept(s) for s in by_empty)
        return emit_automaton(self.book, start, trans, nonempty_accept, self._hint(hint)), empty_ok

    def extra_regions(self, a: ir.ObjA, hint: str) -> list[tuple[GExpr, ir.Node]]:
        declared = frozenset(k for k, _ in a.keys)
        rules = list(a.extras)
        # fast path: a rule forbidding every undeclared key closes the object
        for la, n in rules:
            if n.is_never and _covers_undeclared(la, declared):
                return []
        names_lang: list[StrLang] | None = None
        if a.names is not None:
            names_lang = []
            for alt in a.names.alts:
                if isinstance(alt, ir.AnyA):
                    names_lang = None
                    break
                if isinstance(alt, ir.StrA):
                    names_lang.append(alt.lang)
                elif isinstance(alt, ir.ConstA) and isinstance(alt.value, str):
                    names_lang.append(StrLang(values=frozenset({alt.value})))
        if len(rules) > MAX_EXTRA_RULES:
            raise GrammarError(f"too many patternProperties/additionalProperties rules at {hint}")
        out: list[tuple[GExpr, ir.Node]] = []
        for mask in range(1 << len(rules)):
            value = ir.ANY
            try:
                for i, (_la, n) in enumerate(rules):
                    if mask >> i & 1:
                        value = ir.intersect(value, n)
            except ir.Inexact as e:
                raise GrammarError(f"cannot combine property rules at {hint}: {e}") from e
            if value.is_never:
                continue
            try:
                # "forbid": an extra key is never a declared name (no duplicate of a declared key);
                # "admit": any name, so a declared key may appear again (JSON allows duplicate names)
                forbid_declared = declared and self.duplicates == "forbid"
                dfas = [A.finite_dfa(declared).complement()] if forbid_declared else []
                for i, (la, _n) in enumerate(rules):
                    dfas.append(la.dfa if mask >> i & 1 else la.dfa.complement())
                if names_lang is not None:
                    if not names_lang:
                        continue
                    nd = [x.dfa for x in names_lang]
                    dfas.append(nd[0] if len(nd) == 1 else A.product(nd, "or"))
                d = (
                    A.product(dfas)
                    if len(dfas) > 1
                    else (dfas[0] if dfas else A.to_dfa(A.star(A.Chars(A.UNIVERSE))))
                )
                if d.is_empty():
                    continue
                content = (
                    T.encoded_without(d, "json", self.forbid) if self.forbid else A.to_regex(d, T.enc_json)
                )
            except A.TooComplex as e:
                raise GrammarError(f"property-name constraints too complex to render at {hint} ({e})") from e
            out.append((tok(T.quoted(content), self._hint(f"{hint}-key")), value))
        return out

    # -- arrays
    def array(self, a: ir.ArrA, hint: str) -> GExpr:
        p = self.p
        if a.unique:
            raise GrammarError(f"uniqueItems cannot be rendered at {hint}")
        items_hint = f"{hint}-item"
        if a.contains:
            body, empty_ok = self._array_contains(a, items_hint)
        else:
            body = self._array_items(a, 0, items_hint)
            empty_ok = a.min == 0
        # FAIL drops out of galt (and out of gseq, taking the brackets with it)
        return galt(p.empty_arr if empty_ok else FAIL, gseq(p.lbrack, body, p.rbrack))

    def _item(self, a: ir.ArrA, i: int, hint: str) -> GExpr:
        n = a.item(i)
        if n.is_never:
            return FAIL
        with self.at(*(("items",) if i >= len(a.prefix) else ("prefixItems", i))):
            return self.value(n, hint if i >= len(a.prefix) else f"{hint}-{i}")

    def _array_items(self, a: ir.ArrA, i: int, hint: str) -> GExpr:
        """Items from position i (>= 1 item in total when i == 0)."""
        p = self.p
        if a.max is not None and i >= a.max:
            return EMPTY if i > 0 else FAIL
        sep = EMPTY if i == 0 else p.comma
        if i >= len(a.prefix):
            item = self._item(a, i, hint)
            if item == FAIL:
                return EMPTY if i >= a.min and i > 0 else FAIL
            need = max(a.min - i, 1 if i == 0 else 0)
            top = None if a.max is None else a.max - i
            if i == 0:
                return gseq(item, grep(gseq(p.comma, item), need - 1, None if top is None else top - 1))
            return grep(gseq(sep, item), need, top)
        item = self._item(a, i, hint)
        part = gseq(sep, item, self._array_items(a, i + 1, hint))
        if i == 0 or i < a.min:
            return part
        return gopt(part)

    def _array_contains(self, a: ir.ArrA, hint: str) -> tuple[GExpr, bool]:
        p = self.p
        cons = list(a.contains)
        cap_i = a.max if a.max is not None else max(len(a.prefix), a.min, 1)
        choices_cache: dict[int, list[tuple[GExpr, tuple[int, ...]]]] = {}

        def choices(i: int) -> list[tuple[GExpr, tuple[int, ...]]]:
            key = min(i, len(a.prefix))
            if key in choices_cache:
                return choices_cache[key]
            base = a.item(i)
            out = []
            for mask in range(1 << len(cons)):
                n = base
                try:
                    for k, (c, _lo, hi) in enumerate(cons):
                        if mask >> k & 1:
                            n = ir.intersect(n, c)
                        elif hi is not None:
                            n = difference(n, c)
                except ir.Inexact as e:
                    raise GrammarError(f"contains/maxContains cannot be rendered at {hint}: {e}") from e
                if n.is_never:
                    continue
                inc = tuple(mask >> k & 1 for k in range(len(cons)))
                out.append((self.value(n, hint), inc))
            choices_cache[key] = out
            return out

        def trans(s: Hashable) -> list[tuple[GExpr, Hashable]]:
            i, counts = s  # type: ignore[misc]
            if a.max is not None and i >= a.max:
                return []
            out = []
            for item, inc in choices(i):
                new = []
                ok = True
                for (_c, lo, hi), x, d in zip(cons, counts, inc, strict=True):
                    v = x + d
                    if hi is not None:
                        if v > hi:
                            ok = False
                            break
                    else:
                        v = min(v, lo)
                    new.append(v)
                if not ok:
                    continue
                ni = i + 1 if a.max is not None else min(i + 1, cap_i)
                out.append((item if i == 0 else gseq(p.comma, item), (ni, tuple(new))))
            return out

        def accept(s: Hashable) -> bool:
            i, counts = s  # type: ignore[misc]
            if i < a.min:
                return False
            return all(
                x >= lo and (hi is None or x <= hi) for (_c, lo, hi), x in zip(cons, counts, strict=True)
            )

        start = (0, tuple(0 for _ in cons))
        empty_ok = accept(start)

        def nonempty_accept(s: Hashable) -> bool:
            return s[0] > 0 and accept(s)  # type: ignore[index]

        return emit_automaton(self.book, start, trans, nonempty_accept, self._hint(hint + "s")), empty_ok

    # -- antml parameter values
    def antml_value(self, n: ir.Node, hint: str) -> GExpr:
        close = ANTML_PARAMETER_CLOSE
        if n.alts and all(
            isinstance(x, ir.StrA) or (isinstance(x, ir.ConstA) and isinstance(x.value, str)) for x in n.alts
        ):
            parts = []
            for x in n.alts:
                if isinstance(x, ir.StrA):
                    name = "raw-text" if x.lang.is_all() else self._hint(f"{hint}-raw")
                    parts.append(self._string_expr(x.lang, "raw", close, close, name))
                elif close not in x.value:
                    parts.append(GLit(x.value + close))
            return galt(*parts)
        return gseq(self.value(n, hint), GLit(close))


def _is_tok(e: GExpr) -> bool:
    from tooldecode.grammar.gir import GTok

    return isinstance(e, GTok)


def _covers_undeclared(la: StrLang, declared: frozenset[str]) -> bool:
    """Whether ``la`` contains every string outside ``declared`` (checked syntactically)."""
    return (
        la.min_len == 0
        and la.max_len is None
        and not la.patterns
        and not la.formats
        and la.values is None
        and not la.negs
        and la.excluded <= declared
    )
