"""ECMA-262 patterns (JSON Schema ``pattern``) -> regex AST with search semantics.

Supported: literals, ``.``, classes (incl. ``\\d \\w \\s`` and negations), groups (capturing,
non-capturing, named), alternation, greedy and lazy quantifiers, ``^``/``$`` at the start/end of a
top-level alternative. Lookaround, backreferences, word boundaries, ``\\p{..}`` and anchors in other
places are refused (``PatternError``).

Where ECMA-262 and Python's ``re`` (used by the ``jsonschema`` package) disagree about a class, the
intersection of both is used, so the grammar never admits a string that either engine rejects:
``\\d`` = [0-9], ``\\w`` = [A-Za-z0-9_], ``\\s`` = whitespace in both, ``\\D``/``\\W``/``\\S`` exclude
every character that either engine puts in the positive class, and ``.`` excludes line terminators.
"""

from __future__ import annotations

import sys
from functools import lru_cache

from tooldecode.grammar.automata import (
    UNIVERSE,
    Chars,
    Charset,
    RNode,
    alt,
    cat,
    cs_neg,
    cs_norm,
    cs_of,
    cs_union,
    rep,
    star,
)


class PatternError(ValueError):
    """A pattern that uses an unsupported construct or is malformed."""


DIGIT = cs_of("0123456789")
WORD = cs_norm([(0x30, 0x39), (0x41, 0x5A), (0x61, 0x7A), (0x5F, 0x5F)])
_ECMA_SPACE = cs_norm(
    [
        (0x09, 0x0D),
        (0x20, 0x20),
        (0xA0, 0xA0),
        (0x1680, 0x1680),
        (0x2000, 0x200A),
        (0x2028, 0x2029),
        (0x202F, 0x202F),
        (0x205F, 0x205F),
        (0x3000, 0x3000),
        (0xFEFF, 0xFEFF),
    ]
)
LINE_TERM = cs_of("\n\r\u2028\u2029")


@lru_cache(maxsize=1)
def _py_sets() -> tuple[Charset, Charset, Charset]:
    """Python's Unicode \\d, \\w and \\s sets (computed once, lazily)."""
    import re

    d, w, s = [], [], []
    rd, rw, rs = re.compile(r"\d"), re.compile(r"\w"), re.compile(r"\s")
    for cp in range(sys.maxunicode + 1):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        c = chr(cp)
        if rd.match(c):
            d.append((cp, cp))
        if rw.match(c):
            w.append((cp, cp))
        if rs.match(c):
            s.append((cp, cp))
    return cs_norm(d), cs_norm(w), cs_norm(s)


@lru_cache(maxsize=1)
def _space() -> Charset:
    import re

    r = re.compile(r"\s")
    return cs_norm((cp, cp) for lo, hi in _ECMA_SPACE for cp in range(lo, hi + 1) if r.match(chr(cp)))


def _not_digit() -> Charset:
    return cs_neg(_py_sets()[0])


def _not_word() -> Charset:
    return cs_neg(_py_sets()[1])


def _not_space() -> Charset:
    return cs_neg(cs_union(_ECMA_SPACE, _py_sets()[2]))


DOT = cs_neg(LINE_TERM)


class _Parser:
    def __init__(self, src: str) -> None:
        self.s = src
        self.i = 0

    def peek(self, k: int = 0) -> str:
        j = self.i + k
        return self.s[j] if j < len(self.s) else ""

    def eat(self, c: str) -> bool:
        if self.s.startswith(c, self.i):
            self.i += len(c)
            return True
        return False

    def fail(self, msg: str) -> PatternError:
        return PatternError(f"{msg} at offset {self.i} of pattern {self.s!r}")

    # top level: alternatives with anchors
    def parse_top(self) -> RNode:
        branches = []
        while True:
            anchored_start = self.eat("^")
            items = self.parse_seq(top=True)
            anchored_end = False
            if self.peek() == "$":
                self.i += 1
                anchored_end = True
            if self.peek() not in ("|", ""):
                raise self.fail("anchor '$' or '^' inside a pattern")
            any_star = star(Chars(UNIVERSE))
            parts = []
            if not anchored_start:
                parts.append(any_star)
            parts.append(items)
            if not anchored_end:
                parts.append(any_star)
            branches.append(cat(*parts))
            if not self.eat("|"):
                break
        if self.i != len(self.s):
            raise self.fail("unbalanced ')'")
        return alt(*branches)

    def parse_alt(self) -> RNode:
        branches = [self.parse_seq(top=False)]
        while self.eat("|"):
            branches.append(self.parse_seq(top=False))
        return alt(*branches)

    def parse_seq(self, top: bool) -> RNode:
        items: list[RNode] = []
        while True:
            c = self.peek()
            if c == "" or c == "|" or c == ")":
                break
            if c == "$":
                if top:
                    break
                raise self.fail("anchor '$' inside a group")
            if c == "^":
                raise self.fail("anchor '^' not at the start")
            atom = self.parse_atom()
            atom = self.parse_quant(atom)
            items.append(atom)
        return cat(*items)

    def parse_quant(self, atom: RNode) -> RNode:
        while True:
            c = self.peek()
            if c == "*":
                self.i += 1
                lo, hi = 0, None
            elif c == "+":
                self.i += 1
                lo, hi = 1, None
            elif c == "?":
                self.i += 1
                lo, hi = 0, 1
            elif c == "{" and self._is_brace_quant():
                lo, hi = self._brace()
            else:
                return atom
            self.eat("?")  # lazy: same language
            if self.peek() in ("*", "+", "?") or (self.peek() == "{" and self._is_brace_quant()):
                raise self.fail("nothing to repeat")
            atom = rep(atom, lo, hi)

    def _is_brace_quant(self) -> bool:
        j = self.i + 1
        s = self.s
        k = j
        while k < len(s) and s[k].isdigit():
            k += 1
        if k == j:
            return False
        if k < len(s) and s[k] == "}":
            return True
        if k < len(s) and s[k] == ",":
            k += 1
            while k < len(s) and s[k].isdigit():
                k += 1
            return k < len(s) and s[k] == "}"
        return False

    def _brace(self) -> tuple[int, int | None]:
        self.i += 1
        j = self.i
        while self.peek().isdigit():
            self.i += 1
        lo = int(self.s[j : self.i])
        hi: int | None = lo
        if self.eat(","):
            j = self.i
            while self.peek().isdigit():
                self.i += 1
            hi = int(self.s[j : self.i]) if self.i > j else None
        if not self.eat("}"):
            raise self.fail("bad quantifier")
        if hi is not None and hi < lo:
            raise self.fail("quantifier range out of order")
        if lo > 10000 or (hi or 0) > 10000:
            raise self.fail("quantifier count too large")
        return lo, hi

    def parse_atom(self) -> RNode:
        c = self.peek()
        if c == "(":
            self.i += 1
            if self.eat("?:"):
                pass
            elif self.peek() == "?":
                if self.s.startswith("?<", self.i) and self.peek(2) not in ("=", "!"):
                    end = self.s.find(">", self.i)
                    if end < 0:
                        raise self.fail("bad group name")
                    self.i = end + 1
                else:
                    raise self.fail("lookaround or inline flags")
            inner = self.parse_alt()
            if not self.eat(")"):
                raise self.fail("missing ')'")
            return inner
        if c == "[":
            return Chars(self.parse_class())
        if c == ".":
            self.i += 1
            return Chars(DOT)
        if c == "\\":
            return self.parse_escape(in_class=False)
        if c in "*+?":
            raise self.fail("nothing to repeat")
        if c == "{" and self._is_brace_quant():
            raise self.fail("nothing to repeat")
        self.i += 1
        return Chars(((ord(c), ord(c)),))

    def parse_escape(self, in_class: bool) -> RNode:
        assert self.s[self.i] == "\\"
        self.i += 1
        c = self.peek()
        if c == "":
            raise self.fail("trailing backslash")
        self.i += 1
        simple = {"t": 9, "n": 10, "v": 11, "f": 12, "r": 13}
        if c in simple:
            return _one(simple[c])
        if c == "d":
            return Chars(DIGIT)
        if c == "D":
            return Chars(_not_digit())
        if c == "w":
            return Chars(WORD)
        if c == "W":
            return Chars(_not_word())
        if c == "s":
            return Chars(_space())
        if c == "S":
            return Chars(_not_space())
        if c == "b":
            if in_class:
                return _one(8)
            raise self.fail("word boundary \\b")
        if c == "B":
            raise self.fail("word boundary \\B")
        if c == "0" and not self.peek().isdigit():
            return _one(0)
        if c.isdigit():
            raise self.fail("backreference")
        if c == "k" and self.peek() == "<":
            raise self.fail("named backreference")
        if c in "pP":
            raise self.fail("Unicode property escape")
        if c == "c":
            x = self.peek()
            if x.isascii() and x.isalpha():
                self.i += 1
                return _one(ord(x) % 32)
            raise self.fail("bad control escape")
        if c == "x":
            h = self.s[self.i : self.i + 2]
            if len(h) == 2 and all(ch in "0123456789abcdefABCDEF" for ch in h):
                self.i += 2
                return _one(int(h, 16))
            raise self.fail("bad \\x escape")
        if c == "u":
            if self.peek() == "{":
                end = self.s.find("}", self.i)
                h = self.s[self.i + 1 : end] if end > 0 else ""
                if not h or not all(ch in "0123456789abcdefABCDEF" for ch in h) or int(h, 16) > 0x10FFFF:
                    raise self.fail("bad \\u{...} escape")
                self.i = end + 1
                return _one(int(h, 16))
            h = self.s[self.i : self.i + 4]
            if len(h) == 4 and all(ch in "0123456789abcdefABCDEF" for ch in h):
                self.i += 4
                cp = int(h, 16)
                if 0xD800 <= cp <= 0xDBFF and self.s.startswith("\\u", self.i):
                    h2 = self.s[self.i + 2 : self.i + 6]
                    if len(h2) == 4 and all(ch in "0123456789abcdefABCDEF" for ch in h2):
                        lo = int(h2, 16)
                        if 0xDC00 <= lo <= 0xDFFF:
                            self.i += 6
                            return _one(0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00))
                if 0xD800 <= cp <= 0xDFFF:
                    raise self.fail("lone surrogate escape")
                return _one(cp)
            raise self.fail("bad \\u escape")
        if c == "-" and in_class:
            return _one(ord("-"))
        if not (c.isascii() and c.isalnum()):
            return _one(ord(c))
        raise self.fail(f"unknown escape \\{c}")

    def parse_class(self) -> Charset:
        assert self.s[self.i] == "["
        self.i += 1
        neg = self.eat("^")
        ranges: list[tuple[int, int]] = []
        first = True
        while True:
            c = self.peek()
            if c == "":
                raise self.fail("unterminated class")
            if c == "]" and not first:
                self.i += 1
                break
            if c == "]" and first:
                # ECMA: '[]' is the empty class, '[^]' any character
                self.i += 1
                break
            first = False
            lo_set = self._class_atom()
            if self.peek() == "-" and self.peek(1) not in ("]", ""):
                self.i += 1
                hi_set = self._class_atom()
                if (
                    len(lo_set) != 1
                    or lo_set[0][0] != lo_set[0][1]
                    or len(hi_set) != 1
                    or hi_set[0][0] != hi_set[0][1]
                ):
                    raise self.fail("class range with a class escape")
                a, b = lo_set[0][0], hi_set[0][0]
                if a > b:
                    raise self.fail("class range out of order")
                ranges.append((a, b))
            else:
                ranges.extend(lo_set)
        cs = cs_norm(ranges)
        from tooldecode.grammar.automata import cs_inter

        cs = cs_inter(cs, UNIVERSE)
        return cs_neg(cs) if neg else cs

    def _class_atom(self) -> Charset:
        c = self.peek()
        if c == "\\":
            node = self.parse_escape(in_class=True)
            assert isinstance(node, Chars)
            return node.cs
        self.i += 1
        return ((ord(c), ord(c)),)


def _one(cp: int) -> Chars:
    return Chars(((cp, cp),))


@lru_cache(maxsize=256)
def pattern_ast(pattern: str) -> RNode:
    """AST of the set of strings in which ``pattern`` is found (ECMA-262 ``search`` semantics)."""
    return _Parser(pattern).parse_top()
