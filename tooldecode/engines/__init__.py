"""Engine settings for strict sampling: tooldecode's own grammars and each engine's own JSON-schema mode.

A user rarely compiles a grammar: they hand the tool's JSON Schema to their engine's JSON mode and trust
its default. Each *engine setting* here is one way a user gets strict decoding, selected by name
(``tooldecode sample --engine NAME``, ``engine = [...]`` in an experiment spec):

============================  ==============================================================================
``xgrammar``                  tooldecode's grammar (GBNF) through ``xgrammar.Grammar.from_ebnf`` (mode from
                              the arm: ``strict`` closes every object, ``strict-spec`` follows the schema)
``llguidance``                tooldecode's grammar (Lark) through llguidance
``llama-grammar``             tooldecode's grammar (GBNF) through llama.cpp's grammar sampler
``tooldecode-strict``         tooldecode's closed grammar (every object closed) through xgrammar
``tooldecode-spec``           tooldecode's grammar of the schema as written (objects open unless closed)
``xgrammar-json``             ``xgrammar`` JSON schema at its default (``strict_mode=True``)
``xgrammar-json-nonstrict``   the same with ``strict_mode=False``
``llguidance-json``           llguidance's JSON-schema grammar (``%json``) at its default
``llguidance-json-closed``    the same with additional properties disabled in every object that does not
                              say (what vLLM's ``disable_additional_properties`` does)
``llamacpp-json``             llama.cpp's ``json_schema_to_grammar`` (llama-cpp-python's
                              ``json_schema_to_gbnf``, loaded as a ``LlamaGrammar``) on llama.cpp's sampler
``outlines-transformers``     outlines' JSON-schema output type through ``outlines.from_transformers``:
                              outlines' own generation loop (``SteerableGenerator``) is the sampler
``outlines-llamacpp``         the same through ``outlines.from_llamacpp``
============================  ==============================================================================

**Position after the prefix.** An engine's JSON mode constrains the arguments object. Every engine here
sees the same prompt and forced prefix: its JSON-schema grammar is framed by the wire's literal call
text (``{"name": "edit", "arguments": `` before, ``}`` after for the ``call-json`` wire), one alternative
per offered tool, and the matcher is advanced over the whole forced prefix (the call's opening at L1,
the gold call through ``newText`` at L2). The arguments text of the prefix therefore reaches the engine's
own JSON grammar exactly where the model continues; the closing frame is forced after the engine's
grammar completes the arguments. Outlines' generator is positioned the same way: its logits processor's
guide is advanced over the prefix's tokens when the generator sets it up.

Every setting declares the grammar format it reads (``gbnf``, ``lark``, ``json-schema``);
``check_engine`` turns an unknown name, a format the engine cannot read, or a backend it cannot run on
into a one-line ``EngineError``.
"""

from __future__ import annotations

from tooldecode.engines.build import (
    build_strict,
    draw,
    gbnf_json_frame,
    lark_json_frame,
)
from tooldecode.engines.frames import (
    call_frame,
    closed_schema,
    prefix_gbnf_rules,
    tool_frames,
)
from tooldecode.engines.outlines import (
    OutlinesSampler,
    outlines_regex,
)
from tooldecode.engines.registry import (
    COMPARED,
    ENGINES,
    GRAMMAR_FORMATS,
    SAMPLER_UNREPORTED,
    EngineError,
    EngineInfo,
    check_engine,
    engine_info,
)
from tooldecode.engines.soundness import (
    INVENTED_ITEM_KEY,
    VALID_EDIT,
    accepts,
    soundness,
    soundness_markdown,
)

__all__ = [
    "COMPARED",
    "EngineError",
    "ENGINES",
    "EngineInfo",
    "GRAMMAR_FORMATS",
    "INVENTED_ITEM_KEY",
    "OutlinesSampler",
    "SAMPLER_UNREPORTED",
    "VALID_EDIT",
    "accepts",
    "build_strict",
    "call_frame",
    "check_engine",
    "closed_schema",
    "draw",
    "engine_info",
    "gbnf_json_frame",
    "lark_json_frame",
    "outlines_regex",
    "prefix_gbnf_rules",
    "soundness",
    "soundness_markdown",
    "tool_frames",
]
