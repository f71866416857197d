"""Token-mask engines: a grammar (from ``tooldecode.grammar``) becomes a per-step allowed-token mask.

Engines compile once per (engine, grammar, vocabulary) and are cached; each sequence gets its own
cheap matcher. A matcher that fails (engine error, rejected token, dead end) raises ``MaskError``:
the sampler aborts that sample instead of continuing unconstrained.

- ``xgrammar`` (default): GBNF via ``xgrammar.Grammar.from_ebnf``; bitmask per step.
- ``llguidance``: Lark grammar; bitmask per step.
- ``llama-grammar``: llama.cpp's own grammar sampler fed our GBNF (llama.cpp backend only), applied
  to the full candidate array every step — the slow reference path.

``prefix_keeping`` wraps any of them for the ``strict-prefix`` mode: a masked token's mass moves to its
longest allowed token prefix instead of being renormalised over every allowed token (``PrefixKeeping``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from tooldecode.backends.state import PerBackend
from tooldecode.errors import MaskError
from tooldecode.grammar.check import FORMAT_OF

ENGINES = ("xgrammar", "llguidance", "llama-grammar")
# The grammar format each engine reads (``tooldecode.grammar.render(format=...)``).
ENGINE_FORMATS = {e: FORMAT_OF[e] for e in ENGINES}


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


_CACHE: PerBackend[MaskEngine] = PerBackend()  # by engine label and grammar digest, per backend


def _bits_to_bool(bits: np.ndarray, n_vocab: int) -> np.ndarray:
    as_bytes = bits.view(np.uint8)
    return np.unpackbits(as_bytes, bitorder="little")[:n_vocab].view(bool)


def compile_mask(engine: str, grammar: str, backend: Any, *, label: str | None = None) -> MaskEngine:
    """Compile ``grammar`` (in the engine's format, ``ENGINE_FORMATS``) for ``backend``'s vocabulary
    (cached by engine, grammar text and model). ``label`` names the mask in records (default: ``engine``)."""
    name = label or engine
    if engine not in ENGINES:
        raise MaskError(f"unknown mask engine '{engine}'; choose one of: {', '.join(ENGINES)}")

    def build() -> MaskEngine:
        if engine == "xgrammar":
            eng = _xgrammar(grammar, backend)
            eng.engine = name
            return eng
        if engine == "llguidance":
            return _llguidance(grammar, backend, name)
        return _llama_grammar(grammar, backend, name)

    return _CACHE.get(backend, (name, hashlib.sha256(grammar.encode()).hexdigest()), build)


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


# ---------------------------------------------------------------------------------------------
# the prefix-keeping mask


def special_token_ids(backend: Any) -> frozenset[int]:
    """Control tokens of ``backend``'s vocabulary (end of turn, chat markers): ids whose bytes are not text
    the model writes, so no prefix of their rendering stands for them. End-of-generation ids always count."""
    out = set(backend.eog_ids)
    if backend.name == "llamacpp":
        import llama_cpp

        out |= {i for i in range(backend.n_vocab) if llama_cpp.llama_vocab_is_control(backend._vocab, i)}
    elif getattr(backend, "tokenizer", None) is not None:
        tok = backend.tokenizer
        out |= set(tok.all_special_ids)
        for i, added in (getattr(tok, "added_tokens_decoder", None) or {}).items():
            if getattr(added, "special", False):
                out.add(int(i))
    return frozenset(i for i in out if 0 <= i < backend.n_vocab)


def longest_token_prefix(vocab: Sequence[bytes], excluded: frozenset[int] = frozenset()) -> np.ndarray:
    """For each token, the id of the longest proper prefix of its bytes that is itself a token (−1 when
    none). Tokens in ``excluded`` (control tokens) neither have nor are a prefix; of several tokens with
    the same bytes the lowest id stands for them. Following the array from a token lists all of its
    token prefixes, longest first (a shorter prefix of a token is a prefix of its longest one)."""
    by_bytes: dict[bytes, int] = {}
    for i, b in enumerate(vocab):
        if b and i not in excluded and b not in by_bytes:
            by_bytes[b] = i
    parent = np.full(len(vocab), -1, dtype=np.int64)
    for i, b in enumerate(vocab):
        if i in excluded:
            continue
        for k in range(len(b) - 1, 0, -1):
            j = by_bytes.get(b[:k])
            if j is not None:
                parent[i] = j
                break
    return parent


class PrefixKeeping:
    """The prefix-keeping reweighting of one masked step (a logits-processor: weights in, weights out).

    With P the model's next-token distribution and A the tokens the grammar allows, each masked token
    v ∉ A is mapped to π(v): the longest proper prefix of v's bytes that is an allowed token (``",`` →
    ``"``), if any. The step then samples

        Q⁺(u) = (P(u) + Σ_{v ∉ A, π(v) = u} P(v)) / Z⁺,    u ∈ A,
        Z⁺ = P(A) + Σ_{v ∉ A, π(v) defined} P(v),

    instead of strict's Q(u) = P(u) / P(A): a masked token's mass goes to its prefix (the model keeps
    its decision to end the string; the grammar decides what follows), and only the mass of masked
    tokens without an allowed token prefix is renormalised over A. Where no masked token has an allowed
    prefix, Q⁺ is strict's Q. Control tokens are never moved.
    """

    def __init__(self, parent: np.ndarray) -> None:
        n = parent.size
        self.n = n
        # index n is the sentinel "no prefix": parent[n] = n, allowed[n] = True
        self._parent = np.append(np.where(parent < 0, n, parent), n).astype(np.int64)
        self._ids = np.arange(n + 1, dtype=np.int64)

    def targets(self, allowed: np.ndarray) -> np.ndarray:
        """Per token: itself when allowed, else its longest allowed token prefix, else ``n`` (none)."""
        ok = np.append(allowed.astype(bool, copy=False), True)
        t = np.where(ok, self._ids, self._parent)
        todo = np.flatnonzero(~ok[t])
        while todo.size:
            t[todo] = self._parent[t[todo]]
            todo = todo[~ok[t[todo]]]
        return t[: self.n]

    def __call__(self, e: np.ndarray, allowed: np.ndarray) -> np.ndarray:
        """The unnormalised weights of Q⁺ (float32, zero outside A) from the model's weights ``e`` ∝ P."""
        moved = np.bincount(self.targets(allowed), weights=e, minlength=self.n + 1)[: self.n]
        return moved.astype(np.float32)


_PARENTS: PerBackend[np.ndarray] = PerBackend()  # each token's longest token prefix, per backend


class _PrefixMatcher:
    """A matcher whose steps are reweighted by ``PrefixKeeping`` (``reweight``); the grammar state is the
    inner matcher's."""

    def __init__(self, inner: Matcher, keep: PrefixKeeping) -> None:
        self.inner = inner
        self.reweight = keep

    def allowed(self) -> np.ndarray:
        return self.inner.allowed()

    def accept(self, token_id: int) -> None:
        self.inner.accept(token_id)

    def done(self) -> bool:
        return self.inner.done()


def prefix_keeping(mask: MaskEngine, backend: Any, *, label: str | None = None) -> MaskEngine:
    """``mask`` with every step reweighted by ``PrefixKeeping`` (the ``strict-prefix`` sampling mode): the
    same grammar, the masked mass moved to each masked token's longest allowed token prefix. ``label``
    names it in records (default ``<engine>+prefix``)."""
    if not isinstance(mask, MaskEngine):
        raise MaskError(
            f"strict-prefix reweights a token mask over the full logits, not {type(mask).__name__}; use a mask "
            "engine (xgrammar, llguidance, llama-grammar) on the llamacpp or hf backend"
        )
    parents = _PARENTS.get(
        backend,
        "parents",
        lambda: longest_token_prefix(backend.vocab_bytes[: backend.n_vocab], special_token_ids(backend)),
    )
    keep = PrefixKeeping(parents)
    inner = mask._factory

    def factory(prefill: str, prefill_ids: Sequence[int]) -> Matcher:
        return _PrefixMatcher(inner(prefill, prefill_ids), keep)

    return MaskEngine(
        label or f"{mask.engine}+prefix", mask.grammar, mask.n_vocab, mask.eog_ids, keep, factory
    )
