"""The same model through two channels (llama.cpp and transformers) must not produce different science."""

from __future__ import annotations

import numpy as np
import pytest

from tooldecode.sampling import SamplingParams, sample
from tooldecode.sampling.kernels import log_softmax

pytestmark = [pytest.mark.model, pytest.mark.slow]

PROMPT = (
    "<|im_start|>system\nYou are a helpful coding assistant.<|im_end|>\n"
    "<|im_start|>user\nWrite a Python function that returns the square of x.<|im_end|>\n<|im_start|>assistant\n"
)

# Observed on qwen2.5-coder-0.5b (Q8 GGUF; transformers dequantizes to float32): identical greedy
# tokens, max |Δ log p| of the chosen tokens 0.028, max |Δ p| over the vocabulary 0.013.
TOL_LOGP = 0.1
TOL_P = 0.05


@pytest.fixture(scope="module")
def hf_qwen(qwen_ref):
    from tooldecode.backends import load_backend

    return load_backend("hf", qwen_ref)


def test_greedy_tokens_agree_between_backends(llama_qwen, hf_qwen):
    assert llama_qwen.tokenize(PROMPT) == hf_qwen.tokenize(PROMPT)
    a = sample(llama_qwen, PROMPT, 1, SamplingParams(temperature=0, max_new_tokens=16))[0]
    b = sample(hf_qwen, PROMPT, 1, SamplingParams(temperature=0, max_new_tokens=16))[0]
    assert a.token_ids == b.token_ids
    assert a.text == b.text


def test_teacher_forced_log_probabilities_agree(llama_qwen, hf_qwen):
    ids = llama_qwen.tokenize(PROMPT)
    out = sample(llama_qwen, PROMPT, 1, SamplingParams(temperature=0, max_new_tokens=16))[0]
    full = ids + out.token_ids
    pos = list(range(len(ids) - 1, len(full) - 1))
    la = log_softmax(llama_qwen.forward(full, pos))
    lb = log_softmax(hf_qwen.forward(full, pos))
    chosen = np.array(out.token_ids)
    rows = np.arange(len(chosen))
    assert np.abs(la[rows, chosen] - lb[rows, chosen]).max() < TOL_LOGP
    assert (la.argmax(1) == lb.argmax(1)).all()
    assert np.abs(np.exp(la) - np.exp(lb)).max() < TOL_P
