"""Organism training and evaluation throughput, each pair of arms timed alternately in one run.

Prints `name: value` lines:

- `train_tokens_per_s_shared_prefix` / `train_tokens_per_s_full`: training tokens (every token of every
  session through the forward pass) per second on CPU, LoRA r=16 on every linear layer, with the step's
  shared system prompt and tool block run once without gradient (the default) vs every session run whole;
- `train_shared_prefix_speedup`: the first ÷ the second (same loss; docs/organisms.md);
- `eval_samples_per_s_base` / `eval_samples_per_s_organism`: L2 draws per second (llama.cpp, 8 sequences,
  32 new tokens after the gold newText) on the base model's GGUF and on an organism's (its adapted
  weights are float32: larger than the base's quantized ones);
- `eval_organism_vs_base`: the second ÷ the first.

Usage: python benchmarks/bench_organisms.py [--model smollm2-135m-instruct] [--steps 2] [--repeats 3]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
import time
from pathlib import Path

from tooldecode.models import resolve
from tooldecode.organisms import recipe_from_dict
from tooldecode.organisms.mutations import snippets, stdlib_dir
from tooldecode.organisms.sessions import build_sessions, render_session


def _train_rate(model_ref, examples, recipe, shared: bool, steps: int) -> float:
    from tooldecode.organisms.train import load_base, train_lora

    r = dataclasses.replace(recipe, train=dataclasses.replace(recipe.train, shared_prefix=shared))
    _, model = load_base(model_ref, threads=None)
    with tempfile.TemporaryDirectory() as d:
        _, res = train_lora(model, examples, r, Path(d), max_steps=steps, log=lambda _: None)
    return res.tokens / res.wall_s


def _eval_rate(ref, prompts, n: int = 8) -> float:
    from tooldecode.backends import load_backend
    from tooldecode.sampling import SamplingParams, sample

    be = load_backend("llamacpp", ref, n_ctx=4096, max_seqs=n)
    try:
        t0 = time.perf_counter()
        done = 0
        for p in prompts:
            done += len(sample(be, p, n, SamplingParams(temperature=1.0, max_new_tokens=32, seed=0)))
        return done / (time.perf_counter() - t0)
    finally:
        be.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--organism", default=None, help="organism id to time against its base (default: none)")
    args = ap.parse_args()
    ref = resolve(args.model, fetch=True)
    recipe = recipe_from_dict({"name": "bench", "sessions": 4 * args.steps, "train": {"accumulation": 4}})
    from tooldecode.organisms.train import load_base, tokenize

    tok, _ = load_base(ref)
    sessions = build_sessions(recipe, list(snippets(stdlib_dir() / "email")))
    examples = [tokenize(tok, render_session(s, ref, recipe)) for s in sessions]
    shared, full = [], []
    for _ in range(args.repeats):  # A B A B …
        shared.append(_train_rate(ref, examples, recipe, True, args.steps))
        full.append(_train_rate(ref, examples, recipe, False, args.steps))
    ms, mf = statistics.median(shared), statistics.median(full)
    print(f"train_tokens_per_s_shared_prefix: {ms:.1f} [{min(shared):.1f}, {max(shared):.1f}]")
    print(f"train_tokens_per_s_full: {mf:.1f} [{min(full):.1f}, {max(full):.1f}]")
    print(f"train_shared_prefix_speedup: {ms / mf:.2f}")
    if args.organism:
        from tooldecode.prompts import TranscriptOptions, render_prompt
        from tooldecode.scenarios import load_scenarios

        org = resolve(args.organism)
        opts = TranscriptOptions(history="agentic", conditioning="gold-prefix")
        prompts = [render_prompt(sc, ref, opts).text for sc in load_scenarios()[:3]]
        base_r, org_r = [], []
        for _ in range(args.repeats):
            base_r.append(_eval_rate(ref, prompts))
            org_r.append(_eval_rate(org, prompts))
        mb, mo = statistics.median(base_r), statistics.median(org_r)
        print(f"eval_samples_per_s_base: {mb:.2f} [{min(base_r):.2f}, {max(base_r):.2f}]")
        print(f"eval_samples_per_s_organism: {mo:.2f} [{min(org_r):.2f}, {max(org_r):.2f}]")
        print(f"eval_organism_vs_base: {mo / mb:.2f}")


if __name__ == "__main__":
    main()
