"""Tool-call wire formats: the one table of each wire's delimiters, stop strings and extraction patterns.

=============  ==========================================================================================
``json``       the bare arguments object
``call-json``  ``{"name": "edit", "arguments": {...}}``
``hermes``     ``<tool_call>\\n{"name": "edit", "arguments": {...}}\\n</tool_call>``
``antml``      ``<function_calls><invoke name="edit"><parameter name="path">a.py</parameter>...``
               ``</invoke></function_calls>``; a parameter whose schema admits only strings is raw text,
               any other parameter is JSON
``harmony``    ``<|start|>assistant<|channel|>commentary to=functions.edit <|constrain|>json<|message|>``
               ``{...}<|call|>``
``call-list``  ``<tool_call>[{"name": "edit", "arguments": {...}}]</tool_call>`` (SmolLM2's tool-call
               format: a JSON list of calls; the grammar admits a list of one call)
=============  ==========================================================================================

Each wire but ``json``/``call-json`` has a closing delimiter (``</tool_call>``, ``</parameter>``,
``<|call|>``). The grammar never lets that delimiter occur raw inside a JSON string (the canonical
text writes its ``<`` as ``\\u003c``) nor inside a raw antml parameter (a raw value that contains
``</parameter>`` cannot be written in the antml wire).

Every reader of a wire's text (the grammar's frame and canonical text in ``framing``, the prompts'
stop strings and format instructions, the scorer's extraction, the repairs' markup check) takes the
delimiters from ``WIRE_FORMATS``; no other module spells them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tooldecode.grammar.errors import GrammarError

# what a whole-call grammar may let the model do (``build_grammar``'s ``tool_choice``, besides a tool's name)
TOOL_CHOICES = ("required", "auto", "none")
# the reasoning block a model family writes before its call (Qwen3, DeepSeek-R1, SmolLM3)
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"

# the keys of the JSON envelope around the arguments (call-json, hermes, call-list)
ENVELOPE_KEYS = ("name", "arguments")

HERMES_OPEN, HERMES_CLOSE = "<tool_call>", "</tool_call>"
ANTML_OPEN, ANTML_CLOSE = "<function_calls>", "</function_calls>"
ANTML_INVOKE, ANTML_INVOKE_CLOSE = '<invoke name="{name}">', "</invoke>"
ANTML_PARAMETER, ANTML_PARAMETER_CLOSE = '<parameter name="{name}">', "</parameter>"
HARMONY_MESSAGE, HARMONY_CALL = "<|message|>", "<|call|>"
HARMONY_HEAD = (
    "<|start|>assistant<|channel|>commentary to=functions.{name} <|constrain|>json" + HARMONY_MESSAGE
)

# -- extraction patterns: lenient about spacing, the ``antml:`` prefix and a missing closing tag
HERMES_REGION = re.compile(r"<tool_call>(.*?)(?:(</tool_call>)|(?=<tool_call>)|\Z)", re.S)
HERMES_OPEN_RE = re.compile(re.escape(HERMES_OPEN))
HERMES_CLOSE_RE = re.compile(re.escape(HERMES_CLOSE))
ANTML_BLOCK = re.compile(r"<(?:antml:)?function_calls>(.*?)(?:(</(?:antml:)?function_calls>)|\Z)", re.S)
ANTML_INVOKE_RE = re.compile(
    r"<(?:antml:)?invoke\s+name\s*=\s*\"([^\"]*)\"\s*>(.*?)(?:(</(?:antml:)?invoke>)|\Z)", re.S
)
ANTML_PARAMETER_RE = re.compile(
    r"<(?:antml:)?parameter\s+name\s*=\s*\"([^\"]*)\"\s*>(.*?)"
    r"(?:(</(?:antml:)?parameter>)|(?=<(?:antml:)?parameter\b)|\Z)",
    re.S,
)
_HARMONY_HEADER = (
    r"(?:<\|start\|>\s*assistant\s*)?(?:<\|channel\|>\s*\w+\s*)?to=functions\.(?P<name>[\w\-.]+)"
    r"(?:(?!<\|message\|>|<\|start\|>|<\|end\|>|<\|call\|>).){0,200}"
)
HARMONY_REGION = re.compile(_HARMONY_HEADER + r"?<\|message\|>", re.S)
HARMONY_HEADER_ONLY = re.compile(_HARMONY_HEADER + r"\Z", re.S)
HARMONY_END = re.compile(r"<\|(?:call|end|return|start)\|>")

# -- the markup of each wire family (a leaked tag is text a server for another wire would show)
HERMES_MARKUP = re.compile(r"</?tool_call>")
ANTML_MARKUP = re.compile(r"</?(?:antml:)?(?:function_calls|invoke|parameter)\b")
HARMONY_MARKUP = re.compile(r"<\|(?:channel|message|constrain|call)\|>|\bto=functions\.[\w\-]")


@dataclass(frozen=True)
class WireFormat:
    """One wire format: the text around a call, and how readers find it again.

    Attributes
    ----------
    name : str
        The wire's name (one of ``WIRES``).
    open, close : str
        The text before and after one call (``""`` for the bare wires); harmony's ``open`` holds the
        tool name as ``{name}``.
    pad : str
        Written between ``open`` and the call, and between the call and ``close`` (hermes: a newline).
    forbid : str or None
        The delimiter that never occurs raw inside a value (None: the wire has none).
    envelope : bool
        The call is the JSON envelope ``{"name": …, "arguments": …}`` (``ENVELOPE_KEYS``).
    region : re.Pattern or None
        The scorer's pattern of one call region of this wire (None: found as bare JSON).
    markup : re.Pattern or None
        The tags of this wire's family, for the leaked-markup check (None: the wire has no tags).
    instruction : str or None
        The system prompt's instruction on how to write a call in this wire (None: no prompt asks
        for it).
    """

    name: str
    open: str = ""
    close: str = ""
    pad: str = ""
    forbid: str | None = None
    envelope: bool = False
    region: re.Pattern[str] | None = None
    markup: re.Pattern[str] | None = None
    instruction: str | None = None

    @property
    def stop(self) -> tuple[str, ...]:
        """The stop strings that end a call in this wire (its closing text; none for the bare wires)."""
        return (self.close,) if self.close else ()

    def wrap(self, body: str, name: str = "") -> str:
        """``body`` framed by the wire's opening and closing text (``name`` fills harmony's head)."""
        return self.open.format(name=name) + self.pad + body + self.pad + self.close


WIRE_FORMATS: dict[str, WireFormat] = {
    w.name: w
    for w in (
        WireFormat("json"),
        WireFormat(
            "call-json",
            envelope=True,
            instruction=(
                "For each function call, reply with only a json object with function name and arguments, "
                'nothing before or after it:\n{"name": <function-name>, "arguments": <args-json-object>}'
            ),
        ),
        WireFormat(
            "hermes",
            HERMES_OPEN,
            HERMES_CLOSE,
            pad="\n",
            forbid=HERMES_CLOSE,
            envelope=True,
            region=HERMES_REGION,
            markup=HERMES_MARKUP,
            instruction=(
                "For each function call, return a json object with function name and arguments within "
                f"{HERMES_OPEN}{HERMES_CLOSE} XML tags:\n{HERMES_OPEN}\n"
                '{"name": <function-name>, "arguments": '
                f"<args-json-object>}}\n{HERMES_CLOSE}"
            ),
        ),
        WireFormat(
            "antml",
            ANTML_OPEN,
            ANTML_CLOSE,
            forbid=ANTML_PARAMETER_CLOSE,
            region=ANTML_BLOCK,
            markup=ANTML_MARKUP,
            instruction=(
                f"For each function call, write a {ANTML_OPEN} block. String parameters are written as they "
                f"are; arrays and objects as JSON:\n{ANTML_OPEN}\n{ANTML_INVOKE.format(name='<function-name>')}\n"
                f"{ANTML_PARAMETER.format(name='<parameter-name>')}<parameter-value>{ANTML_PARAMETER_CLOSE}\n"
                f"{ANTML_INVOKE_CLOSE}\n{ANTML_CLOSE}"
            ),
        ),
        WireFormat(
            "harmony",
            HARMONY_HEAD,
            HARMONY_CALL,
            forbid=HARMONY_CALL,
            region=HARMONY_REGION,
            markup=HARMONY_MARKUP,
            instruction=(
                "For each function call, write a message to the function on the commentary channel with the "
                f"arguments as a json object, ending with {HARMONY_CALL}:\n"
                + HARMONY_HEAD.removeprefix("<|start|>assistant").format(name="<function-name>")
                + f"<args-json-object>{HARMONY_CALL}"
            ),
        ),
        WireFormat(
            "call-list",
            HERMES_OPEN,
            HERMES_CLOSE,
            forbid=HERMES_CLOSE,
            envelope=True,
            region=HERMES_REGION,
            markup=HERMES_MARKUP,
            instruction=(
                "The output MUST strictly adhere to the following format, and NO other text MUST be included.\n"
                "The example format is as follows. Please make sure the parameter type is correct. If no "
                "function call is needed, please make the tool calls an empty list '[]'.\n"
                f'{HERMES_OPEN}[\n{{"name": "func_name1", "arguments": {{"argument1": "value1", "argument2": '
                f'"value2"}}}},\n... (more tool calls as required)\n]{HERMES_CLOSE}'
            ),
        ),
    )
}
WIRES = tuple(WIRE_FORMATS)


def wire_format(wire: str) -> WireFormat:
    """The ``WireFormat`` called ``wire``: its open and close strings, stop strings, extraction
    patterns and envelope, the one table prompts, scoring, repair and engines read.

    Parameters
    ----------
    wire : str
        A wire format name, one of ``WIRES``.

    Returns
    -------
    WireFormat

    Raises
    ------
    GrammarError
        An unknown name (the message lists ``WIRES``).

    Examples
    --------
    >>> from tooldecode.grammar import wire_format
    >>> wire_format("hermes").name
    'hermes'
    """
    try:
        return WIRE_FORMATS[wire]
    except (KeyError, TypeError):
        raise GrammarError(f"unknown wire format {wire!r}; use one of {', '.join(WIRES)}") from None


def check_wire(wire: str) -> None:
    """``GrammarError`` unless ``wire`` is one of ``WIRES``."""
    wire_format(wire)


def check_name(name: str, wire: str) -> None:
    """``GrammarError`` unless tool ``name`` can be framed in ``wire`` (no quote, tag or space in it)."""
    if wire != "json" and (not name or any(c in name for c in ' "<>\n\t\\')):
        raise GrammarError(f"tool name {name!r} cannot be framed in the {wire} wire")


__all__ = [
    "WIRES",
    "WIRE_FORMATS",
    "WireFormat",
    "wire_format",
    "check_wire",
    "check_name",
    "ENVELOPE_KEYS",
]
