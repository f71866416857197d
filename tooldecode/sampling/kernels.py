"""The numeric kernels of one decoding step: log-softmax, top-k/top-p filtering, weighted draws over the vocabulary."""

from __future__ import annotations

import math

import numpy as np

from tooldecode.errors import ModelError
from tooldecode.sampling.params import SamplingParams


def log_softmax(x: np.ndarray) -> np.ndarray:
    """Log-probabilities of logits ``x`` along the last axis."""
    m = np.max(x, axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    z = x - m
    lse = np.log(np.sum(np.exp(z), axis=-1, keepdims=True))
    return z - lse


def entropy(logp: np.ndarray) -> np.ndarray:
    """Entropy (nats) of log-probabilities ``logp`` along the last axis."""
    p = np.exp(logp)
    with np.errstate(invalid="ignore"):
        terms = np.where(p > 0, p * logp, 0.0)
    return -np.sum(terms, axis=-1)


def filter_logits(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """Temperature, top-k, top-p, min-p on one row of (masked) logits → log-weights (−inf = excluded)."""
    x = logits / max(params.temperature, 1e-8)
    if params.top_k and params.top_k < x.size:
        kth = np.partition(x, -params.top_k)[-params.top_k]
        x = np.where(x >= kth, x, -np.inf)
    if params.min_p > 0:
        x = np.where(x >= x.max() + math.log(params.min_p), x, -np.inf)
    if params.top_p < 1.0:
        order = np.argsort(-x)
        lp = log_softmax(x[order])
        cum = np.cumsum(np.exp(lp))
        cut = int(np.searchsorted(cum, params.top_p)) + 1
        keep = np.full(x.size, False)
        keep[order[:cut]] = True
        x = np.where(keep, x, -np.inf)
    return x


NOT_FINITE = (
    "the model's next-token distribution is not finite (NaN or infinite logits): its weights are likely "
    "corrupt; check the file (`tooldecode models verify ID`, or its sha256 for a file of your own)"
)


def draw_index(weights: np.ndarray, rng: np.random.Generator) -> int:
    """Draw an index with probability ∝ exp(``weights``) (log-weights; −inf excluded).

    Raises ``ModelError`` when a weight is NaN or +inf (a model with corrupt weights)."""
    if np.isnan(weights).any() or np.isposinf(weights).any():
        raise ModelError(NOT_FINITE)
    lp = log_softmax(weights)
    cum = np.cumsum(np.exp(lp, dtype=np.float64))
    u = rng.random() * cum[-1]
    return int(min(np.searchsorted(cum, u, side="right"), weights.size - 1))


_GROUPS = 256  # the vocabulary is searched in strided groups {c, c + G, c + 2G, ...} of 256 tokens


def _split(size: int) -> tuple[int, int]:
    """(G, n): G strided groups of ``_GROUPS`` tokens cover the first n = G * _GROUPS tokens; the
    rest (fewer than _GROUPS) is the tail."""
    g = size // _GROUPS
    return g, g * _GROUPS


def group_sums(w: np.ndarray) -> np.ndarray:
    """Sum of each strided group, then the tail's sum as the last entry (float64; each group's 256
    terms are added in float32, a relative error below 1e-5, the groups in float64)."""
    g, n = _split(w.size)
    out = np.empty(g + 1, dtype=np.float64)
    if g:
        out[:g] = w[:n].reshape(_GROUPS, g).sum(axis=0)
    out[g] = w[n:].sum(dtype=np.float64)
    return out


def draw_weighted(w: np.ndarray, rng: np.random.Generator, sums: np.ndarray | None = None) -> int:
    """Draw an index with probability proportional to the non-negative weights ``w`` (a zero weight is
    never drawn). Two levels: a group by the groups' sums, then a token inside that group."""
    g, n = _split(w.size)
    if sums is None:
        sums = group_sums(w)
    cum = np.cumsum(sums)
    if not np.isfinite(cum[-1]):
        raise ModelError(NOT_FINITE)
    u = rng.random() * cum[-1]
    c = int(np.searchsorted(cum, u, side="right"))
    if c >= len(cum):  # u rounded onto the total: the last group with weight
        c = int(np.flatnonzero(sums > 0)[-1])
    members = np.arange(n, w.size) if c == g else c + g * np.arange(_GROUPS)
    inner = np.cumsum(w[members], dtype=np.float64)
    j = int(np.searchsorted(inner, u - (cum[c - 1] if c else 0.0), side="right"))
    if j >= members.size:  # the group's own sum rounded below its share: its last token with weight
        j = int(np.flatnonzero(w[members] > 0)[-1])
    return int(members[j])


def top_indices(x: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` largest entries of ``x``, largest first. The ``k`` strided groups with the
    largest maxima (plus the tail) hold a top-k set, ties included, so only they are searched."""
    k = min(k, x.size)
    g, n = _split(x.size)
    if g < 4 * k:
        top = np.argpartition(-x, k - 1)[:k]
    else:
        gmax = x[:n].reshape(_GROUPS, g).max(axis=0)
        groups = np.argpartition(-gmax, k - 1)[:k]
        cand = (groups[None, :] + g * np.arange(_GROUPS)[:, None]).ravel()
        if n < x.size:
            cand = np.concatenate([cand, np.arange(n, x.size)])
        top = cand[np.argpartition(-x[cand], k - 1)[:k]]
    return top[np.argsort(-x[top], kind="stable")]
