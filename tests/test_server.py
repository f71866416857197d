"""The `openai` backend against llama-cpp-python's own server (started by the `llama_server` fixture).

Channel checks: the same SmolLM2 file in-process (llama.cpp) and behind the server must agree —
tokenization identical, next-token probabilities within 1e-5 (flash attention on in both; same
numerics), the probe's decision probabilities within 1e-3, loose sampled rates within intervals.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from tooldecode.backends.openai import ChannelError, ServerError
from tooldecode.prompts import TranscriptOptions, gold_call_text, parse_variant, render_prompt
from tooldecode.sampling import Sample, SamplingParams, sample
from tooldecode.scenarios import get_scenario

pytestmark = pytest.mark.model

SCENARIO = "py-mutable-default-cart"  # the shortest prompt of the corpus (llama-cpp-python's logprobs cost O(prompt × vocab))


def _prompt(ref, variant: str):
    return render_prompt(get_scenario(SCENARIO), ref, parse_variant(variant))


def _user_turn(ref, variant: str):
    """The scenario's prompt from its user turn on (no system turn listing the tools: 764 of its 1,125
    tokens), for the sampling checks, which compare the two sides on the same text whatever it is. The
    numerics checks (next-token distribution, probe) keep the whole prompt: several 512-token chunks."""
    p = _prompt(ref, variant)
    return dataclasses.replace(p, text=p.text[p.text.index("<|im_start|>user") :])


def test_server_kind_and_tokenization_identical(openai_smol, llama_smol, smol_ref):
    be = openai_smol
    assert be.kind == "llama-cpp-python"
    assert not be.caps.token_ids and not be.honours_n
    texts = [
        _prompt(smol_ref, "fresh").text,
        _prompt(smol_ref, "agentic,gold-prefix").text,
        'edit {"path": "café/naïve.py", "newText": "\\t→ ✓ 🙂"}<|im_end|>\n',
    ]
    for text in texts:
        ours = llama_smol.tokenize(text)
        assert be.tokenize(text) == ours
        assert be.server_tokenize(text) == ours
        be.check_tokenization(text, ours)
    with pytest.raises(ChannelError, match="tokenizes the prompt differently"):
        be.check_tokenization("<|im_start|>user", [1, 2, 3])


SHORT = '<|im_start|>user\nWhat is 2+2? Answer in JSON.<|im_end|>\n<|im_start|>assistant\n{"answer": "'


def _logprobs(row: np.ndarray) -> np.ndarray:
    row = np.asarray(row, dtype=np.float64)
    row = row - row.max()
    return row - math.log(np.exp(row).sum())


@pytest.mark.slow
def test_next_token_distribution_matches_in_process(openai_smol, llama_smol, smol_ref):
    """Whole-vocabulary next-token probabilities at a forced prefix inside a scenario's gold call:
    server vs in-process, max abs difference ≤ 1e-5; what the server could not name is unseen mass."""
    p = _prompt(smol_ref, "fresh")
    call = gold_call_text(get_scenario(SCENARIO), TranscriptOptions(history="fresh"), smol_ref.family)
    ids = llama_smol.tokenize(p.text) + llama_smol.tokenize(call)
    pos = len(llama_smol.tokenize(p.text)) + 6
    row = openai_smol.forward(ids, [pos])[0]
    assert row.shape == (openai_smol.n_vocab + 1,)
    ref = _logprobs(llama_smol.forward(ids, [pos])[0])
    seen = np.isfinite(row[:-1])
    unseen = math.exp(row[-1]) if np.isfinite(row[-1]) else 0.0
    diff = float(np.abs(np.exp(row[:-1][seen]) - np.exp(ref[seen])).max())
    print(
        f"channel: next-token max |dp| = {diff:.2e} over {int(seen.sum())} tokens; unseen mass {unseen:.2e}"
    )
    assert diff <= 1e-5
    assert unseen == pytest.approx(float(np.exp(ref[~seen]).sum()), abs=1e-5)
    assert unseen < 5e-3


def test_sample_record_shape_logprobs_and_seeds(openai_smol, llama_smol):
    # greedy, so the tokens are the model's choice and every text names one token
    params = SamplingParams(max_new_tokens=5, seed=3, temperature=0.0, top_logprobs=4)
    got: list = []
    out = openai_smol.sample(SHORT, 1, params, start_index=5, on_batch=got.extend)
    assert [s.index for s in out] == [5] and [s.index for s in got] == [5]
    keys = {f.name for f in dataclasses.fields(Sample)}
    ids = llama_smol.tokenize(SHORT)
    whole = _logprobs(llama_smol.forward(ids, [len(ids) - 1])[0])  # prompt evaluated in one batch
    llama_smol.begin(ids[:-1], 1)
    alone = _logprobs(llama_smol.step([ids[-1]], [0])[0])  # its last token alone (a server cache hit)
    llama_smol.end()
    for s in out:
        rec = s.to_record()
        assert keys <= set(rec) and set(rec) - keys == {"tokens", "tool_name", "absent"}
        assert rec["entropy"] is None and rec["mask_removed"] is None and rec["entropy_masked"] is None
        # every None has its reason; nothing with a value is called absent
        assert {k for k in keys if rec[k] is None and k != "error"} == set(rec["absent"])
        assert s.finish_reason in ("stop", "length")
        assert s.tokens and len(s.logprobs) == len(s.tokens) == len(s.top)
        assert s.token_ids is not None, s.tokens
        assert all(t is not None and 1 <= len(t) <= 4 for t in s.top)
        assert s.top[0][0][1] == pytest.approx(max(whole.max(), alone.max()), abs=0.3)
        # the reported log-probabilities are the model's unmasked ones: the first token's under one of
        # the two evaluation shapes, the rest as in-process decoding (one token per step)
        t0 = s.token_ids[0]
        assert min(abs(s.logprobs[0] - whole[t0]), abs(s.logprobs[0] - alone[t0])) < 1e-3
        llama_smol.begin(ids, 1)
        try:
            ref = []
            for prev, t in zip(s.token_ids[:-1], s.token_ids[1:], strict=True):
                ref.append(float(_logprobs(llama_smol.step([prev], [0])[0])[t]))
        finally:
            llama_smol.end()
        assert np.allclose(s.logprobs[1:], ref, atol=1e-3), (s.logprobs, ref)
        assert s.token_ids[0] == int(np.argmax(whole)) or s.token_ids[0] == int(np.argmax(alone))
    # a sample is a function of (seed, index): drawn again alone, index 6 comes back identical
    params = SamplingParams(max_new_tokens=8, seed=3)
    two = openai_smol.sample(SHORT, 2, params, start_index=5, logprobs=False)
    again = openai_smol.sample(SHORT, 1, params, start_index=6, logprobs=False)
    assert again[0].text == two[1].text and again[0].logprobs is None and again[0].token_ids is None
    assert again[0].absent["logprobs"].startswith("not requested")


def test_strict_through_the_server_grammar(openai_smol, smol_ref):
    """Strict via llama-cpp-python's `grammar` field: every sample is a prefix of the strict grammar's language."""
    import xgrammar as xgr

    from tooldecode.grammar import render_toolset

    p = _user_turn(smol_ref, "fresh")
    gbnf = render_toolset(list(p.tools), format="gbnf", wire=p.wire, mode="strict", ws="bounded")
    params = SamplingParams(max_new_tokens=16, stop=tuple(p.stop), seed=0, top_logprobs=0)
    strict = openai_smol.sample(p.text, 1, params, grammar=gbnf, logprobs=False)
    compiled = xgr.GrammarCompiler(xgr.TokenizerInfo([])).compile_grammar(
        xgr.Grammar.from_ebnf(gbnf, root_rule_name="root")
    )
    for s in strict:
        m = xgr.GrammarMatcher(compiled)
        assert m.accept_string(s.text), s.text
    # the same prompt loose: SmolLM2 does not open with a call in this wire on its own
    loose = openai_smol.sample(p.text, 2, params, start_index=1, logprobs=False)
    assert any(not xgr.GrammarMatcher(compiled).accept_string(s.text) for s in loose)
    # a forced prefill cannot be combined with the server's grammar: a one-line error, nothing sent
    pre = _prompt(smol_ref, "fresh,forced-tool")
    with pytest.raises(ServerError, match="conditioning=free") as err:
        openai_smol.sample(pre.text, 1, params, grammar=gbnf, prefill=pre.prefill)
    assert "\n" not in str(err.value)


@pytest.mark.slow
def test_probe_channel(openai_smol, llama_smol, smol_ref):
    """The exact probe over HTTP agrees with the in-process probe within 1e-3 (unseen mass → undetermined)."""
    from tooldecode.probe import ProbeConfig, probe_call

    opts = TranscriptOptions(history="fresh")
    sc = get_scenario(SCENARIO)
    p = render_prompt(sc, smol_ref, opts)
    call = gold_call_text(sc, opts, smol_ref.family)
    cfg = ProbeConfig(depth=2, key_depth=0, max_branches=3, min_mass=1e-2)
    before = openai_smol.stats["probe_requests"]
    remote = probe_call(openai_smol, p.text, call, select="newText", config=cfg)
    local = probe_call(llama_smol, p.text, call, select="newText", config=cfg)
    assert len(remote) == len(local) >= 1
    assert openai_smol.stats["probe_requests"] - before <= 1 + 3 * len(remote)
    worst = moved = 0.0
    for r, q in zip(remote, local, strict=True):
        assert abs(r.p_close + r.p_continue + r.p_other + r.p_undetermined - 1) < 1e-6
        extra = r.p_undetermined - q.p_undetermined  # what the server could not show, now undetermined
        assert -1e-5 <= extra <= 5e-3
        moved = max(moved, extra)
        for f in ("p_close", "p_continue", "p_other"):
            d = getattr(q, f) - getattr(r, f)
            worst = max(worst, abs(d))
            # never more in a class than in-process; what is missing is in the undetermined mass
            assert -1e-3 <= d <= extra + 1e-3, (f, getattr(r, f), getattr(q, f))
    print(
        f"channel: probe max |dp| over close/continue/other = {worst:.2e}, unseen mass moved to "
        f"undetermined ≤ {moved:.2e} ({len(remote)} points)"
    )


@pytest.mark.slow
def test_loose_rates_agree_within_intervals(openai_smol, llama_smol, smol_ref):
    """L2 loose, same prompt, 16 draws per channel: the rate of each first decision agrees (Newcombe 95%)."""
    from tooldecode.classify import classify_continuation
    from tooldecode.stats import newcombe_diff, wilson

    p = _user_turn(smol_ref, "fresh,gold-prefix")
    n = 16
    params = SamplingParams(max_new_tokens=12, stop=tuple(p.stop), seed=11, top_logprobs=0)
    remote = openai_smol.sample(p.text, n, params, prefill=p.prefill, logprobs=False)
    local = sample(llama_smol, p.text, n, params, prefill=p.prefill)

    def group(s) -> str:
        # gold-prefix stops inside newText's string: the model owes the closing quote, then decides
        return classify_continuation(s.text.encode("utf-8"), pending=b'"', container="object").group

    gr = [group(s) for s in remote]
    gl = [group(s) for s in local]
    for g in sorted(set(gr) | set(gl)):
        kr, kl = gr.count(g), gl.count(g)
        d = newcombe_diff(kr, n, kl, n)
        print(
            f"channel: loose {g}: server {wilson(kr, n)} vs in-process {wilson(kl, n)} (Wilson 95%); "
            f"difference {d} (Newcombe 95%)"
        )
        assert d.lo <= 0.0 <= d.hi, (g, kr, kl)


@pytest.mark.parametrize("kind", ["vllm", "sglang"])
def test_a_wrong_server_kind_is_one_line_naming_the_flag(smol_ref, llama_server, kind):
    """llama-cpp-python's server told to be another kind: its refusal of that kind's request fields is
    one line naming --server-kind, not the server's validation dump."""
    from tooldecode.backends import load_backend

    be = load_backend("openai", smol_ref, base_url=llama_server.base_url, kind=kind)
    try:
        with pytest.raises(ServerError) as err:
            be.sample(_prompt(smol_ref, "agentic,gold-prefix").text, 1, SamplingParams(max_new_tokens=2))
    finally:
        be.close()
    msg = str(err.value)
    assert "\n" not in msg and "--server-kind" in msg, msg
