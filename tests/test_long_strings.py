"""Long strings at linear cost: a large maxLength renders without overlapping ranges in every format,
xgrammar accepts a long value in linear time, and a maxLength past the stated bound renders unbounded."""

from __future__ import annotations

import re
import time
import warnings

import pytest

from tooldecode.grammar import (
    GrammarWarning,
    Tool,
    UnsupportedSchemaError,
    compile_schema,
    render,
    serialize_call,
)
from tooldecode.grammar.compile_types import MAX_LENGTH_BOUND
from tooldecode.grammar.gbnf import GBNF_MAX_REP, gbnf_rep


def _tool(max_length: int, min_length: int = 0) -> Tool:
    prop = {"type": "string", "maxLength": max_length, **({"minLength": min_length} if min_length else {})}
    return Tool("note", parameters={"type": "object", "properties": {"text": prop}, "required": ["text"]})


def _counts(text: str) -> list[tuple[int, int | None]]:
    return [(int(a), int(b) if b else None) for a, b in re.findall(r"\{(\d+)(?:,(\d*))?\}", text)]


def test_large_counts_are_written_in_unambiguous_blocks():
    assert gbnf_rep("x", 0, 2500) == "( ( ( x{1000} )? x{0,999} | ( x{1000} ){2} x{0,500} ) )"
    assert gbnf_rep("x", 1500, None) == "( ( x{1000} ){1} x{500} x* )"
    for lo, hi in ((0, 10**5), (3, 2001), (2500, 7000)):
        text = gbnf_rep("x", lo, hi)
        assert all(max(a, b or 0) <= GBNF_MAX_REP for a, b in _counts(text))
        # never two optional ranges in a row (the ambiguous "{0,1000} {0,1000}")
        assert not re.search(r"x\{0,\d+\} *x\{0,", text)
    assert len(gbnf_rep("x", 0, 10**18)) < 2000  # blocks of blocks: logarithmic size


def _python_language(lo: int, hi: int | None, B: int) -> set[int]:
    """The lengths gbnf_rep's text admits, with GBNF_MAX_REP = B, by translating it to a Python regex."""
    import tooldecode.grammar.gbnf as G

    old = G.GBNF_MAX_REP
    G.GBNF_MAX_REP = B
    try:
        text = gbnf_rep("x", lo, hi)
    finally:
        G.GBNF_MAX_REP = old
    pattern = text.replace(" ", "").replace("(", "(?:")
    return {n for n in range(0, 40) if re.fullmatch(pattern, "x" * n)}


@pytest.mark.parametrize("lo,hi", [(0, 10), (0, 9), (2, 13), (7, None), (0, 27), (5, 5)])
def test_the_blocks_admit_exactly_the_counts(lo, hi):
    want = {n for n in range(40) if n >= lo and (hi is None or n <= hi)}
    assert _python_language(lo, hi, 3) == want


@pytest.mark.parametrize("wire", ["json", "hermes", "antml"])
def test_xgrammar_accepts_a_2000_character_value_in_linear_time(wire):
    xgr = pytest.importorskip("xgrammar")
    tool = _tool(10_000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", GrammarWarning)
        t0 = time.perf_counter()
        gbnf = render(tool, format="gbnf", wire=wire)
        assert time.perf_counter() - t0 < 5  # was 30-60 s in hermes at 5000
    compiled = xgr.GrammarCompiler(xgr.TokenizerInfo([])).compile_grammar(
        xgr.Grammar.from_ebnf(gbnf, root_rule_name="root")
    )
    took = []
    for n in (200, 2000):
        m = xgr.GrammarMatcher(compiled)
        text = serialize_call(tool, {"text": "ab" * (n // 2)}, wire=wire)
        t0 = time.perf_counter()
        assert m.accept_string(text)
        took.append(time.perf_counter() - t0)
    assert took[1] < 10  # overlapping ranges took 251 s for 1,000 characters
    assert took[1] < 40 * took[0] + 0.5  # 10x the characters: about 10x the time, not 100x


def test_xgrammar_admits_every_length_up_to_the_bound_and_not_one_more():
    xgr = pytest.importorskip("xgrammar")
    tool = _tool(2500, min_length=998)
    compiled = xgr.GrammarCompiler(xgr.TokenizerInfo([])).compile_grammar(
        xgr.Grammar.from_ebnf(render(tool, format="gbnf"), root_rule_name="root")
    )
    for n in (997, 998, 999, 1000, 1001, 1999, 2000, 2001, 2500, 2501):
        text = serialize_call(tool, {"text": "a" * n})
        m = xgr.GrammarMatcher(compiled)
        assert m.accept_string(text) == (998 <= n <= 2500), n


def test_a_bound_past_the_limit_renders_unbounded_at_once_and_says_so():
    tool = _tool(10**18)
    t0 = time.perf_counter()
    for fmt in ("gbnf", "lark", "regex"):
        for wire in ("json", "hermes", "antml"):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", GrammarWarning)
                render(tool, format=fmt, wire=wire)
    assert time.perf_counter() - t0 < 10
    (msg,) = compile_schema(tool.parameters).warnings
    assert f"past {MAX_LENGTH_BOUND} characters: rendered unbounded" in msg
    with pytest.raises(UnsupportedSchemaError, match="minLength"):
        render({"type": "string", "minLength": MAX_LENGTH_BOUND + 1})


def test_llama_cpp_reads_the_blocks():
    llama_cpp = pytest.importorskip("llama_cpp")
    llama_cpp.LlamaGrammar.from_string(render(_tool(4500), format="gbnf"), verbose=False)
