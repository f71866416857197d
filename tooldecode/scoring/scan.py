"""Scanning text for JSON-like spans: balanced brackets, key-like suffixes, spans already taken by a call."""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterator
from dataclasses import dataclass

from tooldecode.grammar import Tool
from tooldecode.scoring.schemas import catalog_by_name, tool_keys


def scan_balanced(text: str, start: int) -> int | None:
    """End (exclusive) of the bracketed JSON-like value opening at ``text[start]``; None if the text ends first."""
    depth = 0
    for m in _brackets(text, start):
        if m.group() in "{[":
            depth += 1
        else:
            depth -= 1
            if depth <= 0:
                return m.end()
    return None


def _brackets(text: str, pos: int) -> Iterator[re.Match[str]]:
    """The brackets of ``text`` from ``pos`` on that stand outside JSON strings, in order; they end
    where the text does or where a string never closes."""
    while True:
        m = _SCAN_OUT.search(text, pos)
        if not m:
            return
        pos = m.end()
        if m.group() != '"':
            yield m
            continue
        while True:  # to the end of the string: an unescaped quote
            q = _SCAN_IN.search(text, pos)
            if not q:
                return
            pos = q.end()
            if q.group() != "\\":
                break
            pos += 1


class BalancedScanner:
    """``scan_balanced`` for many starts in one text, in linear total time.

    One scan from a start also settles every bracket it meets outside a string: the scan from an inner
    bracket follows the same path, so its end is where the outer scan pops it (or None when the text
    ends first). Only starts that an earlier scan saw inside a string are scanned again.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        self.ends: dict[int, int | None] = {}

    def end(self, start: int) -> int | None:
        if start in self.ends:
            return self.ends[start]
        stack: list[int] = []
        for m in _brackets(self.text, start):
            if m.group() in "{[":
                stack.append(m.start())
            else:
                if stack:
                    self.ends[stack.pop()] = m.end()
                if not stack:
                    break
        for q in stack:
            self.ends[q] = None
        self.ends.setdefault(start, None)
        return self.ends[start]


class SuffixKeyish:
    """``_keyish(text[start:])`` for increasing starts in one text, in linear total time.

    Each test of ``_keyish`` holds for a suffix whenever it holds for a shorter one, so: the first
    name/arguments match at or after a start is remembered, and the key test has one threshold.
    """

    def __init__(self, text: str, ctx: CallContext) -> None:
        self.text, self.ctx = text, ctx
        self._next: dict[str, tuple[int, re.Match | None]] = {}
        self._key_limit: int | None = None
        self._key_done = False

    def _first(self, name: str, pattern: re.Pattern, start: int) -> re.Match | None:
        got = self._next.get(name)
        if got is not None:
            searched_from, m = got
            if searched_from <= start and (m is None or m.start() >= start):
                return m
        m = pattern.search(self.text, start)
        self._next[name] = (start, m)
        return m

    def _keys_from(self) -> int:
        """Largest start whose suffix holds two keys of one candidate tool (-1 if none)."""
        if not self._key_done:
            matches = [(m.start(), m.group(1)) for m in KEYISH.finditer(self.text)]
            seen: list[set[str]] = [set() for _ in self.ctx.candidates()]
            keysets = [tool_keys(t)[1] for t in self.ctx.candidates()]
            self._key_limit = -1
            for at, key in reversed(matches):
                for keys, found in zip(keysets, seen, strict=True):
                    if key in keys:
                        found.add(key)
                        if len(found) >= 2:
                            self._key_limit = at
                            break
                if self._key_limit >= 0:
                    break
            self._key_done = True
        return self._key_limit if self._key_limit is not None else -1

    def holds(self, start: int) -> bool:
        m = self._first("name", NAME_VALUE, start)
        if m and (m.group(1) in self.ctx.names() or m.group(1) in catalog_by_name()):
            return True
        if self._first("args", ARGS_OPEN, start):
            return True
        return start <= self._keys_from()


_SCAN_OUT = re.compile(r'["{}\[\]]')
_SCAN_IN = re.compile(r'["\\]')
JSON_START = re.compile(r"\{\s*[\"'}]|\[\s*\{")
KEYISH = re.compile(r"[\"']([A-Za-z_$][\w$.\-]*)[\"']\s*:")
NAME_VALUE = re.compile(r"[\"'](?:name|function|tool)[\"']\s*:\s*[\"']([\w.\-]+)[\"']")


# -------------------------------------------------------------------------------------------- extraction


@dataclass
class CallContext:
    """What extraction knows: the offered tools, the wire, the expected tool, lenient parsing."""

    tools: list[Tool]
    wire: str | None
    expected: str | None
    lenient: bool

    def tool(self, name: str | None) -> Tool | None:
        for t in self.tools:
            if t.name == name:
                return t
        return None

    def names(self) -> set[str]:
        return {t.name for t in self.tools}

    def candidates(self) -> list[Tool]:
        exp = self.tool(self.expected)
        return [exp] if exp is not None else self.tools


class TakenSpans:
    """Spans of text already taken by a call, merged where they overlap: ``free`` in O(log n)."""

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []

    def append(self, span: tuple[int, int]) -> None:
        a, b = span
        if b <= a:
            return
        lo = bisect.bisect_right(self.ends, a)  # first span ending after a
        hi = bisect.bisect_left(self.starts, b)  # first span starting at or after b
        if lo < hi:
            a, b = min(a, self.starts[lo]), max(b, self.ends[hi - 1])
        self.starts[lo:hi] = [a]
        self.ends[lo:hi] = [b]

    def free(self, a: int, b: int) -> bool:
        """No taken span overlaps [a, b)."""
        i = bisect.bisect_right(self.starts, a) - 1
        if i >= 0 and self.ends[i] > a and self.starts[i] < b:
            return False
        return not (i + 1 < len(self.starts) and self.starts[i + 1] < b)


ARGS_OPEN = re.compile(r"[\"'](?:arguments|parameters)[\"']\s*:\s*[{\"']")
