"""Exact text languages of JSON strings: encodings (RFC 8259) and delimiter exclusion (numbers: ``numtext``).

A string constraint is a language of *decoded* strings (a DFA or regex AST over code points). The
JSON text of a string is obtained by substituting each decoded character class with all its
encodings: the raw character (not ``"``, ``\\`` or U+0000..U+001F), a short escape (``\\" \\\\ \\/ \\b
\\f \\n \\r \\t``), ``\\uXXXX`` (hex in either case) for a non-surrogate BMP character, or a
``\\uD8xx\\uDCxx`` surrogate pair for a character above U+FFFF. Lone surrogate escapes are never
produced (they decode to strings that cannot be written as UTF-8). Since every encoded string
decodes to exactly one string, length bounds count characters, not escape sequences.

Inside a delimited wire the delimiter (``</tool_call>``, ``</parameter>``, ``<|call|>``) must never
occur raw. For a constrained string (length bounds, a pattern, a format) the exact construction is
the product of the string's automaton with a matcher of the delimiter, whose regex grows
exponentially with the bounds (``maxLength: 16`` already blows up). Beyond ``EXACT_STATES`` states the
builder narrows instead (``delimiter_narrowed``): the string's text never holds the delimiter's first
character raw. In JSON strings that character is then written as an escape (``\u003c``) and the
decoded strings are unchanged; in a raw antml parameter the values lose that character.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

from tooldecode.grammar.automata import (
    DFA,
    EPS,
    NOTHING,
    UNIVERSE,
    Chars,
    Charset,
    RNode,
    Sym,
    alt,
    cat,
    chars,
    cs_diff,
    cs_has,
    cs_inter,
    cs_norm,
    cs_of,
    eliminate,
    lit,
    rep,
    star,
    substitute,
    to_dfa,
)

CONTROL: Charset = ((0, 0x1F),)
_SHORT = {ord('"'): '"', ord("\\"): "\\", ord("/"): "/", 8: "b", 12: "f", 10: "n", 13: "r", 9: "t"}


def _hex_digit_class(lo: int, hi: int) -> RNode:
    """Hex digits lo..hi (values), either case."""
    ranges = []
    for v in range(lo, hi + 1):
        ranges.append(ord("0123456789abcdef"[v]))
        if v >= 10:
            ranges.append(ord("ABCDEF"[v - 10]))
    return Chars(cs_norm((c, c) for c in ranges))


def _hex_range(lo: int, hi: int, width: int) -> RNode:
    """Hex texts of exactly ``width`` digits whose value is in [lo, hi]."""
    if lo > hi:
        return NOTHING
    if width == 0:
        return EPS
    unit = 16 ** (width - 1)
    a, b = divmod(lo, unit)
    c, d = divmod(hi, unit)
    if a == c:
        return cat(_hex_digit_class(a, a), _hex_range(b, d, width - 1))
    parts = []
    start, end = a, c
    if b != 0:
        parts.append(cat(_hex_digit_class(a, a), _hex_range(b, unit - 1, width - 1)))
        start = a + 1
    tail = None
    if d != unit - 1:
        tail = cat(_hex_digit_class(c, c), _hex_range(0, d, width - 1))
        end = c - 1
    if start <= end:
        parts.append(cat(_hex_digit_class(start, end), rep(_hex_digit_class(0, 15), width - 1, width - 1)))
    if tail is not None:
        parts.append(tail)
    return alt(*parts)


@lru_cache(maxsize=4096)
def enc_json(cs: Charset) -> RNode:
    """All JSON-string encodings of one character from ``cs``."""
    raw = cs_diff(cs, cs_union_specials())
    return alt(chars(raw), _escapes_only(cs))


@lru_cache(maxsize=4096)
def _escapes_only(cs: Charset) -> RNode:
    """The escape-sequence encodings (no raw character) of one character from ``cs``."""
    if cs == UNIVERSE:
        return JSON_ESCAPE
    return _escapes_raw(cs)


def _escapes_raw(cs: Charset) -> RNode:
    parts: list[RNode] = []
    shorts = sorted(ch for cp, ch in _SHORT.items() if cs_has(cs, cp))
    if shorts:
        parts.append(cat(lit("\\"), Chars(cs_of("".join(shorts)))))
    uparts: list[RNode] = []
    bmp = cs_inter(cs, ((0, 0xD7FF), (0xE000, 0xFFFF)))
    for lo, hi in bmp:
        uparts.append(_hex_range(lo, hi, 4))
    if uparts:
        parts.append(cat(lit("\\u"), alt(*uparts)))
    astral = cs_inter(cs, ((0x10000, 0x10FFFF),))
    for lo, hi in astral:
        parts.append(_pair_range(lo, hi))
    return alt(*parts) if parts else NOTHING


def cs_union_specials() -> Charset:
    return cs_norm([(0, 0x1F), (ord('"'), ord('"')), (ord("\\"), ord("\\"))])


def _pair_range(lo: int, hi: int) -> RNode:
    """Surrogate-pair escapes for code points lo..hi (>= 0x10000)."""
    out = []
    lo -= 0x10000
    hi -= 0x10000
    hl, ll = divmod(lo, 0x400)
    hh, lh = divmod(hi, 0x400)

    def pair(h1: int, h2: int, l1: int, l2: int) -> RNode:
        return cat(
            lit("\\u"),
            _hex_range(0xD800 + h1, 0xD800 + h2, 4),
            lit("\\u"),
            _hex_range(0xDC00 + l1, 0xDC00 + l2, 4),
        )

    if hl == hh:
        return pair(hl, hl, ll, lh)
    first_full, last_full = ll == 0, lh == 0x3FF
    if not first_full:
        out.append(pair(hl, hl, ll, 0x3FF))
    start, end = (hl if first_full else hl + 1), (hh if last_full else hh - 1)
    if start <= end:
        out.append(pair(start, end, 0, 0x3FF))
    if not last_full:
        out.append(pair(hh, hh, 0, lh))
    return alt(*out)


def enc_raw(cs: Charset) -> RNode:
    return chars(cs)


def encode(ast: RNode, mode: str) -> RNode:
    """Encoded text of a decoded-string language given as an AST (no quotes)."""
    return substitute(ast, enc_json if mode == "json" else enc_raw)


JSON_ESCAPE = Sym("json-escape", _escapes_raw(UNIVERSE))


# ---------------------------------------------------------------------------------------------
# excluding a delimiter sequence from the encoded text


def _kmp_table(word: str) -> list[dict[str, int]]:
    """KMP automaton: state k (matched prefix length) -> {char: next} for chars of ``word``."""
    n = len(word)
    fail = [0] * (n + 1)
    k = 0
    for i in range(1, n):
        while k and word[i] != word[k]:
            k = fail[k]
        if word[i] == word[k]:
            k += 1
        fail[i + 1] = k
    table: list[dict[str, int]] = []
    for state in range(n):
        row = {}
        for ch in set(word):
            s = state
            while s and word[s] != ch:
                s = fail[s]
            if word[s] == ch:
                s += 1
            row[ch] = s
        table.append(row)
    return table


def encoded_without(d: DFA, mode: str, forbid: str) -> RNode:
    """Encoded texts of the decoded language ``d`` in which the raw sequence ``forbid`` never occurs.

    In JSON mode an escape sequence never takes part in an occurrence (``forbid`` must start with a
    character that cannot appear inside an escape, e.g. ``<``), so only raw characters advance the
    matcher and every escape resets it.
    """
    assert forbid and forbid[0] not in '\\u0123456789abcdefABCDEF"/bfnrt'
    table = _kmp_table(forbid)
    n = len(forbid)
    special = cs_of("".join(sorted(set(forbid))))
    live = d.live_states()
    g: dict[int, dict[int, RNode]] = {}

    def sid(q: int, k: int) -> int:
        return q * (n + 1) + k

    todo = [(d.start, 0)]
    seen = {(d.start, 0)}
    accept: set[int] = set()
    while todo:
        q, k = todo.pop()
        out: dict[int, list[RNode]] = {}
        if q in d.accept:
            accept.add(sid(q, k))
        esc_to: dict[int, list[Charset]] = {}
        for a, t in enumerate(d.delta[q]):
            if t not in live:
                continue
            atom = d.atoms[a]
            raw = atom if mode == "raw" else cs_diff(atom, cs_union_specials())
            # raw characters that do not occur in forbid: reset to 0
            plain = cs_diff(raw, special)
            moves: list[tuple[int, RNode]] = []
            if plain:
                moves.append((0, Chars(plain)))
            for ch in sorted(set(forbid)):
                if cs_has(raw, ord(ch)):
                    moves.append((table[k][ch], lit(ch)))
            if mode == "json":
                esc_to.setdefault(t, []).append(atom)
            for k2, lab in moves:
                if k2 >= n:
                    continue
                out.setdefault(sid(t, k2), []).append(lab)
                if (t, k2) not in seen:
                    seen.add((t, k2))
                    todo.append((t, k2))
        for t, atoms in esc_to.items():
            esc = _escapes_only(cs_norm(r for at in atoms for r in at))
            if esc != NOTHING:
                out.setdefault(sid(t, 0), []).append(esc)
                if (t, 0) not in seen:
                    seen.add((t, 0))
                    todo.append((t, 0))
        g[sid(q, k)] = {tgt: alt(*labs) for tgt, labs in out.items()}
    return eliminate(g, sid(d.start, 0), accept)


# ---------------------------------------------------------------------------------------------
# narrowing for constrained strings inside a delimited wire

EXACT_STATES = 8  # decoded-string automata up to this size exclude the delimiter exactly


def admits_char(d: DFA, ch: str) -> bool:
    """Whether some string of ``d``'s language contains ``ch``."""
    live = d.live_states()
    reach, todo = {d.start}, [d.start]
    while todo:
        q = todo.pop()
        for t in d.delta[q]:
            if t in live and t not in reach:
                reach.add(t)
                todo.append(t)
    cp = ord(ch)
    return any(
        t in live and cs_has(d.atoms[a], cp) for q in reach if q in live for a, t in enumerate(d.delta[q])
    )


def ast_admits_char(n: RNode, ch: str) -> bool:
    """Whether a character class of the regex AST ``n`` holds ``ch`` (a cheap over-approximation of
    "some string of ``n`` contains ``ch``")."""
    cp, seen, todo = ord(ch), set(), [n]
    while todo:
        x = todo.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, Chars):
            if cs_has(x.cs, cp):
                return True
        elif isinstance(x, Sym):
            todo.append(x.node)
        else:
            todo.extend(getattr(x, "items", ()) or ((x.item,) if hasattr(x, "item") else ()))
    return False


def narrowing_needed(d: DFA, forbid: str | None) -> bool:
    """Whether a constrained string with automaton ``d`` is narrowed in a wire with delimiter
    ``forbid``: its automaton is past ``EXACT_STATES`` and its strings may hold the delimiter's first
    character."""
    return bool(forbid) and d.n > EXACT_STATES and admits_char(d, forbid[0])  # type: ignore[index]


@lru_cache(maxsize=64)
def _enc_json_without(ch: str) -> Callable[[Charset], RNode]:
    blocked = cs_norm([*cs_union_specials(), (ord(ch), ord(ch))])

    @lru_cache(maxsize=4096)
    def label(cs: Charset) -> RNode:
        return alt(chars(cs_diff(cs, blocked)), _escapes_only(cs))

    return label


@lru_cache(maxsize=64)
def _enc_raw_without(ch: str) -> Callable[[Charset], RNode]:
    def label(cs: Charset) -> RNode:
        return chars(cs_diff(cs, ((ord(ch), ord(ch)),)))

    return label


def narrowed_label(mode: str, forbid: str) -> Callable[[Charset], RNode]:
    """Atom encoder that never writes ``forbid[0]`` raw: escaped in JSON mode, left out in raw mode."""
    return _enc_json_without(forbid[0]) if mode == "json" else _enc_raw_without(forbid[0])


# ---------------------------------------------------------------------------------------------
# generic JSON pieces

STRING_CONTENT_ANY = star(enc_json(UNIVERSE))


def quoted(content: RNode) -> RNode:
    return cat(lit('"'), content, lit('"'))


@lru_cache(maxsize=64)
def any_string_content(mode: str = "json", forbid: str | None = None) -> RNode:
    """Encoded text (no quotes) of any string; ``forbid`` never occurs raw in it."""
    if forbid:
        return encoded_without(to_dfa(star(Chars(UNIVERSE))), mode, forbid)
    return STRING_CONTENT_ANY if mode == "json" else star(Chars(UNIVERSE))


def any_string_terminal(mode: str = "json", forbid: str | None = None) -> RNode:
    content = any_string_content(mode, forbid)
    return quoted(content) if mode == "json" else content
