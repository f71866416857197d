"""The keyword table (tooldecode.grammar.keywords): JSON Schema keywords and JSON type names, one json_type."""

from __future__ import annotations

import pytest

from tooldecode.grammar import ECHO_KEYWORDS, JSON_TYPES, json_type
from tooldecode.grammar.keywords import ANNOTATIONS, KNOWN, VALUE_TYPES


def test_the_echo_words_are_schema_keywords():
    assert ECHO_KEYWORDS <= KNOWN | ANNOTATIONS
    assert {"required", "additionalProperties", "properties"} <= ECHO_KEYWORDS
    assert "type" not in ECHO_KEYWORDS  # checked with its value


def test_value_types_are_the_json_types_but_integer():
    assert set(JSON_TYPES) - set(VALUE_TYPES) == {"integer"}


@pytest.mark.parametrize(
    ("value", "plain", "with_integer"),
    [
        (None, "null", "null"),
        (True, "boolean", "boolean"),
        (3, "number", "integer"),
        (3.0, "number", "number"),
        ("a", "string", "string"),
        ([1], "array", "array"),
        ({"a": 1}, "object", "object"),
    ],
)
def test_json_type(value, plain, with_integer):
    assert json_type(value) == plain
    assert json_type(value, integer=True) == with_integer


def test_json_type_refuses_a_value_that_is_not_json():
    with pytest.raises(TypeError, match="not a JSON value: tuple"):
        json_type((1, 2))
