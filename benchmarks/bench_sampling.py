"""Sampling throughput, measured side by side in one run (ratios, not absolute timings, are the result).

Prints `name: value` lines:
- per-step decode time at batch 1, 4, 8, 16 (llama.cpp backend, qwen 0.5B);
- throughput of tooldecode (batched, prompt evaluated once) over the loop a user would write by hand
  (llama-cpp-python `create_completion` per sample, its prefix cache active), loose and strict;
- strict ÷ loose decode speed for each mask engine, on qwen 0.5B and gemma 270M: at batch 1
  (`strict_over_loose_<engine>_<model>`: one sequence per step in both modes) and at batch 16 with
  refilled slots (`strict_over_loose_batch16_...`: strict samples end when the call closes, so fewer
  sequences share the tail of the run; the mean sample lengths are printed next to it), and the
  median period of batch-16 steps with every slot busy (`strict_over_loose_fullbatch16_...`: equal
  work per step);
- harness overhead: tooldecode's loose decode speed at batch 1 ÷ llama-cpp-python's own `generate`
  loop (T=1, full vocabulary), both with the prompt already evaluated;
- transformers: samples/s at batch 8 ÷ batch 1, and transformers ÷ llama.cpp.

Usage: python benchmarks/bench_sampling.py [--quick] [--samples 32] [--tokens 120]
"""

from __future__ import annotations

import argparse
import itertools
import time

from tooldecode.backends import load_backend
from tooldecode.grammar import render_toolset
from tooldecode.masking import compile_mask
from tooldecode.models import resolve
from tooldecode.prompts import TranscriptOptions, render_prompt
from tooldecode.sampling import SamplingParams, sample
from tooldecode.scenarios import load_scenarios


def _prompt(model: str, min_tokens: int):
    """An agentic edit prompt (no prefill: the grammar applies from the first token) of about ``min_tokens`` tokens (the longest scenario prompts)."""
    ref = resolve(model, fetch=True)
    opts = TranscriptOptions(history="agentic", conditioning="free")
    best = None
    for sc in load_scenarios():
        p = render_prompt(sc, ref, opts)
        n = len(p.text) // 3
        if best is None or abs(n - min_tokens) < abs(best[1] - min_tokens):
            best = (p, n)
    return ref, best[0]


def _timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


class _StepClock:
    """Records when the sampler calls ``backend.step`` and with how many sequences: the period between two
    steps that both ran with every slot busy is the full-batch cost of one decode step plus its draws."""

    def __init__(self, be) -> None:
        self.be, self.calls = be, []

    def __enter__(self):
        orig = self.be.step

        def step(tokens, rows):
            self.calls.append((time.perf_counter(), len(tokens)))
            return orig(tokens, rows)

        self.be.step = step
        return self

    def __exit__(self, *exc) -> None:
        del self.be.step

    def full_period(self, width: int) -> float:
        periods = sorted(
            t2 - t1 for (t1, w1), (t2, w2) in itertools.pairwise(self.calls) if w1 == w2 == width
        )
        return periods[len(periods) // 2] if periods else float("nan")


def _tok_s(out, secs: float) -> float:
    return sum(len(s.token_ids) for s in out) / secs


def _mean_len(out) -> float:
    return round(sum(len(s.token_ids) for s in out) / max(1, len(out)), 1)


def bench_model(model: str, n: int, tokens: int, quick: bool, naive: bool) -> dict[str, float]:
    res: dict[str, float] = {}
    ref, prompt = _prompt(model, 1500)
    short = model.replace("qwen2.5-coder-", "qwen").replace("-instruct", "").replace("gemma-3-", "gemma")
    be = load_backend("llamacpp", ref, n_ctx=8192, max_seqs=33)
    ids = be.tokenize(prompt.text)
    res[f"prompt_tokens_{short}"] = len(ids)
    params = SamplingParams(temperature=1.0, max_new_tokens=tokens, seed=0, top_logprobs=20)
    grammar = render_toolset(list(prompt.tools), format="gbnf", wire=prompt.wire, mode="strict", ws="bounded")
    sample(be, ids, 1, SamplingParams(max_new_tokens=2))  # prompt into the cache, warm-up
    for b in (1, 4, 8, 16) if not quick else (1, 8):
        t0 = time.perf_counter()
        be.begin(ids, b)
        rows = list(range(b))
        toks = [int(be.tokenize(" ")[0])] * b
        steps = 12
        t1 = time.perf_counter()
        for _ in range(steps):
            be.step(toks, rows)
        dt = (time.perf_counter() - t1) / steps
        be.end()
        del t0
        res[f"step_ms_batch{b}_{short}"] = round(dt * 1000, 2)
    batch = 16 if n >= 16 else n
    with _StepClock(be) as clock:
        loose, loose_dt = _timed(lambda: sample(be, ids, n, params, batch_size=batch, prefill=prompt.prefill))
    loose_period = clock.full_period(batch)
    loose_sps = n / loose_dt
    res[f"tooldecode_loose_samples_s_{short}"] = round(loose_sps, 3)
    res[f"tooldecode_loose_tok_s_{short}"] = round(_tok_s(loose, loose_dt), 2)
    res[f"loose_mean_tokens_{short}"] = _mean_len(loose)
    n1 = max(2, n // 4)  # batch 1: every step decodes one sequence, whatever the sample lengths
    loose1, dt1 = _timed(lambda: sample(be, ids, n1, params, batch_size=1, prefill=prompt.prefill))
    loose1_tok_s = _tok_s(loose1, dt1)
    strict_sps = float("nan")
    for engine in ("xgrammar", "llguidance", "llama-grammar"):
        if quick and engine != "xgrammar":
            continue
        g = grammar
        if engine == "llguidance":
            g = render_toolset(
                list(prompt.tools), format="lark", wire=prompt.wire, mode="strict", ws="bounded"
            )
        mask = compile_mask(engine, g, be)
        mask.matcher(prompt.prefill, be.tokenize(prompt.prefill, special=False))  # warm the engine once
        with _StepClock(be) as clock:
            strict, dt = _timed(
                lambda mask=mask: sample(
                    be, ids, n, params, mask=mask, prefill=prompt.prefill, batch_size=batch
                )
            )
        # equal work per step: median period of steps with all slots busy (a step = decode + every row's draw)
        res[f"strict_over_loose_fullbatch{batch}_{engine}_{short}"] = round(
            loose_period / clock.full_period(batch), 3
        )
        if engine == "xgrammar":
            strict_sps = n / dt
            res[f"tooldecode_strict_samples_s_{short}"] = round(strict_sps, 3)
        errors = sum(1 for s in strict if s.error)
        res[f"strict_{engine}_tok_s_{short}"] = round(_tok_s(strict, dt), 2)
        res[f"strict_{engine}_mean_tokens_{short}"] = _mean_len(strict)
        # batch 16 with refill: strict samples are shorter (the grammar ends the call), so the tail of
        # the run has fewer sequences per step than loose; batch 1 compares equal work per step
        res[f"strict_over_loose_batch{batch}_{engine}_{short}"] = round(
            _tok_s(strict, dt) / _tok_s(loose, loose_dt), 3
        )
        strict1, dts1 = _timed(
            lambda mask=mask: sample(be, ids, n1, params, mask=mask, prefill=prompt.prefill, batch_size=1)
        )
        res[f"strict_over_loose_{engine}_{short}"] = round(_tok_s(strict1, dts1) / loose1_tok_s, 3)
        res[f"strict_{engine}_errors_{short}"] = errors
    res[f"tooldecode_loose_b1_tok_s_{short}"] = round(loose1_tok_s, 2)
    # decode only (the prompt is cached): tokens over the time from each sample's start to its end
    decode_b1 = sum(len(x.token_ids) for x in loose1) / sum(
        x.timing["end_s"] - x.timing["start_s"] for x in loose1
    )
    res[f"tooldecode_loose_b1_decode_tok_s_{short}"] = round(decode_b1, 2)
    if naive:
        from llama_cpp import Llama, LlamaGrammar

        be.close()
        threads = be.n_threads  # the same threads as our backend (the default would be half the cores)
        llm = Llama(str(ref.path), n_ctx=8192, n_threads=threads, n_threads_batch=threads, verbose=False)
        llm.create_completion(prompt.text, max_tokens=1)

        def run(grammar_obj):
            toks = 0
            t0 = time.perf_counter()
            for i in range(n):
                r = llm.create_completion(
                    prompt.text, max_tokens=tokens, temperature=1.0, seed=i, grammar=grammar_obj
                )
                toks += r["usage"]["completion_tokens"]
            dt = time.perf_counter() - t0
            return n / dt, toks / dt

        def raw_decode(n_samples: int) -> float:
            """llama-cpp-python's own generate loop, T=1 over the full vocabulary: decode tok/s after the
            first token (the prompt is evaluated before it)."""
            pids = llm.tokenize(prompt.text.encode(), add_bos=False, special=True)
            count_all, secs = 0, 0.0
            for _ in range(n_samples):
                t_first, count = 0.0, 0
                for tok in llm.generate(pids, temp=1.0, top_k=0, top_p=1.0, min_p=0.0):
                    if count == 0:
                        t_first = time.perf_counter()
                    count += 1
                    if count >= tokens or tok == llm.token_eos():
                        break
                secs += time.perf_counter() - t_first
                count_all += count - 1
            return count_all / secs

        sps, tps = run(None)
        res[f"naive_loose_samples_s_{short}"] = round(sps, 3)
        res[f"naive_loose_tok_s_{short}"] = round(tps, 2)
        res[f"throughput_over_naive_loose_{short}"] = round(loose_sps / sps, 2)
        raw = raw_decode(n1)
        res[f"raw_generate_decode_tok_s_{short}"] = round(raw, 2)
        res[f"loose_over_raw_llamacpp_{short}"] = round(decode_b1 / raw, 3)
        if not quick:
            sps_s, tps_s = run(LlamaGrammar.from_string(grammar, verbose=False))
            res[f"naive_strict_samples_s_{short}"] = round(sps_s, 3)
            res[f"naive_strict_over_naive_loose_{short}"] = round(tps_s / tps, 3)
            res[f"throughput_over_naive_strict_{short}"] = round(strict_sps / sps_s, 2)
    return res


def bench_hf(model: str, tokens: int) -> dict[str, float]:
    ref, prompt = _prompt(model, 600)
    res: dict[str, float] = {}
    be = load_backend("hf", ref)
    params = SamplingParams(temperature=1.0, max_new_tokens=tokens, seed=0, top_logprobs=20)
    ids = be.tokenize(prompt.text)
    sample(be, ids, 1, SamplingParams(max_new_tokens=2))
    t0 = time.perf_counter()
    sample(be, ids, 8, params, batch_size=1)
    b1 = 8 / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    sample(be, ids, 8, params, batch_size=8)
    b8 = 8 / (time.perf_counter() - t0)
    res["hf_samples_s_batch1"] = round(b1, 3)
    res["hf_samples_s_batch8"] = round(b8, 3)
    res["hf_batch8_over_batch1"] = round(b8 / b1, 2)
    lb = load_backend("llamacpp", ref, n_ctx=8192, max_seqs=9)
    t0 = time.perf_counter()
    sample(lb, ids, 8, params, batch_size=8)
    l8 = 8 / (time.perf_counter() - t0)
    res["hf_over_llamacpp_batch8"] = round(b8 / l8, 3)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--samples", type=int, default=32)
    ap.add_argument("--tokens", type=int, default=120)
    ap.add_argument("--models", default="qwen2.5-coder-0.5b-instruct,gemma-3-270m")
    ap.add_argument("--no-naive", action="store_true")
    ap.add_argument("--no-hf", action="store_true")
    args = ap.parse_args()
    n = 8 if args.quick else args.samples
    tokens = 40 if args.quick else args.tokens
    for i, model in enumerate(args.models.split(",")):
        for k, v in bench_model(model, n, tokens, args.quick, naive=(i == 0 and not args.no_naive)).items():
            print(f"{k}: {v}", flush=True)
    if not args.no_hf:
        for k, v in bench_hf("qwen2.5-coder-0.5b-instruct", 24 if args.quick else 48).items():
            print(f"{k}: {v}", flush=True)


if __name__ == "__main__":
    main()
