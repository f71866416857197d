"""The prompt of a session scenario (one call of an imported session: ``tooldecode.scenarios.importers``):
the history before the call in the model's chat template and tool block, ending where the call starts.

``render_session`` gives the ``Prompt`` (the session's own tools, the called tool expected, no prefill)
and the gold call in the model's wire; ``tooldecode.trial.Trial`` takes a session scenario through it, so
a session's call is probed (``tooldecode replay``) by the same trial as a built-in scenario.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tooldecode.chat_templates import apply_template, template_info
from tooldecode.errors import PromptError
from tooldecode.grammar import load_tools
from tooldecode.prompts.conversation import SYSTEM_TEXT, qwen_tool_block, smollm2_tool_block
from tooldecode.prompts.options import Prompt
from tooldecode.prompts.wires import calls_text, model_ref, stop_strings, wires_for

__all__ = ["is_session_scenario", "render_session"]


def is_session_scenario(scenario: Any) -> bool:
    """Whether ``scenario`` is a session scenario (a dict with ``tools``, ``history`` and ``call``)."""
    return isinstance(scenario, Mapping) and {"tools", "history", "call"} <= set(scenario)


def _lower(messages: Sequence[Mapping[str, Any]], wire: str, tool_role: bool) -> list[dict[str, Any]]:
    """Session messages as chat-template messages: calls written into the assistant text in ``wire``,
    tool results as ``tool`` turns (or, without ``tool_role``, ``<tool_response>`` user turns)."""
    out: list[dict[str, Any]] = []
    for m in messages:
        role = m["role"]
        if role == "assistant":
            calls = [(c["name"], c["arguments"]) for c in m.get("tool_calls", [])]
            text = calls_text(calls, wire, "compact") if calls else ""
            out.append(
                {"role": "assistant", "content": "\n".join(p for p in (m.get("content", ""), text) if p)}
            )
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


def render_session(model: Any, data: Mapping[str, Any]) -> tuple[Prompt, str]:
    """(the prompt ending where the call starts, the call in the model's wire) of session scenario
    ``data`` for ``model`` (a ``ModelRef`` or model id).

    Raises
    ------
    PromptError
        A model without a chat template.
    """
    ref = model_ref(model)
    template, bos, eos = template_info(ref)
    if not template:
        raise PromptError(f"model '{ref.id}' has no chat template; a session scenario needs a chat model")
    tools = tuple(load_tools(data["tools"]))
    history_wire, wire = wires_for(ref.family, "native", template)
    block = (smollm2_tool_block if ref.family == "smollm2" else qwen_tool_block)(tools, history_wire)
    messages = _lower(data["history"], history_wire, tool_role=ref.family != "smollm2")
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
    call = calls_text([(data["call"]["name"], data["call"]["arguments"])], wire, "compact")
    prompt = Prompt(
        text=text + (lead + "\n" if lead else ""),
        prefill="",
        family=ref.family,
        wire=wire,
        tools=tools,
        expected_tool=data["call"]["name"],
        messages=messages,
        stop=stop_strings(ref.family, wire, eos),
    )
    return prompt, call
