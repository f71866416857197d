"""`make demo`: the main experiment on the default model, small N, with its report.

Step 1 is a channel check: the same model in llama.cpp and in transformers, greedy completion and
the top-5 next-token probabilities at one position, side by side. Step 2 runs the demo experiment
(E1 strict vs loose and E5 close-brace probe at small N) and writes the report.
"""

from __future__ import annotations

import argparse
import math
import sys
import time

from tooldecode.backends import load_backend
from tooldecode.models import DEFAULT_MODEL, resolve
from tooldecode.sampling import SamplingParams, sample

PROMPT = (
    "<|im_start|>system\nYou are a helpful coding assistant.<|im_end|>\n"
    "<|im_start|>user\nWrite a Python function that returns the square of x.<|im_end|>\n"
    "<|im_start|>assistant\n"
)


def channel_check(model: str, n_tokens: int = 16) -> None:
    ref = resolve(model, fetch=True)
    rows = {}
    for name in ("llamacpp", "hf"):
        t0 = time.perf_counter()
        be = load_backend(name, ref)
        load_s = time.perf_counter() - t0
        s = sample(be, PROMPT, 1, SamplingParams(temperature=0, max_new_tokens=n_tokens, top_logprobs=5))[0]
        rows[name] = (be, s, load_s)
    print(f"\n== channel check: {ref.id}, greedy, {n_tokens} tokens")
    for name, (_be, s, load_s) in rows.items():
        print(f"{name:9s} (load {load_s:5.1f}s): {s.text!r}")
    same = rows["llamacpp"][1].token_ids == rows["hf"][1].token_ids
    print(f"identical greedy tokens: {same}")
    print("\ntop-5 next-token probabilities at the first generated position:")
    print(f"{'llama.cpp':>32s}   {'transformers':>32s}")
    lt, ht = rows["llamacpp"][1].top[0], rows["hf"][1].top[0]
    for (a, la), (b, lb) in zip(lt[:5], ht[:5], strict=True):
        pa = rows["llamacpp"][0].detokenize([int(a)])
        pb = rows["hf"][0].detokenize([int(b)])
        print(f"{pa!r:>22s} {math.exp(la):8.4f}   {pb!r:>22s} {math.exp(lb):8.4f}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--skip-channel-check", action="store_true")
    args = ap.parse_args(argv)
    if not args.skip_channel_check:
        channel_check(args.model)
    from tooldecode.experiments import run_demo

    return run_demo(args.model)


if __name__ == "__main__":
    sys.exit(main())
