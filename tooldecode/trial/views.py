"""Tool views: the offered tools' JSON lines of a prompt shown another way, everything else byte-equal.

- ``as-written``: unchanged;
- ``required-first``: ``required`` moved before ``properties`` in every object schema;
- ``no-required``: ``required`` removed from every object schema;
- ``typescript``: each tool as a TypeScript-style signature (as harmony renders tools) instead of JSON.

A view applies to templates that print each tool as one JSON line (Qwen2.5); ``apply_view`` says so in
one line elsewhere. The forms it returns classify a continue's key in the probe: the JSON forms as
shown, or for ``typescript`` the forms as written.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Sequence
from typing import Any

from tooldecode.trial.channel import TrialError

VIEWS = ("as-written", "required-first", "no-required", "typescript")


def _tool_form(tool: Any) -> dict:
    return {
        "type": "function",
        "function": {"name": tool.name, "description": tool.description, "parameters": tool.parameters},
    }


def _walk_objects(schema: Any, fn: Callable[[dict], dict]) -> Any:
    if isinstance(schema, dict):
        out = {k: _walk_objects(v, fn) for k, v in schema.items()}
        return fn(out) if "properties" in out else out
    if isinstance(schema, list):
        return [_walk_objects(v, fn) for v in schema]
    return schema


def _required_first(obj: dict) -> dict:
    if "required" not in obj:
        return obj
    out = {}
    for k, v in obj.items():
        if k == "properties":
            out["required"] = obj["required"]
        if k != "required":
            out[k] = v
    return out


def _no_required(obj: dict) -> dict:
    return {k: v for k, v in obj.items() if k != "required"}


def _ts_type(schema: Any, indent: str) -> str:
    if not isinstance(schema, dict):
        return "any"
    t = schema.get("type")
    if "enum" in schema:
        return " | ".join(json.dumps(v) for v in schema["enum"])
    if t == "array":
        inner = _ts_type(schema.get("items", {}), indent)
        return f"{inner}[]" if not inner.startswith("{") else f"Array<{inner}>"
    if t == "object" or "properties" in schema:
        req = set(schema.get("required", []))
        lines = ["{"]
        for name, sub in schema.get("properties", {}).items():
            desc = sub.get("description") if isinstance(sub, dict) else None
            if desc:
                lines.append(f"{indent}  // {desc}")
            opt = "" if name in req else "?"
            lines.append(f"{indent}  {name}{opt}: {_ts_type(sub, indent + '  ')},")
        lines.append(indent + "}")
        return "\n".join(lines)
    return {"integer": "number", "number": "number", "string": "string", "boolean": "boolean"}.get(
        str(t), "any"
    )


def typescript_signature(tool: Any) -> str:
    """The tool as a TypeScript-style declaration (harmony's way of showing a tool)."""
    return f"// {tool.description}\ntype {tool.name} = (_: {_ts_type(tool.parameters, '')}) => any;"


def _view_form(tool: Any, view: str) -> dict:
    form = copy.deepcopy(_tool_form(tool))
    if view in ("required-first", "no-required"):
        fn = _required_first if view == "required-first" else _no_required
        form["function"]["parameters"] = _walk_objects(form["function"]["parameters"], fn)
    return form


def check_view(view: str) -> None:
    """``TrialError`` (one line) unless ``view`` is one of ``VIEWS``."""
    if view not in VIEWS:
        raise TrialError(f"tool_view {view!r} is not one of {', '.join(VIEWS)}")


def apply_view(prompt_text: str, tools: Sequence[Any], edit_tool: str, view: str) -> tuple[str, list]:
    """``prompt_text`` with every tool's JSON line shown as ``view`` (see the module docstring), and the
    tool forms that classify keys (the JSON forms as shown; for ``typescript`` the forms as written).

    Raises
    ------
    TrialError
        An unknown view, ``edit_tool`` not offered, or a prompt that does not show a tool as one JSON line.
    """
    check_view(view)
    if view == "as-written":
        return prompt_text, list(tools)
    if not any(t.name == edit_tool for t in tools):
        raise TrialError(f"tool {edit_tool!r} is not offered in the prompt; tool_view needs it")
    forms = []
    for tool in tools:
        line = json.dumps(_tool_form(tool), ensure_ascii=False)
        if line not in prompt_text:
            raise TrialError(
                f"the prompt does not show tool {tool.name!r} as one JSON line; tool_view {view!r} applies "
                "to templates that do (Qwen2.5)"
            )
        if view == "typescript":
            new = typescript_signature(tool)
            forms.append(_tool_form(tool))
        else:
            form = _view_form(tool, view)
            new = json.dumps(form, ensure_ascii=False)
            forms.append(form)
        prompt_text = prompt_text.replace(line, new)
    return prompt_text, forms
