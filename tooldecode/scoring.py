"""Score raw model outputs: find the tool call in any wrapping, give one verdict per sample, check the payload.

``extract_calls`` finds every call in a text (``<tool_call>`` tags, fenced blocks, bare JSON, JSON inside
prose, antml markup, harmony, Python-style calls). ``score_text`` picks the primary call, validates it
against the closed (strictified) schema of the tool and checks its edits against the scenario's gold.
Verdict classes, their precedence and the flags are documented in docs/scoring.md.
"""

from __future__ import annotations

import ast
import bisect
import json
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import jsonschema

from tooldecode.errors import ScenarioError, ToolDecodeError
from tooldecode.grammar import Tool, strictify, tool_catalog
from tooldecode.grammar.schema import json_depth
from tooldecode.scenarios import Edit, Scenario, apply_edits, get_scenario
from tooldecode.toolsets import EDIT_TOOL, TOOLSETS

SCORER_VERSION = "s1"

VERDICTS = (
    "valid",
    "invented_key",
    "missing_required",
    "wrong_type",
    "json_syntax",
    "truncated",
    "too_deep",
    "no_call",
    "wrong_tool",
)
# Precedence, worst first: a sample gets the first class whose condition holds.
PRECEDENCE = (
    "no_call",
    "too_deep",
    "truncated",
    "json_syntax",
    "wrong_tool",
    "invented_key",
    "missing_required",
    "wrong_type",
    "valid",
)

FLAGS = (
    "multiple_calls",
    "text_around_call",
    "duplicate_key",
    "schema_echo",
    "payload_correct_schema_invalid",
    "unnamed_call",
    "name_key_variant",
    "arguments_key_variant",
    "arguments_as_string",
    "flat_envelope",
)

# Tools offered by each tool-set variant and the tool an edit turn is expected to call: one table,
# the one prompts render (``tooldecode.toolsets``).
EXPECTED_TOOL = EDIT_TOOL

NAME_KEYS = ("name", "function", "tool", "tool_name", "function_name")
ARGS_KEYS = ("arguments", "parameters", "args", "input", "params", "tool_input")


class ScoringError(ToolDecodeError):
    """A record or tool set that cannot be scored (unknown tool set, unknown tool)."""


@dataclass
class ExtractedCall:
    """One tool call found in a text. ``error`` is set when the call could not be parsed."""

    name: str | None
    arguments: Any
    raw: str
    wrapping: str  # hermes, fenced-json, bare-json, json-in-prose, antml, harmony, python-call
    span: tuple[int, int]
    shape: str = "args"  # call-json, openai, flat, args, markup, python
    error: str | None = None
    unbalanced: bool = False  # the call's text ends before its brackets / tags close
    duplicate_keys: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    # (path, before, after) of string escapes repaired while parsing (``lenient=True`` only)
    fixes: list[tuple[str, Any, Any]] = field(default_factory=list)


@dataclass
class Verdict:
    verdict: str
    flags: list[str]
    tool: str | None
    wrapping: str | None
    invented_keys: list[dict]
    errors: list[str]
    payload: dict | None
    arguments: Any
    shape: str | None = None
    n_calls: int = 0
    duplicate_keys: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------------------------- JSON parsing


class _ParseError(ValueError):
    pass


@dataclass
class _Parsed:
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


def _loads(src: str, *, lenient: bool = False) -> _Parsed:
    if _bracket_depth(src) > MAX_JSON_DEPTH:
        raise _ParseError(TOO_DEEP)
    dups: list[str] = []

    def hook(pairs: list[tuple[str, Any]]) -> dict:
        out: dict = {}
        for k, v in pairs:
            if k in out:
                dups.append(k)
            out[k] = v
        return out

    try:
        return _Parsed(json.loads(src, object_pairs_hook=hook, parse_constant=_reject_constant), dups, [])
    except (ValueError, RecursionError) as err:
        message = str(err).splitlines()[0] if str(err) else type(err).__name__
        if not lenient:
            raise _ParseError(message) from None
    parser = _LenientParser(src)
    try:
        value = parser.parse()
    except (ValueError, RecursionError, IndexError):
        raise _ParseError(message) from None
    return _Parsed(value, parser.dups, parser.fixes)


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
        self._ws()
        if self.s[self.i] == "}":
            self.i += 1
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
            self._ws()
            c = self.s[self.i]
            self.i += 1
            if c == "}":
                return out
            if c != ",":
                raise ValueError("expected ',' or '}'")

    def _array(self, path: tuple, depth: int) -> list:
        self.i += 1
        out: list = []
        self._ws()
        if self.s[self.i] == "]":
            self.i += 1
            return out
        while True:
            self._ws()
            out.append(self._value((*path, len(out)), depth + 1))
            self._ws()
            c = self.s[self.i]
            self.i += 1
            if c == "]":
                return out
            if c != ",":
                raise ValueError("expected ',' or ']'")

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


def _scan_balanced(text: str, start: int) -> int | None:
    """End (exclusive) of the bracketed JSON-like value opening at ``text[start]``; None if the text ends first."""
    depth = 0
    pos = start
    out_re, in_re = _SCAN_OUT, _SCAN_IN
    while True:
        m = out_re.search(text, pos)
        if not m:
            return None
        c = m.group()
        pos = m.end()
        if c == '"':
            while True:
                m2 = in_re.search(text, pos)
                if not m2:
                    return None
                pos = m2.end()
                if m2.group() == "\\":
                    pos += 1
                    continue
                break
        elif c in "{[":
            depth += 1
        else:
            depth -= 1
            if depth <= 0:
                return pos


class _BalancedScanner:
    """``_scan_balanced`` for many starts in one text, in linear total time.

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
        text, out_re, in_re = self.text, _SCAN_OUT, _SCAN_IN
        stack: list[int] = []
        pos = start
        while True:
            m = out_re.search(text, pos)
            if not m:
                break
            c = m.group()
            pos = m.end()
            if c == '"':
                closed = False
                while True:
                    m2 = in_re.search(text, pos)
                    if not m2:
                        break
                    pos = m2.end()
                    if m2.group() == "\\":
                        pos += 1
                        continue
                    closed = True
                    break
                if not closed:
                    break
            elif c in "{[":
                stack.append(m.start())
            else:
                if stack:
                    self.ends[stack.pop()] = pos
                if not stack:
                    break
        for q in stack:
            self.ends[q] = None
        self.ends.setdefault(start, None)
        return self.ends[start]


class _SuffixKeyish:
    """``_keyish(text[start:])`` for increasing starts in one text, in linear total time.

    Each test of ``_keyish`` holds for a suffix whenever it holds for a shorter one, so: the first
    name/arguments match at or after a start is remembered, and the key test has one threshold.
    """

    def __init__(self, text: str, ctx: _Ctx) -> None:
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
            matches = [(m.start(), m.group(1)) for m in _KEYISH.finditer(self.text)]
            seen: list[set[str]] = [set() for _ in self.ctx.candidates()]
            keysets = [_tool_keys(t)[1] for t in self.ctx.candidates()]
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
        m = self._first("name", _NAME_VALUE, start)
        if m and (m.group(1) in self.ctx.names() or m.group(1) in _catalog()):
            return True
        if self._first("args", _ARGS_OPEN, start):
            return True
        return start <= self._keys_from()


_SCAN_OUT = re.compile(r'["{}\[\]]')
# a whole string (escapes included, possibly unterminated) or one bracket
_SCAN_ANY = re.compile(r'"(?:[^"\\]|\\.)*(?:"|\\?\Z)|[{}\[\]]', re.S)
_SCAN_IN = re.compile(r'["\\]')
_JSON_START = re.compile(r"\{\s*[\"'}]|\[\s*\{")
_KEYISH = re.compile(r"[\"']([A-Za-z_$][\w$.\-]*)[\"']\s*:")
_NAME_VALUE = re.compile(r"[\"'](?:name|function|tool)[\"']\s*:\s*[\"']([\w.\-]+)[\"']")


# ------------------------------------------------------------------------------------------------ paths


def render_path(path: Sequence[Any]) -> str:
    """JSON path as ``edits[0].requireUnique``; the root is ``$``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif re.fullmatch(r"[A-Za-z_$][\w$\-]*", part):
            out += f".{part}" if out else part
        else:
            out += f"[{json.dumps(part)}]"
    return out or "$"


# ---------------------------------------------------------------------------------------------- catalog

_CATALOG: dict[str, Tool] | None = None


def _catalog() -> dict[str, Tool]:
    global _CATALOG
    if _CATALOG is None:
        cat = tool_catalog()
        _CATALOG = dict(cat) if isinstance(cat, dict) else {t.name: t for t in cat}
    return _CATALOG


def toolset_tools(toolset: str) -> list[Tool]:
    """The tools a tool-set variant offers (``nested``, ``flat-edit``, ``multiedit``)."""
    if toolset not in TOOLSETS:
        raise ScoringError(f"unknown tool set {toolset!r}; known: {', '.join(TOOLSETS)}")
    return [_tool_by_name(name) for name in TOOLSETS[toolset]]


def _tool_by_name(name: str) -> Tool:
    cat = _catalog()
    if name not in cat:
        raise ScoringError(f"unknown tool {name!r} in the tool catalog; known: {', '.join(sorted(cat))}")
    return cat[name]


def _schema_props(schema: Any, root: Any) -> dict:
    schema = _resolve(schema, root)
    props = schema.get("properties") if isinstance(schema, dict) else None
    return props if isinstance(props, dict) else {}


def _resolve(schema: Any, root: Any) -> Any:
    for _ in range(32):
        if not (isinstance(schema, dict) and isinstance(schema.get("$ref"), str)):
            return schema
        ref = schema["$ref"]
        if not ref.startswith("#"):
            return schema
        target: Any = root
        for part in [p for p in ref[1:].split("/") if p]:
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(target, dict) or part not in target:
                return {}
            target = target[part]
        schema = target
    return schema


def _tool_keys(tool: Tool) -> tuple[set[str], set[str]]:
    """(top-level property names and aliases, property names and aliases at any depth)."""
    params = tool.parameters
    top = set(_schema_props(params, params))
    every: set[str] = set()

    def walk(s: Any, depth: int) -> None:
        if depth > 20 or not isinstance(s, dict):
            return
        for k, v in (s.get("properties") or {}).items():
            every.add(k)
            walk(v, depth + 1)
        for key in ("items", "additionalProperties"):
            walk(s.get(key), depth + 1)
        for key in ("anyOf", "oneOf", "allOf", "prefixItems"):
            for sub in s.get(key) or []:
                walk(sub, depth + 1)
        for sub in (s.get("$defs") or {}).values():
            walk(sub, depth + 1)

    walk(params, 0)
    for pattern, names in (tool.aliases or {}).items():
        every.update(names)
        if "." not in pattern and "[" not in pattern:
            top.update(names)
    return top, every | top


# -------------------------------------------------------------------------------------------- extraction


@dataclass
class _Ctx:
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


def extract_calls(
    text: str,
    *,
    wire: str | None = None,
    tools: Sequence[Tool] | None = None,
    expected_tool: str | None = None,
    lenient: bool = False,
) -> list[ExtractedCall]:
    """Every tool call in ``text``, in order of position, whatever its wrapping.

    ``tools`` (default: the whole catalog) decides which bare objects count as arguments and how antml
    parameters are typed; with ``wire="json"`` the first JSON object is the arguments of ``expected_tool``.
    ``lenient=True`` repairs string escapes while parsing and lists them in ``ExtractedCall.fixes``.
    """
    ctx = _Ctx(list(tools) if tools is not None else list(_catalog().values()), wire, expected_tool, lenient)
    taken = _Spans()
    calls: list[ExtractedCall] = []

    def free(a: int, b: int) -> bool:
        return taken.free(a, b)

    covers = _json_covers(text)

    def markup_free(a: int, b: int) -> bool:
        """Free, and not inside a balanced JSON value (a string may hold markup as content)."""
        return taken.free(a, b) and covers.free(a, a + 1)

    # Regions that are never calls: reasoning and invented tool results.
    for m in _SKIP_REGIONS.finditer(text):
        taken.append(m.span())

    for span, body, closed in _hermes_regions(text):
        if not markup_free(*span):
            continue
        taken.append(span)
        calls.extend(
            _from_region(text[body[0] : body[1]], body[0], span, text, ctx, "hermes", must=True, closed=closed)
        )
    for m in _FUNCTION_CALLS.finditer(text):
        if not markup_free(*m.span()):
            continue
        taken.append(m.span())
        found = [_from_invoke(im, m.start(1), ctx) for im in _INVOKE.finditer(m.group(1))]
        if not found:
            found = [
                _failed(
                    text,
                    m.span(),
                    "antml",
                    "no <invoke> inside <function_calls>",
                    unbalanced=m.group(2) is None,
                )
            ]
        elif m.group(2) is None:  # the stop string may have eaten the closing tag
            for c in found:
                c.flags.append("unclosed_wrapper")
        if len(found) == 1:
            found[0].span = m.span()
            found[0].raw = m.group()
        calls.extend(found)
    for m in _INVOKE.finditer(text):
        if markup_free(*m.span()):
            taken.append(m.span())
            calls.append(_from_invoke(m, 0, ctx))
    for m in _HARMONY.finditer(text):
        if not markup_free(m.start(), m.end()):
            continue
        body = _HARMONY_END.search(text, m.end())
        end = body.start() if body else len(text)
        span = (m.start(), body.end() if body else len(text))
        taken.append(span)
        found = _from_region(
            text[m.end() : end],
            m.end(),
            span,
            text,
            ctx,
            "harmony",
            must=True,
            closed=body is not None,
            force_args=True,
        )
        for c in found:
            c.name = m.group("name")
            c.shape = "markup"
        calls.extend(found)
    for m in _HARMONY_HEADER_ONLY.finditer(text):
        if markup_free(*m.span()):
            taken.append((m.start(), len(text)))
            calls.append(
                _failed(
                    text,
                    (m.start(), len(text)),
                    "harmony",
                    "harmony call without <|message|>",
                    unbalanced=True,
                    name=m.group("name"),
                )
            )
    for m in _FENCE.finditer(text):
        if not markup_free(*m.span()):
            continue
        found = _from_region(
            m.group(2),
            m.start(2),
            m.span(),
            text,
            ctx,
            "fenced-json",
            must=False,
            closed=m.group(3) is not None,
        )
        if found:
            taken.append(m.span())
            calls.extend(found)
    calls.extend(_python_calls(text, ctx, free, taken, "python-call"))
    calls.extend(_bare_json(text, ctx, free, taken))
    calls.sort(key=lambda c: c.span)

    prose = _prose(text, [c.span for c in calls])
    for c in calls:
        if c.wrapping == "bare":
            c.wrapping = "json-in-prose" if prose else "bare-json"
    return calls


class _Spans:
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


def _json_covers(text: str) -> _Spans:
    """Spans of the balanced JSON values in ``text`` (outermost first), found in one linear pass."""
    covers = _Spans()
    scanner = _BalancedScanner(text)
    pos = 0
    while True:
        m = _JSON_START.search(text, pos)
        if m is None:
            return covers
        end = scanner.end(m.start())
        if end is None:
            pos = m.start() + 1
        else:
            covers.append((m.start(), end))
            pos = end


def _hermes_regions(text: str) -> list[tuple[tuple[int, int], tuple[int, int], bool]]:
    """(span, body span, closed) of each ``<tool_call>`` region. A region ends at ``</tool_call>``, or
    at the next ``<tool_call>`` when the closing tag is missing, unless that tag lies inside the
    region's balanced JSON (a string value may contain it): then the first tag after the JSON decides."""
    out = []
    pos = 0
    scanner = _BalancedScanner(text)
    while True:
        m = _HERMES.search(text, pos)
        if m is None:
            return out
        end, body_end, closed = m.end(), m.end(1), m.group(2) is not None
        if m.end(1) < len(text):  # stopped at a tag: is that tag inside the region's JSON?
            brace = re.search(r"[\[{]", text[m.start(1) : m.end(1)])
            json_end = scanner.end(m.start(1) + brace.start()) if brace else None
            if json_end is not None and json_end > m.end(1):
                close = _HERMES_CLOSE.search(text, json_end)
                nxt = _HERMES_OPEN.search(text, json_end)
                if close and (nxt is None or close.start() < nxt.start()):
                    body_end, end, closed = close.start(), close.end(), True
                else:
                    body_end = end = nxt.start() if nxt else len(text)
        out.append(((m.start(), end), (m.start(1), body_end), closed))
        pos = max(end, m.start() + 1)


_HERMES_OPEN = re.compile(r"<tool_call>")
_HERMES_CLOSE = re.compile(r"</tool_call>")
_SKIP_REGIONS = re.compile(r"<think>.*?</think>|<tool_response>.*?(?:</tool_response>|\Z)", re.S)
_HERMES = re.compile(r"<tool_call>(.*?)(?:(</tool_call>)|(?=<tool_call>)|\Z)", re.S)
_FUNCTION_CALLS = re.compile(r"<(?:antml:)?function_calls>(.*?)(?:(</(?:antml:)?function_calls>)|\Z)", re.S)
_INVOKE = re.compile(
    r"<(?:antml:)?invoke\s+name\s*=\s*\"([^\"]*)\"\s*>(.*?)(?:(</(?:antml:)?invoke>)|\Z)", re.S
)
_PARAMETER = re.compile(
    r"<(?:antml:)?parameter\s+name\s*=\s*\"([^\"]*)\"\s*>(.*?)(?:(</(?:antml:)?parameter>)|(?=<(?:antml:)?parameter\b)|\Z)",
    re.S,
)
_HARMONY = re.compile(
    r"(?:<\|start\|>\s*assistant\s*)?(?:<\|channel\|>\s*\w+\s*)?to=functions\.(?P<name>[\w\-.]+)"
    r"(?:(?!<\|message\|>|<\|start\|>|<\|end\|>|<\|call\|>).){0,200}?<\|message\|>",
    re.S,
)
_HARMONY_HEADER_ONLY = re.compile(
    r"(?:<\|start\|>\s*assistant\s*)?(?:<\|channel\|>\s*\w+\s*)?to=functions\.(?P<name>[\w\-.]+)"
    r"(?:(?!<\|message\|>|<\|start\|>|<\|end\|>|<\|call\|>).){0,200}\Z",
    re.S,
)
_HARMONY_END = re.compile(r"<\|(?:call|end|return|start)\|>")
_FENCE = re.compile(r"```[ \t]*([\w+\-]*)[^\n]*\n(.*?)(?:(```)|\Z)", re.S)
_SPECIAL = re.compile(r"<\|[^|<>\s]{1,40}\|>|</?s>|<eos>|<end_of_turn>|<start_of_turn>(?:model)?")


def _prose(text: str, spans: Sequence[tuple[int, int]]) -> str:
    """Visible text outside the call spans, without special tokens and reasoning blocks."""
    pieces = []
    pos = 0
    for a, b in sorted(spans):
        if a > pos:
            pieces.append(text[pos:a])
        pos = max(pos, b)
    pieces.append(text[pos:])
    rest = "".join(pieces)
    rest = re.sub(r"<think>.*?</think>", "", rest, flags=re.S)
    rest = _SPECIAL.sub("", rest)
    return rest.strip()


def _failed(
    text: str,
    span: tuple[int, int],
    wrapping: str,
    error: str,
    *,
    unbalanced: bool = False,
    name: str | None = None,
) -> ExtractedCall:
    raw = text[span[0] : span[1]]
    if name is None:
        m = _NAME_VALUE.search(raw)
        name = m.group(1) if m else None
    return ExtractedCall(
        name=name,
        arguments=None,
        raw=raw,
        wrapping=wrapping,
        span=span,
        shape="args",
        error=error,
        unbalanced=unbalanced,
    )


def _from_region(
    content: str,
    offset: int,
    span: tuple[int, int],
    text: str,
    ctx: _Ctx,
    wrapping: str,
    *,
    must: bool,
    closed: bool,
    force_args: bool = False,
) -> list[ExtractedCall]:
    """Calls inside a delimited region (tag body, fenced block, harmony message)."""
    m = re.search(r"[\[{]", content)
    if not force_args and (m is None or re.match(r"\s*[A-Za-z_][\w.]*\s*\(", content)):
        found = _python_calls(content, ctx, lambda a, b: True, [], wrapping)
        for c in found:
            c.span = span
            c.raw = text[span[0] : span[1]]
        if found:
            return found
    if m is None:
        if must:
            reason = "no JSON in the call" if closed else "the call ends before its JSON"
            return [_failed(text, span, wrapping, reason, unbalanced=not closed)]
        return []
    start = m.start()
    end = _scan_balanced(content, start)
    if end is None:
        if must or _keyish(content[start:], ctx):
            return [_failed(text, span, wrapping, "unterminated JSON", unbalanced=True)]
        return []
    src = content[start:end]
    try:
        parsed = _loads(src, lenient=ctx.lenient)
    except _ParseError as err:
        if must or _keyish(src, ctx):
            return [_failed(text, span, wrapping, f"invalid JSON: {err}")]
        return []
    found = _interpret(parsed, ctx, must=must, force_args=force_args)
    for c in found:
        c.raw = text[span[0] : span[1]]
        c.wrapping = wrapping
        c.span = span
        if not closed and c.error is None and wrapping != "fenced-json":
            c.flags.append("unclosed_wrapper")
    return found


def _keyish(src: str, ctx: _Ctx) -> bool:
    """Whether unparseable JSON-like text is an attempt at a call (not, say, a dict literal in code): it names
    a known tool, opens an arguments object, or uses two keys of the candidate tools."""
    m = _NAME_VALUE.search(src)
    if m and (m.group(1) in ctx.names() or m.group(1) in _catalog()):
        return True
    if _ARGS_OPEN.search(src):
        return True
    keys = set(_KEYISH.findall(src))
    return any(len(keys & _tool_keys(t)[1]) >= 2 for t in ctx.candidates())


_ARGS_OPEN = re.compile(r"[\"'](?:arguments|parameters)[\"']\s*:\s*[{\"']")


def _bare_json(text: str, ctx: _Ctx, free: Any, taken: _Spans) -> list[ExtractedCall]:
    calls: list[ExtractedCall] = []
    pos = 0
    first_attempt = ctx.wire == "json"
    scanner = _BalancedScanner(text)
    tail_keyish = _SuffixKeyish(text, ctx)
    # Closed spans that do not parse are searched again for JSON inside them; the bytes re-read that
    # way are bounded so that scoring stays linear in the length of the text.
    budget = 8 * len(text) + (1 << 16)
    while True:
        m = _JSON_START.search(text, pos)
        if m is None:
            break
        start = m.start()
        if not free(start, start + 1):
            pos = start + 1
            continue
        end = scanner.end(start)
        if end is not None and not free(start, end):  # runs into a call found earlier: not JSON
            pos = start + 1
            continue
        if end is None:
            if free(start, len(text)) and (tail_keyish.holds(start) or (first_attempt and not calls)):
                span = (start, len(text))
                calls.append(_failed(text, span, "bare", "unterminated JSON", unbalanced=True))
                taken.append(span)
                break
            pos = start + 1
            continue
        src = text[start:end]
        budget -= 2 * len(src)
        try:
            parsed = _loads(src, lenient=ctx.lenient)
        except _ParseError as err:
            if _keyish(src, ctx) or (first_attempt and not calls):
                calls.append(_failed(text, (start, end), "bare", f"invalid JSON: {err}"))
                taken.append((start, end))
                pos = end
            else:
                pos = start + 1 if budget > 0 else end
            continue
        found = _interpret(parsed, ctx, must=first_attempt and not calls, force_args=False)
        if not found:
            found = _nested_envelopes(parsed, ctx)
        for c in found:
            c.raw = src
            c.wrapping = "bare"
            c.span = (start, end)
        calls.extend(found)
        if found:
            taken.append((start, end))
        pos = end
    return calls


def _interpret(parsed: _Parsed, ctx: _Ctx, *, must: bool, force_args: bool) -> list[ExtractedCall]:
    value = parsed.value
    if force_args:
        return [_make_call(None, value, (), parsed, "args", [], ctx.lenient)]
    if isinstance(value, list):
        out: list[ExtractedCall] = []
        for i, item in enumerate(value):
            if isinstance(item, dict):
                out.extend(_interpret_object(item, (i,), parsed, ctx, must=False))
        if not out and must:
            out = [ExtractedCall(None, None, "", "", (0, 0), error="the JSON list holds no call")]
        return out
    if isinstance(value, dict):
        return _interpret_object(value, (), parsed, ctx, must=must)
    if must:
        return [ExtractedCall(None, None, "", "", (0, 0), error="the call is not a JSON object")]
    return []


def _interpret_object(
    obj: dict, prefix: tuple, parsed: _Parsed, ctx: _Ctx, *, must: bool
) -> list[ExtractedCall]:
    env = _envelope(obj, ctx, strong=must)
    if env is not None:
        if env.args_path:
            args: Any = obj
            for part in env.args_path:
                args = args[part]
        else:  # flat envelope: the arguments are the other keys
            args = {k: v for k, v in obj.items() if k != env.name_key}
        return [
            _make_call(env.name, args, (*prefix, *env.args_path), parsed, env.shape, env.flags, ctx.lenient)
        ]
    if must or ctx.wire == "json" or _looks_like_args(obj, ctx):
        return [_make_call(None, obj, prefix, parsed, "args", [], ctx.lenient)]
    return []


def _make_call(
    name: str | None,
    args: Any,
    args_path: tuple,
    parsed: _Parsed,
    shape: str,
    flags: list[str],
    lenient: bool,
) -> ExtractedCall:
    fixes = []
    for path, before, after in parsed.fixes:
        if tuple(path[: len(args_path)]) == tuple(args_path):
            fixes.append((render_path(path[len(args_path) :]), before, after))
    call = ExtractedCall(
        name=name,
        arguments=args,
        raw="",
        wrapping="",
        span=(0, 0),
        shape=shape,
        duplicate_keys=list(parsed.dups),
        flags=list(flags),
        fixes=fixes,
    )
    if isinstance(args, str) and args.strip()[:1] in ("{", "["):
        try:
            inner = _loads(args.strip(), lenient=lenient)
        except _ParseError as err:
            call.error = f"arguments given as a string that is not JSON: {err}"
        else:
            call.arguments = inner.value
            call.duplicate_keys += inner.dups
            call.fixes += [(render_path(p), b, a) for p, b, a in inner.fixes]
            call.flags.append("arguments_as_string")
    return call


@dataclass
class _Envelope:
    name: str
    args_path: tuple  # () for a flat envelope (arguments beside the name)
    shape: str
    flags: list[str]
    name_key: str


def _envelope(obj: dict, ctx: _Ctx, *, strong: bool) -> _Envelope | None:
    """How ``obj`` wraps a call (name and where the arguments are), or None when it is not an envelope."""
    exp = ctx.tool(ctx.expected)
    own = set(_schema_props(exp.parameters, exp.parameters)) if exp is not None else set()
    if ctx.wire == "json" and own & set(obj):
        return None
    for key in ("function", "tool", "tool_call", "call"):
        inner = obj.get(key)
        if isinstance(inner, dict) and isinstance(inner.get("name"), str):
            sub = _envelope(inner, ctx, strong=True)
            if sub is None or not sub.args_path:
                return None
            return _Envelope(sub.name, (key, *sub.args_path), "openai", sub.flags, sub.name_key)
    name_key = next((k for k in NAME_KEYS if isinstance(obj.get(k), str)), None)
    if name_key is None:
        return None
    name = obj[name_key]
    flags = [] if name_key == "name" else ["name_key_variant"]
    args_key = next((k for k in ARGS_KEYS if k in obj), None)
    known = name in ctx.names() or name in _catalog()
    if args_key is not None:
        if not (strong or known or isinstance(obj[args_key], dict | str)):
            return None
        if args_key != "arguments":
            flags.append("arguments_key_variant")
        return _Envelope(name, (args_key,), "call-json", flags, name_key)
    if not (strong or known):
        return None
    return _Envelope(name, (), "flat", [*flags, "flat_envelope"], name_key)


def _looks_like_args(obj: dict, ctx: _Ctx) -> bool:
    keys = set(obj)
    if not keys:
        return False
    for t in ctx.candidates():
        top, every = _tool_keys(t)
        if keys & top and 2 * len(keys & every) >= len(keys):
            return True
    return False


def _nested_envelopes(parsed: _Parsed, ctx: _Ctx) -> list[ExtractedCall]:
    """Call envelopes inside a JSON value that is not itself a call (``{"tool_calls": [...]}``)."""
    out: list[ExtractedCall] = []

    def walk(v: Any, path: tuple, depth: int) -> None:
        if depth > 4:
            return
        if isinstance(v, dict):
            env = _envelope(v, ctx, strong=False) if depth else None
            if env is not None and env.args_path:
                args: Any = v
                for part in env.args_path:
                    args = args[part]
                out.append(
                    _make_call(
                        env.name, args, (*path, *env.args_path), parsed, "nested", env.flags, ctx.lenient
                    )
                )
                return
            for k, sub in v.items():
                walk(sub, (*path, k), depth + 1)
        elif isinstance(v, list):
            for i, sub in enumerate(v):
                walk(sub, (*path, i), depth + 1)

    walk(parsed.value, (), 0)
    return out


def _from_invoke(m: re.Match, offset: int, ctx: _Ctx) -> ExtractedCall:
    name, body = m.group(1), m.group(2)
    tool = ctx.tool(name) or _catalog().get(name)
    props = _schema_props(tool.parameters, tool.parameters) if tool is not None else {}
    root = tool.parameters if tool is not None else {}
    args: dict[str, Any] = {}
    dups: list[str] = []
    fixes: list[tuple[str, Any, Any]] = []
    error = None
    unbalanced = False
    params = list(_PARAMETER.finditer(body))
    for pm in params:
        key, raw = pm.group(1), pm.group(2)
        if pm.group(3) is None:
            unbalanced = True
            error = error or f"parameter {key!r} is not closed"
        if key in args:
            dups.append(key)
        types = _types(_resolve(props.get(key), root)) if key in props else None
        if types == {"string"}:
            args[key] = raw
            continue
        try:
            parsed = _loads(raw.strip(), lenient=ctx.lenient)
        except _ParseError as err:
            if types is None or "string" in types:
                args[key] = raw
            else:
                error = error or f"parameter {key!r} is not JSON: {err}"
                args[key] = raw
            continue
        if types is None and not isinstance(parsed.value, dict | list):
            args[key] = raw if not isinstance(parsed.value, bool | int | float) else parsed.value
        else:
            args[key] = parsed.value
        dups += parsed.dups
        fixes += [(render_path((key, *p)), b, a) for p, b, a in parsed.fixes]
    if not params and body.strip():
        error = error or "no <parameter> inside <invoke>"
    flags = []
    if m.group(3) is None:
        tail = body[params[-1].end() :] if params else body
        if error is None and params and not tail.strip():
            flags.append("unclosed_wrapper")  # complete parameters, closing tag missing (a stop string?)
        else:
            error = error or "<invoke> is not closed"
    start = offset + m.start()
    return ExtractedCall(
        name=name,
        arguments=args,
        raw=m.group(),
        wrapping="antml",
        span=(start, offset + m.end()),
        shape="markup",
        error=error,
        unbalanced=unbalanced or m.group(3) is None,
        duplicate_keys=dups,
        fixes=fixes,
        flags=flags,
    )


def _types(schema: Any) -> set[str] | None:
    if not isinstance(schema, dict):
        return None
    t = schema.get("type")
    if isinstance(t, str):
        return {t}
    if isinstance(t, list):
        return {x for x in t if isinstance(x, str)}
    if "enum" in schema and all(isinstance(x, str) for x in schema["enum"]):
        return {"string"}
    if "properties" in schema:
        return {"object"}
    if "items" in schema:
        return {"array"}
    return None


_PY_MAX_TRIES = 64


def _python_calls(
    text: str, ctx: _Ctx, free: Any, taken: _Spans | list[tuple[int, int]], wrapping: str
) -> list[ExtractedCall]:
    names = sorted(ctx.names(), key=len, reverse=True)
    if not names:
        return []
    rx = re.compile(r"(?<![\w.])(" + "|".join(re.escape(n) for n in names) + r")\s*\(")
    out: list[ExtractedCall] = []
    for m in rx.finditer(text):
        if not free(m.start(), m.end()) or any(c.span[0] <= m.start() < c.span[1] for c in out):
            continue
        node = None
        pos = m.end()
        for _ in range(_PY_MAX_TRIES):
            close = text.find(")", pos)
            if close < 0:
                break
            try:
                tree = ast.parse(text[m.start() : close + 1], mode="eval")
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                pos = close + 1
                continue
            node = (tree.body, close + 1)
            break
        if node is None:
            continue
        call, end = node
        if not isinstance(call, ast.Call) or call.args or not call.keywords:
            continue
        if any(kw.arg is None for kw in call.keywords):
            continue
        args: dict[str, Any] = {}
        error = None
        dups = []
        for kw in call.keywords:
            try:
                value = _literal(kw.value, 0)
            except ValueError as err:
                error = error or f"argument {kw.arg!r} is not a literal: {err}"
                value = None
            if kw.arg in args:
                dups.append(kw.arg)
            args[str(kw.arg)] = value
        span = (m.start(), end)
        taken.append(span)
        out.append(
            ExtractedCall(
                name=m.group(1),
                arguments=args if error is None else None,
                raw=text[span[0] : end],
                wrapping=wrapping,
                span=span,
                shape="python",
                error=error,
                duplicate_keys=dups,
            )
        )
    return out


def _literal(node: ast.AST, depth: int) -> Any:
    if depth > 100:
        raise ValueError("nested too deep")
    if isinstance(node, ast.Constant) and isinstance(node.value, str | int | float | bool | type(None)):
        return node.value
    if isinstance(node, ast.Name) and node.id in ("true", "false", "null", "True", "False", "None"):
        return {"true": True, "True": True, "false": False, "False": False}.get(node.id)
    if isinstance(node, ast.List | ast.Tuple):
        return [_literal(e, depth + 1) for e in node.elts]
    if isinstance(node, ast.Dict):
        out = {}
        for k, v in zip(node.keys, node.values, strict=True):
            if not (isinstance(k, ast.Constant) and isinstance(k.value, str)):
                raise ValueError("dict keys must be strings")
            out[k.value] = _literal(v, depth + 1)
        return out
    if (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.USub)
        and isinstance(node.operand, ast.Constant)
        and isinstance(node.operand.value, int | float)
        and not isinstance(node.operand.value, bool)
    ):
        return -node.operand.value
    raise ValueError(type(node).__name__)


def primary_call(calls: Sequence[ExtractedCall], expected_tool: str | None) -> ExtractedCall | None:
    """The call a sample is scored on: a parsed call to the expected tool, else a broken call that may be one,
    else a parsed call to another tool, else the first call."""
    if not calls:
        return None

    def targets(c: ExtractedCall) -> bool:
        return expected_tool is None or c.name is None or c.name == expected_tool

    for c in calls:
        if c.error is None and targets(c):
            return c
    for c in calls:
        if c.error is not None and targets(c):
            return c
    for c in calls:
        if c.error is None:
            return c
    return calls[0]


# ------------------------------------------------------------------------------------------ validation

_VALIDATORS: dict[tuple[str, str], tuple[Any, dict]] = {}


def _validator(tool: Tool) -> tuple[Any, dict]:
    key = (tool.name, json.dumps(tool.parameters, sort_keys=True, default=str))
    if key not in _VALIDATORS:
        schema = strictify(tool.parameters)
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        _VALIDATORS[key] = (cls(schema), schema)
    return _VALIDATORS[key]


@dataclass
class _Check:
    invented: list[dict]
    invented_errors: list[str]
    missing: list[str]
    other: list[str]

    @property
    def errors(self) -> list[str]:
        return self.invented_errors + self.missing + self.other


def _short(message: str, limit: int = 240) -> str:
    message = " ".join(message.split())
    return message if len(message) <= limit else message[: limit - 1] + "…"


def _path_key(path: Sequence[Any]) -> tuple:
    return tuple((0, p, "") if isinstance(p, int) else (1, 0, str(p)) for p in path)


def _check(arguments: Any, tool: Tool) -> _Check:
    validator, schema = _validator(tool)
    invented: list[tuple[tuple, dict]] = []
    missing: list[tuple[tuple, str]] = []
    other: list[tuple[tuple, str]] = []
    inv_err: list[tuple[tuple, str]] = []
    try:
        errors = list(validator.iter_errors(arguments))
    except RecursionError:
        return _Check([], [], [], ["$: arguments nested too deep"])
    for err in errors:
        path = list(err.absolute_path)
        where = render_path(path)
        if err.validator == "additionalProperties" and isinstance(err.instance, dict):
            props = err.schema.get("properties") or {}
            patterns = list(err.schema.get("patternProperties") or {})
            for k, v in err.instance.items():
                if k in props or any(re.search(p, k) for p in patterns):
                    continue
                invented.append(
                    (_path_key([*path, k]), {"path": render_path([*path, k]), "key": k, "value": v})
                )
            inv_err.append((_path_key(path), f"{where}: {_short(err.message)}"))
        elif err.validator == "unevaluatedProperties" and isinstance(err.instance, dict):
            for k in _unexpected_keys(err.message):
                if k in err.instance:
                    invented.append(
                        (
                            _path_key([*path, k]),
                            {"path": render_path([*path, k]), "key": k, "value": err.instance[k]},
                        )
                    )
            inv_err.append((_path_key(path), f"{where}: {_short(err.message)}"))
        elif err.validator == "required":
            missing.append((_path_key(path), f"{where}: {_short(err.message)}"))
        else:
            other.append((_path_key(path), f"{where}: {_short(err.message)}"))

    def ordered(items: list[tuple[tuple, Any]]) -> list:
        return [x for _, x in sorted(items, key=lambda t: t[0])]

    unique = {item["path"]: (key, item) for key, item in reversed(invented)}  # one entry per path
    return _Check(ordered(list(unique.values())), ordered(inv_err), ordered(missing), ordered(other))


def strict_schema(tool: Tool) -> dict:
    """The tool's parameters schema with every object closed (what strict decoding enforces)."""
    return _validator(tool)[1]


def _unexpected_keys(message: str) -> list[str]:
    """Key names from jsonschema's "... ('a', 'b' were unexpected)" message."""
    m = re.search(r"\((.*) (?:was|were) unexpected\)", message, re.S)
    if not m:
        return []
    try:
        keys = ast.literal_eval("(" + m.group(1) + ",)")
    except (ValueError, SyntaxError):
        return []
    return [k for k in keys if isinstance(k, str)]


def validate_arguments(arguments: Any, tool: Tool) -> list[str]:
    """Messages (``path: message``) of every violation of the tool's strictified schema; empty when valid."""
    return _check(arguments, tool).errors


# ----------------------------------------------------------------------------------------- schema echo

_SCHEMA_WORDS = {
    "additionalProperties",
    "properties",
    "required",
    "items",
    "$schema",
    "$ref",
    "$defs",
    "minItems",
    "maxItems",
    "minLength",
    "maxLength",
    "prefixItems",
    "anyOf",
    "oneOf",
    "allOf",
    "const",
    "pattern",
    "enum",
    "patternProperties",
    "unevaluatedProperties",
}
_TYPE_NAMES = {"string", "object", "array", "boolean", "integer", "number", "null"}


def _descriptions(tool: Tool) -> set[str]:
    out = {tool.description.strip()} if isinstance(tool.description, str) else set()

    def walk(s: Any, depth: int) -> None:
        if depth > 30:
            return
        if isinstance(s, dict):
            d = s.get("description")
            if isinstance(d, str):
                out.add(d.strip())
            for v in s.values():
                walk(v, depth + 1)
        elif isinstance(s, list):
            for v in s:
                walk(v, depth + 1)

    walk(tool.parameters, 0)
    return {d for d in out if len(d) >= 8}


def schema_echo(arguments: Any, tool: Tool, invented: Sequence[dict]) -> list[str]:
    """Paths where the arguments copy the tool's schema: schema keywords as invented keys, a property's
    type or schema as its value, a value equal to a description."""
    hits: list[str] = []
    descriptions = _descriptions(tool)
    for item in invented:
        key, value = item["key"], item["value"]
        if (
            key in _SCHEMA_WORDS
            or (key == "type" and (value in _TYPE_NAMES or isinstance(value, dict)))
            or (key in ("description", "title") and isinstance(value, str) and value.strip() in descriptions)
        ):
            hits.append(item["path"])

    def walk(v: Any, path: list, depth: int) -> None:
        if depth > 50:
            return
        if isinstance(v, str):
            if v.strip() in descriptions:
                hits.append(render_path(path))
        elif isinstance(v, dict):
            t = v.get("type")
            if (
                isinstance(t, str)
                and t in _TYPE_NAMES
                and path
                and (len(v) == 1 or {"description", "properties", "items"} & set(v))
            ):
                hits.append(render_path(path))
                return
            for k, sub in v.items():
                walk(sub, [*path, k], depth + 1)
        elif isinstance(v, list):
            for i, sub in enumerate(v):
                walk(sub, [*path, i], depth + 1)

    walk(arguments, [], 0)
    return sorted(set(hits))


# --------------------------------------------------------------------------------------------- payload


def _edit_keys(tool: Tool) -> tuple[str | None, str | None, str | None]:
    """(array property holding edits or None for a flat tool, old-text key, new-text key)."""
    props = _schema_props(tool.parameters, tool.parameters)

    def pick(names: Sequence[str]) -> tuple[str | None, str | None]:
        old = next((n for n in names if n.lower().startswith("old")), None)
        new = next((n for n in names if n.lower().startswith("new")), None)
        return old, new

    for key, sub in props.items():
        item_props = _schema_props(
            _resolve(sub, tool.parameters).get("items") if isinstance(sub, dict) else None, tool.parameters
        )
        old, new = pick(list(item_props))
        if old and new:
            return key, old, new
    old, new = pick(list(props))
    return None, old, new


def _path_key_of(tool: Tool) -> str | None:
    props = _schema_props(tool.parameters, tool.parameters)
    return next((k for k in ("path", "file_path", "filePath", "file") if k in props), None)


def is_edit_tool(tool: Tool) -> bool:
    _, old, new = _edit_keys(tool)
    return bool(old and new)


def _occurrences(haystack: str, needle: str) -> int:
    """Occurrences of ``needle`` (overlapping ones too), capped at 2."""
    if not needle:
        return 2
    first = haystack.find(needle)
    if first < 0:
        return 0
    return 1 if haystack.find(needle, first + 1) < 0 else 2


def check_payload(arguments: Any, tool: Tool, scenario: Scenario) -> dict | None:
    """The edits of a call against the scenario's gold; None when the call carries no edits."""
    if not isinstance(arguments, dict) or not is_edit_tool(tool):
        return None
    array_key, old_key, new_key = _edit_keys(tool)
    pairs: list[tuple[Any, Any]]
    if array_key is not None:
        items = arguments.get(array_key)
        if not isinstance(items, list):
            return None
        pairs = [(i.get(old_key), i.get(new_key)) if isinstance(i, dict) else (None, None) for i in items]
    else:
        if old_key not in arguments and new_key not in arguments:
            return None
        pairs = [(arguments.get(old_key), arguments.get(new_key))]
    content = scenario.content
    strings = all(isinstance(o, str) and isinstance(n, str) for o, n in pairs)
    old_unique = bool(pairs) and strings and all(_occurrences(content, o) == 1 for o, _ in pairs)
    applies = False
    result = None
    if pairs and strings:
        try:
            result = apply_edits(content, tuple(Edit(old_text=o, new_text=n) for o, n in pairs))
            applies = True
        except ScenarioError:
            applies = False
    gold_new = [e.new_text for e in scenario.edits]
    path_key = _path_key_of(tool)
    return {
        "old_unique": old_unique,
        "applies": applies,
        "file_correct": bool(applies and result == scenario.expected),
        "newtext_equal": [n for _, n in pairs] == gold_new,
        "path_equal": path_key is not None and arguments.get(path_key) == scenario.path,
        "n_edits": len(pairs),
        "n_gold": len(scenario.edits),
    }


# --------------------------------------------------------------------------------------------- scoring


def score_text(
    text: str,
    tools: Sequence[Tool],
    *,
    wire: str | None = None,
    expected_tool: str | None = None,
    scenario: Scenario | None = None,
    finish_reason: str | None = None,
) -> Verdict:
    """The verdict of one raw model output (the call text, prefill included)."""
    tools = list(tools)
    calls = extract_calls(text, wire=wire, tools=tools, expected_tool=expected_tool)
    flags: list[str] = []
    if len(calls) > 1:
        flags.append("multiple_calls")
    if calls and _prose(text, [c.span for c in calls]):
        flags.append("text_around_call")
    call = primary_call(calls, expected_tool)
    if call is None:
        return Verdict("no_call", flags, None, None, [], [], None, None, None, 0)
    base = dict(
        flags=flags,
        wrapping=call.wrapping,
        shape=call.shape,
        n_calls=len(calls),
        duplicate_keys=list(call.duplicate_keys),
    )
    for f in call.flags:
        if f in FLAGS and f not in flags:
            flags.append(f)
    if call.duplicate_keys:
        flags.append("duplicate_key")
    if call.error is not None and TOO_DEEP in call.error:
        return Verdict(
            "too_deep", tool=call.name, invented_keys=[], errors=[call.error], payload=None, arguments=None, **base
        )
    if call.error is not None or (call.unbalanced and finish_reason == "length"):
        cut = finish_reason == "length" or (finish_reason is None and call.unbalanced)
        return Verdict(
            "truncated" if cut else "json_syntax",
            tool=call.name,
            invented_keys=[],
            errors=[call.error or "the sample ends inside the call"],
            payload=None,
            arguments=None,
            **base,
        )

    by_name = {t.name: t for t in tools}
    name = call.name
    if name is None:
        if wire not in (None, "json"):
            flags.append("unnamed_call")
        name = expected_tool if expected_tool is not None else _best_tool(call.arguments, tools)
    tool = by_name.get(name) if name is not None else None
    if tool is None or (expected_tool is not None and name != expected_tool):
        why = (
            f"called {name!r}, expected {expected_tool!r}"
            if tool is not None
            else f"tool {name!r} is not offered"
        )
        return Verdict(
            "wrong_tool",
            tool=name,
            invented_keys=[],
            errors=[why],
            payload=None,
            arguments=call.arguments,
            **base,
        )

    check = _check(call.arguments, tool)
    if check.invented:
        verdict = "invented_key"
    elif check.missing:
        verdict = "missing_required"
    elif check.other:
        verdict = "wrong_type"
    else:
        verdict = "valid"
    if schema_echo(call.arguments, tool, check.invented):
        flags.append("schema_echo")
    payload = check_payload(call.arguments, tool, scenario) if scenario is not None else None
    if payload is not None and payload["file_correct"] and verdict != "valid":
        flags.append("payload_correct_schema_invalid")
    return Verdict(
        verdict,
        tool=tool.name,
        invented_keys=check.invented,
        errors=check.errors,
        payload=payload,
        arguments=call.arguments,
        **base,
    )


def _best_tool(arguments: Any, tools: Sequence[Tool]) -> str | None:
    if not isinstance(arguments, dict) or not tools:
        return tools[0].name if tools else None
    keys = set(arguments)
    return max(tools, key=lambda t: len(keys & _tool_keys(t)[1])).name


# ------------------------------------------------------------------------------------- public helpers
# What the repair library builds on: JSON parsing with the scorer's leniency and schema look-ups.

JSONParseError = _ParseError
ParsedJSON = _Parsed  # .value, .dups (keys seen twice), .fixes ((path, raw, value) of repaired strings)


def parse_json(src: str, *, lenient: bool = False) -> ParsedJSON:
    """Parse JSON as the scorer does (``lenient``: invalid string escapes kept as text, listed in
    ``.fixes``).

    Raises
    ------
    JSONParseError
        When ``src`` is not JSON (or nests deeper than ``MAX_JSON_DEPTH``).
    """
    return _loads(src, lenient=lenient)


def resolve_schema(schema: Any, root: Any) -> Any:
    """``schema`` with a local ``$ref`` followed (against ``root``)."""
    return _resolve(schema, root)


def schema_properties(schema: Any, root: Any) -> dict:
    """The ``properties`` of an object schema, ``$ref`` resolved (empty for anything else)."""
    return _schema_props(schema, root)


def schema_types(schema: Any) -> set[str] | None:
    """The JSON types a schema admits, or None when it does not say."""
    return _types(schema)


# ---------------------------------------------------------------------------------------------- records

_SCENARIOS: dict[tuple[str, tuple[str, ...]], Scenario] = {}


def record_context(
    record: dict, manifest: dict
) -> tuple[list[Tool], str | None, str | None, Scenario | None]:
    """(tools offered, wire, expected tool, scenario) of a raw sample record."""
    arm = record.get("arm") or {}
    toolset = arm.get("toolset") or "nested"
    if arm.get("tools"):
        tools = [_tool_by_name(n) for n in arm["tools"]]
    else:
        tools = toolset_tools(toolset)
    expected = arm.get("expected_tool") or EXPECTED_TOOL.get(toolset)
    scenario = None
    sid = record.get("scenario")
    if sid:
        config = manifest.get("config") if isinstance(manifest.get("config"), dict) else {}
        raw_dirs = manifest.get("scenario_dirs") or config.get("scenario_dirs")
        dirs = [Path(d) for d in raw_dirs] if raw_dirs else None
        key = (str(sid), tuple(str(d) for d in dirs or ()))
        if key not in _SCENARIOS:
            _SCENARIOS[key] = get_scenario(str(sid), dirs=dirs)
        scenario = _SCENARIOS[key]
    return tools, arm.get("wire"), expected, scenario


def score_record(record: dict, manifest: dict) -> dict:
    """One line of ``verdicts-<SCORER_VERSION>.jsonl``: the verdict of a raw sample as a JSON-able dict."""
    head = {
        "key": record.get("key"),
        "scorer": SCORER_VERSION,
        "arm": record.get("arm"),
        "scenario": record.get("scenario"),
    }
    if record.get("error"):
        return {**head, "verdict": None, "skipped": str(record["error"])}
    tools, wire, expected, scenario = record_context(record, manifest)
    text = (record.get("prefill") or "") + (record.get("text") or "")
    try:
        verdict = score_text(
            text,
            tools,
            wire=wire,
            expected_tool=expected,
            scenario=scenario,
            finish_reason=record.get("finish_reason"),
        )
        if json_depth(verdict.arguments) > MAX_JSON_DEPTH:
            raise RecursionError
        return {**head, **asdict(verdict)}
    except RecursionError:  # pathological nesting that got past the parsers' own guards
        deep = Verdict("too_deep", [], None, None, [], [TOO_DEEP], None, None, None, 0)
        return {**head, **asdict(deep)}
