"""Finding every tool call in a text, whatever its wrapping (``extract_calls``)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from tooldecode.grammar import Tool
from tooldecode.grammar.wire import (
    ANTML_BLOCK,
    ANTML_INVOKE_RE,
    ANTML_OPEN,
    HARMONY_END,
    HARMONY_HEADER_ONLY,
    HARMONY_MESSAGE,
    HARMONY_REGION,
    HERMES_CLOSE_RE,
    HERMES_OPEN_RE,
    HERMES_REGION,
)
from tooldecode.scoring.calls import call_from_invoke, interpret_parsed, nested_envelopes, python_calls
from tooldecode.scoring.jsonparse import JSONParseError, parse_json
from tooldecode.scoring.records import ExtractedCall
from tooldecode.scoring.scan import (
    ARGS_OPEN,
    JSON_START,
    KEYISH,
    NAME_VALUE,
    BalancedScanner,
    CallContext,
    SuffixKeyish,
    TakenSpans,
    scan_balanced,
)
from tooldecode.scoring.schemas import catalog_by_name, tool_keys


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
    ctx = CallContext(
        list(tools) if tools is not None else list(catalog_by_name().values()), wire, expected_tool, lenient
    )
    taken = TakenSpans()

    def free(a: int, b: int) -> bool:
        return taken.free(a, b)

    covers = _json_covers(text)

    def markup_free(a: int, b: int) -> bool:
        """Free, and not inside a balanced JSON value (a string may hold markup as content)."""
        return taken.free(a, b) and covers.free(a, a + 1)

    # Regions that are never calls: reasoning and invented tool results, unless the tag sits inside a
    # balanced JSON value (a string may hold ``<think>`` as content: the call around it is still a call).
    pos = 0
    while (m := _SKIP_REGIONS.search(text, pos)) is not None:
        if covers.free(m.start(), m.start() + 1):
            taken.append(m.span())
            pos = m.end()
        else:
            pos = m.start() + 1
    calls: list[ExtractedCall] = []
    # Markup first (its spans are taken before the JSON passes look), in this order.
    for markup_pass in (_hermes_calls, _antml_calls, _harmony_calls, _fenced_calls):
        calls.extend(markup_pass(text, ctx, taken, markup_free))
    calls.extend(python_calls(text, ctx, free, taken, "python-call"))
    calls.extend(_bare_json(text, ctx, free, taken))
    calls.sort(key=lambda c: c.span)

    prose = prose_outside(text, [c.span for c in calls])
    for c in calls:
        if c.wrapping == "bare":
            c.wrapping = "json-in-prose" if prose else "bare-json"
    return calls


_Free = Callable[[int, int], bool]


def _free_matches(pattern: re.Pattern[str], text: str, markup_free: _Free) -> Iterator[re.Match[str]]:
    """The matches of ``pattern`` in ``text`` whose span is markup-free when the pass reaches them
    (a match the pass takes makes the ones overlapping it not free)."""
    return (m for m in pattern.finditer(text) if markup_free(*m.span()))


def _hermes_calls(text: str, ctx: CallContext, taken: TakenSpans, markup_free: _Free) -> list[ExtractedCall]:
    """Calls inside ``<tool_call>`` tags."""
    calls: list[ExtractedCall] = []
    for span, body, closed in _hermes_regions(text):
        if not markup_free(*span):
            continue
        taken.append(span)
        calls.extend(
            _from_region(
                text[body[0] : body[1]], body[0], span, text, ctx, "hermes", must=True, closed=closed
            )
        )
    return calls


def _antml_calls(text: str, ctx: CallContext, taken: TakenSpans, markup_free: _Free) -> list[ExtractedCall]:
    """Calls in antml markup: ``<function_calls>`` blocks, then lone ``<invoke>`` elements."""
    calls: list[ExtractedCall] = []
    for m in _free_matches(ANTML_BLOCK, text, markup_free):
        taken.append(m.span())
        found = [call_from_invoke(im, m.start(1), ctx) for im in ANTML_INVOKE_RE.finditer(m.group(1))]
        if not found:
            found = [
                _failed(
                    text,
                    m.span(),
                    "antml",
                    f"no <invoke> inside {ANTML_OPEN}",
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
    for m in _free_matches(ANTML_INVOKE_RE, text, markup_free):
        taken.append(m.span())
        calls.append(call_from_invoke(m, 0, ctx))
    return calls


def _harmony_calls(text: str, ctx: CallContext, taken: TakenSpans, markup_free: _Free) -> list[ExtractedCall]:
    """Calls in harmony channels (``to=functions.NAME ... <|message|>``), headers without a body too."""
    calls: list[ExtractedCall] = []
    if "to=functions." not in text:  # both patterns need it; their optional heads make a scan slow
        return calls
    for m in _free_matches(HARMONY_REGION, text, markup_free):
        body = HARMONY_END.search(text, m.end())
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
    for m in _free_matches(HARMONY_HEADER_ONLY, text, markup_free):
        taken.append((m.start(), len(text)))
        calls.append(
            _failed(
                text,
                (m.start(), len(text)),
                "harmony",
                f"harmony call without {HARMONY_MESSAGE}",
                unbalanced=True,
                name=m.group("name"),
            )
        )
    return calls


def _fenced_calls(text: str, ctx: CallContext, taken: TakenSpans, markup_free: _Free) -> list[ExtractedCall]:
    """Calls in fenced code blocks (a fence holding no call is left to the other passes)."""
    calls: list[ExtractedCall] = []
    for m in _free_matches(_FENCE, text, markup_free):
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
    return calls


def _json_covers(text: str) -> TakenSpans:
    """Spans of the balanced JSON values in ``text`` (outermost first), found in one linear pass."""
    covers = TakenSpans()
    scanner = BalancedScanner(text)
    pos = 0
    while True:
        m = JSON_START.search(text, pos)
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
    out: list[tuple[tuple[int, int], tuple[int, int], bool]] = []
    pos = 0
    scanner = BalancedScanner(text)
    while True:
        m = HERMES_REGION.search(text, pos)
        if m is None:
            return out
        end, body_end, closed = m.end(), m.end(1), m.group(2) is not None
        if m.end(1) < len(text):  # stopped at a tag: is that tag inside the region's JSON?
            brace = re.search(r"[\[{]", text[m.start(1) : m.end(1)])
            json_end = scanner.end(m.start(1) + brace.start()) if brace else None
            if json_end is not None and json_end > m.end(1):
                close = HERMES_CLOSE_RE.search(text, json_end)
                nxt = HERMES_OPEN_RE.search(text, json_end)
                if close and (nxt is None or close.start() < nxt.start()):
                    body_end, end, closed = close.start(), close.end(), True
                else:
                    body_end = end = nxt.start() if nxt else len(text)
        out.append(((m.start(), end), (m.start(1), body_end), closed))
        pos = max(end, m.start() + 1)


_SKIP_REGIONS = re.compile(r"<think>.*?</think>|<tool_response>.*?(?:</tool_response>|\Z)", re.S)
_FENCE = re.compile(r"```[ \t]*([\w+\-]*)[^\n]*\n(.*?)(?:(```)|\Z)", re.S)
_SPECIAL = re.compile(r"<\|[^|<>\s]{1,40}\|>|</?s>|<eos>|<end_of_turn>|<start_of_turn>(?:model)?")


def prose_outside(text: str, spans: Sequence[tuple[int, int]]) -> str:
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
        m = NAME_VALUE.search(raw)
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
    ctx: CallContext,
    wrapping: str,
    *,
    must: bool,
    closed: bool,
    force_args: bool = False,
) -> list[ExtractedCall]:
    """Calls inside a delimited region (tag body, fenced block, harmony message)."""
    m = re.search(r"[\[{]", content)
    if not force_args and (m is None or re.match(r"\s*[A-Za-z_][\w.]*\s*\(", content)):
        found = python_calls(content, ctx, lambda a, b: True, [], wrapping)
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
    end = scan_balanced(content, start)
    if end is None:
        if must or _keyish(content[start:], ctx):
            return [_failed(text, span, wrapping, "unterminated JSON", unbalanced=True)]
        return []
    src = content[start:end]
    try:
        parsed = parse_json(src, lenient=ctx.lenient)
    except JSONParseError as err:
        if must or _keyish(src, ctx):
            return [_failed(text, span, wrapping, f"invalid JSON: {err}")]
        return []
    found = interpret_parsed(parsed, ctx, must=must, force_args=force_args)
    for c in found:
        c.raw = text[span[0] : span[1]]
        c.wrapping = wrapping
        c.span = span
        if not closed and c.error is None and wrapping != "fenced-json":
            c.flags.append("unclosed_wrapper")
    return found


def _keyish(src: str, ctx: CallContext) -> bool:
    """Whether unparseable JSON-like text is an attempt at a call (not, say, a dict literal in code): it names
    a known tool, opens an arguments object, or uses two keys of the candidate tools."""
    m = NAME_VALUE.search(src)
    if m and (m.group(1) in ctx.names() or m.group(1) in catalog_by_name()):
        return True
    if ARGS_OPEN.search(src):
        return True
    keys = set(KEYISH.findall(src))
    return any(len(keys & tool_keys(t)[1]) >= 2 for t in ctx.candidates())


def _bare_json(text: str, ctx: CallContext, free: Any, taken: TakenSpans) -> list[ExtractedCall]:
    calls: list[ExtractedCall] = []
    pos = 0
    first_attempt = ctx.wire == "json"
    scanner = BalancedScanner(text)
    tail_keyish = SuffixKeyish(text, ctx)
    # Closed spans that do not parse are searched again for JSON inside them; the bytes re-read that
    # way are bounded so that scoring stays linear in the length of the text.
    budget = 8 * len(text) + (1 << 16)
    while True:
        m = JSON_START.search(text, pos)
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
            parsed = parse_json(src, lenient=ctx.lenient)
        except JSONParseError as err:
            if _keyish(src, ctx) or (first_attempt and not calls):
                calls.append(_failed(text, (start, end), "bare", f"invalid JSON: {err}"))
                taken.append((start, end))
                pos = end
            else:
                pos = start + 1 if budget > 0 else end
            continue
        found = interpret_parsed(parsed, ctx, must=first_attempt and not calls, force_args=False)
        if not found:
            found = nested_envelopes(parsed, ctx)
        for c in found:
            c.raw = src
            c.wrapping = "bare"
            c.span = (start, end)
        calls.extend(found)
        if found:
            taken.append((start, end))
        pos = end
    return calls
