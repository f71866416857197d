"""What each setting's grammar accepts, asked directly (no sampling): the soundness table."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tooldecode.engines.build import build_strict
from tooldecode.engines.outlines import OutlinesSampler
from tooldecode.engines.registry import COMPARED, ENGINES

# ---------------------------------------------------------------------------------------------
# soundness: what a channel's grammar accepts, asked directly (no sampling)


def accepts(channel: Any, backend: Any, text: str) -> bool:
    """Whether ``channel`` (from ``build_strict``) accepts ``text`` as a whole call: its tokens one by one
    through the engine's own mask (outlines: its own guide), then an end-of-generation token."""
    if isinstance(channel, OutlinesSampler):
        from outlines_core import Guide

        guide = Guide(channel._index)
        for t in channel._prefix_ids(text):
            if not guide.accepts_tokens([t]):
                return False
            guide.advance(token_id=t, return_tokens=False)
        return bool(guide.is_finished())
    matcher = channel.matcher("", [])
    for t in backend.tokenize(text, special=False):
        if not matcher.allowed()[t]:
            return False
        matcher.accept(t)
    allowed = matcher.allowed()
    return bool(matcher.done() or any(allowed[e] for e in backend.eog_ids if e < allowed.size))


#: the edit call with an invented key in an ``edits[]`` item (the probe of every setting's soundness)
INVENTED_ITEM_KEY = {"path": "a.py", "edits": [{"oldText": "x = 1", "newText": "x = 2", "required": "yes"}]}
VALID_EDIT = {"path": "a.py", "edits": [{"oldText": "x = 1", "newText": "x = 2"}]}


def soundness(
    backend: Any, names: Sequence[str] = COMPARED, *, wire: str = "call-json", ws: str = "bounded"
) -> dict[str, dict[str, bool]]:
    """Per engine setting at its default, on the catalog's ``edit`` tool (with ``read``, ``write``, ``bash``
    offered beside it): does it accept the valid call, and the call with an invented key in an item?"""
    from tooldecode.grammar import serialize_call, tool_catalog

    cat = tool_catalog()
    tools = [cat[n] for n in ("edit", "read", "write", "bash")]
    valid = serialize_call("edit", VALID_EDIT, wire=wire, ws=ws)
    invented = valid.replace('"newText": "x = 2"', '"newText": "x = 2", "required": "yes"')
    assert invented != valid
    out = {}
    for name in names:
        if backend.name not in ENGINES[name].backends:
            continue
        channel = build_strict(name, tools, wire, backend, ws=ws)
        out[name] = {
            "valid": accepts(channel, backend, valid),
            "invented": accepts(channel, backend, invented),
        }
    return out


def soundness_markdown(table: dict[str, dict[str, bool]]) -> str:
    """The soundness table as Markdown (docs/engines.md carries it; a test checks they agree)."""
    lines = [
        "| engine setting | accepts a valid call | accepts an invented key in an `edits[]` item |",
        "|---|---|---|",
    ]
    for name, row in table.items():
        lines.append(
            f"| `{name}` | {'yes' if row['valid'] else 'no'} | {'yes' if row['invented'] else 'no'} |"
        )
    return "\n".join(lines)
