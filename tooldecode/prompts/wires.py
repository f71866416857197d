"""Wire formats of a prompt: which wire a family and call format use, how calls are written, the stop strings."""

from __future__ import annotations

from collections.abc import Sequence

from tooldecode.errors import PromptError
from tooldecode.grammar import serialize_call, wire_format
from tooldecode.models import REGISTRY, ModelRef, model_dir, resolve
from tooldecode.prompts.options import FAMILIES, FORMAT_WIRE, SMOLLM2_WIRE


def wires_for(family: str, call_format: str, template: str | None = None) -> tuple[str, str]:
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
        wire = "hermes" if writes_hermes(template) else "call-json"
        return wire, wire
    raise PromptError(f"unknown model family '{family}'; known: {', '.join(FAMILIES)}")


def writes_hermes(template: str | None) -> bool:
    """Whether a chat template writes calls as hermes blocks (it holds the hermes opening tag)."""
    return template is not None and wire_format("hermes").open in template


def native_wire(family: str, template: str | None = None) -> str:
    """The wire a family is expected to write its call in under ``call_format="native"``."""
    return wires_for(family, "native", template)[1]


# call_style → the grammar's whitespace policy: ", " / ": " is its "bounded" policy, no spaces its "compact"
_WS = {"compact": "bounded", "tight": "compact", "pretty": "pretty"}


def calls_text(calls: Sequence[tuple[str, dict]], wire: str, style: str) -> str:
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
        return wire_format(wire).wrap(body)
    return "\n".join(serialize_call(name, args, wire=wire, ws=_WS[style]) for name, args in calls)


def _list_item(one: str) -> str:
    """The call inside a one-call ``call-list`` text (``<tool_call>[`` … ``]</tool_call>``)."""
    w = wire_format(SMOLLM2_WIRE)
    return one[len(w.open) : -len(w.close)].strip()[1:-1].strip()


def stop_strings(family: str, wire: str, eos: str | None = None) -> tuple[str, ...]:
    """The strings that end a call in ``wire`` for ``family`` (the model's end-of-turn ``eos`` included)."""
    close = wire_format(wire).stop
    if family == "gemma3-base":
        turn_end: tuple[str, ...] = ("\nUser:", "\nTool result", "<eos>")
    elif family == "generic":
        turn_end = (eos,) if eos else ()
    else:
        turn_end = ("<|im_end|>", "<|endoftext|>")
    return close + turn_end


def model_ref(model: ModelRef | str) -> ModelRef:
    """A model id, path or ``ModelRef`` as a ``ModelRef`` (without fetching)."""
    if isinstance(model, ModelRef):
        return model
    if model in REGISTRY and REGISTRY[model].family == "gemma3-base":
        spec = REGISTRY[model]  # a plain prompt: the weights are not needed to render it
        return ModelRef(spec.id, model_dir(spec.id) / spec.filename, spec.family, spec.chat, spec.sha256)
    return resolve(model)
