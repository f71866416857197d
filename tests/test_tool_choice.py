"""Whole-call grammars as the anchors offer them: tool choice (required / auto / none / a named tool),
parallel calls where the wire carries them, a reasoning block first, and per-tool ``strict``."""

from __future__ import annotations

import re

import pytest

from tooldecode.grammar import GrammarError, load_tools, render_toolset

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "enum": ["Paris", "Oslo"]}},
                "required": ["city"],
            },
        },
    },
    {"type": "function", "function": {"name": "ping", "parameters": {}}},
]
W = '{"name":"get_weather","arguments":{"city":"Paris"}}'
P = '{"name":"ping","arguments":{}}'


def _re(**kw) -> re.Pattern:
    return re.compile(render_toolset(load_tools(TOOLS), format="regex", **kw), re.S)


def test_a_named_tool_choice_admits_only_that_tool():
    one = _re(wire="hermes", tool_choice="ping")
    assert one.fullmatch(f"<tool_call>\n{P}\n</tool_call>")
    assert not one.fullmatch(f"<tool_call>\n{W}\n</tool_call>")
    with pytest.raises(GrammarError, match="neither one of required, auto, none nor a tool"):
        _re(wire="hermes", tool_choice="nope")


@pytest.mark.parametrize(
    "wire,two",
    [
        ("hermes", f"<tool_call>\n{W}\n</tool_call>\n<tool_call>\n{P}\n</tool_call>"),
        ("call-list", f"<tool_call>[{W},{P}]</tool_call>"),
        (
            "antml",
            '<function_calls><invoke name="get_weather"><parameter name="city">Paris</parameter></invoke>'
            '<invoke name="ping"></invoke></function_calls>',
        ),
    ],
)
def test_parallel_calls_where_the_wire_carries_them(wire, two):
    assert _re(wire=wire, parallel=2).fullmatch(two)
    assert not _re(wire=wire).fullmatch(two)  # one call by default
    three = _re(wire=wire, parallel=3)
    assert three.fullmatch(two)


@pytest.mark.parametrize("wire", ["call-json", "harmony"])
def test_a_wire_of_one_call_refuses_parallel_calls(wire):
    with pytest.raises(GrammarError, match="carries one call"):
        render_toolset(load_tools(TOOLS), wire=wire, parallel=2)
    with pytest.raises(GrammarError, match="whole number of calls"):
        render_toolset(load_tools(TOOLS), wire="hermes", parallel=0)


def test_auto_admits_text_a_call_or_text_then_a_call_and_none_admits_text_only():
    auto = _re(wire="hermes", tool_choice="auto")
    assert auto.fullmatch("The weather is nice.")
    assert auto.fullmatch(f"Let me check.\n<tool_call>\n{W}\n</tool_call>")
    assert auto.fullmatch(f"<tool_call>\n{P}\n</tool_call>")
    assert not auto.fullmatch('<tool_call>\n{"name":"ping","arguments":{"x":1}}\n</tool_call>')
    none = _re(wire="call-list", tool_choice="none")
    assert none.fullmatch("no tools today") and not none.fullmatch(f"<tool_call>[{P}]</tool_call>")
    with pytest.raises(GrammarError, match="opens with a tag"):
        render_toolset(load_tools(TOOLS), wire="call-json", tool_choice="auto")


def test_an_optional_reasoning_block_before_the_call():
    g = _re(wire="hermes", reasoning=True)
    assert g.fullmatch(f"<think>\nParis, <b>today</b>.\n</think>\n<tool_call>\n{W}\n</tool_call>")
    assert g.fullmatch(f"<tool_call>\n{W}\n</tool_call>")
    assert not g.fullmatch(f"<think>a</think>b</think>\n<tool_call>\n{W}\n</tool_call>")


def test_per_tool_strict_from_the_list():
    tools = [
        {
            "type": "function",
            "name": "loose",
            "strict": False,
            "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}},
        },
        {
            "type": "function",
            "name": "tight",
            "strict": True,
            "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}},
        },
    ]
    assert [t.strict for t in load_tools(tools)] == [False, True]
    text = render_toolset(load_tools(tools), format="gbnf", wire="call-json")
    g = re.compile(render_toolset(load_tools(tools[1:]), format="regex", wire="call-json"))
    assert not g.fullmatch('{"name":"tight","arguments":{"a":1,"b":2}}')
    # the loose tool keeps its schema as written: extra members, as JSON Schema allows
    assert "json-value" in text
    with pytest.raises(Exception, match="'strict' of tool"):
        load_tools([{"name": "x", "parameters": {}, "strict": "yes"}])
