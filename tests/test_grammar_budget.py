"""The grammar builder over wide, deep and huge schemas: renders without recursion limits, or fails fast
in one line naming the JSON pointer of what is too big."""

from __future__ import annotations

import time

import pytest

from tooldecode.grammar import GrammarError, render, render_toolset
from tooldecode.grammar.schema import MAX_MEMBERS


def _wide(n: int) -> dict:
    return {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(n)}}


def test_a_wide_object_renders_without_a_recursion_limit():
    text = render(_wide(400), format="gbnf")  # 400: past the old recursive builder's limit
    assert '\\"p399\\"' in text


TOO_BIG = [
    ({"type": "integer", "minimum": 10**5000}, "/minimum"),
    ({"const": 10**5000}, "/const"),
    ({"type": "object", "properties": {"a": {"enum": [1, 10**5000]}}}, "/properties/a/enum/1"),
    (_wide(20_000), "/properties"),
    (_wide(MAX_MEMBERS + 1), "/properties"),
    ({"enum": list(range(100_000))}, "/enum"),
    ({"anyOf": [{"type": "string", "maxLength": i} for i in range(60_000)]}, "/anyOf"),
]


@pytest.mark.parametrize(
    "schema,pointer", TOO_BIG, ids=["int-min", "int-const", "int-enum", "20k", "501", "enum", "nodes"]
)
def test_too_big_fails_fast_naming_where(schema, pointer):
    t0 = time.perf_counter()
    with pytest.raises(GrammarError) as info:
        render(schema)
    assert time.perf_counter() - t0 < 10
    text = str(info.value)
    assert "\n" not in text and pointer in text and "this builder renders" in text


def test_a_toolset_is_checked_too():
    tool = {
        "name": "big",
        "description": "",
        "input_schema": {"type": "object", "properties": {"x": {"const": 10**5000}}},
    }
    with pytest.raises(GrammarError, match="/properties/x/const"):
        render_toolset([tool], wire="hermes")


NO_FINITE_INSTANCE = [
    {"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]},
    {"type": "array", "items": {"$ref": "#"}, "minItems": 1},
    {"$defs": {"n": {"type": "object", "properties": {"next": {"$ref": "#/$defs/n"}}, "required": ["next"]}},
     "$ref": "#/$defs/n"},
]  # fmt: skip


@pytest.mark.parametrize("schema", NO_FINITE_INSTANCE, ids=["self-object", "self-array", "defs-chain"])
def test_a_schema_with_no_finite_instance_admits_no_value(schema):
    for fmt in ("gbnf", "lark"):
        with pytest.raises(GrammarError, match="admits no value"):
            render(schema, format=fmt)


def test_recursion_with_a_way_out_still_renders():
    tree = {
        "type": "object",
        "properties": {"kids": {"type": "array", "items": {"$ref": "#"}}},
        "required": ["kids"],
    }
    assert "root" in render(tree)


def test_a_narrowing_is_warned_without_verbose(tmp_path, capsys):
    from tooldecode.cli import main

    schema = tmp_path / "s.json"
    schema.write_text('{"type": "number", "multipleOf": 1e-300}')
    assert main(["grammar", str(schema)]) == 0
    err = capsys.readouterr().err
    assert "multipleOf at /multipleOf: rendered narrower than the schema" in err
