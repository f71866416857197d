"""Terminals of the JSON grammar: whitespace between tokens, punctuation, canonical texts of strings
and numbers, and the regex ASTs of a string language's encoded text and of a number constraint."""

from __future__ import annotations

import json
from collections.abc import Hashable
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache
from typing import Any

from tooldecode.grammar import automata as A
from tooldecode.grammar import numtext as N
from tooldecode.grammar import textlang as T
from tooldecode.grammar.errors import GrammarError
from tooldecode.grammar.gir import GExpr, RuleBook, emit_automaton, tok
from tooldecode.grammar.ir import NumA, int_bounds
from tooldecode.grammar.strlang import StrLang

WS_POLICIES = ("compact", "bounded", "pretty")
WS_DEFAULT_MAX = {"compact": 0, "bounded": 2, "pretty": 16}


def ws_max_for(ws: str, ws_max: int | None) -> int:
    if ws not in WS_POLICIES:
        raise GrammarError(f"unknown whitespace policy {ws!r}; use one of {', '.join(WS_POLICIES)}")
    if ws_max is None:
        return WS_DEFAULT_MAX[ws]
    if not isinstance(ws_max, int) or ws_max < 0 or ws_max > 64:
        raise GrammarError(f"ws_max must be an integer in 0..64, got {ws_max!r}")
    return ws_max


def gap_ast(ws: str, n: int) -> A.RNode:
    """Whitespace allowed between two tokens."""
    if ws == "compact" or (ws == "bounded" and n == 0):
        return A.EPS
    if ws == "bounded":
        return A.rep(A.Chars(A.cs_of(" \t\n")), 0, n)
    # pretty: nothing, one space, or a newline followed by up to n spaces/tabs of indentation
    return A.opt(A.alt(A.lit(" "), A.cat(A.lit("\n"), A.rep(A.Chars(A.cs_of(" \t")), 0, n))))


def json_str(s: str, forbid: str | None = None) -> str:
    """Canonical JSON text of a string (UTF-8, short escapes) that never contains ``forbid`` raw."""
    out = json.dumps(s, ensure_ascii=False)
    if forbid and forbid in out:
        out = out.replace(forbid, f"\\u{ord(forbid[0]):04x}" + forbid[1:])
    return out


def number_text(v: Any) -> str:
    """Canonical JSON text of a number: integers (and integral floats) without a fraction, other
    floats as the shortest round-tripping decimal without an exponent."""
    if isinstance(v, bool):
        raise TypeError("bool is not a number")
    if isinstance(v, int):
        return str(v)
    if v.is_integer():
        return str(int(v))
    s = repr(v)
    if "e" in s or "E" in s:
        s = format(Decimal(s), "f")
    return s


@lru_cache(maxsize=1024)
def string_content(lang: StrLang, mode: str, forbid: str | None) -> A.RNode:
    """Encoded text (without quotes) of the strings of ``lang``; in a delimited wire a large
    constrained language is narrowed (``delimiter_narrowed``; see ``textlang``)."""
    if lang.is_all():
        return T.any_string_content(mode, forbid)
    simple = lang.simple_ast()
    try:
        if simple is not None and (not forbid or not T.ast_admits_char(simple, forbid[0])):
            return T.encode(simple, mode)  # no raw delimiter can occur: its first character never does
        if forbid and delimiter_narrowed(lang, forbid):
            label = T.narrowed_label(mode, forbid)
            return A.substitute(simple, label) if simple is not None else A.to_regex(lang.dfa, label)
        d = lang.dfa
        if forbid:
            return T.encoded_without(d, mode, forbid)
        return A.to_regex(d, T.enc_json if mode == "json" else T.enc_raw)
    except A.TooComplex as e:
        raise GrammarError(
            f"string constraint too complex to render ({e}); simplify the pattern or length bounds"
        ) from e


RULES_STATES = 64  # a bounded string language with a larger automaton goes straight to per-state rules


def large_bounded(lang: StrLang) -> bool:
    """Whether ``lang`` is bounded, needs an automaton (a pattern or format with length bounds) and its
    automaton is past ``RULES_STATES`` (its regex would grow past the size limit, slowly)."""
    if lang.max_len is None or lang.values is not None or lang.simple_ast() is not None:
        return False
    try:
        return lang.dfa.n > RULES_STATES
    except A.TooComplex:
        return False


def string_rules(book: RuleBook, lang: StrLang, mode: str, forbid: str | None, hint: str) -> GExpr:
    """The encoded text of a bounded string language as rules, one per state of its automaton (an
    acyclic one: the strings are bounded), for languages whose single regex grows too large (a pattern
    with ``maxLength``). Exact, with the same delimiter treatment as ``string_content``."""
    try:
        d = lang.dfa
    except A.TooComplex as e:
        raise GrammarError(f"string constraint too complex to render ({e}); simplify the pattern") from e
    if forbid and delimiter_narrowed(lang, forbid):
        label = T.narrowed_label(mode, forbid)
    elif forbid and T.admits_char(d, forbid[0]):
        raise GrammarError(
            "string constraint too complex to render with the wire's delimiter excluded; simplify the pattern"
        )
    else:
        label = T.enc_json if mode == "json" else T.enc_raw
    live = d.live_states()

    def trans(q: Hashable) -> list[tuple[GExpr, Hashable]]:
        by_target: dict[int, list[A.Charset]] = {}
        for a, t in enumerate(d.delta[int(q)]):  # type: ignore[call-overload]
            if t in live:
                by_target.setdefault(t, []).append(d.atoms[a])
        return [
            (tok(label(A.cs_norm(r for cs in css for r in cs)), f"{hint}-char"), t)
            for t, css in by_target.items()
        ]

    def accept(q: Hashable) -> bool:
        return q in d.accept

    return emit_automaton(book, d.start, trans, accept, hint)


@lru_cache(maxsize=1024)
def delimiter_narrowed(lang: StrLang, forbid: str | None) -> bool:
    """Whether strings of ``lang`` inside a wire delimited by ``forbid`` never hold ``forbid[0]`` raw
    (see ``textlang``): a constrained language other than a set of values, too large to exclude the
    delimiter exactly, whose strings may hold that character."""
    if not forbid or lang.is_all() or lang.values is not None:
        return False
    simple = lang.simple_ast()
    if simple is not None and not T.ast_admits_char(simple, forbid[0]):
        return False
    if not (lang.patterns or lang.formats or lang.excluded or lang.negs):  # length bounds only
        # its automaton counts characters: max_len + 2 states (the dead one included), or min_len + 1
        # unbounded; no need to build it (a minimisation quadratic in maxLength)
        states = lang.max_len + 2 if lang.max_len is not None else lang.min_len + 1
        nonempty = lang.max_len is None or lang.max_len >= max(1, lang.min_len)
        return states > T.EXACT_STATES and nonempty
    try:
        return T.narrowing_needed(lang.dfa, forbid)
    except A.TooComplex:
        return True


@lru_cache(maxsize=512)
def number_ast(a: NumA) -> A.RNode:
    """Texts of the numbers of ``a``; bounded ones in longest-match form (see ``to_regex_longest``)."""
    try:
        ast = _number_ast(a)
        if ast in (N.NUMBER_ANY, N.INT_ANY, N.NONINT_ANY) or A.is_nothing(ast):
            return ast
        return A.to_regex_longest(A.to_dfa(ast), fallback=ast)
    except A.TooComplex as e:
        raise GrammarError(f"number constraint too complex to render ({e})") from e


def _number_ast(a: NumA) -> A.RNode:
    if a.kind == "int" or a.mult is not None:
        lo, hi = int_bounds(a)
        if lo is not None or hi is not None:
            lo, hi, empty = N.clamp_int_bounds(lo, hi)
            if empty:
                return A.NOTHING
        ast = N.int_range(lo, hi)
        if a.mult is not None:
            assert a.residues is not None
            d = A.product([A.to_dfa(ast), N.multiple_dfa(a.mult, a.residues)])
            ast = A.to_regex(d)
        return ast
    bounded = a.lo is not None or a.hi is not None
    if a.kind == "num" and not bounded:
        return N.NUMBER_ANY
    if a.kind == "nonint" and not bounded:
        return N.NONINT_ANY
    parts = []
    if a.kind == "num":
        lo, hi = int_bounds(a)
        lo, hi, empty = N.clamp_int_bounds(lo, hi)
        if not empty:
            parts.append(N.int_range(lo, hi))
    dlo = dhi = None
    empty = False
    if a.lo is not None:
        dlo = N.frac_lower(a.lo, a.lo_x)
        empty = empty or dlo is None
    if a.hi is not None:
        dhi = N.frac_upper(a.hi, a.hi_x)
        empty = empty or dhi is None
    if not empty and (dlo is None or dhi is None or dlo <= dhi):
        parts.append(N.decimal_range(dlo, True, dhi, True, nonzero_frac=(a.kind == "nonint")))
    return A.alt(*parts)


@dataclass(frozen=True)
class Punct:
    lbrace: GExpr
    rbrace: GExpr
    empty_obj: GExpr
    lbrack: GExpr
    rbrack: GExpr
    empty_arr: GExpr
    comma: GExpr
    colon: GExpr
    gap: GExpr


def make_punct(ws: str, n: int) -> Punct:
    g = gap_ast(ws, n)

    def p(ch: str, before: bool, after: bool, hint: str) -> GExpr:
        return tok(A.cat(g if before else A.EPS, A.lit(ch), g if after else A.EPS), hint)

    return Punct(
        lbrace=p("{", False, True, "lbrace"),
        rbrace=p("}", True, False, "rbrace"),
        empty_obj=tok(A.cat(A.lit("{"), g, A.lit("}")), "empty-object"),
        lbrack=p("[", False, True, "lbrack"),
        rbrack=p("]", True, False, "rbrack"),
        empty_arr=tok(A.cat(A.lit("["), g, A.lit("]")), "empty-array"),
        comma=p(",", True, True, "comma"),
        colon=p(":", True, True, "colon"),
        gap=tok(g, "gap"),
    )
