"""JSON parsing as the scorer does it: duplicate keys kept, depth bounded, string escapes optionally repaired."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any


class JSONParseError(ValueError):
    """Text that is not JSON (or nests deeper than ``MAX_JSON_DEPTH``)."""


@dataclass
class ParsedJSON:
    """A parsed JSON value with the keys seen twice (``dups``) and the repaired strings (``fixes``:
    (path, raw, value))."""

    value: Any
    dups: list[str]
    fixes: list[tuple[tuple, Any, Any]]


# A call's JSON nested deeper than this is not scored further (verdict ``too_deep``): real tool calls are
# a few levels deep, and walking pathological nesting would exhaust the interpreter's stack.
MAX_JSON_DEPTH = 64
TOO_DEEP = f"nested deeper than {MAX_JSON_DEPTH} levels"


def _bracket_depth(src: str) -> int:
    """Largest bracket nesting of JSON-like text (strings skipped), one linear pass."""
    depth = deepest = 0
    for m in _SCAN_ANY.finditer(src):
        c = m.group()
        if c in "{[":
            depth += 1
            deepest = max(deepest, depth)
        elif c in "}]":
            depth = max(0, depth - 1)
    return deepest


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_json(src: str, *, lenient: bool = False) -> ParsedJSON:
    """Parse JSON as the scorer does (``lenient``: invalid string escapes kept as text, listed in
    ``.fixes``).

    Raises
    ------
    JSONParseError
        When ``src`` is not JSON (or nests deeper than ``MAX_JSON_DEPTH``).
    """
    if _bracket_depth(src) > MAX_JSON_DEPTH:
        raise JSONParseError(TOO_DEEP)
    dups: list[str] = []

    def hook(pairs: list[tuple[str, Any]]) -> dict:
        out: dict = {}
        for k, v in pairs:
            if k in out:
                dups.append(k)
            out[k] = v
        return out

    try:
        return ParsedJSON(json.loads(src, object_pairs_hook=hook, parse_constant=_reject_constant), dups, [])
    except (ValueError, RecursionError) as err:
        message = str(err).splitlines()[0] if str(err) else type(err).__name__
        if not lenient:
            raise JSONParseError(message) from None
    parser = _LenientParser(src)
    try:
        value = parser.parse()
    except (ValueError, RecursionError, IndexError):
        raise JSONParseError(message) from None
    return ParsedJSON(value, parser.dups, parser.fixes)


_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?")
_WS = " \t\n\r"


class _LenientParser:
    """Strict JSON except inside strings: invalid escapes and broken ``\\uXXXX`` are kept as literal text and
    raw control characters are accepted. Every string that needed this is listed in ``fixes``."""

    MAX_DEPTH = 400

    def __init__(self, src: str) -> None:
        self.s = src
        self.i = 0
        self.dups: list[str] = []
        self.fixes: list[tuple[tuple, Any, Any]] = []

    def parse(self) -> Any:
        self._ws()
        value = self._value((), 0)
        self._ws()
        if self.i != len(self.s):
            raise ValueError("extra data")
        return value

    def _ws(self) -> None:
        while self.i < len(self.s) and self.s[self.i] in _WS:
            self.i += 1

    def _value(self, path: tuple, depth: int) -> Any:
        if depth > self.MAX_DEPTH:
            raise ValueError("too deep")
        c = self.s[self.i]
        if c == "{":
            return self._object(path, depth)
        if c == "[":
            return self._array(path, depth)
        if c == '"':
            return self._string(path)
        for word, value in (("true", True), ("false", False), ("null", None)):
            if self.s.startswith(word, self.i):
                self.i += len(word)
                return value
        m = _NUMBER.match(self.s, self.i)
        if not m:
            raise ValueError(f"unexpected {c!r} at {self.i}")
        self.i = m.end()
        return float(m.group()) if m.group(1) or m.group(2) else int(m.group())

    def _object(self, path: tuple, depth: int) -> dict:
        self.i += 1
        out: dict = {}
        if self._empty("}"):
            return out
        while True:
            self._ws()
            if self.s[self.i] != '"':
                raise ValueError("expected a key")
            key = self._string(path)
            self._ws()
            if self.s[self.i] != ":":
                raise ValueError("expected ':'")
            self.i += 1
            self._ws()
            if key in out:
                self.dups.append(key)
            out[key] = self._value((*path, key), depth + 1)
            if self._last("}"):
                return out

    def _array(self, path: tuple, depth: int) -> list:
        self.i += 1
        out: list = []
        if self._empty("]"):
            return out
        while True:
            self._ws()
            out.append(self._value((*path, len(out)), depth + 1))
            if self._last("]"):
                return out

    def _empty(self, close: str) -> bool:
        """At the start of a container: whether ``close`` follows at once (then past it)."""
        self._ws()
        if self.s[self.i] == close:
            self.i += 1
            return True
        return False

    def _last(self, close: str) -> bool:
        """After an item: past ``close`` (True, the container ends) or past a comma (False)."""
        self._ws()
        c = self.s[self.i]
        self.i += 1
        if c == close:
            return True
        if c != ",":
            raise ValueError(f"expected ',' or '{close}'")
        return False

    def _string(self, path: tuple) -> str:
        start = self.i
        self.i += 1
        parts: list[str] = []
        fixed = False
        s = self.s
        while True:
            c = s[self.i]
            if c == '"':
                self.i += 1
                break
            if c == "\\":
                e = s[self.i + 1]
                if e in '"\\/':
                    parts.append(e)
                    self.i += 2
                elif e in "bfnrt":
                    parts.append({"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}[e])
                    self.i += 2
                elif e == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", s[self.i + 2 : self.i + 6]):
                    code = int(s[self.i + 2 : self.i + 6], 16)
                    self.i += 6
                    low = s[self.i : self.i + 6]
                    if 0xD800 <= code < 0xDC00 and re.fullmatch(r"\\u[dD][c-fC-F][0-9a-fA-F]{2}", low):
                        code = 0x10000 + ((code - 0xD800) << 10) + (int(low[2:], 16) - 0xDC00)
                        self.i += 6
                    parts.append(chr(code))
                else:  # invalid escape or broken \uXXXX: keep the text as written
                    parts.append("\\")
                    self.i += 1
                    fixed = True
            else:
                if ord(c) < 0x20:
                    fixed = True
                parts.append(c)
                self.i += 1
        value = "".join(parts)
        if fixed:
            self.fixes.append((path, s[start : self.i], value))
        return value


# a whole string (escapes included, possibly unterminated) or one bracket
_SCAN_ANY = re.compile(r'"(?:[^"\\]|\\.)*(?:"|\\?\Z)|[{}\[\]]', re.S)
