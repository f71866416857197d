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
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
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
    t_start: float = 0.0
    t_end: float = 0.0


def sample(
    backend: Backend,
    prompt: str | Sequence[int],
    n: int,
    params: SamplingParams = SamplingParams(),
    *,
    mask: MaskEngine | None = None,
    prefill: str = "",
    batch_size: int | None = None,
    start_index: int = 0,
    on_batch: Callable[[list[Sample]], None] | None = None,
) -> list[Sample]:
    """Draw ``n`` samples (indices ``start_index`` … ) from ``prompt``, ``batch_size`` sequences at a time
    (default: the backend's ``suggest_batch_size``, from its memory and context; ``TOOLDECODE_BATCH``
    overrides it).

    ``prompt`` is the full prompt text (special tokens as text) or token ids; ``prefill`` is the part
    of it that the call already contains (the mask's matcher is advanced over it). With ``mask``, every
    token is drawn from the masked distribution; a matcher failure aborts that sample
    (``finish_reason="error"``), never continuing unconstrained.

    On a backend that can restart a sequence (llama.cpp), a finished sample's slot is refilled at once
    with the next sample (continuous batching), so early stops do not leave the batch half empty.
    ``on_batch`` receives the samples as they finish (in finishing order); the return value is in
    index order.
    """
    ids = backend.tokenize(prompt) if isinstance(prompt, str) else list(prompt)
    prefill_ids = backend.tokenize(prefill, special=False) if (mask is not None and prefill) else []
    indices = list(range(start_index, start_index + n))
    if batch_size is None:
        env = os.environ.get("TOOLDECODE_BATCH")
        batch_size = int(env) if env else backend.suggest_batch_size(len(ids), params.max_new_tokens)
    slots = max(1, batch_size)
    if getattr(backend, "can_restart", False):
        groups = [indices] if indices else []
    else:
        groups = [indices[k : k + slots] for k in range(0, n, slots)]
    out: list[Sample] = []
    for group in groups:
        out.extend(_stream(backend, ids, group, params, mask, prefill, prefill_ids, slots, on_batch))
    return sorted(out, key=lambda s: s.index)


_POOL: ThreadPoolExecutor | None = None


def _pool() -> ThreadPoolExecutor | None:
    """Threads for the per-row draws (``TOOLDECODE_SAMPLER_THREADS``, default: the CPU count, at most 4)."""
    global _POOL
    n = int(os.environ.get("TOOLDECODE_SAMPLER_THREADS", 0)) or min(4, os.cpu_count() or 1)
    if n <= 1:
        return None
    if _POOL is None or _POOL._max_workers != n:
        _POOL = ThreadPoolExecutor(max_workers=n, thread_name_prefix="tooldecode-sampler")
    return _POOL


def _new_row(
    i: int, params: SamplingParams, mask: MaskEngine | None, prefill: str, prefill_ids: list[int]
) -> _Row:
    matcher = None
    err = None
    if mask is not None:
        try:
            matcher = mask.matcher(prefill, prefill_ids)
        except MaskError as e:
            err = str(e)
        except Exception as e:  # engine bug: never fall back to unconstrained sampling
            err = f"mask engine failed: {type(e).__name__}: {e}"
    row = _Row(i, np.random.default_rng([params.seed, i]), matcher, t_start=time.perf_counter())
    if err:
        row.finish, row.error = "error", err
    return row


def _stream(
    backend: Backend,
    ids: list[int],
    indices: list[int],
    params: SamplingParams,
    mask: MaskEngine | None,
    prefill: str,
    prefill_ids: list[int],
    slots: int,
    on_batch: Callable[[list[Sample]], None] | None,
) -> list[Sample]:
    t0 = time.perf_counter()
    pending = list(reversed(indices))
    n_slots = min(slots, len(indices))
    logits = backend.begin(ids, n_slots)
    first = np.array(logits[0], dtype=np.float32)  # the prompt's next-token logits, for refilled slots
    t_prefill = time.perf_counter() - t0
    eog = backend.eog_ids
    results: list[Sample] = []
    finished: list[_Row] = []

    def next_row() -> _Row | None:
        while pending:
            row = _new_row(pending.pop(), params, mask, prefill, prefill_ids)
            if row.finish is None:
                return row
            row.t_end = time.perf_counter()
            finished.append(row)
        return None

    pool = _pool() if n_slots > 1 else None
    masked = mask is not None

    def choose(row: _Row, x: np.ndarray) -> int | None:
        return _choose(row, x, params, masked, eog)

    rows: dict[int, _Row] = {}
    for slot in range(n_slots):
        row = next_row()
        if row is None:
            break
        rows[slot] = row
    active = list(rows)
    current: list[np.ndarray] = [logits[slot] for slot in active]
    try:
        while active:
            chosen: list[int] = []
            keep: list[int] = []
            freed: list[int] = []
            batch_rows = [rows[slot] for slot in active]
            if pool is not None and len(active) > 1:
                # rows are independent (own generator, own matcher): numpy and the mask engines
                # release the GIL on the vocabulary-sized work, so the rows' draws share the cores
                toks = list(pool.map(choose, batch_rows, current))
            else:
                toks = [choose(r, x) for r, x in zip(batch_rows, current, strict=True)]
            for slot, row, tok in zip(active, batch_rows, toks, strict=True):
                if tok is not None:
                    row.ids.append(tok)
                    if tok in eog:
                        row.finish = "stop"
                    else:
                        row.text += backend.token_bytes(tok)
                        if params.stop and _hit_stop(row, params.stop):
                            row.finish = "stop"
                        elif len(row.ids) >= params.max_new_tokens:
                            row.finish = "length"
                if row.finish is None:
                    chosen.append(tok)  # type: ignore[arg-type]
                    keep.append(slot)
                else:
                    row.t_end = time.perf_counter()
                    finished.append(row)
                    freed.append(slot)
            fresh: list[int] = []
            for slot in freed:
                row = next_row()
                if row is None:
                    del rows[slot]
                    continue
                backend.restart(slot)  # type: ignore[attr-defined]
                rows[slot] = row
                fresh.append(slot)
            if finished:
                done = [_to_sample(r, params, mask, t0, t_prefill, n_slots) for r in finished]
                finished.clear()
                results.extend(done)
                if on_batch is not None:
                    on_batch(done)
            stepped = backend.step(chosen, keep) if keep else np.empty((0, 0), dtype=np.float32)
            active = keep + fresh
            current = [stepped[k] for k in range(len(keep))] + [first] * len(fresh)
    finally:
        backend.end()
    if finished:  # rows that failed before their first token after the last step
        done = [_to_sample(r, params, mask, t0, t_prefill, n_slots) for r in finished]
        results.extend(done)
        if on_batch is not None:
            on_batch(done)
    return results


def _to_sample(
    row: _Row, params: SamplingParams, mask: MaskEngine | None, t0: float, t_prefill: float, n_slots: int
) -> Sample:
    return Sample(
        index=row.index,
        seed=params.seed,
        text=row.text.decode("utf-8", errors="replace"),
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
            "start_s": round(row.t_start - t0, 4),
            "end_s": round(row.t_end - t0, 4),
            "slots": n_slots,
            "tokens": len(row.ids),
        },
    )


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


_GROUPS = 256  # the vocabulary is searched in strided groups {c, c + G, c + 2G, ...} of 256 tokens


def _split(size: int) -> tuple[int, int]:
    """(G, n): G strided groups of ``_GROUPS`` tokens cover the first n = G * _GROUPS tokens; the
    rest (fewer than _GROUPS) is the tail."""
    g = size // _GROUPS
    return g, g * _GROUPS


def _group_sums(w: np.ndarray) -> np.ndarray:
    """Sum of each strided group, then the tail's sum as the last entry (float64; each group's 256
    terms are added in float32, a relative error below 1e-5, the groups in float64)."""
    g, n = _split(w.size)
    out = np.empty(g + 1, dtype=np.float64)
    if g:
        out[:g] = w[:n].reshape(_GROUPS, g).sum(axis=0)
    out[g] = w[n:].sum(dtype=np.float64)
    return out


def _draw_w(w: np.ndarray, rng: np.random.Generator, sums: np.ndarray | None = None) -> int:
    """Draw an index with probability proportional to the non-negative weights ``w`` (a zero weight is
    never drawn). Two levels: a group by the groups' sums, then a token inside that group."""
    g, n = _split(w.size)
    if sums is None:
        sums = _group_sums(w)
    cum = np.cumsum(sums)
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


def _top_indices(x: np.ndarray, k: int) -> np.ndarray:
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


def _choose(
    row: _Row, x: np.ndarray, params: SamplingParams, masked: bool, eog: frozenset[int]
) -> int | None:
    x = x.astype(np.float32, copy=False)
    m = float(x.max())
    z = x - m  # logits are finite: z <= 0
    e = np.exp(z)
    sums = _group_sums(e)
    s = float(sums.sum())
    log_s = math.log(s)
    h = log_s - float(np.dot(e, z)) / s
    # plain T=1 sampling draws straight from the (masked) exp-weights
    plain = params.temperature == 1.0 and not params.top_k and params.top_p >= 1.0 and params.min_p <= 0
    w = e
    allowed = None
    if masked:
        assert row.matcher is not None
        try:
            allowed = row.matcher.allowed()
            if row.matcher.done():
                allowed = np.zeros_like(allowed)
                allowed[list(eog)] = True
        except MaskError as err:
            row.finish, row.error = "error", str(err)
            return None
        except Exception as err:  # never continue unconstrained
            row.finish, row.error = "error", f"mask engine failed: {type(err).__name__}: {err}"
            return None
        if not allowed.any():
            row.finish, row.error = "error", "grammar dead end: no token is allowed"
            return None
        w = np.multiply(e, allowed.view(np.uint8) if allowed.dtype == bool else allowed, dtype=np.float32)
        sums = _group_sums(w)
        sa = float(sums.sum())
        row.mask_removed.append(max(0.0, 1.0 - sa / s))
        if sa > 0:
            # entropy of the renormalised masked distribution (disallowed tokens have weight 0)
            row.entropy_masked.append(math.log(sa) - float(np.dot(w, z)) / sa)
        else:  # every allowed token underflowed: fall back to the masked logits
            row.entropy_masked.append(float(_entropy(_log_softmax(np.where(allowed, x, -np.inf)))))
            plain = False
    if params.temperature <= 0:
        tok = int(np.argmax(np.where(allowed, x, -np.inf) if allowed is not None else x))
    elif plain:
        tok = _draw_w(w, row.rng, sums)
    else:
        weights = np.where(allowed, x, -np.inf) if allowed is not None else x
        tok = _draw(_filter(weights, params), row.rng)
    if masked:
        try:
            row.matcher.accept(tok)  # type: ignore[union-attr]
        except MaskError as err:
            row.finish, row.error = "error", str(err)
            return None
    lse = m + log_s
    row.logprobs.append(float(x[tok]) - lse)
    row.entropy.append(h)
    if params.top_logprobs and params.keep_top == "all":
        top = _top_indices(x, params.top_logprobs)
        vals = np.round(x[top].astype(np.float64) - lse, 5).tolist()
        row.top.append([[t, v] for t, v in zip(top.tolist(), vals, strict=True)])
    else:
        row.top.append(None)
    return tok


# ---------------------------------------------------------------------------------------------
# strict-aligned: masked samples reweighted to the model conditioned on validity

#: particles drawn per aligned sample (``TOOLDECODE_ALIGNED_PARTICLES`` overrides it)
ALIGNED_PARTICLES = 8
ALIGNED_TARGETS = ("complete", "prefix")  # what is valid under the token cap (see sample_aligned)
#: the particles of aligned sample ``i`` are masked samples ``_PARTICLE_BASE + i * _PARTICLE_STRIDE + j``
#: of the same seed (streams that no plain sample of a run uses)
_PARTICLE_BASE = 1 << 40
_PARTICLE_STRIDE = 1 << 16


def log_weight(mask_removed: Sequence[float], floor: float = 0.0) -> float:
    """Importance weight log w = Σ_t log Z_t of one masked sample, Z_t = 1 − ``mask_removed[t]``.

    A masked sampler draws y with probability Q(y) = Π_t P(y_t | y_<t) / Z_t, so P(y) = w(y) Q(y):
    w is the likelihood ratio of the model (unmasked, at temperature 1) to the masked sampler. A
    ``Z_t`` below ``floor`` (a stored value rounded to 1.0) is taken as ``floor``; −inf when Z_t = 0.
    """
    total = 0.0
    for r in mask_removed:
        z = max(1.0 - float(r), floor)
        if z <= 0.0:
            return -math.inf
        total += math.log(z)
    return total


def aligned_supported(params: SamplingParams) -> str | None:
    """Why ``params`` cannot be corrected by importance weights (None when they can).

    The weights come from the mask's removed mass under the plain distribution at temperature 1;
    other temperatures and any truncation (top-k, top-p, min-p) change the proposal."""
    if params.temperature != 1.0:
        return f"temperature {params.temperature} (the weights need temperature 1.0)"
    if params.top_k or params.top_p < 1.0 or params.min_p > 0.0:
        return "top-k/top-p/min-p truncation (the weights need the untruncated distribution)"
    return None


@dataclass
class AlignedSample(Sample):
    """A masked sample chosen among its particles in proportion to their importance weights.

    ``particles``: ``{"n", "method", "chosen", "log_w" (per particle), "ess", "log_mean_w"
    (log of the mean weight: an unbiased estimate of P(valid) in the linear domain), "tokens" (all
    particles' tokens: the cost)}``."""

    particles: dict[str, Any] = field(default_factory=dict)


def sample_aligned(
    backend: Backend,
    prompt: str | Sequence[int],
    n: int,
    params: SamplingParams = SamplingParams(),
    *,
    mask: MaskEngine,
    prefill: str = "",
    particles: int | None = None,
    method: str = "sir",
    max_rounds: int = 64,
    target: str = "complete",
    batch_size: int | None = None,
    start_index: int = 0,
    on_batch: Callable[[list[Sample]], None] | None = None,
) -> list[AlignedSample]:
    """Draw ``n`` samples of the model conditioned on the grammar, P_L(y) ∝ P(y)·1[y valid].

    Masked sampling draws from Q(y) = P(y) / w(y) with w = Π_t Z_t ≤ 1 (``log_weight``), which is not
    P_L unless every Z_t is 1. Two corrections, both built on masked particles:

    ``target`` says what is valid under the token cap ``max_new_tokens``: ``"complete"`` (the model
    conditioned on a call complete within the cap: a particle cut at the cap has weight 0) or
    ``"prefix"`` (conditioned on a string the grammar can still complete: a cut particle keeps the
    weight of its prefix). ``tooldecode distortion --target`` reads the same two words.

    - ``method="sir"`` (importance resampling): ``particles`` masked samples, one kept with
      probability ∝ w. Consistent: the kept sample's law tends to P_L as ``particles`` grows
      (bias O(1/particles)); cost ``particles`` masked samples per output.
    - ``method="rejection"``: masked particles in rounds of ``particles``, each accepted with
      probability w (≤ 1), the first accepted kept. Exact: P(keep y) ∝ Q(y) w(y) ∝ P_L(y); cost
      1 / P(valid) masked samples per output on average. After ``max_rounds`` rounds without an
      acceptance the sample is an error record (it is never replaced by an unweighted one).

    Output ``i`` depends only on ``(params.seed, i)``: resumable like ``sample``.
    """
    why = aligned_supported(params)
    if why:
        raise MaskError(
            f"strict-aligned sampling cannot correct {why}; use temperature 1.0 without truncation"
        )
    if method not in ("sir", "rejection"):
        raise MaskError(f"unknown aligned method {method!r}; choose 'sir' or 'rejection'")
    if target not in ALIGNED_TARGETS:
        raise MaskError(f"unknown aligned target {target!r}; choose one of: {', '.join(ALIGNED_TARGETS)}")
    k = int(particles or os.environ.get("TOOLDECODE_ALIGNED_PARTICLES", 0) or ALIGNED_PARTICLES)
    if k < 1:
        raise MaskError(f"particles must be at least 1, got {k}")
    slots = batch_size or 16
    out: list[AlignedSample] = []
    stop = start_index + n
    if method == "sir":
        # the k particles of output i are masked samples _PARTICLE_BASE + i*k + j: outputs share a batch
        per_call = max(1, slots // k)
        for first in range(start_index, stop, per_call):
            idx = list(range(first, min(first + per_call, stop)))
            t0 = time.perf_counter()
            parts = sample(
                backend,
                prompt,
                len(idx) * k,
                params,
                mask=mask,
                prefill=prefill,
                batch_size=min(slots, len(idx) * k),
                start_index=_PARTICLE_BASE + first * k,
            )
            wall = (time.perf_counter() - t0) / len(idx)
            done = [
                _pick(i, parts[m * k : (m + 1) * k], params, k, method, wall, target=target)
                for m, i in enumerate(idx)
            ]
            out.extend(done)
            if on_batch is not None:
                on_batch(list(done))
        return out
    for i in range(start_index, stop):
        rng = np.random.default_rng([params.seed, i, 0xA11])
        drawn: list[Sample] = []
        chosen = None
        t0 = time.perf_counter()
        for r in range(max_rounds):
            batch = sample(
                backend,
                prompt,
                k,
                params,
                mask=mask,
                prefill=prefill,
                batch_size=min(slots, k),
                start_index=_PARTICLE_BASE + (i * max_rounds + r) * k,
            )
            drawn.extend(batch)
            u = rng.random(k)
            hit = [
                j
                for j, s in enumerate(batch)
                if (s.finish_reason == "stop" or target == "prefix")
                and math.log(max(u[j], 1e-300)) < _sample_log_w(s)
            ]
            if hit:
                chosen = len(drawn) - k + hit[0]
                break
        done = [_pick(i, drawn, params, k, method, time.perf_counter() - t0, chosen=chosen, target=target)]
        out.extend(done)
        if on_batch is not None:
            on_batch(list(done))
    return out


def _sample_log_w(s: Sample) -> float:
    return -math.inf if s.error else log_weight(s.mask_removed or [])


def _pick(
    i: int,
    drawn: list[Sample],
    params: SamplingParams,
    k: int,
    method: str,
    wall: float,
    chosen: int | None = None,
    target: str = "complete",
) -> AlignedSample:
    """Output sample ``i`` from its particles ``drawn`` (SIR: one chosen ∝ w among the particles that
    completed a call; rejection: ``chosen``). Under the ``complete`` target a particle cut at
    ``max_new_tokens`` is not a valid call: it gets weight 0 unless no particle completed, when the
    choice falls back to the prefix weights (the output is then cut too, ``particles["complete"]`` all
    false). Under the ``prefix`` target every particle keeps its prefix weight."""
    log_ws = [_sample_log_w(s) for s in drawn]
    complete = [s.error is None and s.finish_reason == "stop" for s in drawn]
    prefix = np.array(log_ws, dtype=np.float64)
    use_prefix = target == "prefix" or not any(complete)
    lw_all = prefix if use_prefix else np.where(complete, prefix, -math.inf)
    finite = np.isfinite(lw_all)
    top = float(lw_all[finite].max()) if finite.any() else -math.inf
    w = np.exp(lw_all - top) if finite.any() else np.zeros_like(lw_all)
    total = float(w.sum())
    ess = total**2 / float((w**2).sum()) if total > 0 else 0.0
    log_mean = top + math.log(total / w.size) if total > 0 else -math.inf
    if method == "sir" and total > 0:
        rng = np.random.default_rng([params.seed, i, 0x51F])
        chosen = int(rng.choice(w.size, p=w / total))
    info = {
        "n": k,
        "method": method,
        "drawn": len(drawn),
        "chosen": chosen,
        "log_w": [round(x, 6) if math.isfinite(x) else None for x in log_ws],
        "complete": complete,
        "target": target,
        "ess": round(ess, 4),
        "log_mean_w": round(log_mean, 6) if math.isfinite(log_mean) else None,
        "tokens": sum(len(s.token_ids) for s in drawn),
        "wall_s": round(wall, 4),
    }
    src = drawn[chosen] if chosen is not None else drawn[-1]
    err = None
    if chosen is None:
        err = (
            f"no particle accepted in {len(drawn)} masked draws"
            if method == "rejection"
            else "every particle has weight 0 (errors or a removed mass of 1)"
        )
    return AlignedSample(
        index=i,
        seed=params.seed,
        text=src.text,
        token_ids=src.token_ids,
        logprobs=src.logprobs,
        top=src.top,
        entropy=src.entropy,
        entropy_masked=src.entropy_masked,
        mask_removed=src.mask_removed,
        finish_reason="error" if err else src.finish_reason,
        error=err or src.error,
        timing=dict(src.timing),
        particles=info,
    )
