"""Importance weights, both KL identities and the strict-aligned sampler against exact enumeration:
a four-string grammar on SmolLM2-135M (the smallest real model), every masked token sequence
enumerated with its exact P, Q and w."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from tooldecode.distortion import ExactDistribution, exact_masked_distribution
from tooldecode.masking import compile_mask
from tooldecode.sampling import SamplingParams, log_weight, sample, sample_aligned

pytestmark = pytest.mark.model  # every test reads the enumeration of SmolLM2's masked distribution

PROMPT = "<|im_start|>user\nIs the sky blue? Answer in one word.<|im_end|>\n<|im_start|>assistant\n"
GRAMMAR = 'root ::= "Yes" | "No" | "Yes." | "No."'
N_STRICT = 240
Z = 4.0  # tolerance in standard errors (fixed seeds: a failure is a real discrepancy, not bad luck)


@pytest.fixture(scope="module")
def setup(llama_smol):
    ids = llama_smol.tokenize(PROMPT)
    mask = compile_mask("xgrammar", GRAMMAR, llama_smol)
    exact = exact_masked_distribution(llama_smol, ids, mask)
    strict = sample(
        llama_smol,
        ids,
        N_STRICT,
        SamplingParams(max_new_tokens=12, seed=3, top_logprobs=0),
        mask=mask,
        batch_size=16,
    )
    return llama_smol, ids, mask, exact, strict


def _index(exact: ExactDistribution) -> dict[tuple[int, ...], int]:
    return {s.token_ids: i for i, s in enumerate(exact.sequences)}


def test_exact_identities(setup):
    """On the enumeration itself: E_Q[w] = P(valid), KL(Q‖P_L) = log E_Q[w] − E_Q[log w] and
    KL(P_L‖Q) = E_Q[w log w] / E_Q[w] − log E_Q[w], each side computed independently."""
    *_, exact, _ = setup
    q = exact.q()
    w = np.exp([s.log_w for s in exact.sequences])
    lw = np.array([s.log_w for s in exact.sequences])
    assert q.sum() == pytest.approx(1.0, abs=1e-6)  # Q is a distribution over the enumerated sequences
    e_w = float((q * w).sum())
    assert e_w == pytest.approx(exact.p_valid, rel=1e-6)
    assert math.log(e_w) - float((q * lw).sum()) == pytest.approx(exact.kl_q_pl, rel=1e-6, abs=1e-9)
    assert float((q * w * lw).sum()) / e_w - math.log(e_w) == pytest.approx(exact.kl_pl_q, rel=1e-6, abs=1e-9)
    # the grammar distorts: otherwise the checks below could not fail
    tv = 0.5 * sum(abs(a - b) for a, b in zip(exact.q(), exact.p_l(), strict=True))
    assert tv > 0.1 and exact.kl_q_pl > 0.1


def test_weights_match_enumeration(setup):
    """Every strict sample is an enumerated sequence, and its weight from mask_removed is the exact one
    (up to llama.cpp's logits depending on the batch a row is decoded in)."""
    *_, exact, strict = setup
    idx = _index(exact)
    for s in strict:
        assert s.error is None and s.finish_reason == "stop"
        seq = exact.sequences[idx[tuple(s.token_ids)]]
        # llama.cpp's logits of a row move with the other rows of the batch (measured: 0.03-0.1 nats
        # on a step with log Z ≈ -3, 0.24 on one with log Z ≈ -28; the same tokens sampled twice
        # differ by as much): the tolerance grows with -log w
        assert log_weight(s.mask_removed) == pytest.approx(seq.log_w, abs=0.05 + 0.015 * abs(seq.log_w))


def test_sampler_draws_from_q(setup):
    *_, exact, strict = setup
    q_text = exact.by_text(exact.q())
    counts = Counter(s.text for s in strict)
    for text, p in q_text.items():
        se = math.sqrt(p * (1 - p) / N_STRICT)
        assert abs(counts[text] / N_STRICT - p) <= Z * se + 1e-9, (text, counts[text], p)


def test_estimators_against_exact(setup):
    """E_Q[w], KL(Q‖P_L), KL(P_L‖Q) and a self-normalised P_L rate from the strict samples agree with
    the exact values within Z standard errors (delta method)."""
    *_, exact, strict = setup
    lw = np.array([log_weight(s.mask_removed) for s in strict])
    w = np.exp(lw)
    n = len(w)
    mu = w.mean()
    assert abs(mu - exact.p_valid) <= Z * w.std(ddof=1) / math.sqrt(n)
    kl = math.log(mu) - lw.mean()
    infl = w / mu - lw  # influence of one sample on log mean(w) − mean(log w)
    assert abs(kl - exact.kl_q_pl) <= Z * infl.std(ddof=1) / math.sqrt(n)
    kl2 = float((w * lw).sum() / w.sum()) - math.log(mu)
    infl2 = (w / mu) * (lw - (kl2 + math.log(mu))) - w / mu
    assert abs(kl2 - exact.kl_pl_q) <= Z * infl2.std(ddof=1) / math.sqrt(n)
    yes = np.array([s.text.startswith("Yes") for s in strict], dtype=float)
    sn = float((w * yes).sum() / w.sum())
    p_yes = sum(p for t, p in exact.by_text(exact.p_l()).items() if t.startswith("Yes"))
    infl3 = (w / mu) * (yes - sn)
    assert abs(sn - p_yes) <= Z * infl3.std(ddof=1) / math.sqrt(n)
    # ... while the strict samples themselves over-represent "Yes" (masking bias, detectable at this n)
    q_yes = sum(p for t, p in exact.by_text(exact.q()).items() if t.startswith("Yes"))
    assert q_yes - p_yes > Z * math.sqrt(q_yes * (1 - q_yes) / n)
    assert abs(yes.mean() - q_yes) <= Z * math.sqrt(q_yes * (1 - q_yes) / n)


def _sir_law(exact: ExactDistribution, k: int, draws: int = 400_000) -> np.ndarray:
    """The law of importance resampling with k particles, by simulation from the exact Q and w."""
    rng = np.random.default_rng(0)
    q = exact.q() / exact.q().sum()
    w = np.exp([s.log_w for s in exact.sequences])
    parts = rng.choice(len(q), size=(draws, k), p=q)
    ww = w[parts]
    u = rng.random(draws)[:, None] * ww.sum(axis=1, keepdims=True)
    pick = parts[np.arange(draws), np.minimum((np.cumsum(ww, axis=1) < u).sum(axis=1), k - 1)]
    return np.bincount(pick, minlength=len(q)) / draws


@pytest.mark.slow
def test_aligned_sampler_matches_p_l(setup):
    """strict-aligned (importance resampling, 8 particles) draws from P_L up to its O(1/k) bias:
    its frequencies match the exact resampling law, that law is within 0.02 of P_L in total
    variation, and the corrected 'Yes' rate is far from strict's."""
    be, ids, mask, exact, _ = setup
    k, n = 8, 160
    out = sample_aligned(
        be,
        ids,
        n,
        SamplingParams(max_new_tokens=12, seed=5, top_logprobs=0),
        mask=mask,
        particles=k,
        batch_size=16,
    )
    assert all(s.error is None for s in out) and len(out) == n
    assert all(s.particles["n"] == k and len(s.particles["log_w"]) == k for s in out)
    law = exact.by_text(_sir_law(exact, k))
    p_l = exact.by_text(exact.p_l())
    assert 0.5 * sum(abs(law[t] - p_l[t]) for t in p_l) < 0.02
    counts = Counter(s.text for s in out)
    for text, p in law.items():
        assert abs(counts[text] / n - p) <= Z * math.sqrt(p * (1 - p) / n) + 1e-9, (text, counts[text], p)
    q_yes = sum(p for t, p in exact.by_text(exact.q()).items() if t.startswith("Yes"))
    got = sum(c for t, c in counts.items() if t.startswith("Yes")) / n
    assert q_yes - got > Z * math.sqrt(q_yes * (1 - q_yes) / n) / 2


def test_aligned_refuses_truncated_sampling(setup):
    from tooldecode.errors import MaskError

    be, ids, mask, *_ = setup
    with pytest.raises(MaskError, match="top-k/top-p"):
        sample_aligned(be, ids, 1, SamplingParams(top_p=0.9), mask=mask)
    with pytest.raises(MaskError, match="temperature"):
        sample_aligned(be, ids, 1, SamplingParams(temperature=0.7), mask=mask)


def test_aligned_prefix_target_keeps_cut_particles(setup):
    """Under the ``prefix`` target a particle cut at the token cap keeps its prefix weight. With a cap of
    one token every particle is cut and every one-token prefix has the same weight (the first step's
    kept mass), so the sampler's first tokens follow Q's first step, which is P_L over viable prefixes."""
    from tooldecode.errors import MaskError

    be, ids, mask, exact, _ = setup
    n = 120
    out = sample_aligned(
        be,
        ids,
        n,
        SamplingParams(max_new_tokens=1, seed=9, top_logprobs=0),
        mask=mask,
        particles=4,
        target="prefix",
    )
    assert all(s.error is None and s.finish_reason == "length" for s in out)
    assert all(s.particles["target"] == "prefix" and not any(s.particles["complete"]) for s in out)
    first: Counter[int] = Counter()
    for s, q in zip(exact.sequences, exact.q(), strict=True):
        first[s.token_ids[0]] += q
    got = Counter(s.token_ids[0] for s in out)
    assert set(got) <= set(first)
    for tok, p in first.items():
        assert abs(got[tok] / n - p) <= Z * math.sqrt(p * (1 - p) / n) + 1e-9, (tok, got[tok], p)
    with pytest.raises(MaskError, match="target"):
        sample_aligned(be, ids, 1, SamplingParams(max_new_tokens=1), mask=mask, target="whole")


def _draws_p_l(out, exact, n: int) -> None:
    """``out`` are n exact draws of P_L: every frequency within Z standard errors of the enumeration's P_L,
    and "Yes…" clearly below Q's share (the masked sampler's bias, which an exact sampler must not have)."""
    assert all(s.error is None and s.finish_reason == "stop" for s in out) and len(out) == n
    p_l = exact.by_text(exact.p_l())
    counts = Counter(s.text for s in out)
    assert set(counts) <= set(p_l)
    for text, p in p_l.items():
        assert abs(counts[text] / n - p) <= Z * math.sqrt(p * (1 - p) / n) + 1e-9, (text, counts[text], p)
    q_yes = sum(p for t, p in exact.by_text(exact.q()).items() if t.startswith("Yes"))
    got = sum(c for t, c in counts.items() if t.startswith("Yes")) / n
    assert q_yes - got > Z * math.sqrt(q_yes * (1 - q_yes) / n) / 2


def test_adaptive_sampler_is_exact_and_learns(setup):
    """The adaptive exact sampler (CARS-style) draws P_L: its frequencies match the exact P_L of the
    enumeration, far from Q's; what it learns makes later samples cheaper than plain rejection."""
    from tooldecode.sampling import Trie, sample_adaptive

    be, ids, mask, exact, _ = setup
    n = 160
    trie = Trie()
    out = sample_adaptive(
        be, ids, n, SamplingParams(max_new_tokens=12, seed=11, top_logprobs=0), mask=mask, trie=trie
    )
    _draws_p_l(out, exact, n)
    # the cost: walks per sample fall below plain rejection's 1 / P(valid) once the trie has learned
    attempts = [s.timing["attempts"] for s in out]
    late = sum(attempts[n // 2 :]) / (n - n // 2)
    assert late < 0.5 / exact.p_valid and late < 3
    assert trie.alive >= exact.p_valid - 1e-6  # alive mass bounds P(valid) from above


def test_adaptive_sampler_in_parallel_rounds_is_exact(setup):
    """Rounds of 4 walks in one batch, knowledge frozen within a round, the accepted walk of lowest index
    kept: still P_L (the same check as one walk at a time)."""
    from tooldecode.sampling import Trie, sample_adaptive

    be, ids, mask, exact, _ = setup
    n = 160
    trie = Trie()
    params = SamplingParams(max_new_tokens=12, seed=5, top_logprobs=0)
    out = sample_adaptive(be, ids, n, params, mask=mask, trie=trie, walks=4)
    _draws_p_l(out, exact, n)
    assert {s.timing["walks"] for s in out} == {4}
    assert trie.alive >= exact.p_valid - 1e-6
    # resumable: output i depends on (seed, i) and on what was learned before it, as with one walk
    again = sample_adaptive(be, ids, 3, params, mask=mask, walks=4)
    assert [s.text for s in again] == [s.text for s in out[:3]]


def test_adaptive_queue_draws_what_one_walk_at_a_time_draws(setup):
    """Several requests' walks share decode steps (``sample_adaptive_queue``, 2 slots for 3 requests on two
    prompts): each request's outputs are the ones ``sample_adaptive`` draws alone, walk for walk (same
    texts and same walks per output, up to a token flipped by a batched step's float order), so they are
    P_L's draws; each output's timing names the slots that shared its steps."""
    from tooldecode.sampling import AdaptiveRequest, sample_adaptive, sample_adaptive_queue

    be, ids, mask, exact, _ = setup
    other = be.tokenize(PROMPT.replace("Is the sky blue?", "Is grass green?"))
    plan = [(ids, 60, 7, 0), (other, 20, 7, 0), (ids, 60, 8, 5)]  # prompt, n, seed, start index
    got: dict[int, list] = {k: [] for k in range(len(plan))}
    reqs = [
        AdaptiveRequest(
            list(p), n, SamplingParams(max_new_tokens=12, seed=seed, top_logprobs=0), mask,
            start_index=start, on_batch=got[k].extend,
        )
        for k, (p, n, seed, start) in enumerate(plan)
    ]  # fmt: skip
    sample_adaptive_queue(be, reqs, slots=2)
    flips = 0
    for k, (p, n, seed, start) in enumerate(plan):
        alone = sample_adaptive(
            be, p, n, SamplingParams(max_new_tokens=12, seed=seed, top_logprobs=0), mask=mask,
            start_index=start,
        )  # fmt: skip
        assert [s.index for s in got[k]] == list(range(start, start + n))
        flips += sum(
            (a.text, a.timing["attempts"]) != (b.text, b.timing["attempts"])
            for a, b in zip(alone, got[k], strict=True)
        )
        assert {s.timing["slots"] for s in got[k]} == {2}
    print(f"adaptive queue vs one walk at a time: {flips} of 140 outputs differ")
    assert flips <= 2, flips
    _draws_p_l(got[0] + got[2], exact, 120)


def test_the_aligned_trial_queues_its_adaptive_draws_only(llama_smol):
    """A strict-aligned trial with the adaptive method, one walk at a time, is an item of the shared queue
    (its bound on walks from particles x max_rounds); other methods and parallel walks draw on their own."""
    from tooldecode.sampling import AdaptiveRequest
    from tooldecode.scenarios import load_scenarios
    from tooldecode.trial import Trial

    sc = next(iter(load_scenarios()))
    arm = {
        "model": "smollm2-135m-instruct",
        "backend": "llamacpp",
        "mode": "strict-aligned",
        "temperature": 1.0,
    }
    params = SamplingParams(max_new_tokens=8, seed=0)
    adaptive = {"method": "adaptive", "target": "complete", "particles": 8, "max_rounds": 4}
    req = Trial(arm, sc, aligned=adaptive).request(llama_smol, 2, params, start_index=3)
    assert isinstance(req, AdaptiveRequest) and (req.n, req.start_index, req.max_attempts) == (2, 3, 32)
    assert req.max_tokens is None
    capped = Trial(arm, sc, aligned={**adaptive, "max_walk_tokens": 100}).request(llama_smol, 2, params)
    assert isinstance(capped, AdaptiveRequest) and capped.max_tokens == 100
    assert Trial(arm, sc, aligned={**adaptive, "walks": 4}).request(llama_smol, 2, params) is None
    assert Trial(arm, sc, aligned={"method": "sir"}).request(llama_smol, 2, params) is None


def test_a_walk_token_budget_abandons_an_output_and_keeps_the_accepted_ones_exact(setup):
    """``max_tokens``: an output whose walks reach the budget without an accepted one is an error record
    that names the budget (the queue and one walk at a time agree); an accepted output is the draw the
    unbudgeted sampler makes while its walks stay within the budget (the first output: a fresh trie)."""
    from tooldecode.sampling import AdaptiveRequest, sample_adaptive, sample_adaptive_queue

    be, ids, mask, _, _ = setup
    params = SamplingParams(max_new_tokens=12, seed=11, top_logprobs=0)
    budget = sample_adaptive(be, ids, 24, params, mask=mask, max_tokens=2)
    errors = [s for s in budget if s.error]
    assert errors and len(errors) < len(budget)
    for s in errors:
        assert s.timing["tokens"] >= 2 and "2 walk tokens" in s.error and s.finish_reason == "error"
    for s in budget:  # a walk's tokens are counted when it ends: none starts once the budget is spent
        assert s.error or s.timing["tokens"] - len(s.token_ids) < 2
    free = sample_adaptive(be, ids, 1, params, mask=mask)[0]
    if free.timing["tokens"] - len(free.token_ids) < 2:
        assert (budget[0].text, budget[0].timing["attempts"]) == (free.text, free.timing["attempts"])
    got: list = []
    req = AdaptiveRequest(list(ids), 24, params, mask, max_tokens=2, on_batch=got.extend)
    sample_adaptive_queue(be, [req], slots=2)
    same = sum(
        (a.text, a.error is None) == (b.text, b.error is None) for a, b in zip(budget, got, strict=True)
    )
    assert same >= 22, same  # up to a token flipped by a batched step's float order
    rounds = sample_adaptive(be, ids, 8, params, mask=mask, max_tokens=2, walks=4)
    assert all(s.error is None or s.timing["tokens"] >= 2 for s in rounds)
