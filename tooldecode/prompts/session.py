"""Session scenarios (``kind: session``, docs/scenarios.md) as prompts: the history through the model's
chat template, the gold call in the model's wire.

The history goes through the model's chat template with its tool block in the system prompt; calls
in the history are written in the model's history wire, tool results as tool turns (SmolLM2: as
``<tool_response>`` user turns), and an assistant turn's thinking as the template's
``reasoning_content`` where the template reads one, else as a ``<think>`` block before the content (as
the ``thinking`` transcript variant writes it). The prompt ends where the gold call starts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tooldecode.errors import PromptError


def is_session_scenario(scenario: Any) -> bool:
    """Whether ``scenario`` is a session scenario: a ``SessionScenario`` (``kind == "session"``) or its data
    (a mapping with ``tools``, ``history`` and ``call``)."""
    if getattr(scenario, "kind", None) == "session":
        return True
    return isinstance(scenario, Mapping) and {"tools", "history", "call"} <= set(scenario)


def session_data(scenario: Any) -> Mapping[str, Any]:
    """A session scenario's data (the mapping itself, or a ``SessionScenario``'s ``data``)."""
    return scenario if isinstance(scenario, Mapping) else scenario.data


def render_session(model: Any, scenario: Any) -> tuple[Any, str]:
    """(the ``Prompt`` ending where the call starts, the gold call in the model's wire) of a session
    scenario (a ``SessionScenario`` or its data) for ``model`` (a ``ModelRef`` or model id): the session's
    own tools, the called tool expected, no prefill.

    Raises
    ------
    PromptError
        A model without a chat template.
    """
    from tooldecode.chat_templates import template_info
    from tooldecode.prompts.options import Prompt
    from tooldecode.prompts.wires import model_ref, stop_strings

    ref = model_ref(model)
    data = session_data(scenario)
    text, call, wire, tools = render_session_text(ref, data)
    eos = template_info(ref)[2]
    prompt = Prompt(
        text=text,
        prefill="",
        family=ref.family,
        wire=wire,
        tools=tuple(tools),
        expected_tool=data["call"]["name"],
        messages=list(data["history"]),
        stop=stop_strings(ref.family, wire, eos),
    )
    return prompt, call


def think_text(thinking: str | None) -> str:
    """An assistant turn's thinking as text before its content (``<think>`` tags, as the ``thinking``
    transcript variant writes it); "" without thinking."""
    return f"<think>\n{thinking.strip()}\n</think>\n\n" if thinking and thinking.strip() else ""


def lower_messages(
    messages: Sequence[dict[str, Any]], wire: str, tool_role: bool, reasoning_field: bool = False
) -> list[dict[str, Any]]:
    """Session messages as chat-template messages: calls written into the assistant text in ``wire``,
    tool results as ``tool`` turns (or, without ``tool_role``, ``<tool_response>`` user turns), thinking
    as the template's ``reasoning_content`` where it reads one (``reasoning_field``), else as a
    ``<think>`` block before the content."""
    from tooldecode.prompts.wires import calls_text

    out: list[dict[str, Any]] = []
    for m in messages:
        role = m["role"]
        if role == "assistant":
            calls = [(c["name"], c["arguments"]) for c in m.get("tool_calls", [])]
            text = calls_text(calls, wire, "compact") if calls else ""
            body = "\n".join(p for p in (m.get("content", ""), text) if p)
            msg = {"role": "assistant", "content": body}
            if m.get("thinking") and reasoning_field:
                msg["reasoning_content"] = m["thinking"]
            elif m.get("thinking"):
                msg["content"] = think_text(m["thinking"]) + body
            out.append(msg)
        elif role == "tool" and not tool_role:
            body = f"<tool_response>\n{m.get('content', '')}\n</tool_response>"
            if out and out[-1]["role"] == "user" and out[-1]["content"].startswith("<tool_response>"):
                out[-1] = {"role": "user", "content": out[-1]["content"] + "\n" + body}
            else:
                out.append({"role": "user", "content": body})
        elif role == "tool":
            out.append({"role": "tool", "name": m.get("name", ""), "content": m.get("content", "")})
        else:
            out.append({"role": role, "content": m.get("content", "")})
    return out


def render_session_text(ref: Any, data: Mapping[str, Any]) -> tuple[str, str, str, list[Any]]:
    """(prompt ending where the call starts, the call in the model's wire, the wire, the tools) of a
    session scenario ``data`` for model ``ref``.

    Raises
    ------
    PromptError
        A model without a chat template.
    """
    from tooldecode.chat_templates import apply_template, template_info
    from tooldecode.grammar import load_tools
    from tooldecode.prompts.conversation import SYSTEM_TEXT, qwen_tool_block, smollm2_tool_block
    from tooldecode.prompts.wires import calls_text, wires_for

    template, bos, eos = template_info(ref)
    if not template:
        raise PromptError(f"model '{ref.id}' has no chat template; a session scenario needs a chat model")
    tools = load_tools(data["tools"])
    history_wire, wire = wires_for(ref.family, "native", template)
    block = (smollm2_tool_block if ref.family == "smollm2" else qwen_tool_block)(tools, history_wire)
    messages = lower_messages(
        data["history"],
        history_wire,
        tool_role=ref.family != "smollm2",
        reasoning_field="reasoning_content" in template,
    )
    if messages and messages[0]["role"] == "system":
        messages[0] = {"role": "system", "content": f"{messages[0]['content']}\n\n{block}"}
    else:
        messages.insert(0, {"role": "system", "content": f"{SYSTEM_TEXT}\n\n{block}"})
    text = apply_template(template, messages, None, bos, eos, add_generation_prompt=True)
    before = data.get("before_call") or {}
    earlier = [(c["name"], c["arguments"]) for c in before.get("tool_calls", [])]
    lead = "\n".join(
        p for p in (before.get("content", ""), calls_text(earlier, wire, "compact") if earlier else "") if p
    )
    prompt = text + think_text(before.get("thinking")) + (lead + "\n" if lead else "")
    call = calls_text([(data["call"]["name"], data["call"]["arguments"])], wire, "compact")
    return prompt, call, wire, tools


def session_prompt(scenario: Any, model: Any, options: Any = None) -> Any:
    """The ``Prompt`` of a session scenario (``tooldecode.scenarios.sessions.SessionScenario``) for
    ``model``: what ``render_prompt`` returns for it. Of the transcript options only conditioning
    ``free`` applies (the history is the session's own).

    Raises
    ------
    PromptError
        Conditioning other than ``free``, or a model without a chat template.
    """
    if options is not None and options.conditioning != "free":
        raise PromptError(
            f"session scenario {scenario.id}: conditioning {options.conditioning!r} cuts an edit call; "
            "a session scenario is drawn free (leave the conditioning word out)"
        )
    return render_session(model, scenario)[0]


def session_call_text(scenario: Any, model: Any) -> str:
    """The session scenario's gold call in ``model``'s wire (what the probe teacher-forces)."""
    from tooldecode.prompts.wires import model_ref

    return render_session_text(model_ref(model), scenario.data)[1]


__all__ = [
    "is_session_scenario",
    "lower_messages",
    "render_session",
    "render_session_text",
    "session_call_text",
    "session_data",
    "session_prompt",
    "think_text",
]
