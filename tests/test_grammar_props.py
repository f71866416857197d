"""Property tests: random schemas from the supported subset.

Soundness: every text derived by walking the rendered grammar is accepted by the independent
engines and its arguments validate with ``jsonschema`` against the (strictified) schema.
Completeness: random valid instances, written in the grammar's canonical form, are accepted.
"""

from __future__ import annotations

import json
import os
import random
import re
from fractions import Fraction

import jsonschema
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tooldecode.grammar import (
    Tool,
    build_grammar,
    check,
    compile_schema,
    render,
    serialize_call,
    strictify,
)
from tooldecode.grammar.gbnf import emit_gbnf
from tooldecode.grammar.lark import emit_lark
from tooldecode.grammar.regex import emit_regex

# TOOLDECODE_HYPOTHESIS_EXAMPLES=N runs N random (not derandomized) examples per property, for a deeper search.
DEEP = int(os.environ.get("TOOLDECODE_HYPOTHESIS_EXAMPLES", "0"))
SETTINGS = settings(
    max_examples=DEEP or 40,
    deadline=None,
    derandomize=not DEEP,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
)

NAMES = ["a", "b", "path", "old text", "é", 'q"', "k<", "edits", "$ref", "0", "newText"]
STRINGS = ["", "a", "é", 'q"\\', "x\ny", "<p>", "😀", "\u0001", "abc", "</tool_call>"]
PATTERNS = {  # ECMA pattern -> the same language for Python's re (for hypothesis' from_regex)
    "^[a-z]+$": r"\A[a-z]+\Z",
    "^a": r"\Aa",
    "b$": r"b\Z",
    "[0-9]": r"[0-9]",
    "^(ab|cd)*$": r"\A(ab|cd)*\Z",
    "^.{2,3}$": r"\A[^\n\r\u2028\u2029]{2,3}\Z",
    "^[A-Za-z_]+\\.py$": r"\A[A-Za-z_]+\.py\Z",
}
NUMS = [-2.5, -1, 0, 0.1, 1.1, 3, 7.25, 1000]


def string_schema() -> st.SearchStrategy[dict]:
    @st.composite
    def build(draw):
        s: dict = {"type": "string"}
        if draw(st.booleans()):
            lo = draw(st.integers(0, 3))
            s["minLength"] = lo
            if draw(st.booleans()):
                s["maxLength"] = lo + draw(st.integers(0, 5))
        if draw(st.integers(0, 3)) == 0:
            s["pattern"] = draw(st.sampled_from(sorted(PATTERNS)))
        return s

    return build()


def number_schema() -> st.SearchStrategy[dict]:
    @st.composite
    def build(draw):
        integer = draw(st.booleans())
        s: dict = {"type": "integer" if integer else "number"}
        vals = st.integers(-50, 50) if integer else st.sampled_from(NUMS)
        lo = draw(st.none() | vals)
        hi = draw(st.none() | vals)
        if lo is not None and hi is not None and lo > hi:
            lo, hi = hi, lo
        if lo is not None:
            s["exclusiveMinimum" if draw(st.booleans()) else "minimum"] = lo
        if hi is not None:
            s["exclusiveMaximum" if draw(st.booleans()) else "maximum"] = hi
        if integer and draw(st.integers(0, 3)) == 0:
            s["multipleOf"] = draw(st.integers(2, 7))
        return s

    return build()


scalar_values = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 5), st.sampled_from([0.5, -1.25]), st.sampled_from(STRINGS)
)
leaf = st.one_of(
    string_schema(),
    number_schema(),
    st.just({"type": "boolean"}),
    st.just({"type": "null"}),
    st.lists(scalar_values, min_size=1, max_size=4).map(lambda v: {"enum": v}),
    scalar_values.map(lambda v: {"const": v}),
    st.just({"type": ["string", "null"]}),
    st.just({"type": ["integer", "boolean"], "minimum": 0}),
)


def obj_schema(children: st.SearchStrategy[dict]) -> st.SearchStrategy[dict]:
    @st.composite
    def build(draw):
        props = draw(st.dictionaries(st.sampled_from(NAMES), children, min_size=1, max_size=4))
        names = list(props)
        req = draw(st.lists(st.sampled_from(names), unique=True, max_size=len(names)))
        s: dict = {"type": "object", "properties": props}
        if req:
            s["required"] = req
        r = draw(st.integers(0, 4))
        if r == 0:
            s["additionalProperties"] = False
        elif r == 1:
            s["additionalProperties"] = draw(children)
        return s

    return build()


def arr_schema(children: st.SearchStrategy[dict]) -> st.SearchStrategy[dict]:
    @st.composite
    def build(draw):
        s: dict = {"type": "array", "items": draw(children)}
        lo = draw(st.integers(0, 2))
        if lo:
            s["minItems"] = lo
        if draw(st.booleans()):
            s["maxItems"] = lo + draw(st.integers(0, 3))
        if draw(st.integers(0, 4)) == 0:
            s["prefixItems"] = [draw(children)]
        return s

    return build()


schemas = st.recursive(
    leaf,
    lambda ch: st.one_of(
        obj_schema(ch),
        arr_schema(ch),
        st.lists(ch, min_size=2, max_size=3).map(lambda xs: {"anyOf": xs}),
    ),
    max_leaves=6,
)
tool_schemas = obj_schema(schemas)


def parse_call(text: str, wire: str, schema: dict):
    if wire == "json":
        return json.loads(text)
    if wire == "call-json":
        return json.loads(text)["arguments"]
    if wire == "hermes":
        assert text.startswith("<tool_call>\n") and text.endswith("\n</tool_call>")
        return json.loads(text[len("<tool_call>\n") : -len("\n</tool_call>")])["arguments"]
    if wire == "harmony":
        head, _, rest = text.partition("<|message|>")
        assert rest.endswith("<|call|>")
        return json.loads(rest[: -len("<|call|>")])
    assert wire == "antml"
    body = text[len("<function_calls>") :]
    out = {}
    for m in re.finditer(r'<parameter name="([^"]*)">(.*?)</parameter>', body, re.S):
        k, v = m.group(1), m.group(2)
        out[k] = v if string_only(schema["properties"].get(k, {})) else json.loads(v)
    return out


def string_only(sub: dict) -> bool:
    """The documented antml rule: a parameter is raw text when its schema admits only strings."""
    from tooldecode.grammar.ir import ConstA, StrA

    alts = compile_schema(sub).root.alts
    return bool(alts) and all(
        isinstance(a, StrA) or (isinstance(a, ConstA) and isinstance(a.value, str)) for a in alts
    )


def walk_texts(schema: dict, wire: str, ws: str, mode: str, seed: int, n: int = 4):
    sir = compile_schema(schema, mode=mode)
    g = build_grammar([("t", sir)], wire=wire, ws=ws, allow_empty=True)
    rng = random.Random(seed)
    texts = []
    for _ in range(n * 3):
        try:
            texts.append(check.random_text(g, rng))
        except (RecursionError, ValueError):  # too deep, or a branch that admits nothing
            continue
        if len(texts) >= n:
            break
    return g, texts


@SETTINGS
@given(
    schema=tool_schemas,
    wire=st.sampled_from(["json", "call-json", "hermes", "harmony", "antml"]),
    ws=st.sampled_from(["compact", "bounded", "pretty"]),
    seed=st.integers(0, 10**6),
)
def test_walked_texts_validate_strict(schema, wire, ws, seed):
    if wire == "antml":  # documented limits of the antml wire: no extra parameters, no quote in names
        assume("additionalProperties" not in schema and not any('"' in k for k in schema["properties"]))
    g, texts = walk_texts(schema, wire, ws, "strict", seed)
    gbnf, lark_text = emit_gbnf(g), emit_lark(g)
    validator = jsonschema.Draft202012Validator(strictify(schema))
    for text in texts:
        args = parse_call(text, wire, schema)
        errors = list(validator.iter_errors(args))
        assert not errors, (text, errors[0].message)
        assert check.accepts("xgrammar", gbnf, text), text
        assert check.accepts("llguidance", lark_text, text), text


@SETTINGS
@given(schema=schemas, seed=st.integers(0, 10**6))
def test_walked_texts_validate_spec(schema, seed):
    g, texts = walk_texts(schema, "json", "compact", "spec", seed)
    validator = jsonschema.Draft202012Validator(schema)
    gbnf = emit_gbnf(g)
    for text in texts:
        value = json.loads(text)
        assert validator.is_valid(value), (text, schema)
        assert check.accepts("xgrammar", gbnf, text)


# -- recursive schemas ($defs referenced from inside themselves, and "#")

REF = {"$ref": "#/$defs/node"}


@st.composite
def recursive_schemas(draw):
    """A tool schema whose ``node`` definition refers to itself through items, a property, a
    nullable ``anyOf``, an ``allOf`` wrapper or ``additionalProperties`` (or the root through "#")."""
    link = draw(st.sampled_from(["items", "prop", "nullable", "allof", "addl", "root"]))
    ref = {"$ref": "#"} if link == "root" else REF
    node: dict = {"type": "object", "properties": {"v": draw(schemas)}}
    if draw(st.booleans()):
        node["required"] = ["v"]
    if link in ("items", "root"):
        node["properties"]["kids"] = {"type": "array", "items": ref, "maxItems": 2}
    elif link == "prop":
        node["properties"]["next"] = ref
    elif link == "nullable":
        node["properties"]["next"] = {"anyOf": [{"type": "null"}, ref]}
    elif link == "allof":
        node["properties"]["next"] = {"allOf": [ref], "description": "the next node"}
    else:
        node["additionalProperties"] = ref
    if link != "addl" and draw(st.integers(0, 3)) == 0:
        node["additionalProperties"] = draw(schemas)
    if link == "root":
        return node
    root: dict = {"type": "object", "properties": {"root": REF}, "$defs": {"node": node}}
    if draw(st.booleans()):
        root["required"] = ["root"]
    return root


@SETTINGS
@given(
    schema=recursive_schemas(),
    wire=st.sampled_from(["json", "call-json", "hermes"]),
    ws=st.sampled_from(["compact", "bounded"]),
    seed=st.integers(0, 10**6),
)
def test_walked_texts_validate_strict_recursive(schema, wire, ws, seed):
    g, texts = walk_texts(schema, wire, ws, "strict", seed, n=6)
    gbnf, lark_text = emit_gbnf(g), emit_lark(g)
    validator = jsonschema.Draft202012Validator(strictify(schema))
    for text in texts:
        args = parse_call(text, wire, schema)
        errors = list(validator.iter_errors(args))
        assert not errors, (text, errors[0].message)
        assert check.accepts("xgrammar", gbnf, text), text
        assert check.accepts("llguidance", lark_text, text), text


@SETTINGS
@given(schema=recursive_schemas(), seed=st.integers(0, 10**6))
def test_walked_texts_validate_spec_recursive(schema, seed):
    g, texts = walk_texts(schema, "json", "compact", "spec", seed, n=6)
    validator = jsonschema.Draft202012Validator(schema)
    gbnf = emit_gbnf(g)
    for text in texts:
        assert validator.is_valid(json.loads(text)), (text, schema)
        assert check.accepts("xgrammar", gbnf, text)


@pytest.mark.parametrize("fmt,engine", [("gbnf", "xgrammar"), ("lark", "llguidance"), ("lark", "lark")])
def test_recursive_definition_is_closed_in_strict_mode(fmt, engine):
    node = {
        "type": "object",
        "properties": {"v": {"type": "integer"}, "kids": {"type": "array", "items": REF}},
        "required": ["v"],
    }
    schema = {"type": "object", "properties": {"root": REF}, "required": ["root"], "$defs": {"node": node}}
    text = render(schema, format=fmt)
    validator = jsonschema.Draft202012Validator(strictify(schema))
    for inst in (
        {"root": {"v": 1, "kids": [{"v": 2, "extra": 3}]}},
        {"root": {"v": 1, "extra": 0}},
        {"root": {"v": 1, "kids": [{"v": 2, "kids": [{"v": 3, "x": None}]}]}},
    ):
        assert not validator.is_valid(inst)
        assert not check.accepts(engine, text, json.dumps(inst, separators=(",", ":"))), inst
    for inst in ({"root": {"v": 1, "kids": [{"v": 2, "kids": []}]}}, {"root": {"v": 1}}):
        assert validator.is_valid(inst)
        assert check.accepts(engine, text, json.dumps(inst, separators=(",", ":"))), inst


# -- random valid instances


def instance(schema: dict) -> st.SearchStrategy:
    if "const" in schema:
        return st.just(schema["const"])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if "anyOf" in schema:
        return st.one_of([instance(b) for b in schema["anyOf"]])
    t = schema.get("type")
    if isinstance(t, list):
        return st.one_of([instance({**schema, "type": x}) for x in t])
    if t == "null":
        return st.none()
    if t == "boolean":
        return st.booleans()
    if t == "integer":
        return st.integers(-60, 60)
    if t == "number":
        return st.one_of(st.integers(-60, 60), st.floats(-60, 60, allow_nan=False).map(lambda x: round(x, 3)))
    if t == "string":
        if "pattern" in schema:
            return st.from_regex(PATTERNS[schema["pattern"]], fullmatch=False)
        return st.one_of(st.sampled_from(STRINGS), st.text(max_size=6))
    if t == "array":
        items = schema.get("items", {})
        prefix = [instance(p) for p in schema.get("prefixItems", [])]
        n = schema.get("maxItems", schema.get("minItems", 0) + 3)
        rest = st.lists(instance(items), min_size=0, max_size=max(0, n - len(prefix)))
        return st.tuples(st.tuples(*prefix), rest).map(lambda pr: list(pr[0]) + pr[1])
    if t == "object":
        props = schema.get("properties", {})
        req = set(schema.get("required", []))

        @st.composite
        def build(draw):
            out = {}
            for k, sub in props.items():
                if k in req or draw(st.booleans()):
                    out[k] = draw(instance(sub))
            extra = schema.get("additionalProperties")
            if isinstance(extra, dict) and draw(st.booleans()):
                out[draw(st.sampled_from(["zz", "extra", "é2"]))] = draw(instance(extra))
            return out

        return build()
    return st.none()


@st.composite
def schema_and_value(draw, strat):
    schema = draw(strat)
    value = draw(instance(schema))
    return schema, value


@SETTINGS
@given(
    sv=schema_and_value(tool_schemas),
    wire=st.sampled_from(["json", "hermes", "antml", "harmony"]),
    ws=st.sampled_from(["compact", "bounded", "pretty"]),
    ws_max=st.sampled_from([None, 0, 1, 5]),
    order=st.sampled_from(["schema", "required-first", "any"]),
)
def test_valid_instances_accepted_in_canonical_form(sv, wire, ws, ws_max, order):
    schema, value = sv
    assume(jsonschema.Draft202012Validator(strictify(schema)).is_valid(value))
    tool = Tool(name="t", family="flat", description="", parameters=schema)
    if wire == "antml":  # documented limits of the antml wire: no extra parameters, no quote in names,
        # no raw '</parameter>' in a raw parameter
        assume("additionalProperties" not in schema and not any('"' in k for k in schema["properties"]))
        assume(not any(isinstance(v, str) and "</parameter>" in v for v in value.values()))
    opts = {"wire": wire, "ws": ws, "ws_max": ws_max, "order": order}
    text = serialize_call(tool, value, **opts)
    assert check.accepts("xgrammar", render(tool, format="gbnf", **opts), text), text
    assert check.accepts("llguidance", render(tool, format="lark", **opts), text), text
    if order == "any":  # one regex of all key orders is large; the CFG engines above cover it
        return
    try:
        rx = render(tool, format="regex", **opts)
    except Exception:
        return
    assert check.accepts("re", rx, text), text


# -- numbers


@settings(max_examples=150, deadline=None, derandomize=True)
@given(
    lo=st.none() | st.sampled_from([-3, -1.5, 0, 0.1, 1.1, 2, 1e-7, 123.456]),
    hi=st.none() | st.sampled_from([-1, 0, 0.25, 1, 2.5, 10, 1e5]),
    lo_x=st.booleans(),
    hi_x=st.booleans(),
    integer=st.booleans(),
    texts=st.lists(
        st.one_of(
            st.integers(-20, 20).map(str),
            st.decimals(-20, 20, allow_nan=False, allow_infinity=False, places=3).map(str),
            st.sampled_from(
                [
                    "-0",
                    "0.0",
                    "-0.0",
                    "1e2",
                    "1.10",
                    "0.1000001",
                    "2.50",
                    "1e-8",
                    "0.0000001",
                    "00",
                    "1.",
                    ".5",
                ]
            ),
        ),
        min_size=1,
        max_size=12,
    ),
)
def test_number_terminals_are_sound(lo, hi, lo_x, hi_x, integer, texts):
    schema: dict = {"type": "integer" if integer else "number"}
    if lo is not None:
        schema["exclusiveMinimum" if lo_x else "minimum"] = lo
    if hi is not None:
        schema["exclusiveMaximum" if hi_x else "maximum"] = hi
    try:
        rx = re.compile(render(schema, format="regex"))
    except Exception as e:  # an empty range has no grammar
        assert "admits no value" in str(e)
        return
    v = jsonschema.Draft202012Validator(schema)
    for t in texts:
        if rx.fullmatch(t):
            assert v.is_valid(json.loads(t)), (schema, t)
    for x in range(-20, 21):  # completeness on integers
        assert bool(rx.fullmatch(str(x))) == v.is_valid(x), (schema, x)
    for q in (Fraction(1, 4), Fraction(-5, 2), Fraction(3, 10), Fraction(11, 10)):
        x = float(q)
        if v.is_valid(x) and not integer:
            assert rx.fullmatch(repr(x)), (schema, x)


# -- patterns: our automaton against Python's re on ASCII text


@settings(max_examples=60, deadline=None, derandomize=True)
@given(pattern=st.sampled_from(sorted(PATTERNS)), text=st.text(alphabet="abcdxyz_.py019\n", max_size=8))
def test_pattern_automaton_matches_reference(pattern, text):
    from tooldecode.grammar.strlang import StrLang

    lang = StrLang(patterns=frozenset({pattern}))
    assert lang.accepts(text) == bool(re.search(PATTERNS[pattern], text)), (pattern, text)
    rx = render({"type": "string", "pattern": pattern}, format="regex")
    assert bool(re.fullmatch(rx, json.dumps(text))) == bool(re.search(PATTERNS[pattern], text))


@pytest.mark.parametrize("fmt", ["gbnf", "lark", "regex"])
def test_emitters_agree_on_a_walked_sample(fmt):
    schema = {
        "type": "object",
        "properties": {
            "a": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 4},
            "n": {"type": "integer", "minimum": 3, "maximum": 120},
            "l": {"type": "array", "items": {"enum": ["x", 1, None]}, "maxItems": 2},
        },
        "required": ["a"],
    }
    g, texts = walk_texts(schema, "json", "bounded", "strict", seed=7, n=20)
    text = {"gbnf": emit_gbnf, "lark": emit_lark, "regex": emit_regex}[fmt](g)
    engines = {"gbnf": ["xgrammar"], "lark": ["lark", "llguidance"], "regex": ["re"]}[fmt]
    for t in texts:
        jsonschema.validate(json.loads(t), strictify(schema))
        for eng in engines:
            assert check.accepts(eng, text, t), (eng, t)


# -- exhaustive differential check on small domains (engine: Python re / xgrammar; oracle: jsonschema)


def _arrays(values: list, maxlen: int):
    import itertools

    for n in range(maxlen + 1):
        for t in itertools.product(values, repeat=n):
            yield list(t)


@pytest.mark.parametrize("prefix", [[], [{"const": 0}], [{"type": "integer"}, {"type": "string"}]])
@pytest.mark.parametrize("contains", [None, {"const": 1}, "max1"])
def test_arrays_exhaustively(prefix, contains):
    from tooldecode.grammar.framing import serialize_args

    values = [0, 1, "a", None]
    for items in ({"type": "integer"}, False, {"enum": [1, None]}):
        for lo, hi in ((0, None), (1, 2), (3, 4), (0, 1)):
            s: dict = {"type": "array", "items": items, "minItems": lo}
            if prefix:
                s["prefixItems"] = prefix
            if hi is not None:
                s["maxItems"] = hi
            if contains is not None:
                s["contains"] = {"const": 1}
                if contains == "max1":
                    s["maxContains"] = 1
            try:
                rx = re.compile(render(s, format="regex", mode="spec"))
            except Exception as e:
                assert "admits no value" in str(e)
                continue
            v = jsonschema.Draft202012Validator(s)
            sir = compile_schema(s, mode="spec")
            for a in _arrays(values, 4):
                text = serialize_args(sir, a, wire="json", ws="compact", ws_max=None)
                assert bool(rx.fullmatch(text)) == v.is_valid(a), (s, a)


@pytest.mark.parametrize("mode", ["spec", "strict"])
@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"patternProperties": {"^b": {"type": "string"}}},
        {"propertyNames": {"maxLength": 1, "pattern": "^[a-c]"}},
        {"dependentRequired": {"a": ["b"]}},
    ],
)
def test_objects_exhaustively(mode, extra):
    import itertools

    from tooldecode.grammar.framing import serialize_args

    keys = ["a", "b", "c", "bb"]
    objects = [
        dict(zip(ks, vs, strict=True))
        for n in range(4)
        for ks in itertools.permutations(keys, n)
        for vs in itertools.product([0, "a"], repeat=n)
    ]
    for req, addl, (lo, hi) in [
        ([], None, (0, None)),
        (["a"], False, (1, None)),
        (["a", "c"], {"type": "integer"}, (0, 3)),
        ([], None, (2, 3)),
    ]:
        s: dict = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {}}, **extra}
        if req:
            s["required"] = req
        if addl is not None:
            s["additionalProperties"] = addl
        if lo:
            s["minProperties"] = lo
        if hi is not None:
            s["maxProperties"] = hi
        try:
            g = render(s, format="gbnf", mode=mode)
        except Exception as e:
            assert "admits no value" in str(e)
            continue
        v = jsonschema.Draft202012Validator(s if mode == "spec" else strictify(s))
        sir = compile_schema(s, mode=mode)
        for o in objects:
            text = serialize_args(sir, o, wire="json", ws="compact", ws_max=None)
            assert check.accepts("xgrammar", g, text) == v.is_valid(o), (s, o, text)
