"""Adaptive exact sampling of the model conditioned on the grammar (``sample_adaptive``), as CARS does.

Plain rejection (``sample_aligned(method="rejection")``) proposes from the masked sampler and accepts with
probability w = P/Q: exact, but 1 / P(valid) masked draws per sample. Here the proposal is the model
itself with the mass already known to be invalid removed, and that knowledge grows with every rejection:

- a trie holds every prefix an earlier attempt visited, with the probability of each child step and the
  mass of the children the grammar forbids there (known from the mask at that node);
- an attempt walks from the root. At prefix s it draws the next token from P(· | s) with the known-dead
  mass removed: a child c has weight P(c | s)·a(sc), where a is the share of a child's mass not yet known
  to be dead (1 for a child never visited, 0 for a forbidden token at a node visited before). A token
  the grammar forbids at a node seen for the first time can still be drawn: the attempt is then
  rejected, and the forbidden mass of every node on its path becomes known;
- under the ``complete`` target a prefix that reaches the token cap is dead too (the attempt is rejected
  and its leaf's mass becomes known); under ``prefix`` it is accepted as a viable prefix;
- the first attempt that ends on a stop token (or a stop string) where the grammar allows it is kept.

Exact: the proposal of an attempt is P restricted to the sequences not known to be dead, and every valid
sequence is alive, so an accepted attempt is a draw of P(y | valid) whatever was learned before
(learning depends only on rejected attempts). Each rejection removes mass that no later proposal puts
on it again, so the acceptance rate climbs towards 1.

The outputs of one call share the trie (later outputs are cheaper); output ``i`` then depends on
``(seed, i)`` and on the attempts of the outputs before it in the call.

Walks in parallel (``walks`` > 1): a round starts ``walks`` attempts from the same knowledge, one batch of
sequences, and keeps the accepted attempt of lowest index once every attempt before it is rejected
(later ones are abandoned). Still exact: within a round the knowledge is frozen (what a rejected attempt
teaches is learned after the round), so each attempt's proposal telescopes to P(y) / alive as before,
the attempts are independent given the knowledge, and which one is kept depends only on the rejection
of those before it, never on what the kept one wrote. A round costs one batched decode step per token
instead of one step per walk's token; it learns less between attempts, so it takes more walks.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from tooldecode.backends.base import Backend
from tooldecode.errors import MaskError
from tooldecode.masking import MaskEngine, Matcher
from tooldecode.sampling.params import Sample, SamplingParams, aligned_supported, stream_key

ADAPTIVE_TARGETS = ("complete", "prefix")


@dataclass
class _Node:
    """One prefix of the trie: its children's step probabilities and what is known to be dead below it."""

    p: dict[int, float] = field(default_factory=dict)  # P(c | s) of the children visited
    kids: dict[int, _Node] = field(default_factory=dict)
    forbidden: float = 0.0  # P(forbidden tokens | s), known once an attempt through s was rejected
    known: bool = False
    alive: float = 1.0  # share of P(s·) not known to be dead

    def refresh(self) -> None:
        lost = self.forbidden if self.known else 0.0
        lost += sum(self.p[c] * (1.0 - k.alive) for c, k in self.kids.items())
        self.alive = max(0.0, 1.0 - lost)


@dataclass
class Trie:
    """The knowledge of ``sample_adaptive``: the root prefix (the prompt) and counts of what was learned."""

    root: _Node = field(default_factory=_Node)
    attempts: int = 0
    rejected: int = 0

    @property
    def alive(self) -> float:
        """P(sequences not known dead): an upper bound on P(valid) that tightens with every rejection."""
        return self.root.alive


def _learn(path: list[tuple[_Node, float]], leaf: _Node | None) -> None:
    """After a rejected attempt: every node on ``path`` (with its forbidden mass) is known; ``leaf`` (a
    prefix cut at the cap under the complete target) is dead; alive shares are refreshed bottom-up."""
    if leaf is not None:
        leaf.alive = 0.0
        leaf.known = True
    for node, forbidden in path:
        node.forbidden, node.known = forbidden, True
    for node, _ in reversed(path):
        node.refresh()


def _hit_stop(text: bytes, stops: Sequence[str]) -> bool:
    tail = text[-512:].decode("utf-8", errors="ignore")
    return any(s in tail for s in stops)


def _attempt(
    backend: Backend,
    first: np.ndarray,
    matcher: Matcher,
    trie: Trie,
    params: SamplingParams,
    rng: np.random.Generator,
    target: str,
) -> tuple[bool, list[int], list[float], str]:
    """One walk from the root: (accepted, tokens, their log-probabilities, finish reason); a rejected walk's
    lesson is learned at once."""
    w = _Walk(0, matcher, rng, trie.root, first)
    while True:
        tok = _walk_step(backend, w, params, target)
        if tok is None:
            if w.state == "rejected":
                _learn(w.path, w.leaf)
            return w.state == "accepted", w.ids, w.logps, w.finish
        w.x = np.array(backend.step([tok], [0])[0], dtype=np.float32)


@dataclass
class _Walk:
    """One attempt of a parallel round: its row, matcher, random stream and where it stands."""

    row: int
    matcher: Matcher
    rng: np.random.Generator
    node: _Node
    x: np.ndarray
    path: list[tuple[_Node, float]] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)
    logps: list[float] = field(default_factory=list)
    text: bytes = b""
    state: str = "running"  # running | accepted | rejected | abandoned
    finish: str = ""
    leaf: _Node | None = None


def _walk_step(backend: Backend, w: _Walk, params: SamplingParams, target: str) -> int | None:
    """One token of walk ``w`` under the knowledge as it stands (frozen for the walk's length in a parallel
    round); the token to feed the backend next, or ``None`` when the walk has ended (its ``state`` and
    ``finish`` say how; a rejected walk's lesson is in ``path`` and ``leaf``, learned by the caller)."""
    eog = backend.eog_ids
    allowed = w.matcher.allowed()
    if w.matcher.done():
        allowed = np.zeros_like(allowed)
        allowed[list(eog)] = True
    z = w.x.astype(np.float64) - float(w.x.max())
    p = np.exp(z)
    total = float(p.sum())
    p /= total
    wt = np.where(allowed, p, 0.0)
    forbidden = max(0.0, 1.0 - float(wt.sum()))
    node = w.node
    for c, kid in node.kids.items():
        wt[c] *= kid.alive
    unknown = 0.0 if node.known else forbidden
    mass = float(wt.sum()) + unknown
    w.path.append((node, forbidden))
    if mass <= 0.0 or w.rng.random() * mass < unknown:
        w.state, w.finish = "rejected", "rejected"
        return None
    cum = np.cumsum(wt)
    tok = int(min(np.searchsorted(cum, w.rng.random() * cum[-1], side="right"), wt.size - 1))
    node.p[tok] = float(p[tok])
    child = node.kids.setdefault(tok, _Node())
    w.ids.append(tok)
    w.logps.append(float(z[tok]) - math.log(total))
    if tok in eog:
        w.state, w.finish = "accepted", "stop"
        return None
    w.matcher.accept(tok)
    w.text += backend.token_bytes(tok)
    if params.stop and _hit_stop(w.text, params.stop):
        w.state, w.finish = "accepted", "stop"
        return None
    w.node = child
    if len(w.ids) >= params.max_new_tokens:
        if target == "prefix":
            w.state, w.finish = "accepted", "length"
        else:
            w.state, w.finish, w.leaf = "rejected", "length", child
        return None
    return tok


def _round(
    backend: Backend, walks: list[_Walk], params: SamplingParams, target: str
) -> tuple[_Walk | None, int]:
    """Run ``walks`` (rows 0..k-1, each just reset to the prompt) as one batch: the kept walk (the accepted
    one of lowest index whose predecessors were all rejected; ``None`` when all were) and the tokens
    decoded. Rejections are learned after the round, abandoned walks teach nothing."""
    while True:
        feed = [
            (w, tok)
            for w in walks
            if w.state == "running"
            for tok in [_walk_step(backend, w, params, target)]
        ]
        head = next((j for j, w in enumerate(walks) if w.state == "accepted"), len(walks))
        for w in walks[head + 1 :]:
            if w.state == "running":
                w.state = "abandoned"
        feed = [(w, tok) for w, tok in feed if tok is not None and w.state == "running"]
        lead = next((w for w in walks if w.state != "rejected"), None)  # in index order, the one that decides
        if (lead is not None and lead.state == "accepted") or not feed:
            break
        out = backend.step([tok for _, tok in feed], [w.row for w, _ in feed])
        for k, (w, _) in enumerate(feed):
            w.x = np.array(out[k], dtype=np.float32)
    for w in walks:
        if w.state == "rejected":
            _learn(w.path, w.leaf)
    return (lead if lead is not None and lead.state == "accepted" else None), sum(len(w.ids) for w in walks)


def _check(params: SamplingParams, target: str) -> None:
    """The one-line error for what the adaptive sampler cannot draw: truncation, or an unknown target."""
    why = aligned_supported(params)
    if why:
        raise MaskError(
            f"adaptive exact sampling cannot draw with {why}; use temperature 1.0 without truncation"
        )
    if target not in ADAPTIVE_TARGETS:
        raise MaskError(f"unknown target {target!r}; choose one of: {', '.join(ADAPTIVE_TARGETS)}")


def sample_adaptive(
    backend: Backend,
    prompt: str | Sequence[int],
    n: int,
    params: SamplingParams = SamplingParams(),
    *,
    mask: MaskEngine,
    prefill: str = "",
    target: str = "complete",
    max_attempts: int = 4096,
    start_index: int = 0,
    trie: Trie | None = None,
    on_batch: Callable[[list[Sample]], None] | None = None,
    walks: int = 1,
    max_tokens: int | None = None,
    **_: object,
) -> list[Sample]:
    """Draw ``n`` exact samples of P_L(y) ∝ P(y)·1[y valid] by adaptive rejection (module docstring).

    ``target``: ``complete`` (a call completed within ``max_new_tokens``) or ``prefix`` (a string the grammar
    can still complete at the cap). ``trie``: the knowledge to start from and to extend (a fresh one by
    default; pass the same object to later calls on the same prompt, mask and cap to keep learning). A
    sample that finds no valid sequence within ``max_attempts`` walks, or (``max_tokens``) before its walks
    have decoded that many tokens, is an error record (it is abandoned after the walk that reaches the
    budget; an accepted sample is an exact draw whatever the budget). Each sample's
    ``timing`` carries ``attempts`` (walks, the rejected ones included) and ``tokens`` (tokens decoded by all
    of them): the cost. Needs temperature 1 without truncation (the proposal is the model itself).
    ``walks`` > 1: rounds of that many attempts in one batch (module docstring; ``timing["walks"]``);
    their random streams differ from the one-at-a-time walks', so the draws do too.
    """
    _check(params, target)
    ids = backend.tokenize(prompt) if isinstance(prompt, str) else list(prompt)
    prefill_ids = backend.tokenize(prefill, special=False) if prefill else []
    trie = trie if trie is not None else Trie()
    if walks > 1:
        return _sample_rounds(backend, ids, n, params, mask, prefill, prefill_ids, target, max_attempts,
                              start_index, trie, on_batch, walks, max_tokens)  # fmt: skip
    out: list[Sample] = []
    t0 = time.perf_counter()
    first = np.array(backend.begin(ids, 1)[0], dtype=np.float32)
    try:
        for i in range(start_index, start_index + n):
            rng = np.random.default_rng(stream_key(params, i, 0xCA25))
            t_start = time.perf_counter() - t0
            tokens = 0
            got: tuple[list[int], list[float], str] | None = None
            k = 0
            for k in range(1, max_attempts + 1):
                if k > 1 or i > start_index:
                    first = _back_to_prompt(backend, ids, 1, first)
                matcher = mask.matcher(prefill, prefill_ids)
                trie.attempts += 1
                ok, toks, lps, finish = _attempt(backend, first, matcher, trie, params, rng, target)
                tokens += len(toks)
                if ok:
                    got = (toks, lps, finish)
                    break
                trie.rejected += 1
                if max_tokens is not None and tokens >= max_tokens:
                    break
            s = _output(backend, i, params, got, max_attempts, (t0, t_start), k, tokens, trie,
                        max_tokens=max_tokens)  # fmt: skip
            out.append(s)
            if on_batch is not None:
                on_batch([s])
    finally:
        backend.end()
    return out


def _back_to_prompt(backend: Backend, ids: list[int], rows: int, first: np.ndarray) -> np.ndarray:
    """Every one of ``rows`` sequences back to the bare prompt; the logits after it (``first`` where the
    backend restarts a sequence in place, else a new ``begin``, whose prompt is cached)."""
    if getattr(backend, "can_restart", False):
        for row in range(rows):
            backend.restart(row)  # type: ignore[attr-defined]
        return first
    return np.array(backend.begin(ids, rows)[0], dtype=np.float32)


def _sample_rounds(
    backend: Backend,
    ids: list[int],
    n: int,
    params: SamplingParams,
    mask: MaskEngine,
    prefill: str,
    prefill_ids: list[int],
    target: str,
    max_attempts: int,
    start_index: int,
    trie: Trie,
    on_batch: Callable[[list[Sample]], None] | None,
    k: int,
    max_tokens: int | None = None,
) -> list[Sample]:
    """``sample_adaptive`` in rounds of ``k`` walks: output ``i``'s round ``r`` walk ``j`` draws from the
    stream ``(stream_key(params, i, 0xCA25), r, j)``."""
    out: list[Sample] = []
    t0 = time.perf_counter()
    first = np.array(backend.begin(ids, k)[0], dtype=np.float32)
    fresh = True
    try:
        for i in range(start_index, start_index + n):
            t_start = time.perf_counter() - t0
            key = stream_key(params, i, 0xCA25)
            attempts = tokens = 0
            kept: _Walk | None = None
            r = 0
            while attempts < max_attempts and kept is None and (max_tokens is None or tokens < max_tokens):
                width = min(k, max_attempts - attempts)
                if not fresh:
                    first = _back_to_prompt(backend, ids, k, first)
                fresh = False
                walks = [
                    _Walk(
                        j,
                        mask.matcher(prefill, prefill_ids),
                        np.random.default_rng([key, r, j]),
                        trie.root,
                        first,
                    )
                    for j in range(width)
                ]
                kept, used = _round(backend, walks, params, target)
                ran = sum(1 for w in walks if w.state != "abandoned")
                attempts += ran
                tokens += used
                trie.attempts += ran
                trie.rejected += sum(1 for w in walks if w.state == "rejected")
                r += 1
            got = (kept.ids, kept.logps, kept.finish) if kept is not None else None
            s = _output(backend, i, params, got, max_attempts, (t0, t_start), attempts, tokens, trie, walks=k,
                        max_tokens=max_tokens)  # fmt: skip
            out.append(s)
            if on_batch is not None:
                on_batch([s])
    finally:
        backend.end()
    return out


def _output(
    backend: Backend,
    i: int,
    params: SamplingParams,
    got: tuple[list[int], list[float], str] | None,
    max_attempts: int,
    clock: tuple[float, float],
    attempts: int,
    tokens: int,
    trie: Trie,
    walks: int | None = None,
    max_tokens: int | None = None,
) -> Sample:
    """Output ``i`` from its kept walk (tokens, log-probabilities, finish), or an error record when no walk
    was accepted within ``max_attempts`` walks (or ``max_tokens`` walk tokens); ``timing`` carries its
    cost (``clock``: the call's start and this output's start, in seconds)."""
    t0, t_start = clock
    timing: dict = {
        "start_s": round(t_start, 4),
        "end_s": round(time.perf_counter() - t0, 4),
        "attempts": attempts,
        "tokens": tokens,
        "alive": round(trie.alive, 6),
    }
    if walks is not None:
        timing["walks"] = walks
    if got is None:
        budget = f"{max_attempts} walks" + (f" or {max_tokens} walk tokens" if max_tokens is not None else "")
        return Sample(i, params.seed, "", [], [], [], [], None, None, "error",
                      f"no valid sequence in {attempts} attempts ({tokens} walk tokens; the budget: {budget})",
                      timing)  # fmt: skip
    toks, lps, finish = got
    text = backend.detokenize([t for t in toks if t not in backend.eog_ids])
    return Sample(i, params.seed, text, toks, lps, [None] * len(toks), [], None, None, finish, None, timing)


@dataclass
class AdaptiveRequest:
    """Outputs ``start_index`` … ``start_index + n - 1`` of ``sample_adaptive`` (one walk at a time) on one
    prompt: one item of the queue ``sample_adaptive_queue`` draws from.

    ``prompt_ids`` are the prompt's token ids; ``prefill`` the part of the prompt the call already contains
    (the mask's matcher is advanced over it); ``max_attempts`` the walks an output may take before it is an
    error record, and ``max_tokens`` (None: no bound) the walk tokens; ``trie`` the knowledge to start from (a fresh one by default); ``on_batch`` receives this
    request's outputs as they finish.
    """

    prompt_ids: list[int]
    n: int
    params: SamplingParams
    mask: MaskEngine
    prefill: str = ""
    target: str = "complete"
    max_attempts: int = 4096
    max_tokens: int | None = None
    start_index: int = 0
    trie: Trie | None = None
    on_batch: Callable[[list[Sample]], None] | None = None


@dataclass
class _Job:
    """One request in a slot: the output it is drawing, its walk, and the cost so far."""

    req: AdaptiveRequest
    trie: Trie
    prefill_ids: list[int]
    first: np.ndarray
    t_prefill: float
    i: int = 0
    rng: np.random.Generator | None = None
    walk: _Walk | None = None
    attempts: int = 0
    tokens: int = 0
    t_start: float = 0.0


def sample_adaptive_queue(backend: Backend, requests: Sequence[AdaptiveRequest], slots: int = 8) -> None:
    """``sample_adaptive`` (one walk at a time) for every request, the requests' walks sharing decode steps.

    Each request keeps to itself what makes its outputs what they are: its trie, its outputs in order,
    output ``i``'s random stream ``stream_key(params, i, 0xCA25)`` for all its walks, and each walk learning
    from the rejections before it. Only the decode steps are shared: a slot holds one request, walks it
    from its prompt, restarts it there after each walk, and takes the next waiting request (in request
    order) once the request's outputs are all drawn. So an output is the one ``sample_adaptive`` draws with
    ``walks=1``, up to the floating-point order of a batched step (as in ``sample_queue``). Each output's
    ``timing`` names the ``slots`` that shared its steps and its prompt's ``prefill_s``; ``start_s`` and
    ``end_s`` are the seconds from the queue's start.

    On a backend without slots (``can_assign`` false) the requests are drawn one after another with
    ``sample_adaptive``.
    """
    reqs = [r for r in requests if r.n > 0]
    for r in reqs:
        _check(r.params, r.target)
    if not reqs:
        return
    if not getattr(backend, "can_assign", False):
        for r in reqs:
            sample_adaptive(
                backend, r.prompt_ids, r.n, r.params, mask=r.mask, prefill=r.prefill, target=r.target,
                max_attempts=r.max_attempts, start_index=r.start_index, trie=r.trie, on_batch=r.on_batch,
            )  # fmt: skip
        return
    _adaptive_stream(backend, reqs, max(1, slots))


def _adaptive_stream(  # noqa: C901 - the decode loop of the shared queue: refill, step, restart in one place
    backend: Backend, reqs: list[AdaptiveRequest], slots: int
) -> None:
    t0 = time.perf_counter()
    waiting = list(reversed(reqs))
    n_slots = min(slots, len(reqs))
    first: dict[tuple[int, ...], np.ndarray] = {}
    jobs: dict[int, _Job] = {}
    restart = getattr(backend, "restart_slot", None)
    capacity = getattr(backend, "n_ctx", None)

    def fits(r: AdaptiveRequest) -> bool:
        """Whether the cache holds ``r``'s prompt and walk beside the requests in the slots (as
        ``sample_queue`` counts it); otherwise it waits for a slot's request to end."""
        if capacity is None or not jobs:
            return True
        prompts = {tuple(j.req.prompt_ids) for j in jobs.values()} | {tuple(r.prompt_ids)}
        need = sum(len(p) for p in prompts) + max(len(p) for p in prompts)
        need += sum(j.req.params.max_new_tokens for j in jobs.values()) + r.params.max_new_tokens
        return need <= int(capacity)

    def begin_output(job: _Job, i: int) -> None:
        job.i, job.attempts, job.tokens = i, 0, 0
        job.rng = np.random.default_rng(stream_key(job.req.params, i, 0xCA25))
        job.t_start = time.perf_counter() - t0

    def new_walk(slot: int, job: _Job, fresh: bool) -> None:
        if not fresh:
            if restart is not None:
                restart(slot)
            else:
                backend.assign(slot, job.req.prompt_ids, have_logits=True)  # type: ignore[attr-defined]
        job.trie.attempts += 1
        job.attempts += 1
        matcher = job.req.mask.matcher(job.req.prefill, job.prefill_ids)
        job.walk = _Walk(slot, matcher, job.rng, job.trie.root, job.first)  # type: ignore[arg-type]

    def fill(slot: int) -> bool:
        if not waiting or not fits(waiting[-1]):
            return False
        r = waiting.pop()
        key = tuple(r.prompt_ids)
        t = time.perf_counter()
        logits = backend.assign(slot, r.prompt_ids, have_logits=key in first)  # type: ignore[attr-defined]
        if logits is not None:
            first.setdefault(key, np.array(logits, dtype=np.float32))
        prefill_ids = backend.tokenize(r.prefill, special=False) if r.prefill else []
        job = _Job(r, r.trie if r.trie is not None else Trie(), prefill_ids, first[key],
                   time.perf_counter() - t)  # fmt: skip
        jobs[slot] = job
        begin_output(job, r.start_index)
        new_walk(slot, job, fresh=True)
        return True

    def finish(job: _Job, got: tuple[list[int], list[float], str] | None) -> Sample:
        s = _output(backend, job.i, job.req.params, got, job.req.max_attempts, (t0, job.t_start),
                    job.attempts, job.tokens, job.trie, walks=1, max_tokens=job.req.max_tokens)  # fmt: skip
        s.timing.update({"slots": n_slots, "prefill_s": round(job.t_prefill, 4)})
        return s

    def advance(slot: int) -> int | None:
        """The next token of the walk in ``slot``, or ``None`` once the slot's request has drawn all its
        outputs (the slot is then free). A walk that ends is learned from (rejected) or gives its output
        (accepted), and the next walk starts at once from the prompt's logits, so a slot feeds a token
        to every step its request is alive."""
        job = jobs[slot]
        while True:
            w = job.walk
            assert w is not None
            tok = _walk_step(backend, w, job.req.params, job.req.target)
            if tok is not None:
                return tok
            job.tokens += len(w.ids)
            out: Sample | None = None
            if w.state == "accepted":
                out = finish(job, (w.ids, w.logps, w.finish))
            else:
                _learn(w.path, w.leaf)
                job.trie.rejected += 1
                spent = job.req.max_tokens is not None and job.tokens >= job.req.max_tokens
                if job.attempts >= job.req.max_attempts or spent:
                    out = finish(job, None)
            if out is not None:
                if job.req.on_batch is not None:
                    job.req.on_batch([out])
                if job.i + 1 >= job.req.start_index + job.req.n:
                    del jobs[slot]
                    return None
                begin_output(job, job.i + 1)
            new_walk(slot, job, fresh=False)

    backend.open_slots(n_slots)  # type: ignore[attr-defined]
    try:
        for slot in range(n_slots):
            if not fill(slot):
                break
        while jobs:
            feed = [(slot, tok) for slot in sorted(jobs) for tok in [advance(slot)] if tok is not None]
            for slot in range(n_slots):  # free slots take the waiting requests the cache now holds
                while slot not in jobs and fill(slot):
                    tok = advance(slot)  # its first token, from its prompt's logits
                    if tok is not None:
                        feed.append((slot, tok))
                if slot not in jobs and waiting:
                    break
            if feed:
                out_logits = backend.step_slots([t for _, t in feed], [s for s, _ in feed])  # type: ignore[attr-defined]
                for k, (slot, _) in enumerate(feed):
                    jobs[slot].walk.x = np.array(out_logits[k], dtype=np.float32)  # type: ignore[union-attr]
    finally:
        backend.close_slots()  # type: ignore[attr-defined]
