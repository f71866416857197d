"""Strict channels positioned after the forced prefix: wire frames around each engine's JSON-schema grammar,
``build_strict`` and ``draw``."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from tooldecode.backends.state import PerBackend
from tooldecode.engines.frames import closed_schema, prefix_gbnf_rules, tool_frames
from tooldecode.engines.outlines import OutlinesSampler
from tooldecode.engines.registry import check_engine
from tooldecode.grammar.gbnf import gbnf_literal

# ---------------------------------------------------------------------------------------------
# building an engine setting for a tool set


def _xgrammar_json(tools, wire, ws, backend, *, strict_mode: bool, name: str):
    import xgrammar as xgr

    from tooldecode.masking import xgrammar_mask

    alts = []
    for tool, head, tail in tool_frames(tools, wire, ws):
        parts = [xgr.Grammar.from_ebnf(f"root ::= {gbnf_literal(head)}")] if head else []
        parts.append(xgr.Grammar.from_json_schema(json.dumps(tool.parameters), strict_mode=strict_mode))
        if tail:
            parts.append(xgr.Grammar.from_ebnf(f"root ::= {gbnf_literal(tail)}"))
        alts.append(xgr.Grammar.concat(*parts) if len(parts) > 1 else parts[0])
    grammar = xgr.Grammar.union(*alts) if len(alts) > 1 else alts[0]
    return xgrammar_mask(grammar, backend, engine=name, text=str(grammar))


def lark_json_frame(tools: Sequence[Any], wire: str, ws: str, *, closed: bool = False) -> str:
    """A Lark grammar (llguidance's dialect) of one call: the wire frame around ``%json`` of each tool's
    arguments schema (closed first when ``closed``)."""
    lines = ["start: " + " | ".join(f"call_{i}" for i in range(len(tools)))]
    for i, (tool, head, tail) in enumerate(tool_frames(tools, wire, ws)):
        seq = [json.dumps(head)] if head else []
        seq.append(f"args_{i}")
        if tail:
            seq.append(json.dumps(tail))
        lines.append(f"call_{i}: " + " ".join(seq))
        schema = closed_schema(tool.parameters) if closed else tool.parameters
        lines.append(f"args_{i}: %json {json.dumps(schema)}")
    return "\n".join(lines) + "\n"


def gbnf_json_frame(tools: Sequence[Any], wire: str, ws: str) -> str:
    """A GBNF grammar of one call: the wire frame around llama.cpp's ``json_schema_to_gbnf`` of each tool's
    arguments schema (each tool's rules prefixed ``t<i>-``)."""
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    roots, bodies = [], []
    for i, (tool, head, tail) in enumerate(tool_frames(tools, wire, ws)):
        rules = prefix_gbnf_rules(json_schema_to_gbnf(json.dumps(tool.parameters)), f"t{i}-")
        seq = ([gbnf_literal(head)] if head else []) + [f"t{i}-root"] + ([gbnf_literal(tail)] if tail else [])
        roots.append(" ".join(seq))
        bodies.append(rules.strip())
    return "root ::= " + " | ".join(f"( {r} )" for r in roots) + "\n" + "\n".join(bodies) + "\n"


def build_strict(
    name: str,
    tools: Sequence[Any],
    wire: str,
    backend: Any,
    *,
    mode: str = "strict",
    ws: str = "bounded",
    duplicates: str = "forbid",
) -> Any:
    """The strict channel of engine setting ``name`` for a call of any of ``tools`` in ``wire`` on
    ``backend``: a ``MaskEngine`` (kind ``mask``) or an ``OutlinesSampler`` (kind ``sampler``).

    ``mode`` (``strict``/``strict-spec``) picks tooldecode's grammar mode for the settings that read a
    tooldecode grammar without pinning it; the JSON-schema settings read each tool's schema as given.
    ``duplicates`` reaches tooldecode's open grammar (``build_grammar``); the engines' own JSON-schema
    compilers have no such switch.
    """
    from tooldecode.masking import compile_mask

    info = check_engine(name, backend=backend.name, modes=[mode])
    tools = list(tools)
    if info.mask_engine is not None:
        from tooldecode.grammar import render_toolset

        grammar_mode = info.grammar_mode or ("spec" if mode == "strict-spec" else "strict")
        grammar = render_toolset(
            tools, format=info.reads, wire=wire, mode=grammar_mode, ws=ws, duplicates=duplicates
        )
        return compile_mask(info.mask_engine, grammar, backend, label=name)
    if name in ("xgrammar-json", "xgrammar-json-nonstrict"):
        return _cached(
            name,
            tools,
            wire,
            ws,
            backend,
            lambda: _xgrammar_json(tools, wire, ws, backend, strict_mode=name == "xgrammar-json", name=name),
        )
    if name in ("llguidance-json", "llguidance-json-closed"):
        text = lark_json_frame(tools, wire, ws, closed=name.endswith("-closed"))
        return compile_mask("llguidance", text, backend, label=name)
    if name == "llamacpp-json":
        from llama_cpp import LlamaGrammar

        text = gbnf_json_frame(tools, wire, ws)
        LlamaGrammar.from_string(text, verbose=False)  # what a llama-cpp-python user loads
        return compile_mask("llama-grammar", text, backend, label=name)
    return OutlinesSampler(name, tools, wire, ws, backend)


_BUILT: PerBackend[Any] = PerBackend()


def _cached(name: str, tools: list, wire: str, ws: str, backend: Any, build: Callable[[], Any]) -> Any:
    key = (name, json.dumps([(t.name, t.parameters) for t in tools], sort_keys=True), wire, ws)
    return _BUILT.get(backend, key, build)


# ---------------------------------------------------------------------------------------------
# one entry point for the sampler


def draw(
    backend: Any,
    prompt: str,
    n: int,
    params: Any,
    *,
    mask: Any = None,
    prefill: str = "",
    batch_size: int | None = None,
    start_index: int = 0,
    on_batch: Callable[[list], None] | None = None,
) -> list:
    """``tooldecode.sampling.sample`` for any channel from ``build_strict`` (``mask``): an engine's own
    sampler draws itself, a mask engine goes to tooldecode's sampler (``mask=None``: loose)."""
    if isinstance(mask, OutlinesSampler):
        return mask.sample(
            prompt,
            n,
            params,
            prefill=prefill,
            start_index=start_index,
            batch_size=batch_size,
            on_batch=on_batch,
        )
    from tooldecode.sampling import sample

    return sample(
        backend,
        prompt,
        n,
        params,
        mask=mask,
        prefill=prefill,
        batch_size=batch_size,
        start_index=start_index,
        on_batch=on_batch,
    )
