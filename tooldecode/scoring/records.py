"""What scoring produces: verdict classes, their precedence, flags, and the call and verdict records."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tooldecode.errors import ToolDecodeError
from tooldecode.toolsets import EDIT_TOOL

SCORER_VERSION = "s2"

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
    """The verdict of one sample: its class, flags, the call found and what was wrong with it."""

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
    # did the edit work (``scoring.outcome``): valid, applies, correct, exact, works, wrong_but_valid, why;
    # None when no scenario is known
    outcome: dict | None = None
