"""The one channel dispatch: what constrains a condition's samples and which function draws them.

=================  ===========================================================================================
channel            when, and what draws
=================  ===========================================================================================
``loose``          ``loose`` on a local backend: ``tooldecode.sampling.sample``, unmasked
``server``         ``loose`` on ``--backend openai``: the server draws (``tooldecode.backends.openai.draw``)
``server-grammar`` a strict mode on ``--backend openai``: the server's own grammar field takes tooldecode's
                   GBNF (``strict`` closed, ``strict-spec`` as written)
``mask``           ``strict`` / ``strict-spec`` through a mask engine: tooldecode's sampler under the mask
``sampler``        ``strict`` through an engine setting with its own sampler (outlines): it draws itself
``tools``          ``tools-strict`` / ``tools-loose``: chat completions with ``tools=[…]`` on a server
``aligned``        ``strict-aligned``: masked particles resampled by their importance weights
``prefix``         ``strict-prefix``: the mask with a masked token's mass moved to its longest allowed prefix
=================  ===========================================================================================

``channel_of`` is pure (names only) and raises the one-line error ``tooldecode run`` and ``tooldecode
sample`` both give for a mode the backend cannot draw; ``constraint`` builds what the channel needs on a
loaded backend and ``draw`` draws through it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from tooldecode.errors import ToolDecodeError
from tooldecode.records import MODES, STRICT_MODES, TOOL_MODES

CHANNELS = ("loose", "server", "server-grammar", "mask", "sampler", "tools", "aligned", "prefix")
# the modes a server draws: it returns sampled tokens, not the full logits a mask reweights
SERVER_MODES = ("loose", "strict", "strict-spec", *TOOL_MODES)


class TrialError(ToolDecodeError):
    """A condition that cannot be drawn as asked (a mode the backend cannot do, an unknown mode)."""


def channel_of(
    mode: str,
    backend: str,
    engine: str | None = "xgrammar",
    *,
    conditioning: str | None = None,
    duplicates: str | None = None,
) -> str:
    """The channel (``CHANNELS``) that draws ``mode`` on ``backend`` with engine setting ``engine``.

    Raises
    ------
    TrialError
        An unknown mode, a tool mode off a server (or with ``conditioning`` ``gold-prefix``), a mode
        that needs the full logits on a server, or ``duplicates`` other than ``forbid`` where no open
        tooldecode grammar reads it.
    tooldecode.engines.EngineError
        A strict mode the engine setting cannot draw on ``backend``.
    """
    if mode not in MODES:
        raise TrialError(f"unknown mode {mode!r}; choose one of: {', '.join(MODES)}")
    _check_duplicates(mode, backend, engine or "xgrammar", duplicates or "forbid")
    if mode in TOOL_MODES:
        if backend != "openai":
            raise TrialError(
                f"mode {mode!r} sends chat requests to a server; run it with --backend openai --base-url URL"
            )
        if conditioning == "gold-prefix":
            raise TrialError(f"mode {mode!r} is a chat request and cannot carry conditioning 'gold-prefix'")
        return "tools"
    if backend == "openai":
        if mode not in SERVER_MODES:
            raise TrialError(
                f"mode {mode!r} needs the full logits; --backend openai runs "
                + ", ".join(repr(m) for m in SERVER_MODES)
            )
        return "server-grammar" if mode in STRICT_MODES else "server"
    if mode not in STRICT_MODES:
        return "loose"
    from tooldecode.engines import check_engine

    info = check_engine(engine or "xgrammar", backend=backend, modes=[mode])
    if mode == "strict-aligned":
        return "aligned"
    if mode == "strict-prefix":
        return "prefix"
    return "sampler" if info.kind == "sampler" else "mask"


def _check_duplicates(mode: str, backend: str, engine: str, duplicates: str) -> None:
    """``duplicates`` is read only by the open grammar of ``strict-spec`` that tooldecode renders."""
    from tooldecode.grammar import DUPLICATES
    from tooldecode.masking import ENGINE_FORMATS

    if duplicates not in DUPLICATES:
        raise TrialError(f"unknown duplicates {duplicates!r}; choose one of: {', '.join(DUPLICATES)}")
    if duplicates == "forbid":
        return
    if mode != "strict-spec":
        raise TrialError(
            f"duplicates {duplicates!r} applies to the open grammar of mode 'strict-spec', not {mode!r}"
        )
    if backend != "openai" and engine not in ENGINE_FORMATS and engine != "tooldecode-spec":
        raise TrialError(
            f"duplicates {duplicates!r} needs tooldecode's own grammar, but engine {engine!r} compiles the schema "
            "itself; use a mask engine (xgrammar, llguidance, ...) or 'tooldecode-spec'"
        )


def strict_grammar(
    prompt: Any, ws: str, mode: str = "strict", engine: str = "xgrammar", duplicates: str = "forbid"
) -> str:
    """The mask grammar of a condition, in the format ``engine`` reads: ``strict`` closes every object;
    ``strict-spec`` follows the schema as written (``additionalProperties`` defaults to true, so unknown
    keys stay possible; ``duplicates`` says whether a key the object already has may come again)."""
    from tooldecode.grammar import render_toolset
    from tooldecode.masking import engine_format

    grammar_mode = "spec" if mode == "strict-spec" else "strict"
    return render_toolset(
        list(prompt.tools),
        format=engine_format(engine),
        wire=prompt.wire,
        mode=grammar_mode,
        ws=ws,
        duplicates=duplicates,
    )


def constraint(
    channel: str, prompt: Any, backend: Any, *, mode: str, engine: str, ws: str, duplicates: str = "forbid"
) -> Any:
    """What constrains the samples of ``channel``: None (loose, tools), the GBNF a server's grammar field
    takes, a compiled ``MaskEngine`` (wrapped for ``prefix``) or an engine setting's own sampler."""
    from tooldecode.masking import ENGINE_FORMATS, compile_mask

    if channel in ("loose", "server", "tools"):
        return None
    if channel == "server-grammar":
        return strict_grammar(prompt, ws, mode, "xgrammar", duplicates)
    if engine in ENGINE_FORMATS:
        mask = compile_mask(engine, strict_grammar(prompt, ws, mode, engine, duplicates), backend)
    else:  # an engine setting: its own grammar of the schema, or its own sampler
        from tooldecode.engines import build_strict

        mask = build_strict(
            engine, prompt.tools, prompt.wire, backend, mode=mode, ws=ws, duplicates=duplicates
        )
    if channel == "prefix":  # a masked token's mass moved to its longest allowed token prefix
        from tooldecode.masking import prefix_keeping

        mask = prefix_keeping(mask, backend)
    return mask


def drawer(
    channel: str,
    prompt: Any,
    mode: str,
    *,
    conditioning: str = "free",
    aligned: Mapping[str, Any] | None = None,
) -> Callable[..., list]:
    """The draw function of ``channel``; all share ``tooldecode.sampling.sample``'s call shape
    ``(backend, prompt_text, n, params, *, mask, prefill, batch_size, start_index, on_batch)``."""
    if channel == "tools":  # chat completions with tools=[…] and per-tool strict, on a server
        from tooldecode.backends.openai_tools import tool_drawer

        return tool_drawer(prompt, mode, conditioning)
    if channel in ("server", "server-grammar"):  # the server draws; its own grammar field takes the GBNF
        from tooldecode.backends.openai import draw

        return draw
    if channel == "sampler":
        from tooldecode.engines import draw as engine_draw

        return engine_draw
    from tooldecode.sampling import sample, sample_aligned

    if channel == "aligned":  # masked particles resampled by their importance weights
        return functools.partial(sample_aligned, **dict(aligned or {}))
    return sample
