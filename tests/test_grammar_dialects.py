"""Earlier drafts translated into 2020-12, unknown keywords as annotations, formats as annotations."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest

from tooldecode.grammar import Tool, check, compile_schema, render, serialize_call, strictify
from tooldecode.grammar.dialects import dialect_of, to_2020
from tooldecode.grammar.strlang import FORMAT_PATTERNS

MCP_TOOL = {
    "name": "fetch_page",
    "description": "Fetch a web page",
    "inputSchema": {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": {
            "url": {"type": "string", "format": "uri", "description": "page address"},
            "max_length": {"type": "integer", "exclusiveMinimum": 0, "maximum": 1000000},
            "raw": {"type": "boolean", "default": False},
        },
        "required": ["url"],
        "additionalProperties": False,
    },
}


def _text(v) -> str:
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False)


def test_mcp_style_draft07_tool_renders_via_api_and_cli(tmp_path, capsys):
    from tooldecode.cli import main

    schema = MCP_TOOL["inputSchema"]
    gbnf, lark_text = render(schema), render(schema, format="lark")
    sir = compile_schema(schema)
    assert sir.dialect == "draft7" and not sir.warnings  # format "uri" is asserted (RFC 3986)
    for inst, ok in (
        ({"url": "https://example.com/a?b=1#c", "max_length": 5}, True),
        ({"url": "mailto:a@b.org", "raw": True}, True),
        ({"url": "not a uri"}, False),
        ({"url": "https://example.com", "extra": 1}, False),
        ({"url": "https://example.com", "max_length": 0}, False),
        ({"max_length": 5}, False),
    ):
        assert check.accepts("xgrammar", gbnf, _text(inst)) == ok, inst
        assert check.accepts("llguidance", lark_text, _text(inst)) == ok, inst
        if ok:
            assert jsonschema.Draft7Validator(schema).is_valid(inst)
    tool = dict(MCP_TOOL)
    tool["inputSchema"] = {**schema, "properties": {**schema["properties"], "when": {"format": "x-when"}}}
    p = tmp_path / "fetch.json"
    p.write_text(json.dumps(tool))
    assert main(["grammar", str(p), "--wire", "hermes", "--verbose"]) == 0
    cap = capsys.readouterr()
    assert "fetch_page" in cap.out and "ignored 'format' at /properties/when/format" in cap.err
    assert "warning: format 'x-when'" in cap.err
    assert main(["grammar", str(p), "--wire", "hermes"]) == 0
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    "uri, name",
    [
        ("http://json-schema.org/draft-04/schema#", "draft4"),
        ("http://json-schema.org/draft-06/schema", "draft6"),
        ("https://json-schema.org/draft-07/schema#", "draft7"),
        ("https://json-schema.org/draft/2019-09/schema", "draft2019-09"),
        ("https://json-schema.org/draft/2020-12/schema", "draft2020-12"),
        ("http://json-schema.org/draft-03/schema#", None),
    ],
)
def test_dialect_names(uri, name):
    assert dialect_of(uri) == name


def _check_exact(schema: dict, instances: list, validator_cls) -> None:
    """Every instance: the grammar accepts it iff the draft's own validator accepts it (spec mode)."""
    g = render(schema, mode="spec")
    sir = compile_schema(schema, mode="spec")
    v = validator_cls(schema)
    from tooldecode.grammar.framing import serialize_args

    for inst in instances:
        text = serialize_args(sir, inst, wire="json", ws="compact", ws_max=None)
        assert check.accepts("xgrammar", g, text) == v.is_valid(inst), (schema, inst)


def test_draft04_keywords_translate_exactly():
    schema = {
        "$schema": "http://json-schema.org/draft-04/schema#",
        "id": "http://example.com/root.json",
        "type": "object",
        "properties": {
            "n": {"type": "number", "minimum": 1, "exclusiveMinimum": True, "maximum": 3},
            "t": {
                "type": "array",
                "items": [{"type": "string"}, {"type": "integer"}],
                "additionalItems": False,
            },
            "c": {"const": 5},  # not a draft-04 keyword: an annotation there
            "r": {"$ref": "#/definitions/small", "type": "string"},  # $ref siblings are ignored
        },
        "dependencies": {"n": ["t"], "t": {"required": ["c"]}},
        "definitions": {"small": {"type": "integer", "maximum": 2}},
    }
    insts = [
        {},
        {"n": 1},
        {"n": 1.5, "t": ["a", 1]},
        {"n": 3, "t": ["a"], "c": 7},
        {"t": ["a", 1, 2], "c": 0},
        {"t": [], "c": 1},
        {"t": []},
        {"r": 2},
        {"r": "x"},
        {"r": 3},
        {"c": "anything"},
    ]
    _check_exact(schema, insts, jsonschema.Draft4Validator)
    assert ("const", "/properties/c/const") in compile_schema(schema, mode="spec").ignored


def test_draft07_and_2019_keywords_translate_exactly():
    d7 = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "array",
        "items": [{"type": "integer"}],
        "additionalItems": {"type": "string"},
        "contains": {"const": "z"},
        "unevaluatedItems": False,  # not a draft-07 keyword
    }
    _check_exact(d7, [[], [1], [1, "z"], [1, "z", "y"], ["z"], [1, 2, "z"]], jsonschema.Draft7Validator)
    d19 = {
        "$schema": "https://json-schema.org/draft/2019-09/schema",
        "type": "object",
        "properties": {"a": {"$ref": "#/$defs/pos", "maximum": 5}},  # siblings apply in 2019-09
        "$defs": {"pos": {"type": "integer", "minimum": 1}},
        "dependentRequired": {"a": ["b"]},
    }
    _check_exact(
        d19,
        [{}, {"a": 1, "b": 0}, {"a": 6, "b": 0}, {"a": 0, "b": 0}, {"a": 2}],
        jsonschema.Draft201909Validator,
    )


def test_refs_follow_moved_subschemas():
    schema = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "$ref": "#/definitions/Main",
        "definitions": {
            "Main": {
                "type": "object",
                "properties": {
                    "xs": {"type": "array", "items": [{"$ref": "#/definitions/Main/properties/n"}]},
                    "n": {"type": "integer"},
                },
            },
        },
    }
    out, dialect, _ = to_2020(schema)
    assert dialect == "draft7" and out["$ref"] == "#/x-ignored/definitions/Main"
    _check_exact(
        schema, [{}, {"xs": [1]}, {"xs": ["a"]}, {"n": 1, "xs": [2, 3]}, []], jsonschema.Draft7Validator
    )


def test_unknown_keywords_are_annotations_recorded_on_the_result():
    schema = {
        "type": "object",
        "javaType": "com.example.Thing",
        "properties": {"a": {"type": "string", "readonly": True, "_format": "x"}},
        "self": {"vendor": "v"},
    }
    sir = compile_schema(schema)
    assert {("javaType", "/javaType"), ("self", "/self"), ("readonly", "/properties/a/readonly")} <= set(
        sir.ignored
    )
    t = Tool(name="t", family="flat", description="", parameters=schema)
    text = serialize_call(t, {"a": "x"})
    assert check.accepts("xgrammar", render(schema), text)
    assert jsonschema.Draft202012Validator(strictify(schema)).is_valid({"a": "x"})


def test_unasserted_format_is_an_annotation_with_a_warning_in_strict_mode():
    sir = compile_schema({"type": "string", "format": "x-custom"})
    assert sir.ignored == [("format", "/format")] and "x-custom" in sir.warnings[0]
    assert check.accepts("xgrammar", render({"type": "string", "format": "x-custom"}), '"anything"')


FORMAT_DIR = Path("/work/shared/data/json-schema-test-suite/tests/draft2020-12/optional/format")
for _p in (
    Path(__file__).resolve().parents[2]
    / "shared/data/json-schema-test-suite/tests/draft2020-12/optional/format",
):
    if _p.is_dir():
        FORMAT_DIR = _p


@pytest.mark.skipif(not FORMAT_DIR.is_dir(), reason="JSON-Schema-Test-Suite not available")
@pytest.mark.parametrize("fmt", sorted(FORMAT_PATTERNS))
def test_asserted_formats_against_the_official_format_tests(fmt):
    """Strict mode asserts these formats: no invalid string of the official tests is accepted."""
    rx = re.compile(render({"type": "string", "format": fmt}, format="regex"))
    valid = accepted = 0
    for group in json.loads((FORMAT_DIR / f"{fmt}.json").read_text()):
        for t in group["tests"]:
            if not isinstance(t["data"], str):
                continue
            ok = bool(rx.fullmatch(json.dumps(t["data"])))
            if not t["valid"]:
                assert not ok, (fmt, t["description"], t["data"])
            else:
                valid += 1
                accepted += ok
    # sound subsets: no leap second, upper-case T/Z, no IDNA labels, no quoted local parts or IP literals;
    # the IRI / IDN formats are their ASCII subsets, and the official tests' valid strings are mostly not ASCII
    floor = 0.0 if fmt.startswith(("iri", "idn-")) else 0.2
    assert accepted >= floor * valid, (fmt, accepted, valid)


def test_strict_mode_closes_objects_reached_only_through_refs():
    schema = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "$ref": "#/definitions/Main",
        "definitions": {
            "Main": {"type": "object", "properties": {"child": {"type": "object", "properties": {"a": {}}}}}
        },
        "components": {"x": {"type": "object", "properties": {"b": {"type": "object"}}}},
    }
    g = render(schema)
    assert check.accepts("xgrammar", g, '{"child":{"a":1}}')
    assert not check.accepts("xgrammar", g, '{"child":{"a":1,"b":2}}')
    assert not check.accepts("xgrammar", g, '{"child":{},"z":0}')
    v = jsonschema.Draft202012Validator(strictify(schema))
    assert not v.is_valid({"child": {"a": 1, "b": 2}}) and v.is_valid({"child": {"a": 1}})
    other = {
        "type": "object",
        "properties": {"p": {"$ref": "#/components/x"}},
        "components": schema["components"],
    }
    g2 = render(other)
    assert check.accepts("xgrammar", g2, '{"p":{"b":{}}}')
    assert not check.accepts("xgrammar", g2, '{"p":{"b":{"c":1}}}')


def test_schema_keyword_below_the_root_is_an_annotation():
    """Outside an embedded resource (no ``$id``), ``$schema`` below the root has no meaning."""
    schema = {
        "$ref": "#/definitions/t",
        "definitions": {"t": {"$schema": "http://json-schema.org/draft-04/schema", "type": "string"}},
    }
    sir = compile_schema(schema)
    assert ("$schema", "#/definitions/t/$schema") in sir.ignored
    assert sir.accepts("x") and not sir.accepts(1)
