"""Long strings at linear cost: xgrammar's time to accept one call whose string value is long, under the
GBNF of a string with a large ``maxLength``.

Prints ``name: value`` lines. ``accept_ms_<maxLength>`` is the median time (of ``REPEAT``) for a fresh
matcher to accept a call holding a 900- or 2,000-character value; the ratio compares maxLength 10,000
with 1,000 on the same 900-character value. A bound past xgrammar's or llama.cpp's repetition
limit is written in unambiguous blocks (``tooldecode.grammar.gbnf.gbnf_rep``): the ratio stays near 1,
where overlapping ``{0,1000}`` ranges made it grow without bound.
"""

from __future__ import annotations

import statistics
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tooldecode.grammar import GrammarWarning, Tool, render, serialize_call  # noqa: E402

REPEAT = 5
CASES = ((1_000, 900), (10_000, 900), (2_500, 2_000), (10_000, 2_000))


def accept_ms(max_length: int, chars: int, wire: str = "json") -> tuple[float, float]:
    """(median milliseconds to accept the call, milliseconds to render the grammar)."""
    import xgrammar as xgr

    tool = Tool(
        "note",
        parameters={
            "type": "object",
            "properties": {"text": {"type": "string", "maxLength": max_length}},
            "required": ["text"],
        },
    )
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", GrammarWarning)
        gbnf = render(tool, format="gbnf", wire=wire)
    render_ms = (time.perf_counter() - t0) * 1000
    compiled = xgr.GrammarCompiler(xgr.TokenizerInfo([])).compile_grammar(
        xgr.Grammar.from_ebnf(gbnf, root_rule_name="root")
    )
    text = serialize_call(tool, {"text": "ab" * (chars // 2)}, wire=wire)
    times = []
    for _ in range(REPEAT):
        m = xgr.GrammarMatcher(compiled)
        t0 = time.perf_counter()
        if not m.accept_string(text):
            raise SystemExit(f"xgrammar refused a valid call at maxLength {max_length}")
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times), render_ms


def main() -> None:
    took = {}
    for max_length, chars in CASES:
        took[max_length, chars], _ = accept_ms(max_length, chars)
        print(f"accept_ms_maxlength_{max_length}_value_{chars}: {took[max_length, chars]:.1f}")
    print(f"accept_ratio_maxlength_10000_vs_1000: {took[10_000, 900] / took[1_000, 900]:.2f}")
    ms, render_ms = accept_ms(5_000, 2_000, wire="hermes")
    print(f"hermes_render_ms_maxlength_5000: {render_ms:.1f}")
    print(f"hermes_accept_ms_maxlength_5000_value_2000: {ms:.1f}")


if __name__ == "__main__":
    main()
