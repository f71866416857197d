"""``strictify``: a copy of a schema in which every object is closed (what strict mode renders)."""

from __future__ import annotations

import copy
from typing import Any

from tooldecode.grammar.dialects import json_at, parse_pointer, to_2020
from tooldecode.grammar.keywords import OBJECT_KW


def strictify(schema: Any) -> Any:
    """A copy of ``schema`` (in draft 2020-12, see ``tooldecode.grammar.dialects``) in which every
    object is closed.

    Every subschema in a value position (root, property values, items, ...) that can validate an
    object and gives neither ``additionalProperties`` nor ``unevaluatedProperties`` gets
    ``additionalProperties: false`` -- or ``unevaluatedProperties: false`` when it composes other
    schemas in place (``allOf``/``anyOf``/``oneOf``/``$ref``/``if``/``dependentSchemas``), so that the
    properties of all the composed schemas are merged before closing. Schemas used in place (the
    branches of those keywords, ``$defs`` entries) are not closed themselves. A schema that gives an
    ``additionalProperties`` schema (or ``true``) keeps it. An untyped schema without object keywords
    (``{}``, "any value") stays open.

    Parameters
    ----------
    schema : dict or bool
        A JSON Schema of any supported draft; it is not changed.

    Returns
    -------
    dict or bool
        The closed copy, in draft 2020-12.

    Examples
    --------
    >>> from tooldecode.grammar import strictify
    >>> strictify({"type": "object", "properties": {"a": {"type": "string"}}})["additionalProperties"]
    False
    """
    root = copy.deepcopy(to_2020(schema)[0])
    seen: set[int] = set()
    out = _strictify(root, True, root, seen)
    # subschemas reached only through a $ref (under x-ignored or an unknown keyword): their own value
    # positions are closed too (the referenced schema itself is used in place)
    while True:
        todo = [t for t in _ref_targets(out) if isinstance(t, dict) and id(t) not in seen]
        if not todo:
            return out
        for t in todo:
            _strictify(t, False, out, seen)


def _ref_targets(root: Any) -> list[Any]:
    out: list[Any] = []
    stack = [root]
    while stack:
        x = stack.pop()
        if isinstance(x, dict):
            ref = x.get("$ref")
            if isinstance(ref, str) and ref.startswith("#"):
                t = _local_pointer(root, ref[1:])
                if t is not None:
                    out.append(t)
            stack.extend(x.values())
        elif isinstance(x, list):
            stack.extend(x)
    return out


_INPLACE_LIST = ("allOf", "anyOf", "oneOf")
_INPLACE_ONE = ("not", "if", "then", "else")
_VALUE_ONE = (
    "additionalProperties",
    "unevaluatedProperties",
    "items",
    "contains",
    "unevaluatedItems",
    "propertyNames",
)
_VALUE_MAP = ("properties", "patternProperties")


def _strictify(s: Any, value_pos: bool, root: Any, seen: set[int]) -> Any:  # noqa: C901 -- one case per keyword group
    if not isinstance(s, dict):
        return s
    seen.add(id(s))
    for k in _INPLACE_LIST:
        if isinstance(s.get(k), list):
            s[k] = [_strictify(x, False, root, seen) for x in s[k]]
    for k in _INPLACE_ONE:
        if k in s:
            s[k] = _strictify(s[k], False, root, seen)
    if isinstance(s.get("dependentSchemas"), dict):
        s["dependentSchemas"] = {
            k: _strictify(v, False, root, seen) for k, v in s["dependentSchemas"].items()
        }
    for k in _VALUE_ONE:
        if k in s:
            s[k] = _strictify(s[k], True, root, seen)
    for k in _VALUE_MAP:
        if isinstance(s.get(k), dict):
            s[k] = {name: _strictify(v, True, root, seen) for name, v in s[k].items()}
    if isinstance(s.get("prefixItems"), list):
        s["prefixItems"] = [_strictify(x, True, root, seen) for x in s["prefixItems"]]
    for k in ("$defs", "definitions"):
        if isinstance(s.get(k), dict):
            s[k] = {name: _strictify(v, False, root, seen) for name, v in s[k].items()}
    if value_pos and "additionalProperties" not in s and "unevaluatedProperties" not in s:
        if _declares_object(s, root, set()):
            inplace = any(
                k in s for k in ("allOf", "anyOf", "oneOf", "$ref", "if", "dependentSchemas", "$dynamicRef")
            )
            s["unevaluatedProperties" if inplace else "additionalProperties"] = False
    return s


def _declares_object(s: Any, root: Any, seen: set[int]) -> bool:
    """Whether ``s`` (or what it applies in place: allOf/anyOf/oneOf, then/else, a local ``$ref``)
    declares an object. A worklist, not recursion: a ``$ref`` chain of any length is one step a link."""
    stack = [s]
    while stack:
        x = stack.pop()
        if not isinstance(x, dict) or id(x) in seen:
            continue
        seen.add(id(x))
        t = x.get("type")
        if t is not None:
            types = [t] if isinstance(t, str) else list(t) if isinstance(t, list) else []
            if "object" in types:
                return True
            continue
        if any(k in x for k in OBJECT_KW):
            return True
        for k in _INPLACE_LIST:
            if isinstance(x.get(k), list):
                stack.extend(reversed(x[k]))
        stack.extend((x.get("else"), x.get("then")))
        ref = x.get("$ref")
        if isinstance(ref, str) and ref.startswith("#"):
            stack.append(_local_pointer(root, ref[1:]))
    return False


def _local_pointer(root: Any, ptr: str) -> Any:
    tokens = parse_pointer(ptr)
    if tokens is None:
        return None
    try:
        return json_at(root, tokens)
    except LookupError:
        return None
