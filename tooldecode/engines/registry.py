"""The engine settings: names, the grammar format each reads, the backends it runs on (``check_engine``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tooldecode.errors import ToolDecodeError
from tooldecode.grammar.check import FORMAT_OF
from tooldecode.records import STRICT_MODES

GRAMMAR_FORMATS = ("gbnf", "lark", "json-schema")


class EngineError(ToolDecodeError):
    """An unknown engine setting, or one that cannot read the requested grammar or run on the backend."""


@dataclass(frozen=True)
class EngineInfo:
    """One engine setting: what a user calls and what it reads.

    ``reads`` is the grammar format the engine is fed; ``grammar_mode`` pins tooldecode's grammar mode
    (``strict``/``spec``; None: the arm's mode decides, or not a tooldecode grammar); ``kind`` is
    ``mask`` (tooldecode's sampler draws under the engine's token mask) or ``sampler`` (the engine's own
    generation loop draws); ``closes_objects`` is whether the setting closes objects that the schema
    leaves open (what its documentation says; the soundness test checks it).
    """

    name: str
    library: str
    reads: str
    kind: str
    call: str
    setting: str
    closes_objects: bool | None
    backends: tuple[str, ...] = ("llamacpp", "hf")
    grammar_mode: str | None = None
    mask_engine: str | None = (
        None  # the masking.py engine a tooldecode grammar is fed to (it reads FORMAT_OF's)
    )


ENGINES: dict[str, EngineInfo] = {
    e.name: e
    for e in (
        EngineInfo(
            "xgrammar",
            "xgrammar",
            FORMAT_OF["xgrammar"],
            "mask",
            "xgrammar.Grammar.from_ebnf(tooldecode grammar)",
            "mode from the arm",
            None,
            mask_engine="xgrammar",
        ),
        EngineInfo(
            "llguidance",
            "llguidance",
            FORMAT_OF["llguidance"],
            "mask",
            "llguidance.LLMatcher(lark tooldecode grammar)",
            "mode from the arm",
            None,
            mask_engine="llguidance",
        ),
        EngineInfo(
            "llama-grammar",
            "llama-cpp-python",
            FORMAT_OF["llama-grammar"],
            "mask",
            "llama_sampler_init_grammar(tooldecode grammar)",
            "mode from the arm",
            None,
            backends=("llamacpp",),
            mask_engine="llama-grammar",
        ),
        EngineInfo(
            "tooldecode-strict",
            "tooldecode",
            FORMAT_OF["xgrammar"],
            "mask",
            "render_toolset(..., mode='strict')",
            "default (closed)",
            True,
            grammar_mode="strict",
            mask_engine="xgrammar",
        ),
        EngineInfo(
            "tooldecode-spec",
            "tooldecode",
            FORMAT_OF["xgrammar"],
            "mask",
            "render_toolset(..., mode='spec')",
            "schema as written",
            False,
            grammar_mode="spec",
            mask_engine="xgrammar",
        ),
        EngineInfo(
            "xgrammar-json",
            "xgrammar",
            "json-schema",
            "mask",
            "GrammarCompiler.compile_json_schema(schema)",
            "default (strict_mode=True)",
            True,
        ),
        EngineInfo(
            "xgrammar-json-nonstrict",
            "xgrammar",
            "json-schema",
            "mask",
            "GrammarCompiler.compile_json_schema(schema, strict_mode=False)",
            "strict_mode=False",
            False,
        ),
        EngineInfo(
            "llguidance-json",
            "llguidance",
            "json-schema",
            "mask",
            'grammar_from("json_schema", schema)',
            "default",
            False,
        ),
        EngineInfo(
            "llguidance-json-closed",
            "llguidance",
            "json-schema",
            "mask",
            'grammar_from("json_schema", schema with additionalProperties: false where unsaid)',
            "additional properties disabled",
            True,
        ),
        EngineInfo(
            "llamacpp-json",
            "llama-cpp-python",
            "json-schema",
            "mask",
            "LlamaGrammar.from_json_schema(schema) (json_schema_to_gbnf)",
            "default",
            True,
            backends=("llamacpp",),
        ),
        EngineInfo(
            "outlines-transformers",
            "outlines",
            "json-schema",
            "sampler",
            "outlines.Generator(outlines.from_transformers(...), JsonSchema(schema))",
            "default",
            True,
        ),
        EngineInfo(
            "outlines-llamacpp",
            "outlines",
            "json-schema",
            "sampler",
            "outlines.Generator(outlines.from_llamacpp(...), JsonSchema(schema))",
            "default",
            True,
        ),
    )
}

#: the engine settings of the comparison (tooldecode's own two grammars, then each engine's JSON mode)
COMPARED = (
    "tooldecode-strict",
    "tooldecode-spec",
    "xgrammar-json",
    "xgrammar-json-nonstrict",
    "llguidance-json",
    "llguidance-json-closed",
    "llamacpp-json",
    "outlines-transformers",
    "outlines-llamacpp",
)

#: what an engine's own generation loop cannot report, recorded as ``null`` with this list in the record
SAMPLER_UNREPORTED = ("token_ids", "logprobs", "top", "entropy", "entropy_masked", "mask_removed")


def engine_info(name: str) -> EngineInfo:
    """The setting called ``name``; ``EngineError`` naming the allowed values otherwise."""
    try:
        return ENGINES[name]
    except (KeyError, TypeError):
        raise EngineError(f"unknown engine {name!r}; choose one of: {', '.join(ENGINES)}") from None


def check_engine(
    name: str,
    *,
    grammar_format: str | None = None,
    backend: str | None = None,
    modes: Sequence[str] = (),
) -> EngineInfo:
    """``engine_info`` plus: the engine reads ``grammar_format``, runs on ``backend`` and can draw in each
    of ``modes`` (one-line ``EngineError``s naming the allowed values)."""
    info = engine_info(name)
    allowed = ("strict",) if info.reads == "json-schema" else STRICT_MODES
    if info.kind == "sampler":
        allowed = ("strict",)
    for mode in modes:
        if mode not in allowed:
            raise EngineError(
                f"engine {name!r} draws in mode {' or '.join(allowed)}, not {mode!r} (a JSON-schema setting "
                "reads the schema as given: the setting, not the mode, decides whether objects are closed)"
            )
    if grammar_format is not None and grammar_format != info.reads:
        readers = [e.name for e in ENGINES.values() if e.reads == grammar_format]
        raise EngineError(
            f"engine {name!r} reads {info.reads}, not {grammar_format!r}; engines that read {grammar_format}: "
            f"{', '.join(readers) or 'none (formats: ' + ', '.join(GRAMMAR_FORMATS) + ')'}"
        )
    if backend is not None and backend not in info.backends:
        raise EngineError(
            f"engine {name!r} runs on the {' or '.join(info.backends)} backend, not {backend!r}; "
            "choose --backend accordingly"
        )
    return info
