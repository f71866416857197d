"""Tools in from the shapes other stacks write: OpenAI (chat-completions, responses), Anthropic, MCP."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tooldecode.errors import SchemaError
from tooldecode.grammar import GrammarWarning, Tool, load_tool, load_tools, render, render_toolset

pytestmark = pytest.mark.filterwarnings("ignore::tooldecode.grammar.GrammarWarning")

SCHEMA = {
    "type": "object",
    "properties": {"query": {"type": "string"}, "limit": {"type": "integer", "minimum": 1}},
    "required": ["query"],
}
SCHEMA2 = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}


def _shapes(name: str, schema: dict) -> dict[str, object]:
    return {
        "openai-chat": [
            {"type": "function", "function": {"name": name, "description": "d", "parameters": schema}}
        ],
        "openai-responses": [
            {"type": "function", "name": name, "description": "d", "parameters": schema, "strict": True}
        ],
        "anthropic": [{"name": name, "description": "d", "input_schema": schema}],
        "mcp": {"tools": [{"name": name, "description": "d", "inputSchema": schema}]},
        "mcp-jsonrpc": {
            "jsonrpc": "2.0",
            "id": 1,
            "result": {"tools": [{"name": name, "inputSchema": schema}]},
        },
    }


SHAPES = sorted(_shapes("search", SCHEMA))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("wire", ["json", "hermes", "antml"])
def test_each_shape_renders_the_schemas_grammar(shape, wire):
    data = _shapes("search", SCHEMA)[shape]
    ref = render(SCHEMA, wire=wire, name="search")
    assert render(data, wire=wire) == ref
    (tool,) = load_tools(data)
    assert tool.name == "search" and tool.parameters == SCHEMA and tool.family == "flat"
    assert load_tool(data) == tool
    if wire != "json":
        assert render_toolset(data, wire=wire) == render_toolset([tool], wire=wire)


@pytest.mark.parametrize("shape", SHAPES)
def test_a_list_of_two_renders_the_tool_set(shape, tmp_path):
    one, two = _shapes("search", SCHEMA)[shape], _shapes("open", SCHEMA2)[shape]
    if isinstance(one, list):
        data: object = one + two  # type: ignore[operator]
    else:
        inner = one.get("result", one)  # type: ignore[union-attr]
        inner["tools"] += (two.get("result", two))["tools"]  # type: ignore[union-attr,index]
        data = one
    ref = render_toolset([Tool("search", parameters=SCHEMA), Tool("open", parameters=SCHEMA2)], wire="hermes")
    assert render_toolset(data, wire="hermes") == ref
    f = tmp_path / f"{shape}.json"
    f.write_text(json.dumps(data))
    assert render_toolset(f, wire="hermes") == ref
    out = subprocess.run(
        [sys.executable, "-m", "tooldecode", "grammar", str(f), "--wire", "hermes"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout == ref
    with pytest.raises(SchemaError, match="2 tools"):
        render(data, wire="hermes")


def test_cli_takes_every_shape(tmp_path):
    ref = render(SCHEMA, wire="hermes", name="search")
    for shape, data in _shapes("search", SCHEMA).items():
        f = tmp_path / f"{shape}.json"
        f.write_text(json.dumps(data))
        out = subprocess.run(
            [sys.executable, "-m", "tooldecode", "grammar", str(f), "--wire", "hermes"],
            capture_output=True,
            text=True,
        )
        assert out.returncode == 0 and out.stdout == ref, (shape, out.stderr)


@pytest.mark.parametrize(
    "data, seen",
    [
        ({"foo": 1, "bar": {"type": "string"}}, "keys 'foo', 'bar'"),
        ({"tools": [{"x": 1}]}, "tools[0]"),
        ({"jsonrpc": "2.0", "id": 1, "error": {"code": -1, "message": "boom"}}, "boom"),
        ([{"name": "t"}], "tools[0]"),
    ],
)
def test_a_dict_that_is_no_schema_is_a_one_line_error(data, seen):
    with pytest.raises(SchemaError) as e:
        render(data)
    msg = str(e.value)
    assert "\n" not in msg and seen in msg


def test_cli_refuses_a_non_schema_file_instead_of_an_any_json_grammar(tmp_path):
    f = tmp_path / "notes.json"
    f.write_text(json.dumps({"tool": "search", "args": {"q": "x"}}))
    out = subprocess.run(
        [sys.executable, "-m", "tooldecode", "grammar", str(f)], capture_output=True, text=True
    )
    assert out.returncode == 2 and out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "'tool', 'args'" in lines[0] and "neither a JSON Schema" in lines[0]


def test_schemas_still_render():
    assert render({}, format="gbnf")  # the empty schema admits any value, as JSON Schema says
    assert render({"title": "anything"}, format="gbnf")
    assert render(True, format="gbnf")


def test_family_is_optional_and_a_tool_without_parameters_takes_none():
    t = Tool("ping")
    assert t.family == "flat" and t.description == ""
    assert render(t, wire="call-json", format="regex") == render(
        {"type": "object", "properties": {}}, wire="call-json", format="regex", name="ping"
    )
    (f,) = load_tools([{"type": "function", "function": {"name": "ping"}}])
    assert f.parameters == {"type": "object", "properties": {}}


def test_load_tool_of_a_dict_and_a_long_string():
    assert load_tool({"name": "t", "parameters": SCHEMA}).parameters == SCHEMA
    with pytest.raises(SchemaError, match="unknown tool"):
        load_tool(json.dumps(SCHEMA) * 200)  # not "File name too long"
    with pytest.raises(SchemaError, match="load_tools"):
        load_tool(_shapes("a", SCHEMA)["anthropic"] + _shapes("b", SCHEMA)["anthropic"])  # type: ignore[operator]


# ---------------------------------------------------------------------------------------------
# wire grammars on real schemas: length bounds and patterns inside delimited wires

BOUNDED = {
    "type": "object",
    "properties": {
        "title": {"type": "string", "maxLength": 256},
        "body": {"type": "string", "minLength": 2, "maxLength": 256},
        "tag": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 20},
    },
    "required": ["title", "body"],
}


def _cli_grammar(tmp_path, schema, *args):
    f = tmp_path / "post.json"
    f.write_text(json.dumps({"name": "post", "parameters": schema}))
    return subprocess.run(
        [sys.executable, "-m", "tooldecode", "grammar", str(f), *args], capture_output=True, text=True
    )


def test_hermes_on_max_length_256_renders_and_xgrammar_bounds_the_strings(tmp_path):
    from tooldecode.grammar import check, serialize_call

    out = _cli_grammar(tmp_path, BOUNDED, "--wire", "hermes")
    assert out.returncode == 0, out.stderr
    assert "/properties/title" in out.stderr and "/properties/body" in out.stderr  # the narrowing, named
    g = out.stdout
    tool = Tool("post", parameters=BOUNDED)
    ok = serialize_call(tool, {"title": "a <b> " * 40, "body": "x</tool_call>", "tag": "abc"}, wire="hermes")
    assert "\\u003c" in ok and check.accepts("xgrammar", g, ok)
    full = serialize_call(tool, {"title": "t" * 256, "body": "é" * 256}, wire="hermes")
    assert check.accepts("xgrammar", g, full)
    for bad in (
        {"title": "t" * 257, "body": "ok"},  # over-long
        {"title": "t", "body": "é" * 257},
        {"title": "t", "body": "x"},  # under minLength
        {"title": "t", "body": "ok", "tag": "a" * 21},
        {"title": "t", "body": "ok", "tag": "ABC"},  # not the pattern
    ):
        text = serialize_call(tool, bad, wire="hermes")
        assert not check.accepts("xgrammar", g, text), bad
    raw = '<tool_call>\n{"name":"post","arguments":{"title":"x</tool_call>","body":"ok"}}\n</tool_call>'
    assert not check.accepts("xgrammar", g, raw)  # the delimiter never occurs raw inside a string


@pytest.mark.parametrize("wire", ["antml", "harmony", "call-list"])
def test_other_delimited_wires_render_bounded_strings(wire):
    from tooldecode.grammar import check, serialize_call

    tool = Tool("post", parameters=BOUNDED)
    g = render(tool, wire=wire, format="gbnf")
    ok = serialize_call(tool, {"title": "t" * 256, "body": "two", "tag": "z"}, wire=wire)
    assert check.accepts("xgrammar", g, ok)
    long = serialize_call(tool, {"title": "t" * 257, "body": "two"}, wire=wire)
    assert not check.accepts("xgrammar", g, long)


def test_the_narrowing_warns_with_the_pointers():
    schema = {
        "type": "object",
        "properties": {"n": {"type": "array", "items": {"type": "string", "maxLength": 99}}},
    }
    with pytest.warns(GrammarWarning, match="/properties/n/items"):
        render(Tool("t", parameters=schema), wire="harmony")


def test_a_raw_antml_value_the_narrowing_cannot_write_is_refused():
    from tooldecode.grammar import serialize_call

    tool = Tool("post", parameters=BOUNDED)
    with pytest.raises(SchemaError, match="without '<'"):
        serialize_call(tool, {"title": "a<b", "body": "ok"}, wire="antml")


def test_small_bounds_stay_exact():
    from tooldecode.grammar import check, serialize_call

    small = {"type": "object", "properties": {"s": {"type": "string", "maxLength": 4}}, "required": ["s"]}
    tool = Tool("t", parameters=small)
    g = render(tool, wire="hermes")
    raw = '<tool_call>\n{"name":"t","arguments":{"s":"a<b"}}\n</tool_call>'
    assert check.accepts("xgrammar", g, raw)  # a raw '<' is kept where the exact exclusion is small
    assert serialize_call(tool, {"s": "a<b"}, wire="hermes") == raw


def test_a_string_too_complex_names_its_pointer():
    hard = {
        "type": "object",
        "properties": {
            "x": {
                "type": "object",
                "properties": {"code": {"type": "string", "pattern": "^[<a]*a[<a]{14}$", "maxLength": 30}},
            }
        },
    }
    with pytest.raises(SchemaError, match="/properties/x/properties/code"):
        render(Tool("t", parameters=hard), wire="hermes")


SLUG = {
    "type": "object",
    "properties": {
        "slug": {"type": "string", "pattern": "^[a-z]+(-[a-z]+)*$", "minLength": 3, "maxLength": 40}
    },
    "required": ["slug"],
}


@pytest.mark.parametrize("wire", ["json", "hermes", "antml"])
def test_a_pattern_with_length_bounds_renders_as_rules(wire):
    from tooldecode.grammar import check, serialize_call

    tool = Tool("t", parameters=SLUG)
    for fmt, engine in (("gbnf", "xgrammar"), ("lark", "llguidance")):
        g = render(tool, format=fmt, wire=wire)
        for ok in ("abc", "abc-def", "a" * 40):
            assert check.accepts(engine, g, serialize_call(tool, {"slug": ok}, wire=wire)), (fmt, ok)
        for bad in ("ab", "abc-", "a" * 41, "ABC", "-abc"):
            assert not check.accepts(engine, g, serialize_call(tool, {"slug": bad}, wire=wire)), (fmt, bad)


def test_the_regex_format_refuses_it_naming_the_pointer_and_the_formats_that_render_it():
    with pytest.raises(SchemaError, match=r"format gbnf or lark renders it.*\(at /properties/slug\)"):
        render(Tool("t", parameters=SLUG), format="regex")
