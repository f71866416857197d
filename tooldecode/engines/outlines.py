"""Outlines as the sampler: its JSON-schema regex framed by the wire, its own generation loop."""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Sequence
from typing import Any

from tooldecode.backends.state import PerBackend
from tooldecode.engines.frames import tool_frames
from tooldecode.engines.registry import SAMPLER_UNREPORTED, EngineError
from tooldecode.errors import MaskError

# ---------------------------------------------------------------------------------------------
# outlines: its own model wrapper and generation loop


def outlines_regex(tools: Sequence[Any], wire: str, ws: str) -> str:
    """The regex outlines builds for one call: the wire frame around outlines' own JSON-schema regex of
    each tool's arguments (``outlines_core.json_schema.build_regex_from_schema``, default whitespace)."""
    from outlines_core.json_schema import build_regex_from_schema

    alts = []
    for tool, head, tail in tool_frames(tools, wire, ws):
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
        self._vocab_ids = _outlines_vocab_ids(self.model)

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
        outlines generator call is seeded ``seed * 1_000_003 + first index of the call`` (with a random stream,
        ``SamplingParams.stream``: ``stream_seed31(params, first)``)."""
        from outlines.generator import SteerableGenerator

        from tooldecode.sampling import Sample
        from tooldecode.streams import stream_seed31

        out: list = []
        prefix_ids = self._prefix_ids(prefill)
        t0 = time.perf_counter()
        # llama-cpp-python generates one sequence per call; transformers draws a batch per call
        # (``num_return_sequences``), so its samples share one seed per call
        per_call = 1 if self.engine == "outlines-llamacpp" else max(1, batch_size or 8)
        for first in range(start_index, start_index + n, per_call):
            k = min(per_call, start_index + n - first)
            processor = self._processor_cls(
                self._index, self.model.tensor_library_name, prefix_ids, self._describe_token
            )
            gen = SteerableGenerator.from_processor(self.model, processor)
            seed = params.seed * 1_000_003 + first if params.stream is None else stream_seed31(params, first)
            t_start = time.perf_counter() - t0
            error, texts = None, [""] * k
            try:
                result = gen(prompt, **self._kwargs(params, seed, k))
                texts = [result] if isinstance(result, str) else list(result)
            except Exception as err:  # an engine failure is recorded, never sampled around
                error = f"outlines failed: {type(err).__name__}: {str(err).splitlines()[0][:160]}"
            if error is None and processor.failure is not None:  # raised where the engine swallowed it
                error = f"outlines failed: {processor.failure}"
            if error is None:
                error = self._prompt_changed(prompt, processor.first_input)
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

    def _prompt_ids(self, prompt: str) -> list[int]:
        if self.engine == "outlines-llamacpp":
            return list(self.model.model.tokenize(prompt.encode("utf-8"), add_bos=True, special=True))
        return list(self.model.hf_tokenizer(prompt)["input_ids"])

    def _prompt_changed(self, prompt: str, seen: list[int] | None) -> str | None:
        """An error when the tokens the model saw before its first draw are not ``prompt``'s own (outlines
        re-templating a str prompt as a chat turn, say): such samples would continue another text."""
        if seen is None:
            return "outlines failed: its logits processor was never called (no constrained draw was made)"
        want = self._prompt_ids(prompt)
        if seen[-len(want) :] != want or len(seen) - len(want) > 1:  # a BOS in front is the only slack
            return (
                f"outlines changed the prompt: the model saw {len(seen)} tokens, not the prompt's {len(want)} "
                "(a chat template applied to a prompt that is already chat text?)"
            )
        return None

    def _describe_token(self, token_id: int) -> str:
        """A prefix token for an error message: its id, its bytes, and whether outlines' vocabulary has it."""
        if self.engine == "outlines-llamacpp":
            piece = bytes(self.model.model.detokenize([token_id]))
        else:
            piece = self.model.hf_tokenizer.convert_ids_to_tokens(token_id).encode("utf-8")
        missing = self._vocab_ids is not None and token_id not in self._vocab_ids
        return f"token {token_id} ({piece!r})" + (
            " is missing from outlines' vocabulary of this model" if missing else ""
        )

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


_OUTLINES_MODELS: PerBackend[Any] = PerBackend()  # outlines' model of a backend, by engine setting
_OUTLINES_INDEX: PerBackend[Any] = PerBackend()  # an outlines model's index of a regex


def _outlines_model(name: str, backend: Any) -> Any:
    return _OUTLINES_MODELS.get(backend, name, lambda: _new_outlines_model(name, backend))


def _new_outlines_model(name: str, backend: Any) -> Any:
    import outlines

    if name == "outlines-llamacpp":
        import llama_cpp

        ref = backend.model
        if not ref.is_gguf:
            raise EngineError(f"outlines-llamacpp needs a .gguf model; '{ref.path}' is a folder")
        # the same threads as tooldecode's own llama.cpp backend (llama-cpp-python's default is half the
        # cores, which would make a side-by-side speed comparison unfair to outlines)
        threads = getattr(backend, "n_threads", None) or os.cpu_count() or 1
        llm = llama_cpp.Llama(
            model_path=str(ref.path),
            n_ctx=8192,
            n_threads=threads,
            n_threads_batch=threads,
            verbose=False,
            logits_all=False,
        )
        # chat_mode=False: the prompt is already the model's chat text ending in the forced prefix; outlines'
        # default (chat_mode=True) sends a str as a user message through create_chat_completion
        model = outlines.from_llamacpp(llm, chat_mode=False)
    else:
        if backend.name == "hf":
            hf, tok = backend.hf, backend.tokenizer
        else:
            from tooldecode.backends import load_backend

            hf_backend = load_backend("hf", backend.model)
            hf, tok = hf_backend.hf, hf_backend.tokenizer
        model = outlines.from_transformers(hf, tok)
        # outlines 1.3 wraps a str prompt in a user message when the tokenizer has a chat template, and
        # from_transformers has no switch for it: the prompt here is already the model's chat text ending
        # in the forced prefix, so it must reach the model as written (checked on every call: ``sample``)
        adapter = getattr(model, "type_adapter", None)
        if adapter is None or not hasattr(adapter, "has_chat_template"):
            raise EngineError(
                "outlines-transformers: this outlines version has no type_adapter.has_chat_template to turn "
                "off; pin the outlines version in constraints.txt"
            )
        adapter.has_chat_template = False
        model.hf_tokenizer = tok
    return model


def _outlines_index(model: Any, regex: str) -> Any:
    from outlines.backends.outlines_core import OutlinesCoreBackend
    from outlines_core import Index

    # outlines' own vocabulary conversion for this model
    return _OUTLINES_INDEX.get(model, regex, lambda: Index(regex, OutlinesCoreBackend(model).vocabulary))


def _outlines_vocab_ids(model: Any) -> frozenset[int] | None:
    """The token ids outlines' tokenizer wrapper knows (None where it does not list them).

    outlines' llama.cpp wrapper keys its vocabulary by each token's piece decoded as UTF-8 with
    replacement, so byte-level tokens that are not whole UTF-8 sequences (Qwen2.5: 1,846 of 151,936)
    share the key "\ufffd" and all but one drop out: text that needs them (CJK, some accented Latin)
    cannot be written, and a forced prefix with them is rejected."""
    vocab = getattr(getattr(model, "tokenizer", None), "vocabulary", None)
    return frozenset(vocab.values()) if isinstance(vocab, dict) else None


def _positioned_processor_class() -> type:
    from outlines.backends.outlines_core import OutlinesCoreLogitsProcessor

    class PositionedProcessor(OutlinesCoreLogitsProcessor):
        """outlines-core's logits processor whose fresh guides start after the forced prefix."""

        def __init__(
            self,
            index: Any,
            tensor_library_name: str,
            prefix_ids: Sequence[int],
            describe: Callable[[int], str] = str,
        ) -> None:
            super().__init__(index, tensor_library_name)
            self.prefix_ids = list(prefix_ids)
            self.describe = describe
            self.n_generated = 0
            self.failure: str | None = None
            self.first_input: list[int] | None = None  # the tokens the model saw before its first draw

        def _setup(self, batch_size: int, vocab_size: int) -> None:
            super()._setup(batch_size, vocab_size)
            for guide in self._guides:
                for k, t in enumerate(self.prefix_ids):
                    if not guide.accepts_tokens([t]):
                        raise MaskError(
                            f"outlines' guide rejects the forced prefix at its token {k} of "
                            f"{len(self.prefix_ids)}: {self.describe(t)}"
                        )
                    guide.advance(token_id=t, return_tokens=False)

        def process_logits(self, input_ids: Any, logits: Any) -> Any:
            if self.is_first_token and self.first_input is None:
                row = input_ids[0] if getattr(input_ids, "ndim", 1) > 1 else input_ids
                self.first_input = [int(t) for t in row]
            self.n_generated += 0 if self.is_first_token else 1
            try:
                return super().process_logits(input_ids, logits)
            except Exception as err:
                # llama-cpp-python calls the processor from a ctypes callback that prints and ignores
                # exceptions, then samples unconstrained: keep the failure so the batch is recorded
                # as an error, never as strict samples
                self.failure = self.failure or f"{type(err).__name__}: {str(err).splitlines()[0][:160]}"
                raise

        def finished(self, row: int) -> bool:
            guides = getattr(self, "_guides", None) or []
            return row < len(guides) and bool(guides[row].is_finished())

    return PositionedProcessor
