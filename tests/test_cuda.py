"""CUDA path of the transformers backend: batched sampling on the GPU (skips cleanly without one).

Uses a randomly initialised model of a panel architecture (Qwen2 config, no trained weights) with the
SmolLM2 tokenizer, so the check needs no large download.
"""

from __future__ import annotations

import time

import pytest

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")]


@pytest.fixture(scope="module")
def random_qwen(tmp_path_factory, smol_ref):
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    folder = tmp_path_factory.mktemp("random-qwen2")
    tok = AutoTokenizer.from_pretrained(str(smol_ref.path.parent), gguf_file=smol_ref.path.name)
    cfg = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=512,
        intermediate_size=1536,
        num_hidden_layers=8,
        num_attention_heads=8,
        num_key_value_heads=2,
        max_position_embeddings=4096,
    )
    torch.manual_seed(0)
    Qwen2ForCausalLM(cfg).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def test_batched_sampling_on_cuda(random_qwen):
    from tooldecode.backends import load_backend
    from tooldecode.sampling import SamplingParams, sample

    be = load_backend("hf", str(random_qwen))
    assert be.device.startswith("cuda") and be.dtype == "bfloat16"
    prompt = "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n" * 20
    params = SamplingParams(temperature=1.0, max_new_tokens=64, seed=0)
    rates = {}
    for batch in (1, 32, 128):
        t0 = time.perf_counter()
        out = sample(be, prompt, batch, params, batch_size=batch)
        rates[batch] = batch / (time.perf_counter() - t0)
        assert len(out) == batch and all(len(s.token_ids) > 0 for s in out)
    print("cuda samples/s:", {k: round(v, 2) for k, v in rates.items()})
    assert rates[32] > rates[1]
    same = sample(be, prompt, 4, params, batch_size=4)
    again = sample(be, prompt, 4, params, batch_size=4)
    assert [s.token_ids for s in same] == [s.token_ids for s in again]


def test_slots_filled_across_prompts_on_cuda(random_qwen):
    """The GPU queue's path: draws of several prompts refilled into one left-padded batch cache in
    bfloat16 come back once each, with the first token's log-probability of the job-by-job draw."""
    from tooldecode.backends import load_backend
    from tooldecode.sampling import DrawRequest, SamplingParams, sample, sample_queue

    be = load_backend("hf", str(random_qwen))
    assert be.can_assign
    prompts = [
        f"<|im_start|>user\nhello {k}<|im_end|>\n<|im_start|>assistant\n" * (5 + 7 * k) for k in range(4)
    ]
    got: dict = {}

    def keep(batch, k):
        for s in batch:
            assert (k, s.index) not in got
            got[(k, s.index)] = s

    reqs = [
        DrawRequest(
            be.tokenize(p),
            16,
            SamplingParams(temperature=1.0, max_new_tokens=8 + 24 * (k % 2), seed=0, stream=k),
            on_batch=lambda b, k=k: keep(b, k),
        )
        for k, p in enumerate(prompts)
    ]
    t0 = time.perf_counter()
    sample_queue(be, reqs, slots=24)
    filled = 64 / (time.perf_counter() - t0)
    assert sorted(got) == [(k, i) for k in range(4) for i in range(16)]
    t0 = time.perf_counter()
    ref = {
        (k, s.index): s
        for k, r in enumerate(reqs)
        for s in sample(be, r.prompt_ids, 16, r.params, batch_size=16)
    }
    by_job = 64 / (time.perf_counter() - t0)
    print(f"cuda draws/s: job by job {by_job:.2f}, filled {filled:.2f}")
    for key, a in ref.items():
        assert got[key].logprobs[0] == pytest.approx(a.logprobs[0], abs=0.05)
