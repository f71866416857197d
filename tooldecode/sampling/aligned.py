"""Strict-aligned sampling: masked samples reweighted to the model conditioned on validity (``sample_aligned``)."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tooldecode.backends.base import Backend
from tooldecode.errors import MaskError
from tooldecode.masking import MaskEngine
from tooldecode.sampling.adaptive import AdaptiveRequest
from tooldecode.sampling.draw import sample
from tooldecode.sampling.params import Sample, SamplingParams, aligned_supported, stream_key

#: particles drawn per aligned sample (``TOOLDECODE_ALIGNED_PARTICLES`` overrides it)
ALIGNED_PARTICLES = 8
ALIGNED_TARGETS = ("complete", "prefix")  # what is valid under the token cap (see sample_aligned)
ALIGNED_METHODS = ("sir", "rejection", "adaptive")
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
    walks: int = 1,
    max_walk_tokens: int | None = None,
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

    - ``method="adaptive"``: exact like rejection, with a proposal that learns where the invalid mass is
      (``tooldecode.sampling.adaptive``, as CARS does), one walk at a time, or (``walks`` > 1) in rounds
      of ``walks`` walks decoded as one batch from the same knowledge; ``particles`` × ``max_rounds``
      bounds the walks
      per output (a walk is a partial draw: most rejected ones stop within a few tokens), and
      ``max_walk_tokens`` (None: no bound) the tokens its walks may decode before it is an error record.

    Output ``i`` depends only on ``(params.seed, i)``: resumable like ``sample`` (``adaptive``: and on the
    outputs before it in the call, which share what was learned).
    """
    if max_walk_tokens is not None and method != "adaptive":
        raise ValueError(f"max_walk_tokens bounds the adaptive method's walks; method is {method!r}")
    if method == "adaptive":
        from tooldecode.sampling.adaptive import sample_adaptive

        plan = _plan(params, method, target, particles, max_rounds, batch_size)
        return [
            _adaptive_record(s)
            for s in sample_adaptive(
                backend, prompt, n, params, mask=mask, prefill=prefill, target=target,
                max_attempts=plan.k * plan.max_rounds, start_index=start_index, walks=walks,
                max_tokens=max_walk_tokens, on_batch=(lambda b: on_batch([_adaptive_record(x) for x in b])) if on_batch else None,
            )
        ]  # fmt: skip
    plan = _plan(params, method, target, particles, max_rounds, batch_size)
    k, slots = plan.k, plan.slots
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
            done = [_pick(i, parts[m * k : (m + 1) * k], plan, wall) for m, i in enumerate(idx)]
            out.extend(done)
            if on_batch is not None:
                on_batch(list(done))
        return out
    for i in range(start_index, stop):
        done = [_rejection(backend, prompt, mask, prefill, i, plan)]
        out.extend(done)
        if on_batch is not None:
            on_batch(list(done))
    return out


@dataclass(frozen=True)
class _Plan:
    """How a ``sample_aligned`` call draws: its ``params``, ``method`` and ``target``, ``k`` particles per
    output (per round, for rejection), at most ``max_rounds`` rounds, ``slots`` sequences per batch."""

    params: SamplingParams
    method: str
    target: str
    k: int
    max_rounds: int
    slots: int


def _plan(
    params: SamplingParams,
    method: str,
    target: str,
    particles: int | None,
    max_rounds: int,
    batch_size: int | None,
) -> _Plan:
    """The plan of a call: the particles per output (argument, ``TOOLDECODE_ALIGNED_PARTICLES`` or the
    default), after checking that ``params``, ``method`` and ``target`` are ones strict-aligned sampling
    can correct; ``batch_size`` sequences per batch (default 16)."""
    why = aligned_supported(params)
    if why:
        raise MaskError(
            f"strict-aligned sampling cannot correct {why}; use temperature 1.0 without truncation"
        )
    if method not in ALIGNED_METHODS:
        raise MaskError(f"unknown aligned method {method!r}; choose one of: {', '.join(ALIGNED_METHODS)}")
    if target not in ALIGNED_TARGETS:
        raise MaskError(f"unknown aligned target {target!r}; choose one of: {', '.join(ALIGNED_TARGETS)}")
    k = int(particles or os.environ.get("TOOLDECODE_ALIGNED_PARTICLES", 0) or ALIGNED_PARTICLES)
    if k < 1:
        raise MaskError(f"particles must be at least 1, got {k}")
    return _Plan(params, method, target, k, max_rounds, batch_size or 16)


def _rejection(
    backend: Backend, prompt: str | Sequence[int], mask: MaskEngine, prefill: str, i: int, plan: _Plan
) -> AlignedSample:
    """Output ``i`` by rejection: rounds of ``plan.k`` masked particles, each accepted with probability w."""
    params, k, slots, max_rounds, target = plan.params, plan.k, plan.slots, plan.max_rounds, plan.target
    rng = np.random.default_rng(stream_key(params, i, 0xA11))
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
    return _pick(i, drawn, plan, time.perf_counter() - t0, chosen=chosen)


def aligned_request(
    prompt_ids: list[int],
    n: int,
    params: SamplingParams = SamplingParams(),
    *,
    mask: MaskEngine,
    prefill: str = "",
    particles: int | None = None,
    method: str = "sir",
    max_rounds: int = 64,
    target: str = "complete",
    start_index: int = 0,
    on_batch: Callable[[list[AlignedSample]], None] | None = None,
    walks: int = 1,
    max_walk_tokens: int | None = None,
) -> AdaptiveRequest | None:
    """``sample_aligned``'s outputs as one item of the shared queue ``sample_adaptive_queue``: for the
    adaptive method one walk at a time (the draws ``sample_aligned`` makes, its bound on walks per output
    and its records); ``None`` for the other methods and for parallel walks, which draw through
    ``sample_aligned``."""
    if method != "adaptive" or walks != 1:
        return None
    plan = _plan(params, method, target, particles, max_rounds, None)
    return AdaptiveRequest(
        list(prompt_ids), n, params, mask, prefill=prefill, target=target,
        max_attempts=plan.k * plan.max_rounds, max_tokens=max_walk_tokens, start_index=start_index,
        on_batch=(lambda b: on_batch([_adaptive_record(x) for x in b])) if on_batch else None,
    )  # fmt: skip


def _adaptive_record(s: Sample) -> AlignedSample:
    """An adaptive sample as an aligned record: ``particles`` holds its cost (walks and tokens)."""
    t = s.timing
    info = {"method": "adaptive", "drawn": t.get("attempts", 0), "tokens": t.get("tokens", 0),
            "alive": t.get("alive"), "walks": t.get("walks", 1)}  # fmt: skip
    return AlignedSample(**{**s.__dict__, "particles": info})


def _sample_log_w(s: Sample) -> float:
    return -math.inf if s.error else log_weight(s.mask_removed or [])


def _pick(i: int, drawn: list[Sample], plan: _Plan, wall: float, chosen: int | None = None) -> AlignedSample:
    """Output sample ``i`` from its particles ``drawn`` (SIR: one chosen ∝ w among the particles that
    completed a call; rejection: ``chosen``). Under the ``complete`` target a particle cut at
    ``max_new_tokens`` is not a valid call: it gets weight 0 unless no particle completed, when the
    choice falls back to the prefix weights (the output is then cut too, ``particles["complete"]`` all
    false). Under the ``prefix`` target every particle keeps its prefix weight."""
    params, method, target = plan.params, plan.method, plan.target
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
        rng = np.random.default_rng(stream_key(params, i, 0x51F))
        chosen = int(rng.choice(w.size, p=w / total))
    info = {
        "n": plan.k,
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
