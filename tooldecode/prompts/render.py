"""Rendering a conversation per model family (chat template or plain text) into the prompt text (``render_prompt``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tooldecode.chat_templates import apply_template, template_info
from tooldecode.errors import PromptError
from tooldecode.grammar import Tool
from tooldecode.models import ModelRef
from tooldecode.prompts.conversation import (
    SYSTEM_TEXT,
    call_message,
    conversation_messages,
    qwen_tool_block,
    smollm2_tool_block,
    switch_text,
)
from tooldecode.prompts.options import FAMILIES, Prompt, TranscriptOptions
from tooldecode.prompts.tools import cut_point, edit_calls, offered_tools, tool_json
from tooldecode.prompts.wires import calls_text, model_ref, stop_strings, wires_for, writes_hermes
from tooldecode.scenarios import Scenario
from tooldecode.toolsets import EDIT_TOOL


def _lower_calls(messages: list[dict], wire: str, style: str, tool_role: bool) -> list[dict]:
    """Write tool calls into assistant content (and, unless ``tool_role``, tool results into user turns)."""
    out = []
    for i, msg in enumerate(messages):
        if msg.get("tool_calls"):
            calls = [(c["function"]["name"], c["function"]["arguments"]) for c in msg["tool_calls"]]
            text = calls_text(calls, wire, style)
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
    epilogue: str = ""  # the rendered text after the edit call (``epilogue`` messages), "" without


@dataclass(frozen=True)
class _Request:
    """What a prompt is rendered from: the scenario, the variant, the tools offered at the edit turn and,
    where the conversation switches tool sets (``options.prior``), the tools offered before the switch."""

    scenario: Scenario
    options: TranscriptOptions
    tools: tuple[Tool, ...]
    prior_tools: tuple[Tool, ...] | None

    @property
    def first_tools(self) -> tuple[Tool, ...]:
        """The tools the conversation opens with."""
        return self.prior_tools if self.prior_tools is not None else self.tools


def _prepare(family: str, req: _Request, history_wire: str, system_tools: bool) -> list[dict]:
    """The conversation with the edit turn last (its calls structured), system prompt filled in
    unless the chat template writes the tools itself (``system_tools`` False)."""
    messages, before_call, _ = conversation_messages(req.scenario, req.options)
    messages.append(call_message(before_call, edit_calls(req.scenario, req.options.toolset)))
    if system_tools:
        block = (
            smollm2_tool_block(req.first_tools, history_wire)
            if family == "smollm2"
            else qwen_tool_block(req.first_tools, history_wire)
        )
        messages[0]["content"] = f"{SYSTEM_TEXT}\n\n{block}"
    for msg in messages:
        if msg["content"] == "<tool-switch>":
            msg["content"] = switch_text(req.tools, family)
    return messages


def _render_chat(ref: ModelRef, req: _Request, epilogue: Sequence[dict] = ()) -> _Rendered:
    """Render through the model's chat template, then cut where the edit call starts."""
    options = req.options
    template, bos, eos = template_info(ref)
    family = ref.family
    if not template:
        raise PromptError(
            f"model '{ref.id}' has no chat template in its metadata; it cannot be rendered as family {family}"
        )
    history_wire, wire = wires_for(family, options.call_format, template)
    # Qwen2.5 and generic templates write the tools and hermes calls themselves.
    template_tools = history_wire == "hermes" and (
        family == "qwen2.5" or (family == "generic" and writes_hermes(template))
    )
    messages = _prepare(family, req, history_wire, not template_tools)
    messages += [dict(m) for m in epilogue]
    if not (template_tools and options.call_style == "compact"):
        messages = _lower_calls(messages, history_wire, options.call_style, tool_role=family != "smollm2")
    rendered = apply_template(
        template,
        messages,
        [tool_json(t) for t in req.first_tools] if template_tools else None,
        bos,
        eos,
    )
    calls = edit_calls(req.scenario, options.toolset)
    history_call = calls_text(calls, history_wire, options.call_style)
    start = rendered.rfind(history_call)
    if start < 0:
        raise PromptError(
            f"model '{ref.id}': its chat template does not write the edit call the way the {history_wire} wire "
            "does; choose another call format (e.g. json)"
        )
    after = rendered[start + len(history_call) :] if epilogue else ""
    gold = calls_text(calls, wire, options.call_style)
    return _Rendered(rendered[:start], messages, wire, gold, eos, after)


def _render_plain(req: _Request) -> _Rendered:
    """Gemma 3 base: a plain transcript of "User:", "Assistant:" and "Tool result (name):" turns."""
    options = req.options
    history_wire, wire = wires_for("gemma3-base", options.call_format)
    messages = _prepare("gemma3-base", req, history_wire, True)
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
            text = calls_text(calls, history_wire, options.call_style) if calls else ""
            block = "Assistant: " + "\n".join(p for p in (msg["content"], text) if p)
        parts.append(block if block.endswith("\n") else block + "\n")
        parts.append("\n")
    gold = calls_text(edit_calls(req.scenario, options.toolset), wire, options.call_style)
    return _Rendered("".join(parts), messages, wire, gold)


def render_prompt(
    scenario: Scenario,
    model: ModelRef | str,
    options: TranscriptOptions = TranscriptOptions(),
    *,
    tools: Sequence[Tool] | None = None,
    epilogue: Sequence[dict] = (),
) -> Prompt:
    """The exact prompt ``model`` sees for ``scenario`` in variant ``options``, ending where its edit call starts.

    Parameters
    ----------
    tools
        The tools to offer instead of the tool set's catalog tools (same names; e.g. a schema without an
        optional property). ``None``: the catalog's, in the schema view of ``options``.
    epilogue
        Messages after the edit call (the harness's result, the final answer). Their rendered text, in the
        model's chat template, comes back as ``Prompt.epilogue``; the prompt text itself is unchanged.
        Chat-template families only.
    """
    if getattr(scenario, "kind", "edit") == "session":  # an imported session (docs/scenarios.md)
        from tooldecode.prompts.session import session_prompt

        return session_prompt(scenario, model, options)
    ref = model_ref(model)
    if ref.family not in FAMILIES:
        raise PromptError(f"model '{ref.id}' has family '{ref.family}'; known: {', '.join(FAMILIES)}")
    offered = tuple(tools) if tools is not None else offered_tools(options)
    prior_tools = (
        offered_tools(options, "flat-edit") if options.prior and options.toolset != "flat-edit" else None
    )
    req = _Request(scenario, options, offered, prior_tools)
    if ref.family == "gemma3-base":
        if epilogue:
            raise PromptError(
                f"model '{ref.id}' has a plain prompt (no chat template): no epilogue to render"
            )
        r = _render_plain(req)
    else:
        r = _render_chat(ref, req, epilogue)
    if options.conditioning == "free":
        prefill = ""
    else:
        kind = "forced-tool" if options.conditioning == "forced-tool" else options.gold_cut
        prefill = r.gold[: cut_point(scenario, options, r.wire, kind)]
    return Prompt(
        text=r.before + prefill,
        prefill=prefill,
        family=ref.family,
        wire=r.wire,
        tools=offered,
        expected_tool=EDIT_TOOL[options.toolset],
        messages=r.messages,
        stop=stop_strings(ref.family, r.wire, r.eos),
        epilogue=r.epilogue,
    )
