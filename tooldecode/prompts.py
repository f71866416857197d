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
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tooldecode.chat_templates import apply_template, template_info, tojson
from tooldecode.errors import PromptError
from tooldecode.grammar import Tool, load_tool, serialize_call, strictify
from tooldecode.models import REGISTRY, ModelRef, model_dir, resolve
from tooldecode.scenarios import Scenario
from tooldecode.toolsets import EDIT_TOOL, READ_TOOL, TOOLSETS

__all__ = [
    "CALL_FORMATS",
    "FAMILIES",
    "Prompt",
    "PromptError",
    "TranscriptOptions",
    "chat_template",
    "format_variant",
    "gold_call_text",
    "native_wire",
    "parse_variant",
    "render_prompt",
]


# ---------------------------------------------------------------------------------------------- options

HISTORIES = ("fresh", "agentic")
SCHEMA_VIEWS = ("as-written", "closed", "strictified")
CALL_FORMATS = ("native", "hermes", "antml", "harmony", "json")
CONDITIONINGS = ("free", "forced-tool", "gold-prefix")
CALL_STYLES = ("compact", "tight", "pretty")
FAMILIES = ("qwen2.5", "smollm2", "gemma3-base", "generic")
_CUT_RE = re.compile(r"^(?:(after-newtext|after-oldtext)(?::(\d+))?|before-edits)$")

# call_format → wire name of tooldecode.grammar (for "native" see _wires)
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
        if not _CUT_RE.match(self.gold_cut):
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
        elif _CUT_RE.match(word):
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


# ---------------------------------------------------------------------------------------------- wires


def _wires(family: str, call_format: str, template: str | None = None) -> tuple[str, str]:
    """(wire of the history calls, wire the model is expected to write its call in).

    Native formats: Qwen2.5's template writes calls as hermes ``<tool_call>`` blocks, but the
    Qwen2.5-Coder models cannot emit the ``<tool_call>`` token (it is untrained; see docs/prompts.md)
    and write the same JSON bare, so they are expected to write ``call-json``. SmolLM2 uses its list
    form in both; Gemma 3 base bare call JSON; generic models hermes when their template writes
    ``<tool_call>``, bare call JSON otherwise. Other formats are the same in history and output.
    """
    if call_format != "native":
        wire = FORMAT_WIRE[call_format]
        return wire, wire
    if family == "qwen2.5":
        return "hermes", "call-json"
    if family == "smollm2":
        return SMOLLM2_WIRE, SMOLLM2_WIRE
    if family == "gemma3-base":
        return "call-json", "call-json"
    if family == "generic":
        wire = "hermes" if template and "<tool_call>" in template else "call-json"
        return wire, wire
    raise PromptError(f"unknown model family '{family}'; known: {', '.join(FAMILIES)}")


def native_wire(family: str, template: str | None = None) -> str:
    """The wire a family is expected to write its call in under ``call_format="native"``."""
    return _wires(family, "native", template)[1]


# call_style → the grammar's whitespace policy: ", " / ": " is its "bounded" policy, no spaces its "compact"
_WS = {"compact": "bounded", "tight": "compact", "pretty": "pretty"}


def _calls_text(calls: Sequence[tuple[str, dict]], wire: str, style: str) -> str:
    """One or more calls in ``wire``. Several calls are written one after another, separated by a newline
    (the way Qwen2.5's template writes several ``<tool_call>`` blocks); SmolLM2 puts them in one list."""
    if wire == SMOLLM2_WIRE:
        if len(calls) == 1:
            return serialize_call(calls[0][0], calls[0][1], wire=wire, ws=_WS[style])
        # several calls share one list; each item is written as the one-call list writes it
        items = [_list_item(serialize_call(name, args, wire=wire, ws=_WS[style])) for name, args in calls]
        if style == "pretty":
            body = "[\n" + ",\n".join(items) + "\n]"
        else:
            body = "[" + ("," if style == "tight" else ", ").join(items) + "]"
        return f"<tool_call>{body}</tool_call>"
    return "\n".join(serialize_call(name, args, wire=wire, ws=_WS[style]) for name, args in calls)


def _list_item(one: str) -> str:
    """The call inside a one-call ``call-list`` text (``<tool_call>[`` … ``]</tool_call>``)."""
    return one[len("<tool_call>") : -len("</tool_call>")].strip()[1:-1].strip()


def _stop_strings(family: str, wire: str, eos: str | None = None) -> tuple[str, ...]:
    close = {
        "hermes": ("</tool_call>",),
        SMOLLM2_WIRE: ("</tool_call>",),
        "antml": ("</function_calls>",),
        "harmony": ("<|call|>",),
        "call-json": (),
    }[wire]
    if family == "gemma3-base":
        turn_end: tuple[str, ...] = ("\nUser:", "\nTool result", "<eos>")
    elif family == "generic":
        turn_end = (eos,) if eos else ()
    else:
        turn_end = ("<|im_end|>", "<|endoftext|>")
    return close + turn_end


# ---------------------------------------------------------------------------------------------- tools


def _walk_objects(schema: Any, fn) -> None:
    """Call ``fn`` on every object schema inside ``schema`` (properties, items, combinators, $defs)."""
    if isinstance(schema, dict):
        if schema.get("type") == "object" or "properties" in schema:
            fn(schema)
        for key, value in schema.items():
            if key in ("properties", "$defs", "definitions", "patternProperties") and isinstance(value, dict):
                for sub in value.values():
                    _walk_objects(sub, fn)
            elif key in ("items", "additionalProperties", "not", "if", "then", "else", "contains"):
                _walk_objects(value, fn)
            elif key in ("anyOf", "oneOf", "allOf", "prefixItems") and isinstance(value, list):
                for sub in value:
                    _walk_objects(sub, fn)


def _closed(schema: dict) -> dict:
    out = json.loads(json.dumps(schema))

    def close(obj: dict) -> None:
        if "additionalProperties" not in obj:
            obj["additionalProperties"] = False

    _walk_objects(out, close)
    return out


def _strictified(schema: dict) -> dict:
    """``grammar.strictify`` (every object closed) plus every property required, as a provider's strict
    mode presents a schema (OpenAI's also makes the optional ones nullable; this view does not)."""
    out = strictify(schema)

    def require_all(obj: dict) -> None:
        if isinstance(obj.get("properties"), dict) and obj["properties"]:
            obj["required"] = list(obj["properties"])

    _walk_objects(out, require_all)
    return out


def _with_extra(schema: dict, extra: dict[str, dict], tool: str) -> dict:
    out = json.loads(json.dumps(schema))
    found: set[str] = set()

    def add(obj: dict) -> None:
        for name, sub in obj.get("properties", {}).items():
            if name in extra and isinstance(sub, dict):
                sub.update(extra[name])
                found.add(name)

    _walk_objects(out, add)
    missing = sorted(set(extra) - found)
    if missing:
        raise PromptError(
            f"schema_extra names {', '.join(missing)}, which the {tool} tool's schema has no property for"
        )
    return out


def _offered_tools(options: TranscriptOptions, toolset: str | None = None) -> tuple[Tool, ...]:
    names = TOOLSETS[toolset or options.toolset]
    tools = []
    for name in names:
        tool = load_tool(name)
        params = tool.parameters
        if options.schema_view == "closed":
            params = _closed(params)
        elif options.schema_view == "strictified":
            params = _strictified(params)
        if name == EDIT_TOOL[toolset or options.toolset] and options.schema_extra:
            params = _with_extra(params, options.schema_extra, name)
        tools.append(dataclasses.replace(tool, parameters=params) if params is not tool.parameters else tool)
    return tuple(tools)


def _tool_json(tool: Tool) -> dict:
    """The OpenAI / transformers form of a tool, as chat templates receive it."""
    return {
        "type": "function",
        "function": {"name": tool.name, "description": tool.description, "parameters": tool.parameters},
    }


# ---------------------------------------------------------------------------------------------- gold call


def _edit_calls(scenario: Scenario, toolset: str) -> list[tuple[str, dict]]:
    """The gold edit as calls of the tool set's edit tool (flat Edit: one call per gold edit)."""
    if toolset == "nested":
        edits = [{"oldText": e.old_text, "newText": e.new_text} for e in scenario.edits]
        return [("edit", {"path": scenario.path, "edits": edits})]
    if toolset == "multiedit":
        edits = [{"old_string": e.old_text, "new_string": e.new_text} for e in scenario.edits]
        return [("MultiEdit", {"file_path": scenario.path, "edits": edits})]
    return [
        ("Edit", {"file_path": scenario.path, "old_string": e.old_text, "new_string": e.new_text})
        for e in scenario.edits
    ]


def _read_call(scenario: Scenario, toolset: str) -> tuple[str, dict]:
    key = "path" if toolset == "nested" else "file_path"
    return READ_TOOL[toolset], {key: scenario.path}


def gold_call_text(scenario: Scenario, options: TranscriptOptions, family: str | ModelRef) -> str:
    """The full gold call (all of it, not cut) in the wire and style the prompt expects.

    ``family`` decides the native wire. A ``generic`` model's native wire depends on its chat template:
    pass its ``ModelRef`` (a bare ``"generic"`` counts as hermes).
    """
    template = "<tool_call>"
    if isinstance(family, ModelRef):
        template = template_info(family)[0] if family.family == "generic" else None
        family = family.family
    wire = _wires(family, options.call_format, template)[1]
    return _calls_text(_edit_calls(scenario, options.toolset), wire, options.call_style)


_SENTINEL = "QqTOOLDECODECUTqQ"  # plain ASCII: no wire escapes it


def _marked_calls(calls: list[tuple[str, dict]], index: int, key: str, item: int | None, where: str):
    marked = json.loads(json.dumps(calls))
    args = marked[index][1]
    target = args["edits"][item] if item is not None else args
    target[key] = target[key] + _SENTINEL if where == "end" else _SENTINEL + target[key]
    return [tuple(c) for c in marked]


def _cut_point(scenario: Scenario, options: TranscriptOptions, wire: str, kind: str) -> int:
    """Offset in the gold call text where a prefill ends.

    ``kind`` is ``forced-tool`` (the call's opening through the opening quote of the first argument key,
    or up to the first ``<parameter`` for antml), ``before-edits`` (likewise for the first edit's first
    key) or a gold cut at the end of an oldText / newText value (before its closing quote).
    Cuts before a key name rather than after ``{``: ``{"`` and `` {"`` are single tokens for Qwen2.5 and
    SmolLM2, so a prefill ending in ``{`` would end inside a natural token.
    """
    calls = _edit_calls(scenario, options.toolset)
    flat = options.toolset == "flat-edit"
    old_key, new_key = {"nested": ("oldText", "newText")}.get(options.toolset, ("old_string", "new_string"))
    n = len(scenario.edits)
    if kind == "forced-tool":
        first_key = "path" if options.toolset == "nested" else "file_path"
        spot = ("start", first_key, 0, None)
    elif kind == "before-edits":
        spot = ("start", old_key, 0, None if flat else 0)
    else:
        m = _CUT_RE.match(kind)
        assert m is not None
        which = m.group(1)
        k = int(m.group(2)) if m.group(2) is not None else n - 1
        if not 0 <= k < n:
            raise PromptError(f"gold cut '{kind}': scenario {scenario.id} has {n} edit(s) (items 0..{n - 1})")
        spot = (
            "end",
            new_key if which == "after-newtext" else old_key,
            k if flat else 0,
            None if flat else k,
        )
    where, key, index, item = spot
    text = _calls_text(_marked_calls(calls, index, key, item, where), wire, options.call_style)
    pos = text.index(_SENTINEL)
    if text.replace(_SENTINEL, "", 1) != _calls_text(calls, wire, options.call_style):
        raise PromptError(f"internal: the {wire} serializer changed the text around a cut marker")
    if where == "end":
        return pos
    if wire == "antml" and item is None:
        return text.rfind("<parameter", 0, pos)  # a top-level parameter: cut before its tag
    return text.rfind(f'"{key}"', 0, pos) + 1  # a JSON key: cut after its opening quote


def chat_template(model: ModelRef | str) -> str | None:
    """The chat template stored in a model's GGUF metadata (``tokenizer.chat_template``), or None."""
    ref = model_ref(model)
    return template_info(ref)[0]


# ---------------------------------------------------------------------------------------------- conversation

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


def _call_msg(content: str, calls: Sequence[tuple[str, dict]]) -> dict:
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


def _conversation(scenario: Scenario, options: TranscriptOptions) -> tuple[list[dict], str, bool]:
    """Messages before the edit turn (system first, tools not yet shown), the edit turn's text before
    the call, and whether the tool set changes mid-conversation (prior episode with other tools)."""
    messages: list[dict] = [{"role": "system", "content": SYSTEM_TEXT}]
    switched = options.prior and options.toolset != "flat-edit"
    if options.prior:
        messages += [
            {"role": "user", "content": PRIOR_TASK},
            _call_msg(_think(PRIOR_REASONING["read"], options), [("Read", {"file_path": PRIOR_PATH})]),
            _tool_msg("Read", PRIOR_CONTENT),
            _call_msg(_think(PRIOR_REASONING["edit1"], options), [("Edit", PRIOR_EDITS[0])]),
            _tool_msg("Edit", PRIOR_RESULTS[0]),
            _call_msg(_think(PRIOR_REASONING["edit2"], options), [("Edit", PRIOR_EDITS[1])]),
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
            _call_msg(
                _think(scenario.reasoning.get("read"), options), [_read_call(scenario, options.toolset)]
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
FORMAT_INSTRUCTIONS = {
    "hermes": (
        "For each function call, return a json object with function name and arguments within "
        '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": '
        "<args-json-object>}\n</tool_call>"
    ),
    "call-json": (
        "For each function call, reply with only a json object with function name and arguments, "
        'nothing before or after it:\n{"name": <function-name>, "arguments": <args-json-object>}'
    ),
    "antml": (
        "For each function call, write a <function_calls> block. String parameters are written as they "
        'are; arrays and objects as JSON:\n<function_calls>\n<invoke name="<function-name>">\n'
        '<parameter name="<parameter-name>"><parameter-value></parameter>\n</invoke>\n</function_calls>'
    ),
    "harmony": (
        "For each function call, write a message to the function on the commentary channel with the "
        "arguments as a json object, ending with <|call|>:\n"
        "<|channel|>commentary to=functions.<function-name> <|constrain|>json<|message|><args-json-object><|call|>"
    ),
}
SMOLLM2_SYSTEM = (
    "You are an expert in composing functions. You are given a question and a set of possible functions. \n"
    "Based on the question, you will need to make one or more function/tool calls to achieve the purpose. \n"
    "If none of the functions can be used, point it out and refuse to answer. \n"
    "If the given question lacks the parameters required by the function, also point it out.\n\n"
    "You have access to the following tools:\n<tools>{tools}</tools>\n\n"
    "{instruction}"
)
SMOLLM2_FORMAT = (
    "The output MUST strictly adhere to the following format, and NO other text MUST be included.\n"
    "The example format is as follows. Please make sure the parameter type is correct. If no function call "
    "is needed, please make the tool calls an empty list '[]'.\n"
    '<tool_call>[\n{"name": "func_name1", "arguments": {"argument1": "value1", "argument2": '
    '"value2"}},\n... (more tool calls as required)\n]</tool_call>'
)
TOOL_SWITCH = "The tool set has changed. The earlier tools are no longer available; use only these."


def _tool_lines(tools: Sequence[Tool]) -> str:
    return "".join("\n" + tojson(_tool_json(t)) for t in tools)


def _qwen_tool_block(tools: Sequence[Tool], wire: str) -> str:
    """Qwen2.5's own tool block (same words as its template), with the format instruction for ``wire``."""
    return f"{QWEN_TOOLS_HEADER}{_tool_lines(tools)}\n</tools>\n\n{FORMAT_INSTRUCTIONS[wire]}"


def _smollm2_tool_block(tools: Sequence[Tool], wire: str) -> str:
    instruction = SMOLLM2_FORMAT if wire == SMOLLM2_WIRE else FORMAT_INSTRUCTIONS[wire]
    return SMOLLM2_SYSTEM.format(tools=json.dumps([_tool_json(t) for t in tools]), instruction=instruction)


def _switch_text(tools: Sequence[Tool], family: str) -> str:
    if family == "smollm2":
        return f"{TOOL_SWITCH}\n<tools>{json.dumps([_tool_json(t) for t in tools])}</tools>"
    return f"{TOOL_SWITCH}\n<tools>{_tool_lines(tools)}\n</tools>"


# ---------------------------------------------------------------------------------------------- families


def _lower_calls(messages: list[dict], wire: str, style: str, tool_role: bool) -> list[dict]:
    """Write tool calls into assistant content (and, unless ``tool_role``, tool results into user turns)."""
    out = []
    for i, msg in enumerate(messages):
        if msg.get("tool_calls"):
            calls = [(c["function"]["name"], c["function"]["arguments"]) for c in msg["tool_calls"]]
            text = _calls_text(calls, wire, style)
            out.append({"role": "assistant", "content": "\n".join(p for p in (msg["content"], text) if p)})
        elif msg["role"] == "tool" and not tool_role:
            body = f"<tool_response>\n{msg['content']}\n</tool_response>"
            if out and out[-1]["role"] == "user" and i > 0 and messages[i - 1]["role"] == "tool":
                out[-1] = {"role": "user", "content": out[-1]["content"] + "\n" + body}
            else:
                out.append({"role": "user", "content": body})
        else:
            out.append(dict(msg))
    return out


@dataclass
class _Rendered:
    before: str  # prompt text up to where the model starts its call
    messages: list[dict]
    wire: str  # output wire
    gold: str  # the full gold call in the output wire
    eos: str | None = None  # the model's end-of-sequence token text, when known


def _prepare(
    family: str,
    scenario: Scenario,
    options: TranscriptOptions,
    tools: tuple[Tool, ...],
    prior_tools: tuple[Tool, ...] | None,
    history_wire: str,
    system_tools: bool,
) -> list[dict]:
    """The conversation with the edit turn last (its calls structured), system prompt filled in
    unless the chat template writes the tools itself (``system_tools`` False)."""
    messages, before_call, switched = _conversation(scenario, options)
    first_tools = prior_tools if switched else tools
    messages.append(_call_msg(before_call, _edit_calls(scenario, options.toolset)))
    if system_tools:
        block = (
            _smollm2_tool_block(first_tools, history_wire)
            if family == "smollm2"
            else _qwen_tool_block(first_tools, history_wire)
        )
        messages[0]["content"] = f"{SYSTEM_TEXT}\n\n{block}"
    for msg in messages:
        if msg["content"] == "<tool-switch>":
            msg["content"] = _switch_text(tools, family)
    return messages


def _render_chat(
    ref: ModelRef,
    scenario: Scenario,
    options: TranscriptOptions,
    tools: tuple[Tool, ...],
    prior_tools: tuple[Tool, ...] | None,
) -> _Rendered:
    """Render through the model's chat template, then cut where the edit call starts."""
    template, bos, eos = template_info(ref)
    family = ref.family
    if not template:
        raise PromptError(
            f"model '{ref.id}' has no chat template in its metadata; it cannot be rendered as family {family}"
        )
    history_wire, wire = _wires(family, options.call_format, template)
    # Qwen2.5 and generic templates write the tools and hermes calls themselves.
    template_tools = history_wire == "hermes" and (
        family == "qwen2.5" or (family == "generic" and "<tool_call>" in template)
    )
    messages = _prepare(family, scenario, options, tools, prior_tools, history_wire, not template_tools)
    switched = options.prior and options.toolset != "flat-edit"
    if not (template_tools and options.call_style == "compact"):
        messages = _lower_calls(messages, history_wire, options.call_style, tool_role=family != "smollm2")
    rendered = apply_template(
        template,
        messages,
        [_tool_json(t) for t in (prior_tools if switched else tools)] if template_tools else None,
        bos,
        eos,
    )
    calls = _edit_calls(scenario, options.toolset)
    start = rendered.rfind(_calls_text(calls, history_wire, options.call_style))
    if start < 0:
        raise PromptError(
            f"model '{ref.id}': its chat template does not write the edit call the way the {history_wire} wire "
            "does; choose another call format (e.g. json)"
        )
    return _Rendered(rendered[:start], messages, wire, _calls_text(calls, wire, options.call_style), eos)


def _render_plain(
    scenario: Scenario,
    options: TranscriptOptions,
    tools: tuple[Tool, ...],
    prior_tools: tuple[Tool, ...] | None,
) -> _Rendered:
    """Gemma 3 base: a plain transcript of "User:", "Assistant:" and "Tool result (name):" turns."""
    history_wire, wire = _wires("gemma3-base", options.call_format)
    messages = _prepare("gemma3-base", scenario, options, tools, prior_tools, history_wire, True)
    parts = ["<bos>"]
    for i, msg in enumerate(messages):
        if msg["role"] == "system":
            block = msg["content"] if i == 0 else f"System: {msg['content']}"
        elif msg["role"] == "user":
            block = f"User: {msg['content']}"
        elif msg["role"] == "tool":
            block = f"Tool result ({msg['name']}):\n{msg['content']}"
        elif i == len(messages) - 1:  # the edit turn: stop where the call starts
            parts.append("Assistant: " + (msg["content"] + "\n" if msg["content"] else ""))
            break
        else:
            calls = [(c["function"]["name"], c["function"]["arguments"]) for c in msg.get("tool_calls", [])]
            text = _calls_text(calls, history_wire, options.call_style) if calls else ""
            block = "Assistant: " + "\n".join(p for p in (msg["content"], text) if p)
        parts.append(block if block.endswith("\n") else block + "\n")
        parts.append("\n")
    gold = _calls_text(_edit_calls(scenario, options.toolset), wire, options.call_style)
    return _Rendered("".join(parts), messages, wire, gold)


def model_ref(model: ModelRef | str) -> ModelRef:
    """A model id, path or ``ModelRef`` as a ``ModelRef`` (without fetching)."""
    if isinstance(model, ModelRef):
        return model
    if model in REGISTRY and REGISTRY[model].family == "gemma3-base":
        spec = REGISTRY[model]  # a plain prompt: the weights are not needed to render it
        return ModelRef(spec.id, model_dir(spec.id) / spec.filename, spec.family, spec.chat, spec.sha256)
    return resolve(model)


def render_prompt(
    scenario: Scenario, model: ModelRef | str, options: TranscriptOptions = TranscriptOptions()
) -> Prompt:
    """The exact prompt ``model`` sees for ``scenario`` in variant ``options``, ending where its edit call starts."""
    ref = model_ref(model)
    if ref.family not in FAMILIES:
        raise PromptError(f"model '{ref.id}' has family '{ref.family}'; known: {', '.join(FAMILIES)}")
    tools = _offered_tools(options)
    prior_tools = (
        _offered_tools(options, "flat-edit") if options.prior and options.toolset != "flat-edit" else None
    )
    if ref.family == "gemma3-base":
        r = _render_plain(scenario, options, tools, prior_tools)
    else:
        r = _render_chat(ref, scenario, options, tools, prior_tools)
    if options.conditioning == "free":
        prefill = ""
    else:
        kind = "forced-tool" if options.conditioning == "forced-tool" else options.gold_cut
        prefill = r.gold[: _cut_point(scenario, options, r.wire, kind)]
    return Prompt(
        text=r.before + prefill,
        prefill=prefill,
        family=ref.family,
        wire=r.wire,
        tools=tools,
        expected_tool=EDIT_TOOL[options.toolset],
        messages=r.messages,
        stop=_stop_strings(ref.family, r.wire, r.eos),
    )
