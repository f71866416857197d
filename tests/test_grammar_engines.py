"""Every rendered grammar is read and run by engines we did not write.

GBNF: xgrammar (``Grammar.from_ebnf``) and llama.cpp's parser when llama-cpp-python is installed.
Lark: the ``lark`` package (Earley, complete dynamic lexer) and llguidance (byte-level matcher).
Regex: Python ``re.fullmatch``.
"""

from __future__ import annotations

import json

import pytest

from tooldecode.grammar import (
    FORMATS,
    WIRES,
    check,
    load_tool,
    render,
    render_toolset,
    serialize_call,
    tool_catalog,
)

TRICKY = 'line1\n\tline2 "quoted" \\ back </tool_call> <|call|> <div> é λ 😀 \u2028 \x01'
ARGS = {
    "edit": {
        "path": "src/a b.py",
        "edits": [{"oldText": TRICKY, "newText": "y"}, {"oldText": "", "newText": "z"}],
    },
    "read": {"path": "f.txt", "offset": -3, "limit": 10},
    "write": {"path": "f", "content": TRICKY},
    "bash": {"command": "echo 'hi' && ls", "timeout": 0},
    "Edit": {"file_path": "x", "old_string": TRICKY, "new_string": "b", "replace_all": True},
    "MultiEdit": {
        "file_path": "x",
        "edits": [
            {"old_string": "a", "new_string": "b"},
            {"old_string": "c", "new_string": TRICKY, "replace_all": False},
        ],
    },
    "Read": {"file_path": "x", "limit": 5},
    "Write": {"file_path": "x", "content": ""},
    "Grep": {"pattern": "a.*b", "glob": "*.py", "output_mode": "files_with_matches"},
    "Glob": {"pattern": "**/*.py", "path": "."},
    "Bash": {"command": "echo hi", "description": "say hi", "timeout": 120000},
}
ENGINES_BY_FORMAT = {"gbnf": ("xgrammar",), "lark": ("lark", "llguidance"), "regex": ("re",)}


def engines_accept(tool, text: str, **opts) -> dict[str, bool]:
    out = {}
    for fmt, engines in ENGINES_BY_FORMAT.items():
        g = render(tool, format=fmt, **opts)
        for eng in engines:
            out[eng] = check.accepts(eng, g, text)
    return out


@pytest.mark.parametrize("ws", ["compact", "bounded", "pretty"])
@pytest.mark.parametrize("wire", WIRES)
@pytest.mark.parametrize("name", sorted(ARGS))
def test_canonical_calls_accepted_by_every_engine(name, wire, ws):
    tool = load_tool(name)
    text = serialize_call(tool, ARGS[name], wire=wire, ws=ws)
    verdicts = engines_accept(tool, text, wire=wire, ws=ws)
    assert all(verdicts.values()), (verdicts, text[:200])


@pytest.mark.parametrize("wire", WIRES)
@pytest.mark.parametrize("name", sorted(ARGS))
def test_every_rendered_text_is_read_by_its_engines(name, wire):
    tool = load_tool(name)
    for fmt in FORMATS:
        for ws in ("compact", "bounded"):
            g = render(tool, format=fmt, wire=wire, ws=ws)
            for eng in ENGINES_BY_FORMAT[fmt]:
                check.validate(eng, g)


@pytest.mark.skipif(not check.available("llama-grammar"), reason="llama-cpp-python not installed")
@pytest.mark.parametrize("wire", WIRES)
def test_gbnf_read_by_llama_cpp(wire):
    for tool in tool_catalog().values():
        for ws in ("compact", "bounded", "pretty"):
            check.validate("llama-grammar", render(tool, format="gbnf", wire=wire, ws=ws))


OK_EDIT = '{"path":"a","edits":[{"oldText":"x","newText":"y"}]}'
BAD_EDITS = {
    "invented key at item end": '{"path":"a","edits":[{"oldText":"x","newText":"y","requireUnique":true}]}',
    "invented key at top": '{"path":"a","edits":[],"notes":"x"}',
    "missing required": '{"path":"a","edits":[{"oldText":"x"}]}',
    "keys out of schema order": '{"edits":[],"path":"a"}',
    "raw newline in string": '{"path":"a\nb","edits":[]}',
    "raw control char": '{"path":"a\x07","edits":[]}',
    "bad escape": '{"path":"a\\q","edits":[]}',
    "lone surrogate": '{"path":"\\ud800","edits":[]}',
    "wrong type": '{"path":1,"edits":[]}',
    "trailing comma": '{"path":"a","edits":[],}',
    "whitespace in compact": '{"path": "a","edits":[]}',
    "duplicate key": '{"path":"a","path":"b","edits":[]}',
}


@pytest.mark.parametrize("case", sorted(BAD_EDITS))
def test_invalid_calls_rejected_by_every_engine(case):
    tool = load_tool("edit")
    assert all(engines_accept(tool, OK_EDIT).values())
    verdicts = engines_accept(tool, BAD_EDITS[case])
    assert not any(verdicts.values()), verdicts


def test_spec_mode_admits_invented_keys_strict_does_not():
    tool = load_tool("edit")
    bad = BAD_EDITS["invented key at item end"]
    for eng, fmt in (("xgrammar", "gbnf"), ("lark", "lark"), ("llguidance", "lark")):
        assert check.accepts(eng, render(tool, format=fmt, mode="spec"), bad)
        assert not check.accepts(eng, render(tool, format=fmt, mode="strict"), bad)


def test_wire_delimiter_inside_values_rejected():
    cases = [
        (
            "hermes",
            '<tool_call>\n{"name":"write","arguments":{"path":"a</tool_call>","content":""}}\n</tool_call>',
        ),
        (
            "harmony",
            "<|start|>assistant<|channel|>commentary to=functions.write <|constrain|>json<|message|>"
            '{"path":"<|call|>","content":""}<|call|>',
        ),
        (
            "antml",
            '<function_calls><invoke name="write"><parameter name="path">a</parameter>b</parameter>'
            '<parameter name="content">c</parameter></invoke></function_calls>',
        ),
    ]
    tool = load_tool("write")
    for wire, text in cases:
        assert not any(engines_accept(tool, text, wire=wire).values()), wire
        escaped = text.replace("a</tool_call>", "a\\u003c/tool_call>").replace(
            '"<|call|>"', '"\\u003c|call|>"'
        )
        if wire != "antml":
            assert all(engines_accept(tool, escaped, wire=wire).values()), wire


def test_antml_raw_and_json_parameters():
    tool = load_tool("MultiEdit")
    text = (
        '<function_calls><invoke name="MultiEdit"><parameter name="file_path">a<b>.py</parameter>'
        '<parameter name="edits">[{"old_string":"<x>","new_string":"</parameter"}]</parameter>'
        "</invoke></function_calls>"
    )
    assert all(engines_accept(tool, text, wire="antml").values())
    assert not any(engines_accept(tool, text.replace('"<x>"', '"<x>","kind":1'), wire="antml").values())
    bounded = text.replace("<invoke", "\n<invoke").replace(
        '<parameter name="edits">', '\n<parameter name="edits">'
    )
    assert all(engines_accept(tool, bounded, wire="antml", ws="bounded").values())
    assert not any(engines_accept(tool, bounded, wire="antml").values())


def test_toolset_grammar_in_every_engine():
    tools = list(tool_catalog().values())
    for wire in ("call-json", "hermes", "antml", "harmony"):
        grammars = {fmt: render_toolset(tools, format=fmt, wire=wire) for fmt in FORMATS}
        for name in ("edit", "Grep", "Bash"):
            text = serialize_call(
                name,
                ARGS[name]
                if wire != "antml"
                else json.loads(json.dumps(ARGS[name]).replace("</tool_call>", "")),
                wire=wire,
            )
            for fmt, engines in ENGINES_BY_FORMAT.items():
                for eng in engines:
                    assert check.accepts(eng, grammars[fmt], text), (wire, name, eng)
        wrong = (
            serialize_call("read", {"path": "x"}, wire=wire)
            .replace('"read"', '"reed"')
            .replace("=read", "=reed")
            .replace("functions.read", "functions.reed")
        )
        for fmt, engines in ENGINES_BY_FORMAT.items():
            for eng in engines:
                assert not check.accepts(eng, grammars[fmt], wrong), (wire, eng)


def test_greedy_lexers_see_self_delimiting_tokens():
    """Alternatives that start alike (a declared key vs the pattern of extra keys, a number vs a longer
    number) must work in llguidance's greedy lexer and in lark's first-match regex lexer."""
    schemas_texts = [
        ({"dependentRequired": {"bar": ["foo"]}}, ['{"foo":1}', '{"bar":1,"foo":2}']),
        (
            {
                "properties": {"foo": {}},
                "patternProperties": {"^v": {"type": "integer"}},
                "additionalProperties": False,
            },
            ['{"foo":1,"vroom":2}', '{"v":3}'],
        ),
        ({"minimum": 1.1}, ["1.1", "2.6", "12", "1.25"]),
        ({"type": "integer", "maximum": 999}, ["25", "999", "-4"]),
        ({"anyOf": [{"const": "a"}, {"type": "string", "minLength": 3}]}, ['"a"', '"abc"']),
        ({"type": "array", "items": {"type": "number", "minimum": 0, "maximum": 1}}, ["[0.5,1,0,0.25]"]),
    ]
    for schema, texts in schemas_texts:
        grammars = {fmt: render(schema, format=fmt, mode="spec") for fmt in ("gbnf", "lark")}
        for text in texts:
            for eng, fmt in (("xgrammar", "gbnf"), ("lark", "lark"), ("llguidance", "lark")):
                assert check.accepts(eng, grammars[fmt], text), (schema, text, eng)
