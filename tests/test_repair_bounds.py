"""The json-repair stage on pathological nesting: a bounded outcome, never a RecursionError."""

from __future__ import annotations

import time

import pytest

from tooldecode.repair.jsonrepair import json_repair_call
from tooldecode.scoring import toolset_tools

pytest.importorskip("json_repair")

TOOLS = toolset_tools("nested")
NAME = TOOLS[0].name
HEAD = '{"name": "' + NAME + '", "arguments": '
CASES = {
    "lists-1000": HEAD + "[" * 1000 + "]" * 1000 + "}",
    "objects-1000": HEAD + '{"a":' * 1000 + "1" + "}" * 1000 + "}",
    "open-20kB": HEAD + '{"a":' * 4000,
    "open-lists-50k": HEAD + "[" * 50_000,
}


@pytest.mark.parametrize("text", CASES.values(), ids=CASES.keys())
def test_deep_text_gets_a_bounded_outcome(text):
    t0 = time.perf_counter()
    out = json_repair_call(text, TOOLS, wire="call-json", expected_tool=NAME)
    assert time.perf_counter() - t0 < 5
    assert out["valid"] is False and "nested deeper" in out["error"]


def test_brackets_inside_strings_do_not_count():
    text = HEAD + '{"file_path": "a.py", "edits": [{"old_string": "' + "[{" * 500 + '", "new_string": "x"}]}}'
    out = json_repair_call(text, TOOLS, wire="call-json", expected_tool=NAME)
    assert "nested deeper" not in str(out["error"])
