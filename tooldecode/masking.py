"""Token-mask engines: a grammar (from ``tooldecode.grammar``) becomes a per-step allowed-token mask.

Engines compile once per (engine, grammar, vocabulary) and are cached; each sequence gets its own
cheap matcher. A matcher that fails (engine error, rejected token, dead end) raises ``MaskError``:
the sampler aborts that sample instead of continuing unconstrained.

- ``xgrammar`` (default): GBNF via ``xgrammar.Grammar.from_ebnf``; bitmask per step.
- ``llguidance``: Lark grammar; bitmask per step.
- ``llama-grammar``: llama.cpp's own grammar sampler fed our GBNF (llama.cpp backend only), applied
  to the full candidate array every step — the slow reference path.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from tooldecode.errors import MaskError

ENGINES = ("xgrammar", "llguidance", "llama-grammar")
# The grammar format each engine reads (``tooldecode.grammar.render(format=...)``).
ENGINE_FORMATS = {"xgrammar": "gbnf", "llguidance": "lark", "llama-grammar": "gbnf"}


def engine_format(engine: str) -> str:
    """The grammar format ``engine`` reads; ``MaskError`` naming the engines for an unknown one."""
    try:
        return ENGINE_FORMATS[engine]
    except KeyError:
        raise MaskError(
            f"unknown mask engine '{engine}'; choose one of: {', '.join(ENGINE_FORMATS)}"
        ) from None


class Matcher(Protocol):
    def allowed(self) -> np.ndarray:
        """Boolean mask of shape (n_vocab,) for the next token."""

    def accept(self, token_id: int) -> None:
        """Advance by one sampled token; MaskError if the grammar rejects it."""

    def done(self) -> bool:
        """The grammar is complete (only stop tokens remain)."""


@dataclass
class MaskEngine:
    engine: str
    grammar: str
    n_vocab: int
    eog_ids: frozenset[int]
    _compiled: Any = field(default=None, repr=False)
    _factory: Any = field(default=None, repr=False)

    def matcher(self, prefill: str = "", prefill_ids: Sequence[int] = ()) -> Matcher:
        """A fresh matcher advanced over the forced prefill (text for xgrammar/llguidance, ids for llama)."""
        return self._factory(prefill, prefill_ids)


_CACHE: dict[tuple[str, str, int], MaskEngine] = {}


def _bits_to_bool(bits: np.ndarray, n_vocab: int) -> np.ndarray:
    as_bytes = bits.view(np.uint8)
    return np.unpackbits(as_bytes, bitorder="little")[:n_vocab].view(bool)


def compile_mask(engine: str, grammar: str, backend: Any, *, label: str | None = None) -> MaskEngine:
    """Compile ``grammar`` (in the engine's format, ``ENGINE_FORMATS``) for ``backend``'s vocabulary
    (cached by engine, grammar text and model). ``label`` names the mask in records (default: ``engine``)."""
    label = label or engine
    key = (label, hashlib.sha256(grammar.encode()).hexdigest(), id(backend))
    if key in _CACHE:
        return _CACHE[key]
    if engine == "xgrammar":
        eng = _xgrammar(grammar, backend)
        eng.engine = label
    elif engine == "llguidance":
        eng = _llguidance(grammar, backend, label)
    elif engine == "llama-grammar":
        eng = _llama_grammar(grammar, backend, label)
    else:
        raise MaskError(f"unknown mask engine '{engine}'; choose one of: {', '.join(ENGINES)}")
    _CACHE[key] = eng
    return eng


# ---------------------------------------------------------------------------------------------
# xgrammar


def _xgrammar(grammar: str, backend: Any) -> MaskEngine:
    import xgrammar as xgr

    try:
        parsed = xgr.Grammar.from_ebnf(grammar, root_rule_name="root")
    except Exception as err:  # xgrammar raises RuntimeError/ValueError subclasses
        raise MaskError(f"xgrammar rejected the grammar: {str(err).splitlines()[0][:200]}") from None
    return xgrammar_mask(parsed, backend, engine="xgrammar", text=grammar)


def xgrammar_tokenizer_info(backend: Any) -> Any:
    """``xgrammar.TokenizerInfo`` of ``backend``'s vocabulary (raw token bytes, its end-of-generation ids)."""
    import xgrammar as xgr

    return xgr.TokenizerInfo(
        backend.vocab_bytes[: backend.n_vocab],
        vocab_type=xgr.VocabType.RAW,
        vocab_size=backend.n_vocab,
        stop_token_ids=sorted(backend.eog_ids),
    )


def xgrammar_mask(grammar: Any, backend: Any, *, engine: str, text: str) -> MaskEngine:
    """A mask from an ``xgrammar.Grammar`` object (``text`` is what the engine record names it by)."""
    import torch
    import xgrammar as xgr

    info = xgrammar_tokenizer_info(backend)
    try:
        compiled = xgr.GrammarCompiler(info, max_threads=2).compile_grammar(grammar)
    except Exception as err:  # xgrammar raises RuntimeError/ValueError subclasses
        raise MaskError(f"xgrammar rejected the grammar: {str(err).splitlines()[0][:200]}") from None
    n_vocab = backend.n_vocab

    class XMatcher:
        def __init__(self, prefill: str, prefill_ids: Sequence[int]) -> None:
            self.m = xgr.GrammarMatcher(compiled)
            self.bits = xgr.allocate_token_bitmask(1, n_vocab)
            self.view = self.bits[0].numpy()  # shares the tensor's memory
            if prefill and not self.m.accept_string(prefill):
                raise MaskError(f"the grammar rejects the forced prefill {prefill[-60:]!r}")

        def allowed(self) -> np.ndarray:
            self.m.fill_next_token_bitmask(self.bits, 0)
            return _bits_to_bool(self.view, n_vocab)

        def accept(self, token_id: int) -> None:
            if not self.m.accept_token(int(token_id)):
                raise MaskError(f"xgrammar rejected token {token_id}")

        def done(self) -> bool:
            return bool(self.m.is_terminated())

    del torch
    return MaskEngine(engine, text, n_vocab, backend.eog_ids, compiled, XMatcher)


# ---------------------------------------------------------------------------------------------
# llguidance


def _llg_tokenizer(backend: Any) -> Any:
    if backend.name == "llamacpp":
        import warnings

        from llguidance.llamacpp import lltokenizer_from_vocab

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return lltokenizer_from_vocab(backend._vocab, eos_token=sorted(backend.eog_ids))
    from llguidance.hf import from_tokenizer

    return from_tokenizer(backend.tokenizer, n_vocab=backend.n_vocab, eos_token=sorted(backend.eog_ids))


def _llguidance(grammar: str, backend: Any, engine: str = "llguidance") -> MaskEngine:
    import llguidance
    import llguidance.numpy as lln

    tok = _llg_tokenizer(backend)
    text = llguidance.grammar_from("lark", grammar)
    is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(text, tok)
    if is_error:
        raise MaskError(f"llguidance rejected the grammar: {' '.join(messages)[:200]}")
    n_vocab = backend.n_vocab

    class LMatcher:
        def __init__(self, prefill: str, prefill_ids: Sequence[int]) -> None:
            self.m = llguidance.LLMatcher(tok, text, log_level=0)
            self.bits = lln.allocate_token_bitmask(1, tok.vocab_size)
            if prefill:
                pids = tok.tokenize_str(prefill)
                if not self.m.consume_tokens(pids):
                    raise MaskError(f"the grammar rejects the forced prefill {prefill[-60:]!r}")
            self._check()

        def _check(self) -> None:
            if self.m.is_error():
                raise MaskError(f"llguidance: {self.m.get_error()[:200]}")

        def allowed(self) -> np.ndarray:
            lln.fill_next_token_bitmask(self.m, self.bits, 0)
            self._check()
            mask = _bits_to_bool(self.bits[0], tok.vocab_size)
            out = np.zeros(n_vocab, dtype=bool)
            out[: min(n_vocab, mask.size)] = mask[:n_vocab]
            return out

        def accept(self, token_id: int) -> None:
            if not self.m.consume_token(int(token_id)):
                raise MaskError(f"llguidance rejected token {token_id}: {self.m.get_error()[:160]}")

        def done(self) -> bool:
            return bool(self.m.is_stopped())

    return MaskEngine(engine, grammar, n_vocab, backend.eog_ids, tok, LMatcher)


# ---------------------------------------------------------------------------------------------
# llama.cpp's own grammar sampler


def _llama_grammar(grammar: str, backend: Any, engine: str = "llama-grammar") -> MaskEngine:
    if backend.name != "llamacpp":
        raise MaskError(f"the {engine} engine needs the llamacpp backend (--backend llamacpp)")
    import ctypes

    import llama_cpp

    vocab = backend._vocab
    n_vocab = backend.n_vocab
    probe = llama_cpp.llama_sampler_init_grammar(vocab, grammar.encode(), b"root")
    if not probe:
        raise MaskError(
            "llama.cpp's grammar parser rejected the grammar (set TOOLDECODE_LLAMA_VERBOSE=1 to see why)"
        )
    llama_cpp.llama_sampler_free(probe)

    class LlamaMatcher:
        def __init__(self, prefill: str, prefill_ids: Sequence[int]) -> None:
            self.s = llama_cpp.llama_sampler_init_grammar(vocab, grammar.encode(), b"root")
            self.data = np.zeros(
                n_vocab,
                dtype=np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)], align=True),
            )
            self.data["id"] = np.arange(n_vocab, dtype=np.int32)
            self.arr = llama_cpp.llama_token_data_array(
                data=self.data.ctypes.data_as(llama_cpp.llama_token_data_p),
                size=n_vocab,
                selected=-1,
                sorted=False,
            )
            for t in prefill_ids:
                self.accept(t)

        def allowed(self) -> np.ndarray:
            self.data["logit"] = 0.0
            self.data["id"] = np.arange(n_vocab, dtype=np.int32)
            self.arr.size = n_vocab
            self.arr.sorted = False
            llama_cpp.llama_sampler_apply(self.s, ctypes.byref(self.arr))
            return np.isfinite(self.data["logit"])

        def accept(self, token_id: int) -> None:
            llama_cpp.llama_sampler_accept(self.s, int(token_id))

        def done(self) -> bool:
            return False

        def __del__(self) -> None:
            if getattr(self, "s", None):
                llama_cpp.llama_sampler_free(self.s)
                self.s = None

    return MaskEngine(engine, grammar, n_vocab, backend.eog_ids, None, LlamaMatcher)
