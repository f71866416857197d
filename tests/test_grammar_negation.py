"""Negation (``not``, ``oneOf``, ``if``/``else``) and the other narrowed renderings are sound.

An exact rendering accepts exactly the schema's values; a narrowed one (recorded in
``SchemaIR.warnings``) accepts a subset of them, never a value the schema rejects. Checked on the
IR against ``jsonschema`` (random schemas and values) and on grammar walks (random texts).
"""

from __future__ import annotations

import json
import random

import jsonschema
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_grammar_props import SETTINGS, leaf, walk_texts

from tooldecode.grammar import check, compile_schema, render, strictify
from tooldecode.grammar.gbnf import emit_gbnf
from tooldecode.grammar.ir import NEVER, ArrA, ConstA, ObjA, StrA, node
from tooldecode.grammar.negation import complement, difference
from tooldecode.grammar.strlang import StrLang

KEYS = ["a", "b", "c"]
values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-3, 3)
    | st.sampled_from([0.5, 2.5])
    | st.sampled_from(["", "x", "ab"]),
    lambda ch: st.lists(ch, max_size=3) | st.dictionaries(st.sampled_from(KEYS), ch, max_size=3),
    max_leaves=6,
)


def _obj(children: st.SearchStrategy[dict]) -> st.SearchStrategy[dict]:
    @st.composite
    def build(draw):
        props = draw(st.dictionaries(st.sampled_from(KEYS), children, max_size=3))
        s: dict = {"type": "object", "properties": props}
        req = draw(st.lists(st.sampled_from(KEYS), unique=True, max_size=2))
        if req:
            s["required"] = req
        r = draw(st.integers(0, 5))
        if r == 0:
            s["additionalProperties"] = False
        elif r == 1:
            s["additionalProperties"] = draw(children)
        elif r == 2:
            s["propertyNames"] = {"enum": draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=2))}
        elif r == 3:
            s["maxProperties"] = draw(st.integers(0, 2))
        return s

    return build()


def _arr(children: st.SearchStrategy[dict]) -> st.SearchStrategy[dict]:
    @st.composite
    def build(draw):
        s: dict = {"type": "array"}
        if draw(st.booleans()):
            s["items"] = draw(children)
        if draw(st.integers(0, 2)) == 0:
            s["prefixItems"] = [draw(children)]
        if draw(st.integers(0, 2)) == 0:
            s["maxItems"] = draw(st.integers(0, 3))
        if draw(st.integers(0, 3)) == 0:
            s["uniqueItems"] = True
        if draw(st.integers(0, 3)) == 0:
            s["contains"] = draw(children)
        return s

    return build()


base = st.one_of(
    leaf,
    st.just({"type": "string", "maxLength": 1}),
    st.just({"type": "number", "multipleOf": 0.5}),
    st.just({"type": "number", "multipleOf": 0.01, "maximum": 2}),
    st.just({"type": "integer", "minimum": 0}),
    st.just({"required": ["a"]}),
    values.map(lambda v: {"const": v}),
)
neg_schemas = st.recursive(
    base,
    lambda ch: st.one_of(
        _obj(ch),
        _arr(ch),
        st.lists(ch, min_size=2, max_size=3).map(lambda xs: {"oneOf": xs}),
        ch.map(lambda x: {"not": x}),
        st.tuples(ch, ch, ch).map(lambda t: {"if": t[0], "then": t[1], "else": t[2]}),
        st.lists(ch, min_size=2, max_size=2).map(lambda xs: {"allOf": xs}),
    ),
    max_leaves=7,
)


def _compiled(schema):
    from tooldecode.errors import SchemaError

    try:
        return compile_schema(schema)
    except SchemaError:
        return None


@SETTINGS
@given(schema=neg_schemas, vals=st.lists(values, min_size=1, max_size=12))
def test_ir_never_accepts_an_invalid_value(schema, vals):
    sir = _compiled(schema)
    if sir is None:
        return
    validator = jsonschema.Draft202012Validator(strictify(schema))
    narrowed = any("narrower" in w for w in sir.warnings)
    for v in vals:
        ok = validator.is_valid(v)
        if sir.accepts(v):
            assert ok, (schema, v, sir.warnings)
        elif not narrowed and not sir.ignored:
            assert not ok, (schema, v)  # exact: every valid value is kept


@SETTINGS
@given(schema=neg_schemas, seed=st.integers(0, 10**6))
def test_walked_texts_of_negations_validate(schema, seed):
    if _compiled(schema) is None:
        return
    g, texts = walk_texts(schema, "json", "compact", "strict", seed)
    validator = jsonschema.Draft202012Validator(strictify(schema))
    gbnf = emit_gbnf(g)
    for text in texts:
        assert validator.is_valid(json.loads(text)), (schema, text)
        assert check.accepts("xgrammar", gbnf, text)


# -- the difference on hand-made cases


def test_closed_object_minus_open_schema_is_exact():
    closed = ObjA(
        keys=(("a", node(StrA())), ("b", node(StrA()))), extras=((StrLang(excluded=frozenset("ab")), NEVER),)
    )
    only_a = ObjA(keys=(("b", NEVER),), names=None)
    d = difference(node(closed), node(only_a))  # exact: raises Inexact otherwise
    assert [a.required for a in d.alts] == [frozenset({"b"})]
    no_extras = ObjA(extras=((StrLang(excluded=frozenset({"a"})), NEVER),))
    d = difference(node(closed), node(no_extras))  # the closed object's keys bound the extras
    assert d.alts and all(isinstance(a, ObjA) and "b" in a.required for a in d.alts)


def test_constants_of_arrays_and_objects_negate_exactly():
    n = complement(node(ConstA([1, {"a": None}]), ConstA({"x": [True]})))
    for v, inside in [
        ([1, {"a": None}], False),
        ({"x": [True]}, False),
        ([1, {"a": None, "b": 1}], True),
        ([1], True),
        ({"x": [True], "y": 1}, True),
        ({"x": [False]}, True),
        ({}, True),
        ("s", True),
    ]:
        assert any(ir_accepts(a, v) for a in n.alts) == inside, v


def ir_accepts(a, v):
    from tooldecode.grammar.ir import accepts_alt

    return accepts_alt(a, v)


def test_open_object_minus_closed_is_narrowed_with_a_reason():
    closed = ObjA(keys=(("a", node(StrA())),), extras=((StrLang(excluded=frozenset("a")), NEVER),))
    loss: list[str] = []
    d = difference(node(ObjA()), node(closed), loss)
    assert loss and "open object" in loss[0]
    # what is kept: objects that are not closed.a objects (more members, or a non-string 'a')
    for a in d.alts:
        assert isinstance(a, (ObjA, ArrA)) or a.type != "object"


@pytest.mark.parametrize(
    ("schema", "good", "bad"),
    [
        (
            {
                "type": "object",
                "properties": {"kind": {"type": "string"}, "n": {"type": "integer"}, "s": {"type": "string"}},
                "oneOf": [{"required": ["n"]}, {"required": ["s"]}],
            },
            [{"n": 1}, {"s": "x", "kind": "k"}],
            [{"n": 1, "s": "x"}, {}],
        ),
        (
            {"type": "object", "properties": {"a": {"type": "string"}}, "not": {"required": ["a"]}},
            [{}],
            [{"a": "x"}],
        ),
        (
            {
                "type": "object",
                "properties": {"a": {"type": "integer"}},
                "not": {"additionalProperties": False, "properties": {"a": {"minimum": 3}}},
            },
            [{"a": 1}],
            [{"a": 3}, {}],
        ),
    ],
)
def test_negation_cases_render_exactly(schema, good, bad):
    sir = compile_schema(schema)
    assert not any("narrower" in w for w in sir.warnings), sir.warnings
    for v in good:
        assert sir.accepts(v), v
    for v in bad:
        assert not sir.accepts(v), v
    text = render(schema, order="any")  # members in any order: the instances' own order
    for v in good:
        assert check.accepts("xgrammar", text, json.dumps(v, separators=(",", ":")))
    for v in bad:
        assert not check.accepts("xgrammar", text, json.dumps(v, separators=(",", ":")))


def test_random_walk_of_narrowed_not_is_valid():
    schema = {
        "type": "object",
        "properties": {"a": {"type": "string"}},
        "not": {"properties": {"a": {"const": "x"}}, "additionalProperties": {"type": "integer"}},
    }
    sir = compile_schema(schema)
    validator = jsonschema.Draft202012Validator(strictify(schema))
    rng = random.Random(0)
    for _ in range(50):
        v = rng.choice([{}, {"a": "x"}, {"a": "y"}, {"a": ""}])
        if sir.accepts(v):
            assert validator.is_valid(v)


def test_one_of_with_a_narrowed_branch_of_another_type():
    """A narrowed branch cannot be subtracted, but branches of disjoint declared types need not be."""
    sir = compile_schema(
        {
            "oneOf": [{"type": "number", "multipleOf": 0.01}, {"$ref": "#/$defs/s"}],
            "$defs": {"s": {"type": "string"}},
        }
    )
    assert sir.accepts(3) and sir.accepts("x") and not sir.accepts(0.5) and not sir.accepts(None)
    assert any(w.startswith("multipleOf") for w in sir.warnings)
