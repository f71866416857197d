"""The exact probe of one call, with branches sharing the cached call vs the prefix evaluated again.

Prints `name: value` lines, on Qwen2.5-Coder 0.5B (llama.cpp backend), the key-resolved probe of the
variant suites (``experiments/p2_transcript_variants.toml``'s ``[probe]`` bounds) after the first and the
last ``newText`` of a few scenarios' gold calls, the two ways timed alternately in one run:

- `probe_row_s_shared`: seconds per probe row (one call, its selected decision points) when the branches
  share sequence 0's cache of the whole call (``LlamaCppBackend.branch_logits``, the default);
- `probe_row_s_prefix_again`: the same rows when every ``branch_logits`` call evaluates the prefix again
  (``Backend.branch_logits``: the last aligned prompt chunk is decoded again at each expansion level);
- `probe_shared_speedup`: the second ÷ the first;
- `probe_max_abs_diff`: the largest difference between the two ways' probabilities (they must agree).

Usage: python benchmarks/bench_probe.py [--scenarios 3] [--repeats 2]
"""

from __future__ import annotations

import argparse
import time
import tomllib
from pathlib import Path
from types import MethodType

from tooldecode.backends import load_backend
from tooldecode.backends.base import Backend
from tooldecode.models import resolve
from tooldecode.probe import ProbeConfig, probe_call
from tooldecode.prompts import TranscriptOptions, gold_call_text, render_prompt
from tooldecode.scenarios import load_scenarios

MODEL = "qwen2.5-coder-0.5b-instruct"
SPEC = Path(__file__).resolve().parents[1] / "experiments" / "p2_transcript_variants.toml"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scenarios", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    bounds = tomllib.loads(SPEC.read_text())["probe"]
    cfg = ProbeConfig(**bounds)
    ref = resolve(MODEL, fetch=True)
    be = load_backend("llamacpp", ref, n_ctx=8192, max_seqs=cfg.max_branches + 1)
    opts = TranscriptOptions(history="agentic", conditioning="free")
    rows = []
    for sc in load_scenarios()[: args.scenarios]:
        prompt = render_prompt(sc, ref, opts)
        rows.append((prompt, gold_call_text(sc, opts, ref.family)))
    shared = be.branch_logits
    again = MethodType(Backend.branch_logits, be)

    def probe_all() -> tuple[float, list[float]]:
        t0 = time.perf_counter()
        ps: list[float] = []
        for prompt, call in rows:
            be.forward(
                be.tokenize("warm-up text of another prompt"), [0]
            )  # no prompt cached from the last row
            for p in probe_call(
                be,
                prompt.text,
                call,
                select="newText",
                config=cfg,
                tools=prompt.tools,
                expected_tool=prompt.expected_tool,
            ):
                ps += [p.p_close, p.p_continue, *p.p_continue_by_kind.values()]
        return time.perf_counter() - t0, ps

    t_shared = t_again = 0.0
    diff = 0.0
    probe_all()  # warm
    for _ in range(args.repeats):
        be.branch_logits = shared  # type: ignore[method-assign]
        dt, ps_shared = probe_all()
        t_shared += dt
        be.branch_logits = again  # type: ignore[method-assign]
        dt, ps_again = probe_all()
        t_again += dt
        diff = max([diff, *(abs(a - b) for a, b in zip(ps_shared, ps_again, strict=True))])
    n = args.repeats * len(rows)
    print(f"probe_row_s_shared: {t_shared / n:.2f}")
    print(f"probe_row_s_prefix_again: {t_again / n:.2f}")
    print(f"probe_shared_speedup: {t_again / t_shared:.3f}")
    print(f"probe_max_abs_diff: {diff:.2e}")


if __name__ == "__main__":
    main()
