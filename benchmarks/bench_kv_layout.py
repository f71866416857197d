"""Filled slots on one llama.cpp context: a unified KV cache vs a stream of its own for each sequence.

Prints `name: value` lines, measured side by side in one run:

- `prefill_tokens_per_s`: the one prompt evaluated (then copied into every slot);
- `step_ms_unified`, `step_ms_streams`: one decode step of ``--slots`` sequences, each holding its own
  copy of a ``--prompt-tokens`` prompt (distinct cells, as slots of different scenarios have), the median
  over ``--reps`` rounds of ``--steps`` steps, the two layouts alternating;
- `streams_vs_unified`: the ratio of the two (above 1: streams are faster).

In a unified cache every token of a step attends over every slot's cells (masked), so a step's attention
grows with the slots times their prompts; in streams each token attends over its own sequence's cells.

Usage: python benchmarks/bench_kv_layout.py [--model qwen2.5-coder-0.5b-instruct] [--prompt-tokens 2560]
       [--slots 8] [--steps 30] [--reps 3]

Measure on an idle machine: both contexts share the cores. The load average at the start is printed.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import time


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="qwen2.5-coder-0.5b-instruct")
    p.add_argument("--prompt-tokens", type=int, default=2560)
    p.add_argument("--slots", type=int, default=8)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--reps", type=int, default=3)
    args = p.parse_args()
    print(f"load_average_at_start: {os.getloadavg()[0]:.2f}")

    import llama_cpp as lc
    from llama_cpp._internals import LlamaBatch, LlamaContext, LlamaModel

    from tooldecode.models import resolve

    ref = resolve(args.model, fetch=True)
    model = LlamaModel(path_model=str(ref.path), params=lc.llama_model_default_params(), verbose=False)
    n, slots = args.prompt_tokens, args.slots
    toks = [(1000 + 7 * k) % 150000 for k in range(n)]
    stream = 1 << (n + args.steps * args.reps + 1).bit_length()

    def context(unified: bool) -> tuple[object, object]:
        cp = lc.llama_context_default_params()
        cp.n_seq_max = slots + 1
        cp.n_ctx = stream * (slots + 1) if not unified else stream * slots
        cp.n_batch = cp.n_ubatch = 512
        cp.n_threads = cp.n_threads_batch = 2
        cp.kv_unified = unified
        cp.no_perf = True
        ctx = LlamaContext(model=model, params=cp, verbose=False)
        return ctx, LlamaBatch(n_tokens=512, embd=0, n_seq_max=1, verbose=False)

    def decode(ctx: object, batch: object, items: list[tuple[int, int, int, bool]]) -> None:
        b = batch.batch  # type: ignore[attr-defined]
        b.n_tokens = len(items)
        for i, (tok, seq, pos, logits) in enumerate(items):
            b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = tok, pos, 1, logits
            b.seq_id[i][0] = seq
        if lc.llama_decode(ctx.ctx, b) != 0:  # type: ignore[attr-defined]
            raise SystemExit("bench_kv_layout: llama_decode failed; lower --prompt-tokens or --slots")

    ctxs = {}
    for unified in (True, False):
        ctx, batch = context(unified)
        t = time.perf_counter()
        for start in range(0, n, 512):
            chunk = toks[start : start + 512]
            decode(ctx, batch, [(tok, 1, start + i, False) for i, tok in enumerate(chunk)])
        if unified:
            print(f"prefill_tokens_per_s: {n / (time.perf_counter() - t):.1f}")
        size = lc.llama_state_seq_get_size(ctx.ctx, 1)
        buf = (ctypes.c_uint8 * size)()
        got = lc.llama_state_seq_get_data(ctx.ctx, buf, size, 1)
        for s in range(2, slots + 1):  # each slot its own copy of the prompt's cells
            if lc.llama_state_seq_set_data(ctx.ctx, buf, got, s) <= 0:
                raise SystemExit("bench_kv_layout: could not copy the prompt into a slot")
        ctxs[unified] = (ctx, batch)

    times: dict[bool, list[float]] = {True: [], False: []}
    for rep in range(args.reps):
        for unified in (True, False):
            ctx, batch = ctxs[unified]
            t = time.perf_counter()
            for k in range(args.steps):
                pos = n + rep * args.steps + k
                decode(ctx, batch, [(500 + k + s, s, pos, True) for s in range(1, slots + 1)])
            times[unified].append((time.perf_counter() - t) / args.steps * 1000)
    uni, streams = statistics.median(times[True]), statistics.median(times[False])
    print(f"step_ms_unified: {uni:.1f}")
    print(f"step_ms_streams: {streams:.1f}")
    print(f"streams_vs_unified: {uni / streams:.2f}")


if __name__ == "__main__":
    main()
