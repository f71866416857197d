"""Loose and grammar-masked (strict) sampling of many continuations from one prompt.

The prompt is evaluated once; ``n`` samples are decoded as parallel sequences (``batch_size`` at a
time) that share its KV cache. Every sample keeps its tokens, each token's log-probability under
the model's unmasked distribution, the top-k alternatives, the entropy before and after the mask
and the probability mass the mask removed.

Reproducibility: sample ``i`` of seed ``s`` draws its random numbers from its own generator seeded
with ``(s, i)``, so a sample does not depend on the others in its batch (up to the backend's
numerics for different batch shapes, see ``Backend.info()["eval_mode"]``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from tooldecode.backends.base import Backend
from tooldecode.errors import MaskError
from tooldecode.masking import MaskEngine, Matcher


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    max_new_tokens: int = 256
    stop: tuple[str, ...] = ()
    seed: int = 0
    top_logprobs: int = 20
    keep_top: str = "all"  # "all" | "none" (runs keep top-k only at structural positions when stored)


@dataclass
class Sample:
    index: int
    seed: int
    text: str
    token_ids: list[int]
    logprobs: list[float]
    top: list[list[list[float]] | None]
    entropy: list[float]
    entropy_masked: list[float] | None
    mask_removed: list[float] | None
    finish_reason: str
    error: str | None = None
    timing: dict[str, float] = field(default_factory=dict)

    def to_record(self) -> dict[str, Any]:
        return asdict(self)


_STRUCTURAL = set(',}]":')


def _log_softmax(x: np.ndarray) -> np.ndarray:
    m = np.max(x, axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    z = x - m
    lse = np.log(np.sum(np.exp(z), axis=-1, keepdims=True))
    return z - lse


def _entropy(logp: np.ndarray) -> np.ndarray:
    p = np.exp(logp)
    with np.errstate(invalid="ignore"):
        terms = np.where(p > 0, p * logp, 0.0)
    return -np.sum(terms, axis=-1)


def _filter(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """Temperature, top-k, top-p, min-p on one row of (masked) logits → log-weights (−inf = excluded)."""
    x = logits / max(params.temperature, 1e-8)
    if params.top_k and params.top_k < x.size:
        kth = np.partition(x, -params.top_k)[-params.top_k]
        x = np.where(x >= kth, x, -np.inf)
    if params.min_p > 0:
        x = np.where(x >= x.max() + math.log(params.min_p), x, -np.inf)
    if params.top_p < 1.0:
        order = np.argsort(-x)
        lp = _log_softmax(x[order])
        cum = np.cumsum(np.exp(lp))
        cut = int(np.searchsorted(cum, params.top_p)) + 1
        keep = np.full(x.size, False)
        keep[order[:cut]] = True
        x = np.where(keep, x, -np.inf)
    return x


def _draw(weights: np.ndarray, rng: np.random.Generator) -> int:
    lp = _log_softmax(weights)
    cum = np.cumsum(np.exp(lp, dtype=np.float64))
    u = rng.random() * cum[-1]
    return int(min(np.searchsorted(cum, u, side="right"), weights.size - 1))


@dataclass
class _Row:
    index: int
    rng: np.random.Generator
    matcher: Matcher | None
    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    top: list[list[list[float]] | None] = field(default_factory=list)
    entropy: list[float] = field(default_factory=list)
    entropy_masked: list[float] = field(default_factory=list)
    mask_removed: list[float] = field(default_factory=list)
    text: bytes = b""
    finish: str | None = None
    error: str | None = None


def sample(
    backend: Backend,
    prompt: str | Sequence[int],
    n: int,
    params: SamplingParams = SamplingParams(),
    *,
    mask: MaskEngine | None = None,
    prefill: str = "",
    batch_size: int = 16,
    start_index: int = 0,
    on_batch: Callable[[list[Sample]], None] | None = None,
) -> list[Sample]:
    """Draw ``n`` samples (indices ``start_index`` … ) from ``prompt``.

    ``prompt`` is the full prompt text (special tokens as text) or token ids; ``prefill`` is the part
    of it that the call already contains (the mask's matcher is advanced over it). With ``mask``, every
    token is drawn from the masked distribution; a matcher failure aborts that sample
    (``finish_reason="error"``), never continuing unconstrained.
    """
    ids = backend.tokenize(prompt) if isinstance(prompt, str) else list(prompt)
    prefill_ids = backend.tokenize(prefill, special=False) if (mask is not None and prefill) else []
    out: list[Sample] = []
    for b0 in range(0, n, batch_size):
        idx = list(range(start_index + b0, start_index + min(n, b0 + batch_size)))
        batch = _sample_batch(backend, ids, idx, params, mask, prefill, prefill_ids)
        out.extend(batch)
        if on_batch is not None:
            on_batch(batch)
    return out


def _sample_batch(
    backend: Backend,
    ids: list[int],
    indices: list[int],
    params: SamplingParams,
    mask: MaskEngine | None,
    prefill: str,
    prefill_ids: list[int],
) -> list[Sample]:
    t0 = time.perf_counter()
    rows: list[_Row] = []
    for i in indices:
        matcher = None
        err = None
        if mask is not None:
            try:
                matcher = mask.matcher(prefill, prefill_ids)
            except MaskError as e:
                err = str(e)
            except Exception as e:  # engine bug: never fall back to unconstrained sampling
                err = f"mask engine failed: {type(e).__name__}: {e}"
        row = _Row(i, np.random.default_rng([params.seed, i]), matcher)
        if err:
            row.finish, row.error = "error", err
        rows.append(row)
    logits = backend.begin(ids, len(rows))
    t_prefill = time.perf_counter() - t0
    active = [r for r in range(len(rows)) if rows[r].finish is None]
    eog = backend.eog_ids
    steps = 0
    while active and steps < params.max_new_tokens:
        steps += 1
        chosen: list[int] = []
        keep_rows: list[int] = []
        for pos, r in enumerate(active):
            row = rows[r]
            x = logits[pos] if logits.shape[0] == len(active) else logits[r]
            tok = _choose(row, x, params, mask is not None, eog)
            if tok is None:
                continue
            row.ids.append(tok)
            piece = backend.token_bytes(tok) if tok not in eog else b""
            row.text += piece
            if tok in eog:
                row.finish = "stop"
                continue
            if params.stop and _hit_stop(row, params.stop):
                row.finish = "stop"
                continue
            chosen.append(tok)
            keep_rows.append(r)
        active = keep_rows
        if active and steps < params.max_new_tokens:
            logits = backend.step(chosen, active)
    for r in active:
        rows[r].finish = "length"
    backend.end()
    elapsed = time.perf_counter() - t0
    samples = []
    for row in rows:
        text = row.text.decode("utf-8", errors="replace")
        samples.append(
            Sample(
                index=row.index,
                seed=params.seed,
                text=text,
                token_ids=row.ids,
                logprobs=row.logprobs,
                top=row.top,
                entropy=row.entropy,
                entropy_masked=row.entropy_masked if mask is not None else None,
                mask_removed=row.mask_removed if mask is not None else None,
                finish_reason=row.finish or "length",
                error=row.error,
                timing={
                    "prefill_s": round(t_prefill, 4),
                    "batch_s": round(elapsed, 4),
                    "batch_size": len(rows),
                    "tokens": len(row.ids),
                },
            )
        )
    return samples


def _hit_stop(row: _Row, stops: tuple[str, ...]) -> bool:
    tail = row.text[-512:].decode("utf-8", errors="ignore")
    for s in stops:
        k = tail.find(s)
        if k >= 0:
            # cut anything the last token carried past the stop string
            cut = len(tail[: k + len(s)].encode("utf-8"))
            row.text = row.text[: len(row.text) - len(tail.encode("utf-8")) + cut]
            return True
    return False


def _draw_p(p: np.ndarray, rng: np.random.Generator) -> int:
    """Draw from non-negative weights ``p`` (zero-weight tokens are never drawn)."""
    cum = np.cumsum(p, dtype=np.float64)
    u = rng.random() * cum[-1]
    return int(min(np.searchsorted(cum, u, side="right"), p.size - 1))


def _choose(
    row: _Row, x: np.ndarray, params: SamplingParams, masked: bool, eog: frozenset[int]
) -> int | None:
    logp = _log_softmax(x.astype(np.float32, copy=False))
    p = np.exp(logp)
    h = float(-np.dot(p, np.where(p > 0, logp, 0.0)))
    # plain T=1 sampling draws straight from the (masked) probabilities: one pass over the vocabulary
    plain = params.temperature == 1.0 and not params.top_k and params.top_p >= 1.0 and params.min_p <= 0
    dist = p
    weights = x
    if masked:
        assert row.matcher is not None
        try:
            allowed = row.matcher.allowed()
            if row.matcher.done():
                allowed = np.zeros_like(allowed)
                allowed[list(eog)] = True
        except MaskError as e:
            row.finish, row.error = "error", str(e)
            return None
        except Exception as e:  # never continue unconstrained
            row.finish, row.error = "error", f"mask engine failed: {type(e).__name__}: {e}"
            return None
        if not allowed.any():
            row.finish, row.error = "error", "grammar dead end: no token is allowed"
            return None
        dist = p * allowed
        kept = float(dist.sum())
        row.mask_removed.append(max(0.0, 1.0 - kept))
        if kept > 0:
            # entropy of the renormalised masked distribution, from the unmasked log-probabilities
            # (logits are finite, so logp is too and disallowed tokens contribute 0 * logp = 0)
            row.entropy_masked.append(-float(np.dot(dist, logp)) / kept + math.log(kept))
        else:  # every allowed token underflowed: fall back to the masked logits
            row.entropy_masked.append(float(_entropy(_log_softmax(np.where(allowed, x, -np.inf)))))
            plain = False
        if params.temperature <= 0 or not plain:
            weights = np.where(allowed, x, -np.inf)
    if params.temperature <= 0:
        tok = int(np.argmax(weights))
    elif plain:
        tok = _draw_p(dist, row.rng)
    else:
        tok = _draw(_filter(weights, params), row.rng)
    if masked:
        try:
            row.matcher.accept(tok)  # type: ignore[union-attr]
        except MaskError as e:
            row.finish, row.error = "error", str(e)
            return None
    row.logprobs.append(float(logp[tok]))
    row.entropy.append(h)
    if params.top_logprobs and params.keep_top == "all":
        k = params.top_logprobs
        top = np.argpartition(-logp, k)[:k]
        top = top[np.argsort(-logp[top])]
        row.top.append([[int(t), round(float(logp[t]), 5)] for t in top])
    else:
        row.top.append(None)
    return tok


def structural_positions(backend: Backend, token_ids: Sequence[int]) -> list[int]:
    """Positions whose token carries a JSON structural character (where top-k is worth keeping)."""
    return [
        i
        for i, t in enumerate(token_ids)
        if _STRUCTURAL & set(backend.token_bytes(t).decode("utf-8", "ignore"))
    ]
