"""Repairing a raw call text (``repair_text``): the call found as the scorer finds it, its arguments repaired, leaked markup noted."""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence

from tooldecode.grammar import WIRE_FORMATS, Tool
from tooldecode.repair.arguments import REPAIRS, Change, RepairResult, check_repairs, repair_arguments
from tooldecode.scoring import (
    ExtractedCall,
    extract_calls,
    primary_call,
)


def _markup_families() -> dict[re.Pattern[str], set[str]]:
    """Each wire family's markup pattern, and the wire formats whose servers parse it."""
    out: dict[re.Pattern[str], set[str]] = {}
    for w in WIRE_FORMATS.values():
        if w.markup is not None:
            out.setdefault(w.markup, set()).add(w.name)
    return out


_MARKUP = _markup_families()


def leaked_markup(text: str, calls: Sequence[ExtractedCall], wire: str | None) -> bool:
    """Tool-call markup in visible text: outside every parsed call, or of a wire format other than ``wire``
    (a server for that wire would have shown it as text)."""
    for rx, wires in _MARKUP.items():
        for m in rx.finditer(text):
            inside = any(c.error is None and c.span[0] <= m.start() < c.span[1] for c in calls)
            if not inside or (wire is not None and wire not in wires):
                return True
    return False


def repair_text(
    text: str,
    tools: Sequence[Tool],
    *,
    wire: str | None = None,
    expected_tool: str | None = None,
    enabled: Collection[str] = REPAIRS,
) -> RepairResult:
    """Extract the primary call from raw text (escapes repaired while parsing when ``fix_escapes`` is on)
    and repair its arguments."""
    kinds = check_repairs(enabled)
    tools = list(tools)
    calls = extract_calls(
        text, wire=wire, tools=tools, expected_tool=expected_tool, lenient="fix_escapes" in kinds
    )
    retry = leaked_markup(text, calls, wire)
    call = primary_call(calls, expected_tool)
    if call is None:
        return RepairResult(None, [], False, retry, ["no tool call found"])
    if call.error is not None:
        return RepairResult(None, [], False, retry, [call.error], tool=call.name, wrapping=call.wrapping)
    by_name = {t.name: t for t in tools}
    name = call.name if call.name is not None else expected_tool
    tool = by_name.get(name) if name is not None else None
    if tool is None or (expected_tool is not None and name != expected_tool):
        return RepairResult(
            call.arguments,
            [],
            False,
            retry,
            [f"tool {name!r} is not the expected tool"],
            tool=name,
            wrapping=call.wrapping,
        )
    fixes = [Change("fix_escapes", path, before, after) for path, before, after in call.fixes]
    result = repair_arguments(call.arguments, tool, enabled=kinds)
    result.changes = fixes + result.changes
    result.retry_signal = retry
    result.wrapping = call.wrapping
    return result
