"""Sampler on a real model (SmolLM2 135M through llama.cpp): determinism, log-probabilities, masks."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from tooldecode.errors import MaskError
from tooldecode.masking import MaskEngine, compile_mask
from tooldecode.sampling import SamplingParams, sample
from tooldecode.sampling.kernels import draw_weighted, log_softmax, top_indices

pytestmark = pytest.mark.model

PROMPT = (
    "<|im_start|>system\nYou answer with JSON only.<|im_end|>\n"
    '<|im_start|>user\nGive me a JSON object with a key "a" holding a small number.<|im_end|>\n'
    "<|im_start|>assistant\n"
)
GBNF = r'''root ::= "{\"a\": " [1-9] [0-9]? "}"'''


def test_same_seed_same_samples(llama_smol):
    p = SamplingParams(temperature=1.0, max_new_tokens=12, seed=7)
    a = sample(llama_smol, PROMPT, 4, p, batch_size=4)
    b = sample(llama_smol, PROMPT, 4, p, batch_size=4)
    assert [s.token_ids for s in a] == [s.token_ids for s in b]
    c = sample(
        llama_smol, PROMPT, 4, SamplingParams(temperature=1.0, max_new_tokens=12, seed=8), batch_size=4
    )
    assert [s.token_ids for s in a] != [s.token_ids for s in c]


def test_a_stream_word_gives_other_random_numbers(llama_smol):
    """``stream`` (a scenario's own random streams in runs) changes the draws; None keeps (seed, index)."""
    from tooldecode.sampling import stream_key

    base = SamplingParams(temperature=1.0, max_new_tokens=12, seed=7)
    assert stream_key(base, 3) == [7, 3] and stream_key(base, 3, 9) == [7, 3, 9]
    other = SamplingParams(temperature=1.0, max_new_tokens=12, seed=7, stream=11)
    assert stream_key(other, 3) == [7, 11, 3]
    a = sample(llama_smol, PROMPT, 4, base, batch_size=4)
    b = sample(llama_smol, PROMPT, 4, other, batch_size=4)
    assert [s.token_ids for s in a] != [s.token_ids for s in b]
    again = sample(llama_smol, PROMPT, 4, other, batch_size=4)
    assert [s.token_ids for s in b] == [s.token_ids for s in again]


def test_first_logprob_matches_hand_log_softmax(llama_smol):
    ids = llama_smol.tokenize(PROMPT)
    logits = llama_smol.begin(ids, 1)[0].astype(np.float64)
    llama_smol.end()
    m = logits.max()
    hand = logits - m - np.log(np.exp(logits - m).sum())
    s = sample(llama_smol, PROMPT, 1, SamplingParams(temperature=0, max_new_tokens=1, top_logprobs=5))[0]
    tok = s.token_ids[0]
    assert tok == int(np.argmax(logits))
    assert s.logprobs[0] == pytest.approx(hand[tok], abs=1e-4)
    top_ids = [int(t) for t, _ in s.top[0]]
    assert top_ids == [int(t) for t in np.argsort(-hand)[:5]]
    assert s.entropy[0] == pytest.approx(float(-(np.exp(hand) * hand).sum()), abs=1e-3)


def test_greedy_rows_in_one_batch_agree(llama_smol):
    out = sample(llama_smol, PROMPT, 3, SamplingParams(temperature=0, max_new_tokens=10), batch_size=3)
    assert out[0].token_ids == out[1].token_ids == out[2].token_ids


def test_top_k_one_is_greedy(llama_smol):
    g = sample(llama_smol, PROMPT, 1, SamplingParams(temperature=0, max_new_tokens=10))[0]
    k = sample(llama_smol, PROMPT, 1, SamplingParams(temperature=1.5, top_k=1, max_new_tokens=10, seed=3))[0]
    assert g.token_ids == k.token_ids


def test_stop_string_cuts_text(llama_smol):
    free = sample(llama_smol, PROMPT, 1, SamplingParams(temperature=0, max_new_tokens=20))[0]
    assert len(free.text) > 3
    stop = free.text[2:4]
    cut = sample(llama_smol, PROMPT, 1, SamplingParams(temperature=0, max_new_tokens=20, stop=(stop,)))[0]
    assert cut.finish_reason == "stop"
    assert cut.text.endswith(stop) and free.text.startswith(cut.text)


@pytest.mark.parametrize("engine", ["xgrammar", "llama-grammar", "llguidance"])
def test_strict_samples_follow_the_grammar(llama_smol, engine):
    grammar = GBNF
    if engine == "llguidance":
        grammar = 'start: "{\\"a\\": " /[1-9][0-9]?/ "}"'
    mask = compile_mask(engine, grammar, llama_smol)
    out = sample(
        llama_smol,
        PROMPT,
        8,
        SamplingParams(temperature=1.0, max_new_tokens=16, seed=1),
        mask=mask,
        batch_size=8,
    )
    for s in out:
        assert s.error is None, s.error
        assert re.fullmatch(r'\{"a": [1-9][0-9]?\}', s.text), s.text
        assert json.loads(s.text)["a"] >= 1
        assert len(s.mask_removed) == len(s.token_ids) and all(0 <= m <= 1 for m in s.mask_removed)
        assert s.finish_reason == "stop"
    # the mask removed real probability mass somewhere (the model would have written other text)
    assert max(max(s.mask_removed) for s in out) > 0.01


def test_prefill_advances_the_matcher(llama_smol):
    mask = compile_mask("xgrammar", GBNF, llama_smol)
    out = sample(
        llama_smol,
        PROMPT + '{"a": ',
        4,
        SamplingParams(temperature=1.0, max_new_tokens=8, seed=2),
        mask=mask,
        prefill='{"a": ',
    )
    for s in out:
        assert re.fullmatch(r"[1-9][0-9]?\}", s.text), s.text


class _Broken:
    """A matcher whose engine fails mid-sample (as a buggy processor would)."""

    def __init__(self, fail_after: int) -> None:
        self.n = 0
        self.fail_after = fail_after

    def allowed(self):
        self.n += 1
        if self.n > self.fail_after:
            raise RuntimeError("engine exploded")
        return np.ones(49152, dtype=bool)

    def accept(self, token_id):
        pass

    def done(self):
        return False


def test_broken_mask_aborts_instead_of_sampling_unmasked(llama_smol):
    eng = MaskEngine("broken", "", llama_smol.n_vocab, llama_smol.eog_ids, None, lambda p, ids: _Broken(2))
    out = sample(llama_smol, PROMPT, 3, SamplingParams(temperature=1.0, max_new_tokens=20), mask=eng)
    for s in out:
        assert s.finish_reason == "error" and "engine exploded" in s.error
        assert len(s.token_ids) == 2  # nothing was drawn after the failure


def test_prefill_the_grammar_rejects_is_an_error(llama_smol):
    mask = compile_mask("xgrammar", GBNF, llama_smol)
    with pytest.raises(MaskError):
        mask.matcher('{"b": ')
    out = sample(llama_smol, PROMPT, 2, SamplingParams(max_new_tokens=5), mask=mask, prefill='{"b": ')
    assert all(s.finish_reason == "error" and s.token_ids == [] for s in out)


def test_log_softmax_is_normalised():
    x = np.array([[1.0, 2.0, -np.inf, 3.0]])
    lp = log_softmax(x)
    assert np.exp(lp).sum() == pytest.approx(1.0)
    assert lp[0, 2] == -np.inf


@pytest.mark.parametrize(
    "engine,fmt", [("xgrammar", "gbnf"), ("llguidance", "lark"), ("llama-grammar", "gbnf")]
)
def test_strict_edit_calls_validate_against_the_strict_schema(llama_smol, engine, fmt):
    import jsonschema

    from tooldecode.grammar import load_tool, render_toolset, strictify

    edit = load_tool("edit")
    grammar = render_toolset([edit], format=fmt, wire="call-json", mode="strict", ws="bounded")
    mask = compile_mask(engine, grammar, llama_smol)
    prompt = (
        "<|im_start|>system\nCall the edit tool with JSON.<|im_end|>\n<|im_start|>user\nIn a.py replace x = 1 "
        'by x = 2.<|im_end|>\n<|im_start|>assistant\n{"name": "edit", "arguments": {"'
    )
    out = sample(
        llama_smol,
        prompt,
        4,
        SamplingParams(temperature=0.7, max_new_tokens=120, seed=4),
        mask=mask,
        prefill='{"name": "edit", "arguments": {"',
        batch_size=4,
    )
    finished = [s for s in out if s.finish_reason == "stop"]
    assert all(s.error is None for s in out), [s.error for s in out]
    assert finished, "no strict sample finished within the token budget"
    for s in finished:
        call = json.loads('{"name": "edit", "arguments": {"' + s.text)
        jsonschema.validate(call["arguments"], strictify(edit.parameters))


@pytest.mark.slow
def test_hf_batch_size_from_memory(hf_smol):
    cfg = hf_smol.hf.config
    per_token = (
        2 * cfg.num_hidden_layers * cfg.num_key_value_heads * (cfg.hidden_size // cfg.num_attention_heads) * 4
    )
    assert hf_smol.sequence_bytes(1000) == per_token * 1000 + 4 * hf_smol.n_vocab
    assert 1 <= hf_smol.suggest_batch_size(1000, 100) <= 16
    out = sample(hf_smol, PROMPT, 2, SamplingParams(temperature=0, max_new_tokens=3))  # batch from memory
    assert out[0].token_ids == out[1].token_ids and out[0].timing["slots"] == 2


@pytest.mark.slow
def test_hf_prefix_reuse_matches_a_fresh_prompt(hf_smol):
    """A second prompt sharing a prefix with the cached one gives the same greedy tokens as from scratch."""
    p = SamplingParams(temperature=0, max_new_tokens=8)
    sample(hf_smol, PROMPT, 1, p)
    other = PROMPT.replace("small number", "large number")
    reused = sample(hf_smol, other, 2, p, batch_size=2)
    hf_smol.forward(hf_smol.tokenize(other), [0])  # drops the cache
    fresh = sample(hf_smol, other, 1, p)
    assert reused[0].token_ids == reused[1].token_ids == fresh[0].token_ids


def test_refilled_slots_restart_from_the_prompt(llama_smol):
    """With more samples than slots, a finished slot is refilled (continuous batching): a restarted
    sequence must see exactly the prompt again, so greedy samples through every slot agree."""
    p = SamplingParams(temperature=0, max_new_tokens=6)
    out = sample(llama_smol, PROMPT, 5, p, batch_size=2)
    assert [s.index for s in out] == [0, 1, 2, 3, 4]
    assert all(s.token_ids == out[0].token_ids for s in out)
    assert max(s.timing["start_s"] for s in out) > 0  # later samples started after earlier ones


def test_refill_keeps_per_index_randomness(llama_smol):
    p = SamplingParams(temperature=1.0, max_new_tokens=8, seed=11)
    seen: list[int] = []
    a = sample(llama_smol, PROMPT, 6, p, batch_size=2, on_batch=lambda b: seen.extend(s.index for s in b))
    b = sample(llama_smol, PROMPT, 6, p, batch_size=2)
    assert sorted(seen) == list(range(6))
    assert [s.token_ids for s in a] == [s.token_ids for s in b]
    assert len({tuple(s.token_ids) for s in a}) > 1


def test_two_level_draw_follows_the_weights():
    rng = np.random.default_rng(0)
    w = np.zeros(5000, dtype=np.float32)  # 19 strided groups of 256 and a tail of 136
    w[[3, 2047, 2048, 4999]] = [1.0, 2.0, 3.0, 4.0]
    draws = np.array([draw_weighted(w, rng) for _ in range(20000)])
    assert set(np.unique(draws)) == {3, 2047, 2048, 4999}  # zero weights are never drawn
    freq = np.array([(draws == i).mean() for i in (3, 2047, 2048, 4999)])
    assert np.allclose(freq, [0.1, 0.2, 0.3, 0.4], atol=0.015)


@pytest.mark.parametrize("size", [50, 3000, 151936, 262144])
def test_block_top_k_equals_a_full_sort(size):
    rng = np.random.default_rng(size)
    x = np.round(rng.normal(size=size), 2).astype(np.float32)  # many ties
    for k in (1, 5, 20):
        got = top_indices(x, k)
        assert len(got) == k and len(set(got.tolist())) == k
        assert np.array_equal(np.sort(x[got])[::-1], np.sort(x)[::-1][:k])
        assert np.all(np.diff(x[got]) <= 0)


def test_batch_size_follows_memory_and_context(llama_smol):
    from tooldecode.backends.hf import batch_for_memory

    assert batch_for_memory(8 << 30, 100 << 20, cap=256) == 40  # half of 8 GiB in 100 MiB sequences
    assert batch_for_memory(1 << 20, 100 << 20, cap=256) == 1  # never below one
    assert batch_for_memory(1 << 40, 1 << 20, cap=16) == 16
    assert llama_smol.suggest_batch_size(100, 64) == min(16, llama_smol.max_seqs)
    room = (llama_smol.n_ctx - 100) // 64
    assert llama_smol.suggest_batch_size(100, llama_smol.n_ctx) == 1
    assert llama_smol.suggest_batch_size(100, 64) <= room


def test_sample_command_scores_strict_samples(capsys):
    from tooldecode.cli import main as cli_main

    argv = ["sample", "--model", "smollm2-135m-instruct", "--scenario", "py-pagination-off-by-one"]
    argv += [
        "--variant",
        "fresh,gold-prefix",
        "--mode",
        "strict",
        "-n",
        "2",
        "--max-new-tokens",
        "8",
        "--json",
    ]
    assert cli_main(argv) == 0
    recs = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert [r["index"] for r in recs] == [0, 1]
    assert all(r["verdict"] and r["error"] is None and r["mask_removed"] for r in recs)
    assert all(r["verdict"] != "invented_key" for r in recs)


def test_non_finite_logits_are_a_one_line_error_not_a_garbage_token():
    """A model with corrupt weights gives NaN logits: every draw path refuses them in one line."""
    import numpy as np

    from tooldecode.errors import ModelError
    from tooldecode.sampling.kernels import draw_index, draw_weighted

    rng = np.random.default_rng(0)
    bad = np.full(1000, np.nan, dtype=np.float32)
    for fn in (draw_index, draw_weighted):
        with pytest.raises(ModelError) as err:
            fn(bad, rng)
        assert "corrupt" in str(err.value) and "\n" not in str(err.value)
    ok = np.zeros(1000, dtype=np.float32)
    assert 0 <= draw_index(ok, rng) < 1000 and 0 <= draw_weighted(np.exp(ok), rng) < 1000


@pytest.mark.model
def test_a_gguf_with_random_weights_is_refused_while_sampling(smol_ref, tmp_path):
    """Random bytes over a user GGUF's tensor data: llama.cpp loads it; sampling says the weights look
    corrupt instead of raising IndexError or writing garbage."""
    import gguf
    import numpy as np

    from tooldecode.backends import load_backend
    from tooldecode.errors import ModelError
    from tooldecode.models import resolve

    bad = tmp_path / "random-weights.gguf"
    bad.write_bytes(smol_ref.path.read_bytes())
    reader = gguf.GGUFReader(str(bad), "r+")
    rng = np.random.default_rng(0)
    for t in reader.tensors:
        if t.name == "token_embd.weight":  # the embedding: every token's vector becomes random bytes
            t.data.view(np.uint8)[...] = rng.integers(0, 256, t.data.nbytes, dtype=np.uint8).reshape(
                t.data.view(np.uint8).shape
            )
    del reader
    be = load_backend("llamacpp", resolve(str(bad)), n_ctx=512, max_seqs=1)
    try:
        with pytest.raises(ModelError):
            sample(be, "<|im_start|>user\nhi<|im_end|>\n", 1, SamplingParams(max_new_tokens=8))
    finally:
        be.close()
