"""The prefix-keeping mask (mode ``strict-prefix``): a masked token's mass moves to its longest allowed token
prefix. Checked on a toy vocabulary and, on SmolLM2-135M, against a brute-force pass over the vocabulary
at the decision after the gold newText."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tooldecode.masking import PrefixKeeping, longest_token_prefix

TOY = [b'"', b'",', b'",\n', b"a", b"ab", b"abc", b"<|end|>", b"<", b"x", b'"}']


def test_longest_token_prefix_and_targets_on_a_toy_vocabulary():
    parent = longest_token_prefix(TOY, excluded=frozenset({6}))
    assert parent.tolist() == [-1, 0, 1, -1, 3, 4, -1, -1, -1, 0]
    keep = PrefixKeeping(parent)
    allowed = np.array([True, False, False, True, False, False, False, True, True, True])
    # '",' and '",\n' go to '"' (the chain passes the masked '",'), 'ab' and 'abc' to 'a'; the control
    # token and tokens without an allowed prefix keep no mass
    assert keep.targets(allowed).tolist() == [0, 0, 0, 3, 3, 3, 10, 7, 8, 9]
    e = np.arange(1, 11, dtype=np.float32)
    w = keep(e, allowed)
    assert w.tolist() == [1 + 2 + 3, 0, 0, 4 + 5 + 6, 0, 0, 0, 8, 9, 10]
    # nothing masked has an allowed prefix: strict's weights
    only = np.array([False, False, False, False, False, False, False, True, True, True])
    assert keep(e, only).tolist() == (e * only).tolist()


# ------------------------------------------------------------------------------------- SmolLM2 decision

SCENARIOS = ("py-pagination-off-by-one", "c-config-trim-crlf")


def _brute_force(
    vocab: list[bytes], special: frozenset[int], allowed: np.ndarray, p: np.ndarray
) -> np.ndarray:
    """What the prefix-keeping step should sample, token by token over the whole vocabulary: an allowed
    token keeps its probability; a masked one gives it to the allowed token (lowest id of equal bytes)
    whose bytes are the longest proper prefix of its own; the rest is renormalised."""
    ids: dict[bytes, int] = {}
    for i, b in enumerate(vocab):
        if b and i not in special:
            ids.setdefault(b, i)
    out = np.zeros(len(vocab))
    for v, b in enumerate(vocab):
        if allowed[v]:
            out[v] += p[v]
            continue
        if v in special:
            continue
        for k in range(len(b) - 1, 0, -1):
            u = ids.get(b[:k])
            if u is not None and allowed[u]:
                out[u] += p[v]
                break
    return out / out.sum()


@pytest.fixture(scope="module")
def decisions(llama_smol, smol_ref):
    """(prompt, mask, the model's P and the grammar's allowed set) after the gold newText of each scenario."""
    from tooldecode.grammar import render_toolset
    from tooldecode.masking import compile_mask
    from tooldecode.prompts import TranscriptOptions, render_prompt
    from tooldecode.scenarios import get_scenario

    out = []
    opts = TranscriptOptions(history="agentic", toolset="nested", conditioning="gold-prefix")
    for sid in SCENARIOS:
        prompt = render_prompt(get_scenario(sid), smol_ref, opts)
        g = render_toolset(list(prompt.tools), format="gbnf", wire=prompt.wire, mode="strict", ws="bounded")
        mask = compile_mask("xgrammar", g, llama_smol)
        ids = llama_smol.tokenize(prompt.text)
        logits = llama_smol.branch_logits(ids[:-1], [ids[-1:]])[0].astype(np.float64)
        p = np.exp(logits - logits.max())
        p /= p.sum()
        allowed = mask.matcher(prompt.prefill).allowed()
        out.append((prompt, mask, ids, p, allowed))
    return out


@pytest.mark.model
def test_prefix_keeping_matches_brute_force_at_the_close_decision(llama_smol, decisions):
    from tooldecode.masking import prefix_keeping, special_token_ids

    vocab = llama_smol.vocab_bytes[: llama_smol.n_vocab]
    special = special_token_ids(llama_smol)
    quote = llama_smol.tokenize('"', special=False)
    assert len(quote) == 1
    for prompt, mask, _ids, p, allowed in decisions:
        want = _brute_force(vocab, special, allowed, p)
        pk = prefix_keeping(mask, llama_smol)
        m = pk.matcher(prompt.prefill)
        got = m.reweight(p.astype(np.float32), m.allowed()).astype(np.float64)
        got /= got.sum()
        assert np.abs(got - want).max() < 1e-6
        strict = np.where(allowed, p, 0.0) / p[allowed].sum()
        # the mask removes mass here ('",' cannot follow newText in a closed item), and the prefix-keeping
        # step gives some of it to the closing quote: it is not strict's step
        assert p[~allowed].sum() > 1e-3
        assert got[quote[0]] > strict[quote[0]] + 1e-4
        assert not np.any(got[~allowed] > 0)


@pytest.mark.model
def test_strict_prefix_sampler_draws_the_reweighted_step(llama_smol, decisions):
    """The sampler's first tokens (cap of one token) follow the prefix-keeping step's distribution."""
    from tooldecode.masking import prefix_keeping
    from tooldecode.sampling import SamplingParams, sample

    prompt, mask, ids, p, allowed = decisions[0]
    pk = prefix_keeping(mask, llama_smol)
    m = pk.matcher(prompt.prefill)
    q = m.reweight(p.astype(np.float32), m.allowed()).astype(np.float64)
    z_plus = q.sum()  # the mass kept or moved
    q /= z_plus
    n = 200
    out = sample(
        llama_smol,
        ids,
        n,
        SamplingParams(max_new_tokens=1, seed=4, top_logprobs=0),
        mask=pk,
        prefill=prompt.prefill,
        batch_size=16,
    )
    assert all(s.error is None for s in out)
    first = np.array([s.token_ids[0] for s in out])
    assert all(allowed[t] for t in first)
    quote = llama_smol.tokenize('"', special=False)[0]
    k = int((first == quote).sum())
    se = math.sqrt(q[quote] * (1 - q[quote]) / n)
    assert abs(k / n - q[quote]) <= 4 * se + 1e-9
    # mask_removed is the mass neither kept nor moved, 1 − Z⁺ (llama.cpp's logits move a little with the batch)
    assert all(abs(s.mask_removed[0] - (1 - z_plus)) < 0.02 for s in out)
