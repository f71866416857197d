"""One backend session: the sizing rule of a llama.cpp context and the cache that loads each model once.

A llama.cpp context holds ``max_seqs`` parallel sequences in a KV cache of ``n_ctx`` tokens. Sequence 0
holds the prompt (or, for the probe, the teacher-forced call); every other sequence is a sample drawn
from it or a probe branch. ``llamacpp_size`` is the one rule that sizes a context from what it must
hold; ``backend_kwargs`` is what ``load_backend`` takes for any backend, and ``ModelCache`` loads the
models of a run, a command or a replay through it.
"""

from __future__ import annotations

from typing import Any

# parallel sequences a draw uses by default: ``LlamaCppBackend.suggest_batch_size`` caps its batch here
DRAW_SLOTS = 16
# tokens of a context that evaluates prompts: the longest prompt of the corpus with its samples' tokens
CONTEXT_TOKENS = 8192
# a context whose slots are filled across prompts keeps each sequence in a stream of its own (a unified cache
# would make every token attend over every slot's cells: a step of 8 slots of 2,560-token prompts took
# x1.38 as long, benchmarks/bench_kv_layout.py, docs/runs.md), each stream as large as a context that evaluates one prompt
FILL_STREAM_TOKENS = CONTEXT_TOKENS
# tokens of a context that only tokenizes and reads the vocabulary (a replay through a mask)
VOCABULARY_TOKENS = 512


def llamacpp_size(
    *, batch_size: int | None = None, branches: int = 0, evaluates: bool = True, fill_slots: bool = False
) -> dict[str, Any]:
    """``n_ctx`` and ``max_seqs`` of a llama.cpp context from what it must hold.

    Parameters
    ----------
    batch_size
        The most samples drawn at once (``None``: the sampler's default, ``DRAW_SLOTS``; a smaller batch
        still gets ``DRAW_SLOTS`` slots, so the sampler's own choice always fits).
    branches
        The most branches the probe expands at one level (``ProbeConfig.max_branches``; 0: no probe).
    evaluates
        False when the context is used only for its tokenizer and vocabulary: one sequence, a small cache.
    fill_slots
        The draws of many prompts share the context (``sample_queue``, as many slots as ``batch_size``):
        each sequence gets a stream of its own of ``FILL_STREAM_TOKENS`` (``kv_unified`` false), so a
        token attends over its own sequence's cells only.

    Returns
    -------
    dict
        ``{"n_ctx": …, "max_seqs": …}``: the draws or branches, whichever are more, plus sequence 0; with
        ``fill_slots`` also ``"kv_unified": False`` and ``n_ctx`` the streams' tokens together.
    """
    if not evaluates:
        return {"n_ctx": VOCABULARY_TOKENS, "max_seqs": 1}
    if fill_slots:
        seqs = max(batch_size or DRAW_SLOTS, branches) + 1
        return {"n_ctx": seqs * FILL_STREAM_TOKENS, "max_seqs": seqs, "kv_unified": False}
    slots = max(batch_size or 0, DRAW_SLOTS, branches)
    return {"n_ctx": CONTEXT_TOKENS, "max_seqs": slots + 1}


def backend_kwargs(
    backend: str,
    *,
    batch_size: int | None = None,
    branches: int = 0,
    evaluates: bool = True,
    server: dict[str, Any] | None = None,
    fill_slots: bool = False,
) -> dict[str, Any]:
    """``load_backend(backend, …)``'s keyword arguments: the sizing rule for ``llamacpp``, the server's
    options (``base_url``, ``api_key_env``, ``kind``) for ``openai``, none for ``hf``."""
    if backend == "llamacpp":
        return llamacpp_size(
            batch_size=batch_size, branches=branches, evaluates=evaluates, fill_slots=fill_slots
        )
    if backend == "openai":
        return dict(server or {})
    return {}


class ModelCache:
    """Load each (backend, model) once; by default one at a time (a new one closes the others).

    Parameters
    ----------
    batch_size, branches, evaluates
        What every context must hold (``llamacpp_size``).
    server
        The ``openai`` backend's options (``base_url``, ``api_key_env``, ``kind``).
    keep_all
        Keep every loaded model open until ``close`` (several models' vocabularies at once).
    """

    def __init__(
        self,
        *,
        batch_size: int | None = None,
        branches: int = 0,
        evaluates: bool = True,
        server: dict[str, Any] | None = None,
        keep_all: bool = False,
        fill_slots: bool = False,
    ) -> None:
        self.fill_slots = fill_slots
        self.cache: dict[tuple[str, str], Any] = {}
        self.batch_size, self.branches, self.evaluates = batch_size, branches, evaluates
        self.server = server or {}
        self.keep_all = keep_all

    def get(self, backend: str, model: str) -> Any:
        """The loaded backend of ``model`` (fetched and loaded on first use)."""
        from tooldecode.backends import load_backend
        from tooldecode.models import resolve, verified

        key = (backend, model)
        if key not in self.cache:
            if not self.keep_all:
                for other in list(self.cache):
                    self.cache.pop(other).close()
            ref = verified(resolve(model, fetch=True))  # the bytes re-hashed, as `run` does
            kw = backend_kwargs(
                backend,
                server=self.server,
                batch_size=self.batch_size,
                branches=self.branches,
                evaluates=self.evaluates,
                fill_slots=self.fill_slots,
            )
            self.cache[key] = load_backend(backend, ref, **kw)
        return self.cache[key]

    def close(self) -> None:
        """Close every loaded backend."""
        for be in self.cache.values():
            be.close()
        self.cache.clear()

    def __enter__(self) -> ModelCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
