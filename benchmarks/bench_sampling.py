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

One pass per arm cannot resolve a difference of a few percent on a shared machine, so the arms run
interleaved (loose, every strict engine, the hand-written loop; then again) for ``--reps`` repetitions
(5 by default) with the same seeds, each ratio is taken within one repetition, and each line reads
``name: median [min, max]`` over the repetitions (a value that does not vary prints once).

Usage: python benchmarks/bench_sampling.py [--quick] [--samples 32] [--tokens 120] [--reps 5] [--prompt-tokens 1500]
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time
from collections import defaultdict

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


def summary(values: list[float]) -> str:
    """``median [min, max]`` of one metric's repetitions (one value where they all agree)."""
    if len(set(values)) == 1:
        return f"{values[0]:g}"
    return f"{statistics.median(values):.3f} [{min(values):.3f}, {max(values):.3f}]"


def _step_ms(be, ids: list[int], b: int, steps: int = 12) -> float:
    """Milliseconds of one decode step of ``b`` sequences after the cached prompt."""
    be.begin(ids, b)
    rows = list(range(b))
    toks = [int(be.tokenize(" ")[0])] * b
    t1 = time.perf_counter()
    for _ in range(steps):
        be.step(toks, rows)
    dt = (time.perf_counter() - t1) / steps
    be.end()
    return dt * 1000


class _Naive:
    """The loop a user would write by hand with llama-cpp-python (``create_completion`` per sample, its
    prefix cache active), and its own ``generate`` loop, on a second copy of the model."""

    def __init__(self, ref, prompt, grammar: str, threads: int, tokens: int) -> None:
        from llama_cpp import Llama, LlamaGrammar

        # the same threads as our backend (the default would be half the cores)
        self.llm = Llama(str(ref.path), n_ctx=8192, n_threads=threads, n_threads_batch=threads, verbose=False)
        self.llm.create_completion(prompt.text, max_tokens=1)
        self.grammar = LlamaGrammar.from_string(grammar, verbose=False)
        self.prompt, self.tokens = prompt, tokens

    def run(self, n: int, strict: bool) -> tuple[float, float]:
        """(samples/s, tokens/s) of ``n`` completions, loose or with the GBNF."""
        toks = 0
        t0 = time.perf_counter()
        for i in range(n):
            r = self.llm.create_completion(
                self.prompt.text,
                max_tokens=self.tokens,
                temperature=1.0,
                seed=i,
                grammar=self.grammar if strict else None,
            )
            toks += r["usage"]["completion_tokens"]
        dt = time.perf_counter() - t0
        return n / dt, toks / dt

    def raw_decode(self, n_samples: int) -> float:
        """llama-cpp-python's own generate loop, T=1 over the full vocabulary: decode tok/s after the
        first token (the prompt is evaluated before it)."""
        llm = self.llm
        pids = llm.tokenize(self.prompt.text.encode(), add_bos=False, special=True)
        count_all, secs = 0, 0.0
        for _ in range(n_samples):
            t_first, count = 0.0, 0
            for tok in llm.generate(pids, temp=1.0, top_k=0, top_p=1.0, min_p=0.0):
                if count == 0:
                    t_first = time.perf_counter()
                count += 1
                if count >= self.tokens or tok == llm.token_eos():
                    break
            secs += time.perf_counter() - t_first
            count_all += count - 1
        return count_all / secs


def bench_model(
    model: str, n: int, tokens: int, quick: bool, naive: bool, reps: int, prompt_tokens: int = 1500
) -> dict[str, list[float]]:
    """Every metric of one model, one value per repetition; the arms interleave within each repetition."""
    res: dict[str, list[float]] = defaultdict(list)
    ref, prompt = _prompt(model, prompt_tokens)
    short = model.replace("qwen2.5-coder-", "qwen").replace("-instruct", "").replace("gemma-3-", "gemma")
    be = load_backend("llamacpp", ref, n_ctx=8192, max_seqs=33)
    ids = be.tokenize(prompt.text)
    res[f"prompt_tokens_{short}"].append(len(ids))
    params = SamplingParams(temperature=1.0, max_new_tokens=tokens, seed=0, top_logprobs=20)
    grammar = render_toolset(list(prompt.tools), format="gbnf", wire=prompt.wire, mode="strict", ws="bounded")
    engines = ("xgrammar",) if quick else ("xgrammar", "llguidance", "llama-grammar")
    masks = {}
    for engine in engines:
        g = grammar
        if engine == "llguidance":
            g = render_toolset(
                list(prompt.tools), format="lark", wire=prompt.wire, mode="strict", ws="bounded"
            )
        masks[engine] = compile_mask(engine, g, be)
        masks[engine].matcher(prompt.prefill, be.tokenize(prompt.prefill, special=False))  # warm it once
    sample(be, ids, 1, SamplingParams(max_new_tokens=2))  # prompt into the cache, warm-up
    hand = _Naive(ref, prompt, grammar, be.n_threads, tokens) if naive else None
    batch = 16 if n >= 16 else n
    n1 = max(2, n // 4)  # batch 1: every step decodes one sequence, whatever the sample lengths

    def draw(mask, size: int, count: int):
        with _StepClock(be) as clock:
            out, dt = _timed(
                lambda: sample(be, ids, count, params, mask=mask, prefill=prompt.prefill, batch_size=size)
            )
        return out, dt, clock.full_period(size)

    for _ in range(reps):
        for b in (1, 4, 8, 16) if not quick else (1, 8):
            res[f"step_ms_batch{b}_{short}"].append(round(_step_ms(be, ids, b), 2))
        loose, loose_dt, loose_period = draw(None, batch, n)
        res[f"tooldecode_loose_samples_s_{short}"].append(n / loose_dt)
        res[f"tooldecode_loose_tok_s_{short}"].append(_tok_s(loose, loose_dt))
        res[f"loose_mean_tokens_{short}"].append(_mean_len(loose))
        strict_sps = {}
        for engine, mask in masks.items():  # A B C D, A B C D, …: each strict arm next to its loose reference
            strict, dt, period = draw(mask, batch, n)
            strict_sps[engine] = n / dt
            # equal work per step: median period of steps with all slots busy (decode + every row's draw)
            res[f"strict_over_loose_fullbatch{batch}_{engine}_{short}"].append(loose_period / period)
            res[f"strict_{engine}_tok_s_{short}"].append(_tok_s(strict, dt))
            res[f"strict_{engine}_mean_tokens_{short}"].append(_mean_len(strict))
            res[f"strict_{engine}_errors_{short}"].append(sum(1 for s in strict if s.error))
            # with refill: strict samples are shorter (the grammar ends the call), so the tail of the run
            # has fewer sequences per step than loose; batch 1 compares equal work per step
            res[f"strict_over_loose_batch{batch}_{engine}_{short}"].append(
                _tok_s(strict, dt) / _tok_s(loose, loose_dt)
            )
        res[f"tooldecode_strict_samples_s_{short}"].append(strict_sps["xgrammar"])
        loose1, dt1, _ = draw(None, 1, n1)
        loose1_tok_s = _tok_s(loose1, dt1)
        res[f"tooldecode_loose_b1_tok_s_{short}"].append(loose1_tok_s)
        for engine, mask in masks.items():
            strict1, dts1, _ = draw(mask, 1, n1)
            res[f"strict_over_loose_{engine}_{short}"].append(_tok_s(strict1, dts1) / loose1_tok_s)
        # decode only (the prompt is cached): tokens over the time from each sample's start to its end
        decode_b1 = sum(len(x.token_ids) for x in loose1) / sum(
            x.timing["end_s"] - x.timing["start_s"] for x in loose1
        )
        res[f"tooldecode_loose_b1_decode_tok_s_{short}"].append(decode_b1)
        if hand is None:
            continue
        sps, tps = hand.run(n, strict=False)
        res[f"naive_loose_samples_s_{short}"].append(sps)
        res[f"naive_loose_tok_s_{short}"].append(tps)
        res[f"throughput_over_naive_loose_{short}"].append(n / loose_dt / sps)
        raw = hand.raw_decode(n1)
        res[f"raw_generate_decode_tok_s_{short}"].append(raw)
        res[f"loose_over_raw_llamacpp_{short}"].append(decode_b1 / raw)
        if not quick:
            sps_s, tps_s = hand.run(n, strict=True)
            res[f"naive_strict_samples_s_{short}"].append(sps_s)
            res[f"naive_strict_over_naive_loose_{short}"].append(tps_s / tps)
            res[f"throughput_over_naive_strict_{short}"].append(strict_sps["xgrammar"] / sps_s)
    be.close()
    return res


def bench_hf(model: str, tokens: int, reps: int) -> dict[str, list[float]]:
    """transformers at batch 1 and 8 and llama.cpp at batch 8, interleaved over ``reps`` repetitions."""
    ref, prompt = _prompt(model, 600)
    res: dict[str, list[float]] = defaultdict(list)
    be = load_backend("hf", ref)
    lb = load_backend("llamacpp", ref, n_ctx=8192, max_seqs=9)
    params = SamplingParams(temperature=1.0, max_new_tokens=tokens, seed=0, top_logprobs=20)
    ids = be.tokenize(prompt.text)
    lids = lb.tokenize(prompt.text)
    sample(be, ids, 1, SamplingParams(max_new_tokens=2))
    sample(lb, lids, 1, SamplingParams(max_new_tokens=2))
    for _ in range(reps):
        _, dt = _timed(lambda: sample(be, ids, 8, params, batch_size=1))
        b1 = 8 / dt
        _, dt = _timed(lambda: sample(be, ids, 8, params, batch_size=8))
        b8 = 8 / dt
        _, dt = _timed(lambda: sample(lb, lids, 8, params, batch_size=8))
        l8 = 8 / dt
        res["hf_samples_s_batch1"].append(b1)
        res["hf_samples_s_batch8"].append(b8)
        res["hf_batch8_over_batch1"].append(b8 / b1)
        res["hf_over_llamacpp_batch8"].append(b8 / l8)
    lb.close()
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--samples", type=int, default=32)
    ap.add_argument("--tokens", type=int, default=120)
    ap.add_argument("--models", default="qwen2.5-coder-0.5b-instruct,gemma-3-270m")
    ap.add_argument("--no-naive", action="store_true")
    ap.add_argument("--no-hf", action="store_true")
    ap.add_argument("--reps", type=int, default=5, help="interleaved repetitions of every arm (default 5)")
    ap.add_argument("--prompt-tokens", type=int, default=1500, help="about how long the llama.cpp prompt is")
    args = ap.parse_args()
    if args.reps < 1:
        ap.error("--reps must be at least 1")
    n = 8 if args.quick else args.samples
    tokens = 40 if args.quick else args.tokens
    print(f"repetitions: {args.reps} (each line: median [min, max])", flush=True)
    for i, model in enumerate(args.models.split(",")):
        naive = i == 0 and not args.no_naive
        for k, v in bench_model(model, n, tokens, args.quick, naive, args.reps, args.prompt_tokens).items():
            print(f"{k}: {summary(v)}", flush=True)
    if not args.no_hf:
        for k, v in bench_hf("qwen2.5-coder-0.5b-instruct", 24 if args.quick else 48, args.reps).items():
            print(f"{k}: {summary(v)}", flush=True)


if __name__ == "__main__":
    main()
