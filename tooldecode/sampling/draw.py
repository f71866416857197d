"""Many continuations of one prompt as parallel sequences, optionally masked (``sample``)."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from tooldecode.backends.base import Backend
from tooldecode.errors import MaskError, ModelError
from tooldecode.masking import MaskEngine, Matcher
from tooldecode.sampling.kernels import (
    NOT_FINITE,
    draw_index,
    draw_weighted,
    entropy,
    filter_logits,
    group_sums,
    log_softmax,
    top_indices,
)
from tooldecode.sampling.params import Sample, SamplingParams, stream_key


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


# Prompt tokens the draws of this process asked for (each draw counts its whole prompt, whether or not
# it was evaluated again): the nominal prefill that benchmarks/bench_eval.py sets against what was evaluated.
COUNTERS = {"prompt_tokens_nominal": 0, "draws": 0}


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
    COUNTERS["prompt_tokens_nominal"] += len(ids) * n
    COUNTERS["draws"] += n
    out: list[Sample] = []
    for group in groups:
        out.extend(_stream(backend, ids, group, params, mask, prefill, prefill_ids, slots, on_batch))
    return sorted(out, key=lambda s: s.index)


_POOLS: dict[int, ThreadPoolExecutor] = {}  # by thread count


def _pool() -> ThreadPoolExecutor | None:
    """Threads for the per-row draws (``TOOLDECODE_SAMPLER_THREADS``, default: the CPU count, at most 4)."""
    n = int(os.environ.get("TOOLDECODE_SAMPLER_THREADS", 0)) or min(4, os.cpu_count() or 1)
    if n <= 1:
        return None
    if n not in _POOLS:
        _POOLS[n] = ThreadPoolExecutor(max_workers=n, thread_name_prefix="tooldecode-sampler")
    return _POOLS[n]


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
    row = _Row(i, np.random.default_rng(stream_key(params, i)), matcher, t_start=time.perf_counter())
    if err:
        row.finish, row.error = "error", err
    return row


def _stream(  # noqa: C901 - the decode loop: slots refilled, stepped and flushed in one place
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
                    _accept(row, tok, backend, params, eog)
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


def _accept(row: _Row, tok: int, backend: Backend, params: SamplingParams, eog: frozenset[int]) -> None:
    """Append ``tok`` to ``row``; set the row's finish reason when the token ends the sample."""
    row.ids.append(tok)
    if tok in eog:
        row.finish = "stop"
        return
    row.text += backend.token_bytes(tok)
    if params.stop and _hit_stop(row, params.stop):
        row.finish = "stop"
    elif len(row.ids) >= params.max_new_tokens:
        row.finish = "length"


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


def _choose(
    row: _Row, x: np.ndarray, params: SamplingParams, masked: bool, eog: frozenset[int]
) -> int | None:
    x = x.astype(np.float32, copy=False)
    m = float(x.max())  # NaN when any logit is NaN
    if not math.isfinite(m):
        raise ModelError(NOT_FINITE)
    z = x - m  # logits are finite: z <= 0
    e = np.exp(z)
    sums = group_sums(e)
    s = float(sums.sum())
    log_s = math.log(s)
    h = log_s - float(np.dot(e, z)) / s
    # plain T=1 sampling draws straight from the (masked) exp-weights
    plain = params.temperature == 1.0 and not params.top_k and params.top_p >= 1.0 and params.min_p <= 0
    w = e
    allowed = None
    keep = None
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
        keep = getattr(row.matcher, "reweight", None)  # strict-prefix: masked mass moved to prefixes
        if keep is not None:
            w = keep(e, allowed)
            allowed = w > 0
        else:
            w = np.multiply(e, allowed.view(np.uint8) if allowed.dtype == bool else allowed, dtype=np.float32)
        sums = group_sums(w)
        sa = float(sums.sum())
        row.mask_removed.append(max(0.0, 1.0 - sa / s))
        if sa > 0:
            # entropy of the renormalised masked distribution (disallowed tokens have weight 0)
            row.entropy_masked.append(math.log(sa) - float(np.dot(w, z)) / sa)
        else:  # every allowed token underflowed: fall back to the masked logits
            row.entropy_masked.append(float(entropy(log_softmax(np.where(allowed, x, -np.inf)))))
            plain = False
    if params.temperature <= 0:
        tok = int(
            np.argmax(w if keep is not None else np.where(allowed, x, -np.inf) if allowed is not None else x)
        )
    elif plain:
        tok = draw_weighted(w, row.rng, sums)
    else:
        weights = np.where(allowed, x, -np.inf) if allowed is not None else x
        if masked and keep is not None:
            with np.errstate(divide="ignore"):
                weights = np.log(w) + m  # the reweighted step as logits
        tok = draw_index(filter_logits(weights, params), row.rng)
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
        top = top_indices(x, params.top_logprobs)
        vals = np.round(x[top].astype(np.float64) - lse, 5).tolist()
        row.top.append([[t, v] for t, v in zip(top.tolist(), vals, strict=True)])
    else:
        row.top.append(None)
    return tok


@dataclass
class DrawRequest:
    """Draws ``start_index`` … ``start_index + n - 1`` of one prompt: what ``sample`` takes, as one item of
    the queue ``sample_queue`` draws from.

    ``prompt_ids`` are the prompt's token ids; ``prefill`` the part of the prompt the call already
    contains (the mask's matcher is advanced over it); ``on_batch`` receives this request's samples as
    they finish.
    """

    prompt_ids: list[int]
    n: int
    params: SamplingParams
    mask: MaskEngine | None = None
    prefill: str = ""
    start_index: int = 0
    on_batch: Callable[[list[Sample]], None] | None = None


def sample_queue(backend: Backend, requests: Sequence[DrawRequest], slots: int = 16) -> None:
    """Draw every request's samples on one decode stream with ``slots`` sequences, each slot refilled the
    moment its draw ends with the next waiting draw of *any* request (in request order).

    A slot refilled with another prompt takes that prompt's keys and values from any slot or cache that
    already holds a prefix of it (cut back to the backend's aligned chunk boundary, so a prompt's
    logits do not depend on where its prefix came from) and evaluates only the rest. Each draw keeps its
    own random stream (``stream_key(params, index)``) and its own matcher, so its tokens do not depend
    on which draws share its steps, up to the floating-point order of a batched step
    (``tests/test_sampling.py`` measures how often that flips a token).

    On a backend without slots (``can_assign`` false) the requests are drawn one after another with
    ``sample``.
    """
    reqs = [r for r in requests if r.n > 0]
    if not reqs:
        return
    if not getattr(backend, "can_assign", False):
        for r in reqs:
            sample(
                backend,
                r.prompt_ids,
                r.n,
                r.params,
                mask=r.mask,
                prefill=r.prefill,
                batch_size=slots,
                start_index=r.start_index,
                on_batch=r.on_batch,
            )
        return
    _queue_stream(backend, reqs, max(1, slots))


def _queue_stream(  # noqa: C901 - the decode loop of the shared queue: refill, step, flush in one place
    backend: Backend, reqs: list[DrawRequest], slots: int
) -> None:
    t0 = time.perf_counter()
    COUNTERS["prompt_tokens_nominal"] += sum(len(r.prompt_ids) * r.n for r in reqs)
    COUNTERS["draws"] += sum(r.n for r in reqs)
    waiting = [(k, i) for k, r in enumerate(reqs) for i in range(r.start_index, r.start_index + r.n)]
    waiting.reverse()
    prefill_ids: dict[int, list[int]] = {}
    first: dict[tuple[int, ...], np.ndarray] = {}  # a prompt's next-token logits, by its ids
    prefill_s: dict[int, float] = {}
    owner: dict[int, int] = {}  # row index → request, per slot
    n_slots = min(slots, len(waiting))
    backend.open_slots(n_slots)  # type: ignore[attr-defined]
    eog = backend.eog_ids
    finished: list[tuple[int, _Row]] = []
    rows: dict[int, _Row] = {}
    current: dict[int, np.ndarray] = {}

    def flush() -> None:
        by_req: dict[int, list[Sample]] = {}
        for k, row in finished:
            r = reqs[k]
            by_req.setdefault(k, []).append(
                _to_sample(row, r.params, r.mask, t0, prefill_s.get(k, 0.0), n_slots)
            )
        finished.clear()
        for k, done in by_req.items():
            if reqs[k].on_batch is not None:
                reqs[k].on_batch(done)  # type: ignore[misc]

    capacity = getattr(backend, "n_ctx", None)

    def fits(k: int) -> bool:
        """Whether the cache can hold request ``k``'s prompt beside the slots in use, each up to its token
        cap, counting every distinct prompt whole (shared prefixes only make it roomier) and once more the
        longest for sequence 0's cached prompt. Otherwise the draw waits for slots to end."""
        if capacity is None or not rows:
            return True
        prompts = {tuple(reqs[owner[s]].prompt_ids) for s in rows} | {tuple(reqs[k].prompt_ids)}
        need = sum(len(p) for p in prompts) + max(len(p) for p in prompts)
        need += sum(reqs[owner[s]].params.max_new_tokens for s in rows) + reqs[k].params.max_new_tokens
        return need <= int(capacity)

    def fill(slot: int) -> tuple[_Row, np.ndarray, int] | None:
        while waiting:
            if not fits(waiting[-1][0]):
                return None
            k, i = waiting.pop()
            r = reqs[k]
            if k not in prefill_ids:
                prefill_ids[k] = (
                    backend.tokenize(r.prefill, special=False) if (r.mask is not None and r.prefill) else []
                )
            row = _new_row(i, r.params, r.mask, r.prefill, prefill_ids[k])
            if row.finish is not None:
                row.t_end = time.perf_counter()
                finished.append((k, row))
                continue
            key = tuple(r.prompt_ids)
            t = time.perf_counter()
            logits = backend.assign(slot, r.prompt_ids, have_logits=key in first)  # type: ignore[attr-defined]
            if logits is not None:
                first.setdefault(key, np.array(logits, dtype=np.float32))
            prefill_s[k] = prefill_s.get(k, 0.0) + time.perf_counter() - t
            row.t_start = time.perf_counter()
            return row, first[key], k
        return None

    pool = _pool() if n_slots > 1 else None
    try:
        for slot in range(n_slots):
            got = fill(slot)
            if got is None:
                break
            rows[slot], current[slot], owner[slot] = got
        while rows:
            active = sorted(rows)
            batch_rows = [rows[s] for s in active]

            def choose(s: int) -> int | None:
                r = reqs[owner[s]]
                return _choose(rows[s], current[s], r.params, r.mask is not None, eog)

            if pool is not None and len(active) > 1:
                toks = list(pool.map(choose, active))
            else:
                toks = [choose(s) for s in active]
            keep: list[int] = []
            chosen: list[int] = []
            for s, row, tok in zip(active, batch_rows, toks, strict=True):
                if tok is not None:
                    _accept(row, tok, backend, reqs[owner[s]].params, eog)
                if row.finish is None:
                    keep.append(s)
                    chosen.append(tok)  # type: ignore[arg-type]
                else:
                    row.t_end = time.perf_counter()
                    finished.append((owner[s], row))
                    del rows[s]
            # refill before the step: a refill evaluates its prompt, and the step's logits are a view that
            # the next evaluation overwrites
            for s in range(n_slots):
                if s not in rows:
                    got = fill(s)
                    if got is not None:
                        rows[s], current[s], owner[s] = got
            if finished:
                flush()
            if keep:
                stepped = backend.step_slots(chosen, keep)  # type: ignore[attr-defined]
                for j, s in enumerate(keep):
                    current[s] = stepped[j]
    finally:
        backend.close_slots()  # type: ignore[attr-defined]
    if finished:
        flush()
