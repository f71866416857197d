"""Scoring and repair cost per kB of model output, 1 kB to 1 MB, on the shapes that used to be quadratic.

Prints ``name: value`` lines: ``score_us_per_kb_<shape>_<size>`` and ``repair_us_per_kb_<shape>_<size>``,
and ``growth_<shape>`` = (µs/kB at 1 MB) ÷ (µs/kB at 1 kB) for score + repair together: about 1 when
the work is linear in the text, about 1000 when it is quadratic. All sizes run side by side in one
process.

    python benchmarks/bench_scoring.py [--max-kb 1024]
"""

from __future__ import annotations

import argparse
import time

from tooldecode.repair import repair_text
from tooldecode.scoring import score_text, toolset_tools

SHAPES = {
    "unterminated_objects": '{"a":',
    "prose_with_keys": 'and then {"path": the file ',
    "open_string": '[{"x": "',
    "closed_but_invalid": '{"a": {"b": 1} x',
    "many_tool_call_tags": '<tool_call>{"a":',
    "many_fences": '```json\n{"a":',
    "call_json_prefix": '{"name": "edit", "arguments": {"path": "a.c", "edits": [{"oldText": "x", "newText": "',
}


def _time(fn, text: str, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn(text)
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--max-kb", type=int, default=1024)
    args = ap.parse_args()
    tools = toolset_tools("nested")

    def score(t: str) -> None:
        score_text(t, tools, wire="hermes", expected_tool="edit")

    def repair(t: str) -> None:
        repair_text(t, tools, wire="hermes", expected_tool="edit")

    sizes = [kb for kb in (1, 16, 256, 1024) if kb <= args.max_kb]
    for shape, unit in SHAPES.items():
        per_kb: dict[int, float] = {}
        for kb in sizes:
            text = (unit * (kb * 1024 // len(unit) + 1))[: kb * 1024]
            repeat = 3 if kb <= 16 else 1
            s = _time(score, text, repeat) * 1e6 / kb
            r = _time(repair, text, repeat) * 1e6 / kb
            per_kb[kb] = s + r
            print(f"score_us_per_kb_{shape}_{kb}kb: {s:.1f}")
            print(f"repair_us_per_kb_{shape}_{kb}kb: {r:.1f}")
        if len(sizes) > 1:
            print(f"growth_{shape}: {per_kb[sizes[-1]] / per_kb[sizes[0]]:.2f}")


if __name__ == "__main__":
    main()
