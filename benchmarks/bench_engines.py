"""Strict sampling through each engine setting vs loose, side by side in one run (ratios are the result).

Prints `name: value` lines, on Qwen2.5-Coder 0.5B (llama.cpp backend), one L2 prompt (the gold call
forced through newText), the same seeds in every channel:

- `strict_over_loose_<setting>`: samples/s of strict sampling through the engine setting ÷ samples/s of
  loose sampling timed just before it (compilation excluded: each channel is built and warmed once
  before it is timed);
- `strict_over_loose_tokens_<setting>`: the same for tokens/s where the channel reports its tokens
  (outlines' own loop reports none: its samples/s ratio only);
- `build_s_<setting>`: seconds to build the channel for this model (grammar compile, model wrapper).

Usage: python benchmarks/bench_engines.py [--samples 8] [--tokens 24] [--settings a,b,...]
"""

from __future__ import annotations

import argparse
import time

from tooldecode.backends import load_backend
from tooldecode.engines import COMPARED, build_strict, draw
from tooldecode.models import resolve
from tooldecode.prompts import TranscriptOptions, render_prompt
from tooldecode.sampling import SamplingParams
from tooldecode.scenarios import load_scenarios

MODEL = "qwen2.5-coder-0.5b-instruct"


def _timed(be, prompt, n: int, params: SamplingParams, channel) -> tuple[float, int]:
    t0 = time.perf_counter()
    out = draw(be, prompt.text, n, params, mask=channel, prefill=prompt.prefill, batch_size=n)
    dt = time.perf_counter() - t0
    tokens = sum(len(s.token_ids) for s in out if s.token_ids is not None)
    return dt, tokens


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=24)
    ap.add_argument("--settings", default=",".join(COMPARED))
    args = ap.parse_args()
    ref = resolve(MODEL, fetch=True)
    be = load_backend("llamacpp", ref, n_ctx=8192, max_seqs=max(16, args.samples) + 1)
    sc = load_scenarios()[0]
    prompt = render_prompt(sc, ref, TranscriptOptions(toolset="nested", conditioning="gold-prefix"))
    params = SamplingParams(max_new_tokens=args.tokens, stop=tuple(prompt.stop), seed=0)
    _timed(be, prompt, 1, params, None)  # warm: the prompt is in the cache for every channel
    loose_dt, loose_tokens = _timed(be, prompt, args.samples, params, None)
    print(f"loose_samples_per_s: {args.samples / loose_dt:.3f}", flush=True)
    for name in [s for s in args.settings.split(",") if s]:
        t0 = time.perf_counter()
        channel = build_strict(name, prompt.tools, prompt.wire, be)
        _timed(be, prompt, 1, params, channel)  # warm the channel (and outlines' own prompt cache)
        print(f"build_s_{name}: {time.perf_counter() - t0:.2f}", flush=True)
        # loose is timed again right before each setting: the ratio compares neighbours in time
        loose_dt, loose_tokens = _timed(be, prompt, args.samples, params, None)
        dt, tokens = _timed(be, prompt, args.samples, params, channel)
        print(f"strict_over_loose_{name}: {loose_dt / dt:.3f}", flush=True)
        if tokens:
            ratio = (tokens / dt) / (loose_tokens / loose_dt)
            print(f"strict_over_loose_tokens_{name}: {ratio:.3f}", flush=True)


if __name__ == "__main__":
    main()
