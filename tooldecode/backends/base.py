"""The backend interface: what the sampler and the probe need from a model runtime.

A backend evaluates a prompt once and branches ``n`` sequences from it (the prompt's KV cache is
shared), then advances the active sequences one token per step. Logits come back as a float32
numpy array of shape ``(rows, n_vocab)``.

Evaluation mode matters numerically: llama.cpp's logits depend on how many tokens are evaluated
together. Every backend states its mode in ``info()["eval_mode"]``.
"""

from __future__ import annotations

import ctypes
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from functools import cached_property, lru_cache
from typing import Any

import numpy as np

from tooldecode.errors import ModelError
from tooldecode.models import ModelRef


def cpu_threads(requested: int | None = None) -> int:
    """The CPU threads a model runtime uses: ``requested``, else ``TOOLDECODE_THREADS``, else every core.

    One home for the setting, read by llama.cpp, transformers and training alike, so that two processes
    sharing the cores (two test workers, a queue job) can each be held to one thread.

    Raises
    ------
    ModelError
        When ``TOOLDECODE_THREADS`` is set to anything but a positive integer.
    """
    if requested:
        return int(requested)
    raw = os.environ.get("TOOLDECODE_THREADS", "").strip()
    if raw:
        if not raw.isdigit() or int(raw) < 1:
            raise ModelError(
                f"TOOLDECODE_THREADS={raw!r} is not a positive integer; set it to a thread count (e.g. 1) or unset it"
            )
        return int(raw)
    return os.cpu_count() or 1


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens ``a`` and ``b`` share: what a cached prompt saves a new one."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


class Backend(ABC):
    name: str = "?"
    model: ModelRef
    n_vocab: int
    eog_ids: frozenset[int]

    # --- tokens -------------------------------------------------------------------------------
    @abstractmethod
    def tokenize(self, text: str, *, special: bool = True, add_bos: bool = False) -> list[int]:
        """Text → token ids. With ``special=True`` special-token text (``<|im_start|>``) maps to the special token."""

    @abstractmethod
    def token_bytes(self, token_id: int) -> bytes:
        """The bytes a token stands for (special tokens rendered as their text)."""

    def detokenize(self, ids: Sequence[int]) -> str:
        return b"".join(self.token_bytes(int(t)) for t in ids).decode("utf-8", errors="replace")

    @cached_property
    def vocab_bytes(self) -> list[bytes]:
        """The bytes of each logits column, indexed by token id; ``[:n_vocab]`` is the vocabulary itself
        (a backend whose rows carry an extra column, such as the server backend's ``UNSEEN``, lists it too)."""
        return [self.token_bytes(i) for i in range(self.n_vocab)]

    # --- evaluation ---------------------------------------------------------------------------
    @abstractmethod
    def begin(self, prompt_ids: Sequence[int], n_seqs: int) -> np.ndarray:
        """Evaluate the prompt (reusing a cached common prefix) and branch ``n_seqs`` sequences from it.

        Returns the logits after the last prompt token, shape ``(n_seqs, n_vocab)`` (identical rows).
        """

    @abstractmethod
    def step(self, tokens: Sequence[int], rows: Sequence[int]) -> np.ndarray:
        """Append ``tokens[i]`` to sequence ``rows[i]``; return the next logits, shape ``(len(rows), n_vocab)``.

        The array may be a view of the runtime's buffer: it is valid until the next ``begin``/``step``/
        ``forward`` call (copy what must outlive it)."""

    def suggest_batch_size(self, prompt_tokens: int, max_new_tokens: int) -> int:
        """How many sequences to decode in parallel for this prompt and budget (``sample``'s default)."""
        return 16

    #: whether ``restart`` is implemented (the sampler then refills finished slots: continuous batching)
    can_restart: bool = False

    def restart(self, row: int) -> None:
        """Reset sequence ``row`` of the current ``begin`` to the bare prompt (its next logits are the
        prompt's, as ``begin`` returned them); the other sequences are untouched."""
        raise NotImplementedError(f"{type(self).__name__} cannot restart a sequence")

    @abstractmethod
    def end(self) -> None:
        """Drop the branches; the prompt stays cached for the next ``begin``."""

    @abstractmethod
    def forward(self, ids: Sequence[int], positions: Sequence[int]) -> np.ndarray:
        """Teacher-forced logits: for each ``p`` in ``positions``, the logits after ``ids[: p + 1]``."""

    def branch_logits(self, prefix_ids: Sequence[int], continuations: Sequence[Sequence[int]]) -> np.ndarray:
        """Logits after ``prefix + c`` for each continuation ``c`` (each non-empty), shape ``(len(c), n_vocab)``.

        The prefix is evaluated once; the continuations run as parallel sequences branched from it.
        """
        out = np.empty((len(continuations), self.n_vocab), dtype=np.float32)
        group = int(getattr(self, "max_seqs", 16))
        if len(continuations) > group:
            for g in range(0, len(continuations), group):
                out[g : g + group] = self.branch_logits(prefix_ids, continuations[g : g + group])
            return out
        if not continuations:
            return out
        self.begin(prefix_ids, len(continuations))
        try:
            feed_branches(continuations, lambda toks, rows, _k: self.step(toks, rows), out)
        finally:
            self.end()
        return out

    @abstractmethod
    def info(self) -> dict:
        """Backend name, library versions, device, dtype, threads and evaluation mode (for manifests)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        pass

    def __enter__(self) -> Backend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def feed_branches(
    continuations: Sequence[Sequence[int]],
    step: Callable[[list[int], list[int], int], np.ndarray],
    out: np.ndarray,
    offset: int = 0,
) -> None:
    """Feed each continuation one token per step (``step(tokens, rows, k)``: token ``k`` of the rows
    still going, their next logits) and keep each row's logits after its last token in ``out[offset + row]``."""
    k = 0
    while True:
        rows = [r for r, c in enumerate(continuations) if len(c) > k]
        if not rows:
            return
        logits = step([int(continuations[r][k]) for r in rows], rows, k)
        for j, r in enumerate(rows):
            if len(continuations[r]) == k + 1:
                out[offset + r] = logits[j]
        k += 1


@lru_cache(maxsize=1)
def byte_level_decoder() -> dict[str, int]:
    """GPT-2's byte-level BPE alphabet reversed: each printable stand-in character → its byte (Qwen2.5 and
    SmolLM2 write their vocabularies in it)."""
    bs = (
        list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), 256))
    )
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs, strict=True)}


# --- llama.cpp's tokenizer (the llamacpp backend and the openai backend's GGUF vocabulary) -------------
def llama_tokenize(lc: Any, vocab: Any, text: str, *, add_bos: bool, special: bool) -> list[int]:
    """Token ids of ``text`` under llama.cpp's ``vocab`` (``lc``: the ``llama_cpp`` module); the
    buffer grows to what llama.cpp asks for."""
    data = text.encode("utf-8")
    cap = len(data) + 16
    buf = (lc.llama_token * cap)()
    n = lc.llama_tokenize(vocab, data, len(data), buf, cap, add_bos, special)
    if n < 0:
        cap = -n
        buf = (lc.llama_token * cap)()
        n = lc.llama_tokenize(vocab, data, len(data), buf, cap, add_bos, special)
    return list(buf[:n])


def llama_piece(lc: Any, vocab: Any, token_id: int, *, special: bool) -> bytes:
    """The bytes of one token of llama.cpp's ``vocab`` (special tokens as their text when ``special``)."""
    buf = ctypes.create_string_buffer(256)
    n = lc.llama_token_to_piece(vocab, int(token_id), buf, 256, 0, special)
    if n < 0:
        buf = ctypes.create_string_buffer(-n)
        n = lc.llama_token_to_piece(vocab, int(token_id), buf, -n, 0, special)
    return buf.raw[:n]
