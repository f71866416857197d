"""The conversation before the model's call: system text, the prior episode, tool prompts per family."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from tooldecode.chat_templates import tojson
from tooldecode.errors import PromptError
from tooldecode.grammar import Tool, wire_format
from tooldecode.prompts.options import TranscriptOptions
from tooldecode.prompts.tools import read_call, tool_json
from tooldecode.scenarios import Scenario
from tooldecode.toolsets import READ_TOOL

SYSTEM_TEXT = (
    "You are a coding agent working in the user's repository. Use the tools to read and change files. "
    "Make the smallest change that does what the user asks."
)

# The "prior" episode: an earlier task in the same session, done with the flat Edit tool (with its
# optional replace_all flag) before the tool set changed.
PRIOR_PATH = "docs/NOTES.md"
PRIOR_CONTENT = (
    "# Notes\n\n"
    "## Todo\n\n"
    "- Pick a colour scheme for the dashboard.\n"
    "- Check the colour contrast of the error banner.\n"
    "- Remove the old build script.\n"
)
PRIOR_TASK = (
    f'First a small one: in {PRIOR_PATH} the heading "## Todo" should be "## TODO", '
    'and we use American spelling, so every "colour" should be "color".'
)
PRIOR_REASONING = {
    "read": "I should look at the notes file before changing it.",
    "edit1": "The heading occurs once, so a plain replacement works.",
    "edit2": '"colour" occurs twice; replace_all changes both.',
}
PRIOR_EDITS = (
    {"file_path": PRIOR_PATH, "old_string": "## Todo", "new_string": "## TODO", "replace_all": False},
    {"file_path": PRIOR_PATH, "old_string": "colour", "new_string": "color", "replace_all": True},
)
PRIOR_RESULTS = (
    f"The file {PRIOR_PATH} has been updated.",
    f"The file {PRIOR_PATH} has been updated. All 2 occurrences of 'colour' were replaced with 'color'.",
)
PRIOR_DONE = 'Done: the heading now reads "## TODO" and both "colour" are now "color".'


def _think(text: str | None, options: TranscriptOptions) -> str:
    return f"<think>\n{text.strip()}\n</think>" if options.thinking and text and text.strip() else ""


def _join(*parts: str) -> str:
    return "\n\n".join(p for p in parts if p)


def call_message(content: str, calls: Sequence[tuple[str, dict]]) -> dict:
    """An assistant message carrying ``calls`` as structured tool calls."""
    return {
        "role": "assistant",
        "content": content,
        "tool_calls": [{"type": "function", "function": {"name": n, "arguments": a}} for n, a in calls],
    }


def _tool_msg(name: str, content: str) -> dict:
    return {"role": "tool", "name": name, "content": content}


def _fence(language: str, content: str) -> str:
    """A Markdown code block around ``content``, its fence longer than any backtick run inside."""
    body = content if content.endswith("\n") else content + "\n"
    fence = "`" * max(3, 1 + max((len(run) for run in re.findall(r"`+", content)), default=0))
    return f"{fence}{language}\n{body}{fence}"


def conversation_messages(scenario: Scenario, options: TranscriptOptions) -> tuple[list[dict], str, bool]:
    """Messages before the edit turn (system first, tools not yet shown), the edit turn's text before
    the call, and whether the tool set changes mid-conversation (prior episode with other tools)."""
    messages: list[dict] = [{"role": "system", "content": SYSTEM_TEXT}]
    switched = options.prior and options.toolset != "flat-edit"
    if options.prior:
        messages += [
            {"role": "user", "content": PRIOR_TASK},
            call_message(_think(PRIOR_REASONING["read"], options), [("Read", {"file_path": PRIOR_PATH})]),
            _tool_msg("Read", PRIOR_CONTENT),
            call_message(_think(PRIOR_REASONING["edit1"], options), [("Edit", PRIOR_EDITS[0])]),
            _tool_msg("Edit", PRIOR_RESULTS[0]),
            call_message(_think(PRIOR_REASONING["edit2"], options), [("Edit", PRIOR_EDITS[1])]),
            _tool_msg("Edit", PRIOR_RESULTS[1]),
            {"role": "assistant", "content": PRIOR_DONE},
        ]
        if switched:
            messages.append({"role": "system", "content": "<tool-switch>"})  # filled in per family
    if options.history == "fresh":
        user = f"{scenario.task}\n\nHere is {scenario.path}:\n\n{_fence(scenario.language, scenario.content)}"
        messages.append({"role": "user", "content": user})
        before_call = _think(scenario.reasoning.get("edit"), options)
    else:
        messages += [
            {"role": "user", "content": scenario.task},
            call_message(
                _think(scenario.reasoning.get("read"), options), [read_call(scenario, options.toolset)]
            ),
            _tool_msg(READ_TOOL[options.toolset], scenario.content),
        ]
        before_call = _join(_think(scenario.reasoning.get("edit"), options), scenario.diagnosis.strip())
    return messages, before_call, switched


# ---------------------------------------------------------------------------------------------- tool prompts

QWEN_TOOLS_HEADER = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
SMOLLM2_SYSTEM = (
    "You are an expert in composing functions. You are given a question and a set of possible functions. \n"
    "Based on the question, you will need to make one or more function/tool calls to achieve the purpose. \n"
    "If none of the functions can be used, point it out and refuse to answer. \n"
    "If the given question lacks the parameters required by the function, also point it out.\n\n"
    "You have access to the following tools:\n<tools>{tools}</tools>\n\n"
    "{instruction}"
)
TOOL_SWITCH = "The tool set has changed. The earlier tools are no longer available; use only these."


def _tool_lines(tools: Sequence[Tool]) -> str:
    return "".join("\n" + tojson(tool_json(t)) for t in tools)


def qwen_tool_block(tools: Sequence[Tool], wire: str) -> str:
    """Qwen2.5's own tool block (same words as its template), with the format instruction for ``wire``."""
    return f"{QWEN_TOOLS_HEADER}{_tool_lines(tools)}\n</tools>\n\n{_instruction(wire)}"


def smollm2_tool_block(tools: Sequence[Tool], wire: str) -> str:
    """SmolLM2's trained system prompt with ``tools``, and the instruction for ``wire``."""
    return SMOLLM2_SYSTEM.format(
        tools=json.dumps([tool_json(t) for t in tools]), instruction=_instruction(wire)
    )


def _instruction(wire: str) -> str:
    """The format instruction of ``wire`` (the wire table's)."""
    instruction = wire_format(wire).instruction
    if instruction is None:
        raise PromptError(f"no prompt asks for calls in the {wire} wire")
    return instruction


def switch_text(tools: Sequence[Tool], family: str) -> str:
    """The user-turn note that the tool set changed, with the new tools (as ``family`` lists them)."""
    if family == "smollm2":
        return f"{TOOL_SWITCH}\n<tools>{json.dumps([tool_json(t) for t in tools])}</tools>"
    return f"{TOOL_SWITCH}\n<tools>{_tool_lines(tools)}\n</tools>"
