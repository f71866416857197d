"""The tools a prompt offers (schema views, extra keys) and the gold call and cut points of a scenario."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from tooldecode.chat_templates import template_info
from tooldecode.errors import PromptError
from tooldecode.grammar import Tool, load_tool, strictify, wire_format
from tooldecode.grammar.wire import ANTML_PARAMETER
from tooldecode.models import ModelRef
from tooldecode.prompts.options import CUT_RE, TranscriptOptions
from tooldecode.prompts.wires import calls_text, model_ref, wires_for
from tooldecode.scenarios import Scenario
from tooldecode.toolsets import EDIT_TOOL, READ_TOOL, TOOLSETS


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


def offered_tools(options: TranscriptOptions, toolset: str | None = None) -> tuple[Tool, ...]:
    """The tools the prompt offers, in the schema view of ``options`` (tool set: ``toolset`` or the options')."""
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


def tool_json(tool: Tool) -> dict:
    """The OpenAI / transformers form of a tool, as chat templates receive it."""
    return {
        "type": "function",
        "function": {"name": tool.name, "description": tool.description, "parameters": tool.parameters},
    }


# ---------------------------------------------------------------------------------------------- gold call


def edit_calls(scenario: Scenario, toolset: str) -> list[tuple[str, dict]]:
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


def read_call(scenario: Scenario, toolset: str) -> tuple[str, dict]:
    """The prior read call of the agentic history: (tool name, arguments)."""
    key = "path" if toolset == "nested" else "file_path"
    return READ_TOOL[toolset], {key: scenario.path}


def gold_call_text(scenario: Scenario, options: TranscriptOptions, family: str | ModelRef) -> str:
    """The full gold call (all of it, not cut) in the wire and style the prompt expects.

    ``family`` decides the native wire. A ``generic`` model's native wire depends on its chat template:
    pass its ``ModelRef`` (a bare ``"generic"`` counts as hermes).
    """
    if getattr(scenario, "kind", "edit") == "session":
        from tooldecode.prompts.session import session_call_text

        return session_call_text(scenario, family)
    template = wire_format("hermes").open  # a template that writes hermes calls
    if isinstance(family, ModelRef):
        template = template_info(family)[0] if family.family == "generic" else None
        family = family.family
    wire = wires_for(family, options.call_format, template)[1]
    return calls_text(edit_calls(scenario, options.toolset), wire, options.call_style)


_SENTINEL = "QqTOOLDECODECUTqQ"  # plain ASCII: no wire escapes it


def _marked_calls(calls: list[tuple[str, dict]], index: int, key: str, item: int | None, where: str):
    marked = json.loads(json.dumps(calls))
    args = marked[index][1]
    target = args["edits"][item] if item is not None else args
    target[key] = target[key] + _SENTINEL if where == "end" else _SENTINEL + target[key]
    return [tuple(c) for c in marked]


def cut_point(scenario: Scenario, options: TranscriptOptions, wire: str, kind: str) -> int:
    """Offset in the gold call text where a prefill ends.

    ``kind`` is ``forced-tool`` (the call's opening through the opening quote of the first argument key,
    or up to the first ``<parameter`` for antml), ``before-edits`` (likewise for the first edit's first
    key) or a gold cut at the end of an oldText / newText value (before its closing quote).
    Cuts before a key name rather than after ``{``: ``{"`` and `` {"`` are single tokens for Qwen2.5 and
    SmolLM2, so a prefill ending in ``{`` would end inside a natural token.
    """
    calls = edit_calls(scenario, options.toolset)
    flat = options.toolset == "flat-edit"
    old_key, new_key = {"nested": ("oldText", "newText")}.get(options.toolset, ("old_string", "new_string"))
    n = len(scenario.edits)
    if kind == "forced-tool":
        first_key = "path" if options.toolset == "nested" else "file_path"
        spot = ("start", first_key, 0, None)
    elif kind == "before-edits":
        spot = ("start", old_key, 0, None if flat else 0)
    else:
        m = CUT_RE.match(kind)
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
    text = calls_text(_marked_calls(calls, index, key, item, where), wire, options.call_style)
    pos = text.index(_SENTINEL)
    if text.replace(_SENTINEL, "", 1) != calls_text(calls, wire, options.call_style):
        raise PromptError(f"internal: the {wire} serializer changed the text around a cut marker")
    if where == "end":
        return pos
    if wire == "antml" and item is None:
        return text.rfind(ANTML_PARAMETER.format(name=key), 0, pos)  # a top-level parameter: before its tag
    return text.rfind(f'"{key}"', 0, pos) + 1  # a JSON key: cut after its opening quote


def chat_template(model: ModelRef | str) -> str | None:
    """The chat template stored in a model's GGUF metadata (``tokenizer.chat_template``), or None."""
    ref = model_ref(model)
    return template_info(ref)[0]
