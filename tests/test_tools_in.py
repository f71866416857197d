"""Tools in from the shapes other stacks write: OpenAI (chat-completions, responses), Anthropic, MCP."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tooldecode.errors import SchemaError
from tooldecode.grammar import Tool, load_tool, load_tools, render, render_toolset

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
