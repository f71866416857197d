"""Transcript variants: ``TranscriptOptions``, their one-word spelling (``parse_variant``/``format_variant``), and the ``Prompt`` a render returns."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from tooldecode.errors import PromptError
from tooldecode.records import CONDITIONINGS as CONDITIONING_LEVELS
from tooldecode.toolsets import TOOLSETS

HISTORIES = ("fresh", "agentic")
SCHEMA_VIEWS = ("as-written", "closed", "strictified")
CALL_FORMATS = ("native", "hermes", "antml", "harmony", "json")
CONDITIONINGS = tuple(CONDITIONING_LEVELS)  # the arms' conditionings (tooldecode.records)
CALL_STYLES = ("compact", "tight", "pretty")
FAMILIES = ("qwen2.5", "smollm2", "gemma3-base", "generic")
CUT_RE = re.compile(r"^(?:(after-newtext|after-oldtext)(?::(\d+))?|before-edits)$")

# call_format → wire name of tooldecode.grammar (for "native" see wires_for)
FORMAT_WIRE = {"hermes": "hermes", "antml": "antml", "harmony": "harmony", "json": "call-json"}
# SmolLM2's trained format: a JSON list of {"name", "arguments"} objects inside <tool_call>…</tool_call>.
SMOLLM2_WIRE = "call-list"


@dataclass(frozen=True)
class TranscriptOptions:
    """One transcript variant. ``parse_variant`` builds it from a comma-separated spec."""

    history: str = "agentic"  # "fresh" | "agentic"
    thinking: bool = False  # reasoning text before each assistant call (<think>…</think>) vs stripped
    prior: bool = False  # earlier successful calls of the flat Edit tool before the current tools
    toolset: str = "nested"  # "nested" | "flat-edit" | "multiedit"
    schema_view: str = "as-written"  # "as-written" | "closed" | "strictified"
    call_format: str = "native"  # "native" | "hermes" | "antml" | "harmony" | "json"
    conditioning: str = "free"  # "free" | "forced-tool" | "gold-prefix"
    gold_cut: str = "after-newtext"  # "after-newtext[:K]" | "after-oldtext[:K]" | "before-edits"
    call_style: str = "compact"  # "compact" | "tight" | "pretty"
    schema_extra: dict | None = None  # extra schema keywords per property of the edit tool

    def __post_init__(self) -> None:
        checks = [
            ("history", self.history, HISTORIES),
            ("toolset", self.toolset, tuple(TOOLSETS)),
            ("schema_view", self.schema_view, SCHEMA_VIEWS),
            ("call_format", self.call_format, CALL_FORMATS),
            ("conditioning", self.conditioning, CONDITIONINGS),
            ("call_style", self.call_style, CALL_STYLES),
        ]
        for name, value, valid in checks:
            if value not in valid:
                raise PromptError(f"TranscriptOptions.{name}={value!r} is not one of: {', '.join(valid)}")
        if not CUT_RE.match(self.gold_cut):
            raise PromptError(
                f"TranscriptOptions.gold_cut={self.gold_cut!r}; use after-newtext, after-newtext:K, "
                "after-oldtext, after-oldtext:K or before-edits"
            )
        if self.schema_extra is not None and not (
            isinstance(self.schema_extra, dict)
            and all(isinstance(v, dict) for v in self.schema_extra.values())
        ):
            raise PromptError(
                'TranscriptOptions.schema_extra must map property names to keyword dicts, e.g. {"oldText": {"minLength": 1}}'
            )


_WORDS: dict[str, tuple[str, Any]] = {
    "fresh": ("history", "fresh"),
    "agentic": ("history", "agentic"),
    "thinking": ("thinking", True),
    "stripped": ("thinking", False),
    "prior": ("prior", True),
    "no-prior": ("prior", False),
    **{name: ("toolset", name) for name in TOOLSETS},
    **{name: ("schema_view", name) for name in SCHEMA_VIEWS},
    **{name: ("call_format", name) for name in CALL_FORMATS},
    **{name: ("conditioning", name) for name in CONDITIONINGS},
    **{name: ("call_style", name) for name in CALL_STYLES},
}
_VALID_WORDS = ", ".join([*_WORDS, "after-newtext[:K]", "after-oldtext[:K]", "before-edits"])


def parse_variant(spec: str) -> TranscriptOptions:
    """``"agentic,thinking,prior,flat-edit,closed,antml,gold-prefix"`` → ``TranscriptOptions``.

    Words not given keep their defaults. A gold cut word (``after-newtext:1``) implies ``gold-prefix``.
    An unknown word, or two words for the same option, raise PromptError.
    """
    chosen: dict[str, tuple[str, Any]] = {}

    def put(word: str, name: str, value: Any) -> None:
        if name in chosen and chosen[name][1] != value:
            raise PromptError(f"variant '{spec}': '{chosen[name][0]}' and '{word}' both set {name}; keep one")
        chosen[name] = (word, value)

    for raw in spec.split(","):
        word = raw.strip().lower()
        if not word:
            continue
        if word in _WORDS:
            put(word, *_WORDS[word])
        elif CUT_RE.match(word):
            put(word, "gold_cut", word)
            put(word, "conditioning", "gold-prefix")
        else:
            raise PromptError(f"variant '{spec}': unknown word '{word}'; valid words: {_VALID_WORDS}")
    return TranscriptOptions(**{name: value for name, (_, value) in chosen.items()})


def format_variant(options: TranscriptOptions) -> str:
    """The canonical spec of ``options`` (every option spelled out); ``parse_variant`` reads it back.

    ``schema_extra`` has no word; it is left out.
    """
    words = [
        options.history,
        "thinking" if options.thinking else "stripped",
        *(["prior"] if options.prior else []),
        options.toolset,
        options.schema_view,
        options.call_format,
        options.gold_cut if options.conditioning == "gold-prefix" else options.conditioning,
        options.call_style,
    ]
    return ",".join(words)


# ---------------------------------------------------------------------------------------------- result


@dataclass(frozen=True)
class Prompt:
    """The exact prompt for one scenario × model × variant."""

    text: str  # full prompt text INCLUDING the prefill at the end; special tokens as text
    prefill: str  # the part of ``text`` that belongs to the assistant's call (forced); "" for free
    family: str
    wire: str  # wire format the model is expected to write its call in ("hermes", "antml", …)
    tools: tuple  # Tool objects offered (schemas as shown in the prompt)
    expected_tool: str  # "edit" | "Edit" | "MultiEdit"
    messages: list[dict]  # the chat messages as the template gets them, the edit turn last with its gold call
    stop: tuple[str, ...]  # stop strings for sampling
    epilogue: str = ""  # rendered text after the call, when ``render_prompt`` got epilogue messages
