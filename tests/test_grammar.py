"""Grammar builder: public API, catalog, strictify, policies, errors, CLI, rendered files."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from tooldecode.errors import SchemaError
from tooldecode.grammar import (
    FORMATS,
    WIRES,
    GrammarError,
    Tool,
    UnsupportedSchemaError,
    compile_schema,
    load_tool,
    render,
    render_toolset,
    serialize_call,
    strictify,
    tool_catalog,
)

ROOT = Path(__file__).resolve().parents[1]
EDIT_ARGS = {"path": "src/a.py", "edits": [{"oldText": "x = 1", "newText": "x = 2"}]}


def full(fmt_regex: str, text: str) -> bool:
    return re.fullmatch(fmt_regex, text) is not None


# ---------------------------------------------------------------------------------------------
# import hygiene and API


def test_import_does_not_pull_heavy_modules():
    code = (
        "import sys, tooldecode.grammar as g; g.render(g.load_tool('edit'), wire='hermes'); "
        "heavy = [m for m in ('torch', 'transformers', 'llama_cpp', 'xgrammar', 'llguidance') "
        "if m in sys.modules]; print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"


def test_errors_are_schema_errors_with_one_line_messages():
    assert issubclass(UnsupportedSchemaError, SchemaError) and issubclass(GrammarError, SchemaError)
    with pytest.raises(UnsupportedSchemaError) as ei:
        compile_schema({"type": "object", "properties": {"a": {"type": "string", "pattern": "(?=x)a"}}})
    msg = str(ei.value)
    assert "\n" not in msg and "'pattern'" in msg and "/properties/a/pattern" in msg
    assert ei.value.keyword == "pattern" and ei.value.pointer == "/properties/a/pattern"


def test_lenient_records_what_was_ignored():
    schema = {
        "type": "object",
        "properties": {"a": {"type": "string", "pattern": "(?=x)a", "nullable": True}},
    }
    with pytest.raises(UnsupportedSchemaError):
        compile_schema(schema)
    sir = compile_schema(schema, lenient=True)
    assert ("pattern", "/properties/a/pattern") in sir.ignored
    assert ("nullable", "/properties/a/nullable") in sir.ignored


@pytest.mark.parametrize(
    "schema, keyword",
    [
        ({"type": "string", "pattern": "a\\1"}, "pattern"),
        ({"not": {"type": "number", "multipleOf": 0.01}}, "not"),
        ({"$dynamicRef": "#x"}, "$dynamicRef"),
        ({"$ref": "https://example.com/s.json"}, "$ref"),
        ({"type": "number", "multipleOf": 0.07}, "multipleOf"),
        ({"oneOf": [{"type": "number", "multipleOf": 0.01}, {"type": "integer"}]}, "oneOf"),
        ({"$recursiveRef": "#"}, "$recursiveRef"),
        ({"$schema": "http://json-schema.org/draft-03/schema#", "type": "string"}, "$schema"),
    ],
)
def test_unsupported_keywords_are_named(schema, keyword):
    with pytest.raises(UnsupportedSchemaError) as ei:
        compile_schema(schema, mode="spec")
    assert ei.value.keyword == keyword


@pytest.mark.parametrize(
    "schema, keyword, kept, left_out",
    [
        (
            {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
            "uniqueItems",
            [[], ["a"]],
            [["a", "b"]],
        ),
        ({"type": "number", "multipleOf": 0.1}, "multipleOf", [0, 3, -20], [0.5]),
        (
            {
                "oneOf": [
                    {"type": "object", "additionalProperties": {"type": "string"}},
                    {"type": "object", "additionalProperties": {"type": "integer"}},
                ]
            },
            "oneOf",
            [],
            [{}, {"a": 1}],
        ),
    ],
)
def test_narrowed_keywords_are_warned(schema, keyword, kept, left_out):
    """Renderings that are a strict subset of the schema's language say so in ``warnings``."""
    sir = compile_schema(schema, mode="spec")
    assert any(w.startswith(keyword) and "narrower" in w for w in sir.warnings), sir.warnings
    for v in kept:
        assert sir.accepts(v), v
    for v in left_out:
        assert not sir.accepts(v), v


def test_bad_options_raise_grammar_error():
    t = load_tool("edit")
    with pytest.raises(GrammarError):
        render(t, format="ebnf")
    with pytest.raises(GrammarError):
        render(t, wire="xml")
    with pytest.raises(GrammarError):
        render(t, ws="loose")
    with pytest.raises(GrammarError):
        render({"type": "object"}, wire="hermes")  # a bare schema has no tool name
    with pytest.raises(GrammarError):
        render_toolset([t, load_tool("read")], wire="json")
    with pytest.raises(GrammarError):
        render(False)


def test_recursive_schema_renders_in_cfg_formats_but_not_regex():
    tree = {
        "$defs": {
            "node": {
                "type": "object",
                "properties": {
                    "v": {"type": "integer"},
                    "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}},
                },
                "required": ["v"],
            }
        },
        "$ref": "#/$defs/node",
    }
    for fmt in ("gbnf", "lark"):
        assert "kids" in render(tree, format=fmt)
    with pytest.raises(GrammarError, match="recursive"):
        render(tree, format="regex")
    with pytest.raises(UnsupportedSchemaError):
        compile_schema({"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"})


# ---------------------------------------------------------------------------------------------
# catalog


def test_catalog_holds_the_built_in_tools():
    cat = tool_catalog()
    assert set(cat) == {
        "edit",
        "read",
        "write",
        "bash",
        "Edit",
        "MultiEdit",
        "Read",
        "Write",
        "Grep",
        "Glob",
        "Bash",
    }
    edit = cat["edit"]
    assert isinstance(edit, Tool) and edit.family == "nested" and cat["Edit"].family == "flat"
    items = edit.parameters["properties"]["edits"]["items"]
    assert set(items["required"]) == {"oldText", "newText"} and set(edit.parameters["required"]) == {
        "path",
        "edits",
    }
    assert cat["MultiEdit"].parameters["properties"]["edits"]["minItems"] == 1
    assert cat["Grep"].parameters["properties"]["output_mode"]["enum"] == [
        "content",
        "files_with_matches",
        "count",
    ]
    assert load_tool("flat-Edit") is cat["Edit"]
    assert load_tool("Edit").name == "Edit" and load_tool("edit").name == "edit"


def test_load_tool_from_file_and_errors(tmp_path):
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"name": "t", "parameters": {"type": "object"}}))
    t = load_tool(p)
    assert t.name == "t" and t.source == p and t.family == "flat"
    with pytest.raises(SchemaError):
        load_tool("no-such-tool")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(SchemaError, match="not valid JSON"):
        load_tool(tmp_path / "bad.json")
    (tmp_path / "bad2.json").write_text(json.dumps({"name": "a b", "parameters": {}}))
    with pytest.raises(SchemaError):
        load_tool(tmp_path / "bad2.json")


# ---------------------------------------------------------------------------------------------
# strictify


def test_strictify_closes_objects_and_rejects_invented_keys():
    s = strictify(load_tool("edit").parameters)
    assert s["additionalProperties"] is False
    assert s["properties"]["edits"]["items"]["additionalProperties"] is False
    bad = {"path": "a", "edits": [{"oldText": "a", "newText": "b", "requireUnique": True}]}
    jsonschema.validate(bad, load_tool("edit").parameters)  # the schema as written admits it
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, s)
    jsonschema.validate(EDIT_ARGS, s)


def test_strictify_merges_before_closing_and_keeps_given_schemas():
    s = strictify({"allOf": [{"properties": {"a": {}}}, {"properties": {"b": {}}}]})
    assert s["unevaluatedProperties"] is False and "additionalProperties" not in s["allOf"][0]
    jsonschema.validate({"a": 1, "b": 2}, s)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"a": 1, "c": 2}, s)
    s2 = strictify({"type": "object", "additionalProperties": {"type": "integer"}, "properties": {"m": {}}})
    assert s2["additionalProperties"] == {"type": "integer"}
    assert s2["properties"]["m"] == {}  # "any value" stays open
    assert strictify({"type": "string"}) == {"type": "string"}


# ---------------------------------------------------------------------------------------------
# semantics through the regex emitter (Python re as the engine)


def test_strict_vs_spec_invented_key():
    inv = '{"path":"a","edits":[{"oldText":"a","newText":"b","type":"x"}]}'
    ok = '{"path":"a","edits":[{"oldText":"a","newText":"b"}]}'
    strict = render(load_tool("edit"), format="regex")
    assert full(strict, ok) and not full(strict, inv)
    with pytest.raises(GrammarError, match="recursive"):  # an open object admits any JSON value
        render(load_tool("edit"), format="regex", mode="spec")
    from tooldecode.grammar import check

    spec = render(load_tool("edit"), format="gbnf", mode="spec")
    assert check.accepts("xgrammar", spec, ok) and check.accepts("xgrammar", spec, inv)
    # an extra key may not repeat a declared key, even escaped
    assert not check.accepts("xgrammar", spec, '{"path":"a","edits":[],"p\\u0061th":1}')
    assert check.accepts("xgrammar", spec, '{"path":"a","edits":[],"p\\u0061thx":1}')


def test_json_strings_are_rfc8259_exact():
    rx = render({"type": "string"}, format="regex")
    for good in ['"a"', '"\\n\\t\\"\\\\\\/"', '"\\u00e9\\u00E9"', '"\\ud83d\\ude00"', '"é😀"', '""']:
        assert full(rx, good), good
    for bad in ['"a\nb"', '"\x00"', '"\\x41"', '"\\ud800"', '"\\udc00x"', '"\\u12"', '"a', "'a'"]:
        assert not full(rx, bad), bad


def test_length_counts_characters_not_escapes():
    rx = render({"type": "string", "minLength": 2, "maxLength": 2}, format="regex")
    assert (
        full(rx, '"ab"') and full(rx, '"\\u00e9\\n"') and full(rx, '"😀x"') and full(rx, '"\\ud83d\\ude00x"')
    )
    assert not full(rx, '"a"') and not full(rx, '"abc"') and not full(rx, '"\\ud83d\\ude00"')


def test_patterns_are_anchored_searches_and_exact():
    rx = render({"type": "string", "pattern": "^[a-z]+\\.py$", "maxLength": 6}, format="regex")
    assert full(rx, '"ab.py"') and not full(rx, '"abcd.py"') and not full(rx, '"AB.py"')
    rx2 = render({"type": "string", "pattern": "x"}, format="regex")
    assert full(rx2, '"axb"') and not full(rx2, '"ab"')


def test_numbers_and_bounds():
    rx = render({"type": "integer", "minimum": -3, "exclusiveMaximum": 12}, format="regex")
    for v in range(-10, 20):
        assert full(rx, str(v)) == (-3 <= v < 12), v
    assert not full(rx, "1.0") and not full(rx, "01")
    pos = render({"type": "number", "exclusiveMinimum": 0}, format="regex")
    for good in ["1", "0.5", "0.000001", "123.25"]:
        assert full(pos, good)
    for bad in ["0", "-0", "0.0", "-1", "-0.5", "1e-400"]:
        assert not full(pos, bad)
    b = render({"type": "number", "minimum": 1.1, "maximum": 3}, format="regex")
    assert full(b, "1.1") and full(b, "3") and full(b, "3.0") and not full(b, "1.09") and not full(b, "3.01")
    m = render({"type": "integer", "multipleOf": 3, "minimum": 0, "maximum": 30}, format="regex")
    assert [v for v in range(-5, 40) if full(m, str(v))] == list(range(0, 31, 3))


def test_formats_in_strict_mode():
    d = render({"type": "string", "format": "date"}, format="regex")
    assert full(d, '"2024-02-29"') and not full(d, '"2023-02-29"') and not full(d, '"2023-13-01"')
    assert full(d, '"2000-02-29"') and not full(d, '"1900-02-29"')
    spec = render({"type": "string", "format": "date"}, format="regex", mode="spec")
    assert full(spec, '"not a date"')  # an annotation in spec mode


def test_order_policies():
    t = load_tool("Edit")
    rf = render(t, format="regex", order="required-first")
    assert full(rf, '{"file_path":"a","old_string":"b","new_string":"c","replace_all":true}')
    anyo = render(t, format="regex", order="any")
    assert full(anyo, '{"replace_all":false,"new_string":"c","file_path":"a","old_string":"b"}')
    assert not full(anyo, '{"new_string":"c","file_path":"a"}')  # required enforced
    assert not full(anyo, '{"file_path":"a","old_string":"b","new_string":"c","file_path":"a"}')  # once
    sch = render(t, format="regex")
    assert not full(sch, '{"old_string":"b","file_path":"a","new_string":"c"}')
    big = {"type": "object", "properties": {f"k{i}": {"type": "integer"} for i in range(9)}}
    with pytest.raises(GrammarError, match="order='any'"):
        render(big, format="gbnf", order="any")


def test_whitespace_policies():
    args = EDIT_ARGS
    bounded = render(load_tool("edit"), format="regex", ws="bounded")
    assert full(bounded, json.dumps(args))  # Python's ", " and ": " separators
    assert full(bounded, json.dumps(args, separators=(",", ":")))
    assert full(bounded, '{\n "path" :\t"src/a.py",\n\n"edits": []}')
    assert not full(bounded, '{"path":   "src/a.py","edits":[]}')  # 3 > ws_max=2
    assert full(
        render(load_tool("edit"), format="regex", ws="bounded", ws_max=3), '{"path":   "src/a.py","edits":[]}'
    )
    pretty = render(load_tool("edit"), format="regex", ws="pretty")
    assert full(pretty, json.dumps(args, indent=2)) and full(pretty, json.dumps(args, indent=4))
    assert full(pretty, json.dumps(args, indent="\t"))
    assert not full(pretty, json.dumps(args, indent=20))  # over the bound (16)
    compact = render(load_tool("edit"), format="regex")
    assert not full(compact, json.dumps(args))


def test_serialize_call_is_canonical_and_accepted():
    for wire in WIRES:
        for ws in ("compact", "bounded", "pretty"):
            text = serialize_call("edit", EDIT_ARGS, wire=wire, ws=ws)
            assert full(render(load_tool("edit"), format="regex", wire=wire, ws=ws), text), (wire, ws)
    assert json.loads(serialize_call("edit", EDIT_ARGS)) == EDIT_ARGS
    assert serialize_call("edit", {"edits": [], "path": "p"}) == '{"path":"p","edits":[]}'  # schema order
    hermes = serialize_call("edit", EDIT_ARGS, wire="hermes", ws="bounded")
    assert hermes.startswith('<tool_call>\n{"name": "edit", "arguments": {"path": ')
    assert (
        serialize_call("unknown_tool", {"b": 1, "a": 2}, wire="call-json")
        == '{"name":"unknown_tool","arguments":{"b":1,"a":2}}'
    )


def test_wire_delimiters_never_occur_raw_inside_values():
    args = {"path": "a</parameter>b", "content": "x</tool_call>y<|call|>"}
    for wire, delim in (("hermes", "</tool_call>"), ("harmony", "<|call|>")):
        text = serialize_call("write", args, wire=wire)
        assert text.count(delim) == 1 and text.endswith(delim)  # only the real closing delimiter
        assert json.loads(text[text.index("{") : text.rindex("}") + 1]).get("arguments", args) == args
        rx = render(load_tool("write"), format="regex", wire=wire)
        assert full(rx, text)
        raw = text.replace("\\u003c", "<")  # the delimiter written raw inside a string
        assert raw.count(delim) == 2 and not full(rx, raw)
    with pytest.raises(GrammarError, match="</parameter>"):
        serialize_call("write", args, wire="antml")
    ok = serialize_call("write", {"path": "a<b", "content": "if a < b:\n\tpass</param"}, wire="antml")
    assert ok == (
        '<function_calls><invoke name="write"><parameter name="path">a<b</parameter>'
        '<parameter name="content">if a < b:\n\tpass</param</parameter></invoke></function_calls>'
    )
    rx = render(load_tool("write"), format="regex", wire="antml")
    assert full(rx, ok)
    assert not full(rx, ok.replace("a<b", "a</parameter>b"))


def test_antml_needs_closed_objects():
    with pytest.raises(GrammarError, match="antml"):
        render(load_tool("edit"), wire="antml", mode="spec")


def test_toolset_alternation_carries_names():
    tools = [load_tool(n) for n in ("edit", "read", "bash")]
    rx = render_toolset(tools, format="regex", wire="call-json")
    assert full(rx, serialize_call("read", {"path": "x"}, wire="call-json"))
    assert full(rx, serialize_call("bash", {"command": "ls"}, wire="call-json"))
    assert not full(rx, '{"name":"write","arguments":{"path":"x","content":"y"}}')
    assert not full(rx, '{"name":"read","arguments":{"command":"ls"}}')


def test_identical_subgrammars_are_shared_and_rules_named_by_path():
    g = render(load_tool("MultiEdit"), format="gbnf")
    names = [line.split(" ::= ")[0] for line in g.splitlines()]
    assert names[0] == "root" and "edits" in names and "edits-item" in names
    assert names.count("string") == 1 and len(names) == len(set(names))


def test_ir_is_exposed_for_structure_engines():
    sir = compile_schema(load_tool("edit").parameters)
    assert sir.mode == "strict" and sir.ignored == []
    assert sir.accepts(EDIT_ARGS)
    assert not sir.accepts({"path": "a", "edits": [{"oldText": "a", "newText": "b", "x": 1}]})


# ---------------------------------------------------------------------------------------------
# CLI and rendered files


def test_cli_prints_grammar_and_fails_with_one_line(capsys, tmp_path):
    from tooldecode.cli import main

    assert main(["grammar", "edit", "--format", "lark", "--wire", "hermes", "--ws", "bounded"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("start: ") and "<tool_call>" in out
    assert main(["grammar", "does-not-exist"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does-not-exist" in err
    p = tmp_path / "s.json"
    p.write_text(json.dumps({"type": "object", "properties": {"a": {"type": "string", "pattern": "(?=x)a"}}}))
    assert main(["grammar", str(p)]) == 2
    assert "pattern" in capsys.readouterr().err
    assert main(["grammar", str(p), "--lenient", "--format", "regex"]) == 0
    cap = capsys.readouterr()
    assert "ignored 'pattern' at /properties/a/pattern" in cap.err


def test_rendered_grammars_do_not_drift(tmp_path):
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import render_grammars
    finally:
        sys.path.pop(0)
    files = render_grammars.expected()
    render_grammars.write(tmp_path, files)
    assert len(files) == 1 + len(tool_catalog()) * len(WIRES) * len(FORMATS)
    drifted = render_grammars.check(ROOT / "grammars", files)
    assert drifted == [], f"run `make grammars`: {drifted[:5]}"
    for rel in files:
        assert (tmp_path / rel).read_bytes() == (ROOT / "grammars" / rel).read_bytes()


def test_a_ref_used_twice_at_every_level_renders_without_expanding():
    """$defs where each definition refers to the next one twice: 2**40 paths to the innermost one. The
    builder names each definition once (a shared sub-node is hashed once), so this renders at once."""
    n = 40
    defs = {
        f"d{i}": {
            "type": "object",
            "properties": {"a": {"$ref": f"#/$defs/d{i + 1}"}, "b": {"$ref": f"#/$defs/d{i + 1}"}},
            "additionalProperties": False,
        }
        for i in range(n)
    }
    defs[f"d{n}"] = {"type": "string"}
    text = render({"$defs": defs, "$ref": "#/$defs/d0"})
    assert text.count("::=") < 20 * n


def test_an_allof_of_anyofs_past_the_budget_is_one_line_naming_its_pointer():
    schema = {
        "allOf": [
            {"anyOf": [{"type": "object", "properties": {f"p{i}": {"type": "string"}}},
                       {"type": "object", "properties": {f"q{i}": {"type": "integer"}}}]}
            for i in range(16)
        ]
    }  # fmt: skip
    with pytest.raises(GrammarError) as err:
        render(schema)
    msg = str(err.value)
    assert "/allOf/" in msg and "alternatives" in msg and "\n" not in msg
