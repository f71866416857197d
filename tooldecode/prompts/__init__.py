"""Transcript variants → the exact prompt text a model sees, per model family and wire format.

A scenario (a file, a user task, the gold edit) and ``TranscriptOptions`` (history, thinking, prior,
tool set, schema view, call format, conditioning, call style) become a list of chat messages, which
each model family renders its own way:

- ``qwen2.5``: the chat template stored in the GGUF (ChatML; tools in ``<tools>`` in the system
  turn; history calls as ``<tool_call>`` JSON; results in ``<tool_response>`` inside a user turn);
  the model's own call is expected as bare JSON (its ``<tool_call>`` token is untrained);
- ``smollm2``: the GGUF's chat template (ChatML without tools) with the tool prompt SmolLM2 was
  trained with in the system turn; calls as a JSON list inside ``<tool_call>``;
- ``gemma3-base``: a plain-text transcript (a base model has no chat template);
- ``generic``: the GGUF's own chat template, tools passed to it.

The prompt ends exactly where the model starts writing its edit call, plus the prefill that
``conditioning`` forces (nothing, the call's opening, or the gold call up to a cut). Special tokens
are written as text (``<|im_start|>``); tokenize ``Prompt.text`` with special-token parsing on and
no added BOS. ``docs/prompts.md`` documents every variant and family.

Modules: ``options`` (the variants, ``Prompt``) → ``wires`` (call formats, stop strings) → ``tools``
(offered tools, gold call, cut points) → ``conversation`` (messages, tool prompts) → ``render``
(per family, ``render_prompt``).
"""

from __future__ import annotations

from tooldecode.errors import PromptError
from tooldecode.prompts.options import (
    CALL_FORMATS,
    CALL_STYLES,
    CONDITIONINGS,
    FAMILIES,
    FORMAT_WIRE,
    HISTORIES,
    SCHEMA_VIEWS,
    Prompt,
    TranscriptOptions,
    format_variant,
    parse_variant,
)
from tooldecode.prompts.render import render_prompt
from tooldecode.prompts.tools import chat_template, gold_call_text, offered_tools
from tooldecode.prompts.wires import model_ref, native_wire
from tooldecode.toolsets import EDIT_TOOL, TOOLSETS

__all__ = [
    "CALL_FORMATS",
    "CALL_STYLES",
    "CONDITIONINGS",
    "EDIT_TOOL",
    "FAMILIES",
    "FORMAT_WIRE",
    "HISTORIES",
    "Prompt",
    "PromptError",
    "SCHEMA_VIEWS",
    "TOOLSETS",
    "TranscriptOptions",
    "chat_template",
    "format_variant",
    "gold_call_text",
    "offered_tools",
    "model_ref",
    "native_wire",
    "parse_variant",
    "render_prompt",
]
