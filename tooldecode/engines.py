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

import json
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tooldecode.errors import MaskError, ToolDecodeError

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
    mask_engine: str | None = None  # the masking.py engine a tooldecode grammar is fed to


ENGINES: dict[str, EngineInfo] = {
    e.name: e
    for e in (
        EngineInfo(
            "xgrammar",
            "xgrammar",
            "gbnf",
            "mask",
            "xgrammar.Grammar.from_ebnf(tooldecode grammar)",
            "mode from the arm",
            None,
            mask_engine="xgrammar",
        ),
        EngineInfo(
            "llguidance",
            "llguidance",
            "lark",
            "mask",
            "llguidance.LLMatcher(lark tooldecode grammar)",
            "mode from the arm",
            None,
            mask_engine="llguidance",
        ),
        EngineInfo(
            "llama-grammar",
            "llama-cpp-python",
            "gbnf",
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
            "gbnf",
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
            "gbnf",
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
    allowed = ("strict",) if info.reads == "json-schema" else ("strict", "strict-spec", "strict-aligned")
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


def _frames(tools: Sequence[Any], wire: str, ws: str) -> list[tuple[Any, str, str]]:
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


def _gbnf_literal(text: str) -> str:
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


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


# ---------------------------------------------------------------------------------------------
# building an engine setting for a tool set


def _xgrammar_json(tools, wire, ws, backend, *, strict_mode: bool, name: str):
    import xgrammar as xgr

    from tooldecode.masking import xgrammar_mask

    alts = []
    for tool, head, tail in _frames(tools, wire, ws):
        parts = [xgr.Grammar.from_ebnf(f"root ::= {_gbnf_literal(head)}")] if head else []
        parts.append(xgr.Grammar.from_json_schema(json.dumps(tool.parameters), strict_mode=strict_mode))
        if tail:
            parts.append(xgr.Grammar.from_ebnf(f"root ::= {_gbnf_literal(tail)}"))
        alts.append(xgr.Grammar.concat(*parts) if len(parts) > 1 else parts[0])
    grammar = xgr.Grammar.union(*alts) if len(alts) > 1 else alts[0]
    return xgrammar_mask(grammar, backend, engine=name, text=str(grammar))


def lark_json_frame(tools: Sequence[Any], wire: str, ws: str, *, closed: bool = False) -> str:
    """A Lark grammar (llguidance's dialect) of one call: the wire frame around ``%json`` of each tool's
    arguments schema (closed first when ``closed``)."""
    lines = ["start: " + " | ".join(f"call_{i}" for i in range(len(tools)))]
    for i, (tool, head, tail) in enumerate(_frames(tools, wire, ws)):
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
    for i, (tool, head, tail) in enumerate(_frames(tools, wire, ws)):
        rules = prefix_gbnf_rules(json_schema_to_gbnf(json.dumps(tool.parameters)), f"t{i}-")
        seq = (
            ([_gbnf_literal(head)] if head else []) + [f"t{i}-root"] + ([_gbnf_literal(tail)] if tail else [])
        )
        roots.append(" ".join(seq))
        bodies.append(rules.strip())
    return "root ::= " + " | ".join(f"( {r} )" for r in roots) + "\n" + "\n".join(bodies) + "\n"


def build_strict(
    name: str, tools: Sequence[Any], wire: str, backend: Any, *, mode: str = "strict", ws: str = "bounded"
) -> Any:
    """The strict channel of engine setting ``name`` for a call of any of ``tools`` in ``wire`` on
    ``backend``: a ``MaskEngine`` (kind ``mask``) or an ``OutlinesSampler`` (kind ``sampler``).

    ``mode`` (``strict``/``strict-spec``) picks tooldecode's grammar mode for the settings that read a
    tooldecode grammar without pinning it; the JSON-schema settings read each tool's schema as given.
    """
    from tooldecode.masking import compile_mask

    info = check_engine(name, backend=backend.name, modes=[mode])
    tools = list(tools)
    if info.mask_engine is not None:
        from tooldecode.grammar import render_toolset

        grammar_mode = info.grammar_mode or ("spec" if mode == "strict-spec" else "strict")
        grammar = render_toolset(tools, format=info.reads, wire=wire, mode=grammar_mode, ws=ws)
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


_BUILT: dict[tuple, Any] = {}


def _cached(name: str, tools: list, wire: str, ws: str, backend: Any, build: Callable[[], Any]) -> Any:
    key = (name, json.dumps([(t.name, t.parameters) for t in tools], sort_keys=True), wire, ws, id(backend))
    if key not in _BUILT:
        _BUILT[key] = build()
    return _BUILT[key]


# ---------------------------------------------------------------------------------------------
# outlines: its own model wrapper and generation loop


def outlines_regex(tools: Sequence[Any], wire: str, ws: str) -> str:
    """The regex outlines builds for one call: the wire frame around outlines' own JSON-schema regex of
    each tool's arguments (``outlines_core.json_schema.build_regex_from_schema``, default whitespace)."""
    from outlines_core.json_schema import build_regex_from_schema

    alts = []
    for tool, head, tail in _frames(tools, wire, ws):
        args = build_regex_from_schema(json.dumps(tool.parameters))
        alts.append(re.escape(head) + "(?:" + args + ")" + re.escape(tail))
    return alts[0] if len(alts) == 1 else "(?:" + "|".join(f"(?:{a})" for a in alts) + ")"


class OutlinesSampler:
    """Strict samples drawn by outlines' own loop: ``outlines.from_transformers`` or ``outlines.from_llamacpp``
    wraps the model, outlines' JSON-schema regex (framed by the wire) compiles to an outlines-core index,
    and ``SteerableGenerator`` generates. The processor's guide is advanced over the forced prefix's
    tokens when outlines sets it up, so generation continues exactly where the prefix ends.

    Outlines returns text only: token ids, log-probabilities, top-k, entropies and the removed mass are
    recorded as ``null`` and listed in the record's ``unreported``.
    """

    engine: str

    def __init__(self, name: str, tools: Sequence[Any], wire: str, ws: str, backend: Any) -> None:
        self.engine = name
        self.backend = backend
        self.regex = outlines_regex(tools, wire, ws)
        self.model = _outlines_model(name, backend)
        self._processor_cls = _positioned_processor_class()
        self._index = _outlines_index(self.model, self.regex)

    def _prefix_ids(self, prefill: str) -> list[int]:
        if not prefill:
            return []
        if self.engine == "outlines-llamacpp":
            return list(self.model.model.tokenize(prefill.encode("utf-8"), add_bos=False, special=False))
        return list(self.model.hf_tokenizer(prefill, add_special_tokens=False)["input_ids"])

    def sample(
        self,
        prompt: str,
        n: int,
        params: Any,
        *,
        prefill: str = "",
        start_index: int = 0,
        batch_size: int | None = None,
        on_batch: Callable[[list], None] | None = None,
    ) -> list:
        """``n`` samples (indices ``start_index`` …) of ``prompt`` (which ends with ``prefill``). Each
        outlines generator call is seeded ``seed * 1_000_003 + first index of the call``."""
        from outlines.generator import SteerableGenerator

        from tooldecode.sampling import Sample

        out: list = []
        prefix_ids = self._prefix_ids(prefill)
        t0 = time.perf_counter()
        # llama-cpp-python generates one sequence per call; transformers draws a batch per call
        # (``num_return_sequences``), so its samples share one seed per call
        per_call = 1 if self.engine == "outlines-llamacpp" else max(1, batch_size or 8)
        for first in range(start_index, start_index + n, per_call):
            k = min(per_call, start_index + n - first)
            processor = self._processor_cls(self._index, self.model.tensor_library_name, prefix_ids)
            gen = SteerableGenerator.from_processor(self.model, processor)
            seed = params.seed * 1_000_003 + first
            t_start = time.perf_counter() - t0
            error, texts = None, [""] * k
            try:
                result = gen(prompt, **self._kwargs(params, seed, k))
                texts = [result] if isinstance(result, str) else list(result)
            except Exception as err:  # an engine failure is recorded, never sampled around
                error = f"outlines failed: {type(err).__name__}: {str(err).splitlines()[0][:160]}"
            t_end = round(time.perf_counter() - t0, 4)
            batch = []
            for j in range(k):
                text, stopped = _cut_stop(texts[j], params.stop)
                finish = "error" if error else ("stop" if stopped or processor.finished(j) else "length")
                batch.append(
                    Sample(
                        index=first + j,
                        seed=params.seed,
                        text=text,
                        token_ids=None,  # type: ignore[arg-type]
                        logprobs=None,  # type: ignore[arg-type]
                        top=None,  # type: ignore[arg-type]
                        entropy=None,  # type: ignore[arg-type]
                        entropy_masked=None,
                        mask_removed=None,
                        finish_reason=finish,
                        error=error,
                        timing={
                            "prefill_s": 0.0,
                            "start_s": round(t_start, 4),
                            "end_s": t_end,
                            "slots": k,
                            "tokens": processor.n_generated,
                            "unreported": list(SAMPLER_UNREPORTED),
                            "engine_seed": seed,
                        },
                    )
                )
            out.extend(batch)
            if on_batch is not None:
                on_batch(batch)
        return out

    def _kwargs(self, params: Any, seed: int, k: int) -> dict:
        if self.engine == "outlines-llamacpp":
            return {
                "max_tokens": params.max_new_tokens,
                "temperature": params.temperature,
                "top_p": params.top_p,
                "top_k": params.top_k,
                "min_p": params.min_p,
                "repeat_penalty": 1.0,
                "seed": seed,
                "stop": list(params.stop) or None,
            }
        import torch

        torch.manual_seed(seed)
        kw: dict[str, Any] = {
            "max_new_tokens": params.max_new_tokens,
            # explicit neutral values: generate() would otherwise take the model's generation_config
            # defaults (Qwen2.5: top_k 20, top_p 0.8, repetition_penalty 1.1)
            "top_k": params.top_k,
            "repetition_penalty": 1.0,
            "num_return_sequences": k,
        }
        if params.temperature <= 0:
            kw["do_sample"] = False
        else:
            kw.update(do_sample=True, temperature=params.temperature, top_p=params.top_p)
        if params.stop:
            kw["stop_strings"] = list(params.stop)
            kw["tokenizer"] = self.model.hf_tokenizer
        return kw


def _cut_stop(text: str, stops: Sequence[str]) -> tuple[str, bool]:
    """Cut ``text`` after the first stop string (as tooldecode's sampler does); whether one was hit."""
    best = None
    for s in stops:
        k = text.find(s)
        if k >= 0 and (best is None or k + len(s) < best):
            best = k + len(s)
    return (text, False) if best is None else (text[:best], True)


_OUTLINES_MODELS: dict[tuple[str, int], Any] = {}
_OUTLINES_INDEX: dict[tuple[int, str], Any] = {}


def _outlines_model(name: str, backend: Any) -> Any:
    import outlines

    key = (name, id(backend))
    if key in _OUTLINES_MODELS:
        return _OUTLINES_MODELS[key]
    if name == "outlines-llamacpp":
        import llama_cpp

        ref = backend.model
        if not ref.is_gguf:
            raise EngineError(f"outlines-llamacpp needs a .gguf model; '{ref.path}' is a folder")
        llm = llama_cpp.Llama(model_path=str(ref.path), n_ctx=8192, verbose=False, logits_all=False)
        model = outlines.from_llamacpp(llm)
    else:
        if backend.name == "hf":
            hf, tok = backend.hf, backend.tokenizer
        else:
            from tooldecode.backends import load_backend

            hf_backend = load_backend("hf", backend.model)
            hf, tok = hf_backend.hf, hf_backend.tokenizer
        model = outlines.from_transformers(hf, tok)
        model.hf_tokenizer = tok
    _OUTLINES_MODELS[key] = model
    return model


def _outlines_index(model: Any, regex: str) -> Any:
    from outlines.backends.outlines_core import OutlinesCoreBackend
    from outlines_core import Index

    key = (id(model), regex)
    if key not in _OUTLINES_INDEX:
        backend = OutlinesCoreBackend(model)  # outlines' own vocabulary conversion for this model
        _OUTLINES_INDEX[key] = Index(regex, backend.vocabulary)
    return _OUTLINES_INDEX[key]


def _positioned_processor_class() -> type:
    from outlines.backends.outlines_core import OutlinesCoreLogitsProcessor

    class PositionedProcessor(OutlinesCoreLogitsProcessor):
        """outlines-core's logits processor whose fresh guides start after the forced prefix."""

        def __init__(self, index: Any, tensor_library_name: str, prefix_ids: Sequence[int]) -> None:
            super().__init__(index, tensor_library_name)
            self.prefix_ids = list(prefix_ids)
            self.n_generated = 0

        def _setup(self, batch_size: int, vocab_size: int) -> None:
            super()._setup(batch_size, vocab_size)
            for guide in self._guides:
                for t in self.prefix_ids:
                    if not guide.accepts_tokens([t]):
                        raise MaskError("outlines' guide rejects the forced prefix")
                    guide.advance(token_id=t, return_tokens=False)

        def process_logits(self, input_ids: Any, logits: Any) -> Any:
            self.n_generated += 0 if self.is_first_token else 1
            return super().process_logits(input_ids, logits)

        def finished(self, row: int) -> bool:
            guides = getattr(self, "_guides", None) or []
            return row < len(guides) and bool(guides[row].is_finished())

    return PositionedProcessor


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
