"""The `openai` backend against a real vLLM server (opt-in: slow, and vLLM is not part of `make setup`).

Set TOOLDECODE_VLLM_URL to the API root of a running vLLM server that serves Qwen2.5-Coder 0.5B Instruct
(converted from tooldecode's .gguf) with `--max-logprobs -1 --enable-auto-tool-choice --tool-call-parser
hermes`; docs/scale-out.md ("vLLM on this machine's CPU") starts one. Without it these tests are skipped.
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

from tooldecode.backends.openai_records import MASKED_LOGPROBS
from tooldecode.prompts import TranscriptOptions, gold_call_text, parse_variant, render_prompt
from tooldecode.sampling import SamplingParams
from tooldecode.scenarios import get_scenario

URL = os.environ.get("TOOLDECODE_VLLM_URL")
pytestmark = [
    pytest.mark.model,
    pytest.mark.slow,
    pytest.mark.skipif(
        not URL,
        reason="TOOLDECODE_VLLM_URL is not set (point it at a running vLLM server serving "
        "qwen2.5-coder-0.5b-instruct; see docs/scale-out.md)",
    ),
]

SCENARIO = "py-mutable-default-cart"


@pytest.fixture(scope="module")
def vllm_qwen(qwen_ref):
    from tooldecode.backends import load_backend

    be = load_backend("openai", qwen_ref, base_url=URL)
    yield be
    be.close()


def test_kind_tokenization_and_strict_samples(vllm_qwen, qwen_ref):
    import xgrammar as xgr

    from tooldecode.grammar import render_toolset

    be = vllm_qwen
    assert be.kind == "vllm" and be.caps.token_ids and be.honours_n
    p = render_prompt(get_scenario(SCENARIO), qwen_ref, parse_variant("fresh"))
    assert be.server_tokenize(p.text) == be.tokenize(p.text)
    gbnf = render_toolset(list(p.tools), format="gbnf", wire=p.wire, mode="strict", ws="bounded")
    params = SamplingParams(max_new_tokens=64, stop=tuple(p.stop), seed=0, top_logprobs=3)
    out = be.sample(p.text, 2, params, grammar=gbnf)
    compiled = xgr.GrammarCompiler(xgr.TokenizerInfo([])).compile_grammar(
        xgr.Grammar.from_ebnf(gbnf, root_rule_name="root")
    )
    for s in out:
        assert xgr.GrammarMatcher(compiled).accept_string(s.text), s.text
        # token ids come back exactly (return_tokens_as_token_ids); the masked log-probabilities do not
        assert s.token_ids is not None
        assert be.detokenize([t for t in s.token_ids if t not in be.eog_ids]) == s.text
        assert s.logprobs is None and s.absent["logprobs"] == MASKED_LOGPROBS


def test_logprobs_under_structured_outputs_are_the_masked_distribution(vllm_qwen):
    """One real request each way: a grammar that forces "zqx" reports its first token at log-probability
    0 (the only token the mask allows), where the unconstrained model gives that token far less."""
    be = vllm_qwen
    prompt = "<|im_start|>user\nSay hi.<|im_end|>\n<|im_start|>assistant\n"
    ids = be.tokenize(prompt)
    kw = dict(max_tokens=3, logprobs=1, seed=0, **be.sampling_fields(0.0, 1.0, 0, 0.0))
    forced = be.complete(ids, prompt, structured_outputs={"grammar": 'root ::= "zqx"'}, **kw)
    c = forced["choices"][0]
    assert c["text"] == "zqx"
    first = c["logprobs"]["token_logprobs"][0]
    assert first == pytest.approx(0.0, abs=1e-6)
    # the raw distribution at the same point
    row = be.next_logprobs(ids)
    tok = be.tokenize("zqx")[0]
    assert row[tok] < -3, row[tok]


def test_probe_whole_vocabulary_against_in_process(vllm_qwen, llama_qwen, qwen_ref):
    """`--max-logprobs -1`: the whole vocabulary comes back (no unseen mass). vLLM's bf16 weights
    (dequantized from the Q8_0 .gguf) vs llama.cpp's Q8_0: next-token probabilities within 1e-2
    (measured: 9e-5 … 3e-3 at three points of the gold call)."""
    sc = get_scenario(SCENARIO)
    p = render_prompt(sc, qwen_ref, TranscriptOptions(history="fresh"))
    call = gold_call_text(sc, TranscriptOptions(history="fresh"), qwen_ref.family)
    head = llama_qwen.tokenize(p.text)
    ids = head + llama_qwen.tokenize(call)
    for pos in (len(head), len(head) + 6):
        row = vllm_qwen.forward(ids, [pos])[0]
        assert not np.isfinite(row[-1])  # nothing unseen
        ref = np.asarray(llama_qwen.forward(ids, [pos])[0], dtype=np.float64)
        ref = ref - ref.max() - math.log(np.exp(ref - ref.max()).sum())
        diff = float(np.abs(np.exp(row[:-1]) - np.exp(ref)).max())
        print(f"vllm channel: next-token max |dp| = {diff:.2e} at +{pos - len(head)}")
        assert diff <= 1e-2 and int(np.argmax(row[:-1])) == int(np.argmax(ref))


def test_tool_calling_arms_structural_tags(vllm_qwen, qwen_ref):
    """forced-tool with `strict: true`: vLLM's structural tag holds the arguments to the schema (no
    invented key, parseable); the same request with `strict: false` constrains only the envelope."""
    from tooldecode.backends.openai_tools import draw_tools
    from tooldecode.scoring import score_text

    sc = get_scenario(SCENARIO)
    p = render_prompt(sc, qwen_ref, parse_variant("fresh,forced-tool"))
    params = SamplingParams(max_new_tokens=200, seed=0)
    for strict in (True, False):
        out = draw_tools(vllm_qwen, p, 3, params, strict=strict, conditioning="forced-tool")
        for s in out:
            assert s.tool_name == p.expected_tool and s.token_ids is None and "token_ids" in s.absent
            v = score_text(s.text, list(p.tools), wire=p.wire, expected_tool=p.expected_tool, scenario=sc,
                           finish_reason=s.finish_reason)  # fmt: skip
            assert v.tool == p.expected_tool
            if strict and s.finish_reason == "stop":
                assert v.verdict not in ("json_syntax", "invented_key") and v.invented_keys == [], s.text
