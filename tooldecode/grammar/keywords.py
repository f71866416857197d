"""The JSON Schema keywords the compiler knows, by group, and the options it takes."""

from __future__ import annotations

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
FORMATS = tuple(FORMAT_PATTERNS)
MAX_UNIQUE_ENUM = 2000
DIALECTS = frozenset(
    {"https://json-schema.org/draft/2020-12/schema", "https://json-schema.org/draft/2020-12/schema#"}
)
