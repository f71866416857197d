"""The JSON Schema keywords and JSON type names: the one table the compiler and the scorer's schema-echo
check read, by group; the options the compiler takes; ``json_type``."""

from __future__ import annotations

from typing import Any

from tooldecode.grammar.strlang import FORMAT_PATTERNS

MODES = ("strict", "spec")
ORDERS = ("schema", "required-first", "any")

ANNOTATIONS = frozenset(
    {
        "title",
        "description",
        "default",
        "examples",
        "deprecated",
        "readOnly",
        "writeOnly",
        "$comment",
        "contentMediaType",
        "contentEncoding",
        "contentSchema",
        "$schema",
        "$id",
        "$anchor",
        "$dynamicAnchor",
        "$vocabulary",
        "$defs",
        "definitions",
    }
)
OBJECT_KW = (
    "properties",
    "patternProperties",
    "additionalProperties",
    "required",
    "propertyNames",
    "minProperties",
    "maxProperties",
    "dependentRequired",
    "dependentSchemas",
    "unevaluatedProperties",
)
ARRAY_KW = (
    "items",
    "prefixItems",
    "minItems",
    "maxItems",
    "contains",
    "minContains",
    "maxContains",
    "uniqueItems",
    "unevaluatedItems",
)
STRING_KW = ("minLength", "maxLength", "pattern", "format")
NUMBER_KW = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")
APPLICATORS = ("allOf", "anyOf", "oneOf", "not", "if", "then", "else", "$ref")
KNOWN = frozenset(OBJECT_KW + ARRAY_KW + STRING_KW + NUMBER_KW + APPLICATORS + ("type", "enum", "const"))
# keywords that constrain values but have no exact rendering: refused (or skipped under lenient)
UNEXPRESSIBLE = frozenset({"$dynamicRef", "$recursiveRef"})
JSON_TYPES = ("null", "boolean", "integer", "number", "string", "array", "object")
# the types of JSON values (an integer is a number)
VALUE_TYPES = tuple(t for t in JSON_TYPES if t != "integer")
# the schema words a model copies from a tool block into its arguments (as keys): what the scorer's
# schema-echo check looks for (``tooldecode.scoring.checks.schema_echo``); "type" is checked with its value
ECHO_KEYWORDS = frozenset(
    {
        "additionalProperties",
        "properties",
        "required",
        "items",
        "$schema",
        "$ref",
        "$defs",
        "minItems",
        "maxItems",
        "minLength",
        "maxLength",
        "prefixItems",
        "anyOf",
        "oneOf",
        "allOf",
        "const",
        "pattern",
        "enum",
        "patternProperties",
        "unevaluatedProperties",
    }
)
FORMATS = tuple(FORMAT_PATTERNS)
MAX_UNIQUE_ENUM = 2000
DIALECTS = frozenset(
    {"https://json-schema.org/draft/2020-12/schema", "https://json-schema.org/draft/2020-12/schema#"}
)


def json_type(v: Any, *, integer: bool = False) -> str:
    """The JSON type of a JSON value.

    Parameters
    ----------
    v : Any
        A parsed JSON value (``None``, ``bool``, ``int``, ``float``, ``str``, ``list`` or ``dict``).
    integer : bool, default False
        Report an ``int`` as ``"integer"`` instead of ``"number"``.

    Returns
    -------
    str
        One of ``VALUE_TYPES`` (``"integer"`` only with ``integer=True``).

    Raises
    ------
    TypeError
        A value that is not JSON.

    Examples
    --------
    >>> from tooldecode.grammar import json_type
    >>> json_type(3), json_type(3, integer=True), json_type(True)
    ('number', 'integer', 'boolean')
    """
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer" if integer else "number"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    if isinstance(v, dict):
        return "object"
    raise TypeError(f"not a JSON value: {type(v).__name__}")
