"""The wire frame around an arguments object: where each engine's JSON-schema grammar sits in a call."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from tooldecode.engines.registry import EngineError

# ---------------------------------------------------------------------------------------------
# the wire frame around the arguments object


def call_frame(tool_name: str, wire: str, ws: str) -> tuple[str, str]:
    """(text before, text after) the arguments object of one call of ``tool_name`` in ``wire``."""
    from tooldecode.grammar import Tool, serialize_call

    if wire == "antml":
        raise EngineError(
            "the antml wire writes parameters as XML, not a JSON arguments object; an engine's JSON-schema "
            "mode cannot constrain it (use a json, call-json, hermes, harmony or call-list wire)"
        )
    probe = Tool(tool_name, "flat", "", {"type": "object", "properties": {"q": {"type": "integer"}}})
    text = serialize_call(probe, {"q": 7}, wire=wire, ws=ws)
    dec = json.JSONDecoder()
    for m in re.finditer(r"\{", text):
        try:
            value, end = dec.raw_decode(text, m.start())
        except ValueError:
            continue
        if value == {"q": 7}:
            return text[: m.start()], text[end:]
    raise EngineError(f"internal: no arguments object found in the {wire} call text {text!r}")


def tool_frames(tools: Sequence[Any], wire: str, ws: str) -> list[tuple[Any, str, str]]:
    return [(t, *call_frame(t.name, wire, ws)) for t in tools]


def closed_schema(schema: Any) -> Any:
    """``schema`` with ``additionalProperties: false`` in every object schema that does not say (how vLLM
    disables additional properties for llguidance)."""
    out = json.loads(json.dumps(schema))

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for value in node.values():
                walk(value)
            if "additionalProperties" not in node and ("properties" in node or "patternProperties" in node):
                node["additionalProperties"] = False
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(out)
    return out


_IDENT = re.compile(r"[A-Za-z0-9_-]+")


def prefix_gbnf_rules(gbnf: str, prefix: str) -> str:
    """Rename every rule of a GBNF text to ``prefix + name`` (names in definitions and references; string
    literals, character classes, repetition counts and comments are left alone)."""
    out: list[str] = []
    i, n = 0, len(gbnf)
    while i < n:
        ch = gbnf[i]
        if ch == '"' or ch == "[":
            close = '"' if ch == '"' else "]"
            j = i + 1
            while j < n and gbnf[j] != close:
                j += 2 if gbnf[j] == "\\" else 1
            out.append(gbnf[i : j + 1])
            i = j + 1
        elif ch == "{":
            j = gbnf.index("}", i)
            out.append(gbnf[i : j + 1])
            i = j + 1
        elif ch == "#":
            j = gbnf.find("\n", i)
            j = n if j < 0 else j
            out.append(gbnf[i:j])
            i = j
        else:
            m = _IDENT.match(gbnf, i)
            if m:
                out.append(prefix + m.group(0))
                i = m.end()
            else:
                out.append(ch)
                i += 1
    return "".join(out)
