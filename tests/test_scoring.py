"""Scoring of raw model outputs: extraction in every wrapping, verdict classes, flags, payload checks."""

from __future__ import annotations

import json

import pytest
from conftest import make_sample
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tooldecode.grammar import WIRES, serialize_call
from tooldecode.runs import sample_of, score_stored
from tooldecode.scenarios import get_scenario
from tooldecode.scoring import (
    PRECEDENCE,
    SCORER_VERSION,
    VERDICTS,
    extract_calls,
    score_record,
    score_text,
    toolset_tools,
)

CONTENT = (
    'def greet(name):\n    return "Hello, %s" % name\n\n\ndef join_path(a, b):\n    return a + "/" + b\n'
)
OLD = '    return a + "/" + b\n'
NEW = '    sep = "\\\\" if WINDOWS else "/"\n\treturn a + sep + b\n'
EXPECTED = CONTENT.replace(OLD, NEW)
GOLD_ARGS = {"path": "src/paths.py", "edits": [{"oldText": OLD, "newText": NEW}]}


@pytest.fixture(scope="module")
def scenario_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("scenarios")
    doc = {
        "id": "t-join-path",
        "language": "python",
        "title": "join_path ignores Windows",
        "path": "src/paths.py",
        "content": CONTENT,
        "task": "join_path breaks on Windows",
        "diagnosis": "It hard-codes '/'.",
        "edits": [{"oldText": OLD, "newText": NEW}],
        "expected": EXPECTED,
    }
    (d / "t-join-path.json").write_text(json.dumps(doc))
    return d


@pytest.fixture(scope="module")
def scenario(scenario_dir):
    return get_scenario("t-join-path", dirs=[scenario_dir])


NESTED = toolset_tools("nested")
FLAT = toolset_tools("flat-edit")
MULTI = toolset_tools("multiedit")


def call(args, name="edit", **extra):
    return json.dumps({"name": name, "arguments": args, **extra})


def score(text, *, tools=NESTED, wire="hermes", expected="edit", scenario=None, finish="stop"):
    return score_text(text, tools, wire=wire, expected_tool=expected, scenario=scenario, finish_reason=finish)


def with_item_key(key, value):
    return {"path": "src/paths.py", "edits": [{"oldText": OLD, "newText": NEW, key: value}]}


# ------------------------------------------------------------------------------------------ verdict classes


def test_verdict_names_and_precedence_cover_the_same_classes():
    assert set(VERDICTS) == set(PRECEDENCE) and len(VERDICTS) == 9
    assert PRECEDENCE[0] == "no_call" and PRECEDENCE[-1] == "valid"


def test_valid_hermes_call_with_correct_payload(scenario):
    v = score(f"<tool_call>\n{call(GOLD_ARGS)}\n</tool_call>", scenario=scenario)
    assert (v.verdict, v.tool, v.wrapping, v.flags) == ("valid", "edit", "hermes", [])
    assert v.payload == {
        "old_unique": True,
        "applies": True,
        "file_correct": True,
        "newtext_equal": True,
        "path_equal": True,
        "n_edits": 1,
        "n_gold": 1,
    }
    assert v.arguments == GOLD_ARGS


def test_invented_key_recorded_with_path_and_value(scenario):
    v = score(call(with_item_key("requireUnique", True)), scenario=scenario)
    assert v.verdict == "invented_key"
    assert v.invented_keys == [{"path": "edits[0].requireUnique", "key": "requireUnique", "value": True}]
    assert "payload_correct_schema_invalid" in v.flags
    assert v.payload["file_correct"] is True


def test_invented_keys_at_several_depths_in_path_order():
    args = {
        "path": "a.py",
        "edits": [{"oldText": "a", "newText": "b"}, {"oldText": "c", "newText": "d", "id": 2}],
        "kind": "replace",
    }
    v = score(call(args))
    assert [k["path"] for k in v.invented_keys] == ["edits[1].id", "kind"]


def test_invented_key_takes_precedence_over_missing_required():
    v = score(call({"path": "a.py", "edits": [{"oldText": "a", "unique": True}]}))
    assert v.verdict == "invented_key"
    assert any("'newText' is a required property" in e for e in v.errors)


def test_missing_required():
    v = score(call({"path": "a.py", "edits": [{"oldText": "a"}]}))
    assert v.verdict == "missing_required"
    assert v.errors == ["edits[0]: 'newText' is a required property"]


def test_wrong_type_for_edits_sent_as_string():
    v = score(call({"path": "a.py", "edits": json.dumps([{"oldText": "a", "newText": "b"}])}))
    assert v.verdict == "wrong_type"
    assert v.errors[0].startswith("edits: ")


def test_wrong_type_for_a_boolean_given_as_string():
    args = {"file_path": "a.py", "old_string": "a", "new_string": "b", "replace_all": "true"}
    v = score(call(args, name="Edit"), tools=FLAT, expected="Edit")
    assert v.verdict == "wrong_type"


def test_json_syntax_for_python_triple_quoted_strings():
    text = '{"name": "edit", "arguments": {"path": "a.py", "edits": [{"oldText": """x = 1""", "newText": "x = 2"}]}}'
    v = score(text, wire="call-json")
    assert v.verdict == "json_syntax"
    assert v.errors[0].startswith("invalid JSON")


def test_json_syntax_for_a_raw_newline_inside_a_string():
    text = '<tool_call>{"name": "edit", "arguments": {"path": "a.py", "edits": [{"oldText": "a\nb", "newText": "c"}]}}'
    assert score(text + "</tool_call>").verdict == "json_syntax"


def test_truncated_only_when_the_sample_hit_the_length_limit():
    text = '<tool_call>\n{"name": "edit", "arguments": {"path": "a.py", "edits": [{"oldText": "x = 1", "newT'
    assert score(text, finish="length").verdict == "truncated"
    assert score(text, finish="stop").verdict == "json_syntax"
    assert (
        score(text, finish=None).verdict == "truncated"
    )  # unknown finish reason: an unbalanced end is a cut


def test_no_call_for_prose_and_for_code_with_braces():
    assert score("I think the bug is in join_path; it should use os.sep.").verdict == "no_call"
    prose = "Use a dict:\n```python\nopts = {'sep': '/'}\nprint(opts)\n```\n"
    v = score(prose)
    assert v.verdict == "no_call" and v.tool is None and v.n_calls == 0


def test_wrong_tool_for_another_offered_tool_and_for_an_invented_tool():
    v = score(call({"path": "src/paths.py"}, name="read"))
    assert (v.verdict, v.tool) == ("wrong_tool", "read")
    v = score(call(GOLD_ARGS, name="apply_patch"))
    assert v.verdict == "wrong_tool"
    assert "not offered" in v.errors[0]


def test_wrong_tool_ranks_below_json_syntax():
    text = (
        call({"path": "a.py"}, name="read") + '\n{"name": "edit", "arguments": {"path": "a.py", "edits": [}'
    )
    assert score(text).verdict == "json_syntax"


# --------------------------------------------------------------------------------------------- wire formats


@pytest.mark.parametrize("wire", WIRES)
@pytest.mark.parametrize("ws", ["compact", "pretty"])
def test_calls_serialized_by_the_grammar_score_valid_in_every_wire(wire, ws, scenario):
    cases = [
        (NESTED, "edit", GOLD_ARGS),
        (FLAT, "Edit", {"file_path": "src/paths.py", "old_string": OLD, "new_string": NEW}),
        (
            MULTI,
            "MultiEdit",
            {"file_path": "src/paths.py", "edits": [{"old_string": OLD, "new_string": NEW}]},
        ),
    ]
    for tools, name, args in cases:
        text = serialize_call(name, args, wire=wire, ws=ws)
        v = score(text, tools=tools, wire=wire, expected=name, scenario=scenario)
        assert (v.verdict, v.tool, v.flags, v.arguments) == ("valid", name, [], args), text
        assert v.payload["file_correct"] and v.payload["path_equal"]


def test_wire_json_bare_arguments_belong_to_the_expected_tool(scenario):
    v = score(json.dumps(GOLD_ARGS, indent=2), wire="json", scenario=scenario)
    assert (v.verdict, v.tool, v.wrapping, v.shape, v.flags) == ("valid", "edit", "bare-json", "args", [])
    assert v.payload["file_correct"]


def test_wire_call_json():
    v = score(call(GOLD_ARGS), wire="call-json")
    assert (v.verdict, v.wrapping, v.shape) == ("valid", "bare-json", "call-json")


def test_wire_antml_types_parameters_by_schema(scenario):
    edits = json.dumps(GOLD_ARGS["edits"])
    text = (
        '<function_calls>\n<invoke name="edit">\n<parameter name="path">src/paths.py</parameter>\n'
        f'<parameter name="edits">{edits}</parameter>\n</invoke>\n</function_calls>'
    )
    v = score(text, wire="antml", scenario=scenario)
    assert (v.verdict, v.tool, v.wrapping, v.flags) == ("valid", "edit", "antml", [])
    assert v.arguments == GOLD_ARGS
    assert v.payload["file_correct"]


def test_wire_antml_string_parameter_that_looks_like_json_stays_a_string():
    text = (
        '<function_calls><invoke name="write"><parameter name="path">a.json</parameter>'
        '<parameter name="content">{"a": 1}</parameter></invoke></function_calls>'
    )
    v = score(text, wire="antml", expected="write")
    assert v.verdict == "valid"
    assert v.arguments == {"path": "a.json", "content": '{"a": 1}'}


def test_wire_antml_invented_parameter_and_broken_json_parameter():
    base = '<function_calls><invoke name="edit"><parameter name="path">a.py</parameter>'
    good = '<parameter name="edits">[{"oldText": "a", "newText": "b"}]</parameter>'
    v = score(
        base + good + '<parameter name="unique">true</parameter></invoke></function_calls>', wire="antml"
    )
    assert v.verdict == "invented_key"
    assert v.invented_keys == [{"path": "unique", "key": "unique", "value": True}]
    bad = '<parameter name="edits">[{"oldText": "a", "newText": "b"</parameter></invoke></function_calls>'
    assert score(base + bad, wire="antml").verdict == "json_syntax"


def test_wire_antml_cut_inside_a_parameter_is_truncated():
    text = '<function_calls><invoke name="edit"><parameter name="path">a.py</parameter><parameter name="edits">[{"old'
    assert score(text, wire="antml", finish="length").verdict == "truncated"


def test_closing_tags_eaten_by_the_stop_string():
    edits = json.dumps(GOLD_ARGS["edits"])
    antml = (
        f'<function_calls><invoke name="edit"><parameter name="path">src/paths.py</parameter>'
        f'<parameter name="edits">{edits}</parameter>'
    )
    assert score(antml + "</invoke>\n", wire="antml").verdict == "valid"
    assert score(antml + "\n", wire="antml", finish="stop").verdict == "valid"
    assert score(antml, wire="antml", finish="length").verdict == "truncated"
    assert score(f"<tool_call>\n{call(GOLD_ARGS)}\n").verdict == "valid"
    assert (
        score(
            f"<|channel|>commentary to=functions.edit <|constrain|>json<|message|>{json.dumps(GOLD_ARGS)}",
            wire="harmony",
        ).verdict
        == "valid"
    )


@pytest.mark.parametrize("prefix", ["<|start|>assistant", ""])
def test_wire_harmony_with_and_without_start(prefix, scenario):
    text = (
        f"{prefix}<|channel|>commentary to=functions.edit <|constrain|>json<|message|>"
        f"{json.dumps(GOLD_ARGS)}<|call|>"
    )
    v = score(text, wire="harmony", scenario=scenario)
    assert (v.verdict, v.tool, v.wrapping, v.flags) == ("valid", "edit", "harmony", [])
    assert v.payload["file_correct"]


def test_wire_harmony_wrong_tool_and_truncation():
    text = '<|channel|>commentary to=functions.read <|constrain|>json<|message|>{"path": "a.py"}<|call|>'
    assert score(text, wire="harmony").verdict == "wrong_tool"
    cut = (
        '<|channel|>commentary to=functions.edit <|constrain|>json<|message|>{"path": "a.py", "edits": [{"old'
    )
    assert score(cut, wire="harmony", finish="length").verdict == "truncated"


# ------------------------------------------------------------------------------------ wrappings seen in pilots


def test_fenced_json_block_inside_prose():
    text = f"I'll fix join_path.\n\n```json\n{call(GOLD_ARGS)}\n```\n\nThis adds Windows support."
    v = score(text)
    assert (v.verdict, v.wrapping) == ("valid", "fenced-json")
    assert "text_around_call" in v.flags


def test_json_inside_prose():
    v = score(f"Sure, here is the call: {call(GOLD_ARGS)} Let me know.")
    assert (v.verdict, v.wrapping) == ("valid", "json-in-prose")
    assert "text_around_call" in v.flags


def test_function_and_parameters_keys_in_place_of_name_and_arguments():
    text = json.dumps({"function": "edit", "parameters": GOLD_ARGS})
    v = score(text)
    assert v.verdict == "valid"
    assert {"name_key_variant", "arguments_key_variant"} <= set(v.flags)
    v = score(json.dumps({"tool": "edit", "arguments": GOLD_ARGS}))
    assert v.verdict == "valid" and "name_key_variant" in v.flags


def test_openai_style_function_object_with_string_arguments():
    text = json.dumps({"type": "function", "function": {"name": "edit", "arguments": json.dumps(GOLD_ARGS)}})
    v = score(text)
    assert (v.verdict, v.shape) == ("valid", "openai")
    assert "arguments_as_string" in v.flags


def test_arguments_as_a_json_string():
    v = score(call(json.dumps(GOLD_ARGS)))
    assert v.verdict == "valid" and "arguments_as_string" in v.flags
    v = score(call('{"path": "a.py", "edits": [}'))
    assert v.verdict == "json_syntax"


def test_smollm2_list_inside_tool_call():
    text = f"<tool_call>[{call(GOLD_ARGS)}]</tool_call>"
    v = score(text)
    assert (v.verdict, v.wrapping, v.n_calls) == ("valid", "hermes", 1)


def test_flat_envelope_name_beside_the_arguments():
    v = score(json.dumps({"name": "edit", **GOLD_ARGS}))
    assert v.verdict == "valid" and "flat_envelope" in v.flags


def test_python_style_call():
    v = score('edit(path="src/paths.py", edits=[{"oldText": "a", "newText": "b"}])')
    assert (v.verdict, v.wrapping) == ("valid", "python-call")
    assert score("f.write(data)\nread(path)").verdict == "no_call"


def test_python_call_inside_tool_call_tags_and_prose_before_json_inside_tags():
    v = score('<tool_call>edit(path="a.py", edits=[{"oldText": "a", "newText": "b"}])</tool_call>')
    assert (v.verdict, v.wrapping, v.shape) == ("valid", "hermes", "python")
    v = score(f"<tool_call>Note (fix): {call(GOLD_ARGS)}</tool_call>")
    assert (v.verdict, v.wrapping) == ("valid", "hermes")


def test_broken_dict_literal_in_code_is_not_a_call_attempt():
    text = 'Fixed version:\n```python\nopts = {"path": base + name}\nreturn opts\n```'
    assert score(text).verdict == "no_call"
    text = '{"path": "a.py", "edits": [{"oldText": "a", "newText": b}]}'  # two keys of the tool: an attempt
    assert score(text).verdict == "json_syntax"


def test_unnamed_arguments_in_a_named_wire_are_flagged():
    v = score(json.dumps(GOLD_ARGS), wire="hermes")
    assert v.verdict == "valid" and "unnamed_call" in v.flags


def test_invented_tool_response_turn_is_not_a_call():
    text = f'<tool_call>\n{call(GOLD_ARGS)}\n</tool_call>\n<tool_response>\n{{"name": "edit", "arguments": {{}}}}\n</tool_response>'
    v = score(text)
    assert v.verdict == "valid" and v.n_calls == 1
    assert "text_around_call" in v.flags  # the model kept writing after its call


# --------------------------------------------------------------------------------------------------- flags


def test_multiple_calls_prefers_the_expected_tool():
    text = call({"path": "src/paths.py"}, name="read") + "\n" + call(GOLD_ARGS)
    v = score(text)
    assert v.verdict == "valid" and v.tool == "edit"
    assert "multiple_calls" in v.flags


def test_duplicate_key_flag():
    text = (
        '{"name": "edit", "arguments": {"path": "a.py", "edits": [{"oldText": "a", "newText": "b", '
        '"newText": "c"}]}}'
    )
    v = score(text)
    assert v.verdict == "valid" and "duplicate_key" in v.flags
    assert v.duplicate_keys == ["newText"]
    assert v.arguments["edits"][0]["newText"] == "c"  # last one wins, as in JSON.parse


def test_schema_echo_additional_properties_copied_from_the_schema():
    v = score(call(with_item_key("additionalProperties", False)))
    assert v.verdict == "invented_key" and "schema_echo" in v.flags


def test_schema_echo_description_copied_as_a_value():
    args = {
        "path": "Path of the file to edit, relative to the workspace root.",
        "edits": [{"oldText": "a", "newText": "b"}],
    }
    v = score(call(args))
    assert v.verdict == "valid" and "schema_echo" in v.flags


def test_schema_echo_not_raised_for_ordinary_invented_keys():
    v = score(call(with_item_key("type", "replace")))
    assert v.verdict == "invented_key" and "schema_echo" not in v.flags
    assert "schema_echo" in score(call(with_item_key("type", "string"))).flags


# ------------------------------------------------------------------------------------------------- payload


def test_payload_wrong_new_text_and_ambiguous_old_text(scenario):
    args = {"path": "src/paths.py", "edits": [{"oldText": OLD, "newText": "    return os.path.join(a, b)\n"}]}
    p = score(call(args), scenario=scenario).payload
    assert p["applies"] and p["old_unique"] and not p["file_correct"] and not p["newtext_equal"]
    args = {"path": "src/paths.py", "edits": [{"oldText": "return", "newText": "yield"}]}
    p = score(call(args), scenario=scenario).payload
    assert not p["old_unique"] and not p["applies"] and not p["file_correct"]


def test_payload_for_flat_edit_and_multiedit(scenario):
    flat = {"file_path": "src/paths.py", "old_string": OLD, "new_string": NEW}
    v = score(call(flat, name="Edit"), tools=FLAT, expected="Edit", scenario=scenario)
    assert v.verdict == "valid" and v.payload["file_correct"] and v.payload["path_equal"]
    multi = {"file_path": "src/paths.py", "edits": [{"old_string": OLD, "new_string": NEW}]}
    v = score(call(multi, name="MultiEdit"), tools=MULTI, expected="MultiEdit", scenario=scenario)
    assert v.verdict == "valid" and v.payload["file_correct"]


def test_payload_is_none_without_edits(scenario):
    assert score(call({"path": "src/paths.py"}), scenario=scenario).payload is None


def test_payload_correct_but_old_text_key_misspelled_is_not_payload_correct(scenario):
    args = {"path": "src/paths.py", "edits": [{"old_text": OLD, "newText": NEW}]}
    v = score(call(args), scenario=scenario)
    assert v.verdict == "invented_key"
    assert v.payload["file_correct"] is False and "payload_correct_schema_invalid" not in v.flags


# ------------------------------------------------------------------------------------------------- records


def test_score_record_uses_arm_and_prefill(scenario_dir):
    prefill = '<tool_call>\n{"name": "edit", "arguments": {'
    body = json.dumps(GOLD_ARGS)[1:] + "}\n</tool_call>"
    record = make_sample(
        body,
        arm={"mode": "loose", "toolset": "nested", "wire": "hermes"},
        key="a/t-join-path/0/0",
        scenario="t-join-path",
        prefill=prefill,
    )
    out = score_stored(record, {"config": {"scenario_dirs": [str(scenario_dir)]}})
    assert out["key"] == "a/t-join-path/0/0" and out["scorer"] == SCORER_VERSION
    assert out["verdict"] == "valid" and out["payload"]["file_correct"]
    json.dumps(out)  # JSON-able
    # the line is the record's verdict: score_record of the SampleRecord against its scenario
    verdict = score_record(sample_of(record), get_scenario("t-join-path", dirs=[scenario_dir]))
    assert verdict.to_json() == out and verdict.tool == "edit"


def test_score_record_flat_toolset_expects_edit_and_skips_errors(scenario_dir):
    record = make_sample(
        call({"path": "x"}, name="Read"),
        arm={"toolset": "flat-edit", "wire": "call-json"},
        key="k",
        scenario="t-join-path",
    )
    manifest = {"scenario_dirs": [str(scenario_dir)]}
    assert score_stored(record, manifest)["verdict"] == "wrong_tool"
    skipped = score_stored({**record, "error": "mask failed"}, manifest)
    assert skipped["verdict"] is None and skipped["skipped"] == "mask failed"


def test_extract_calls_spans_and_raw():
    text = f"Here:\n<tool_call>{call(GOLD_ARGS)}</tool_call>"
    (c,) = extract_calls(text, tools=NESTED)
    assert text[c.span[0] : c.span[1]] == c.raw and c.raw.startswith("<tool_call>")


FRAGMENTS = list('{}[]":,\\ \nab') + [
    "<tool_call>",
    "</tool_call>",
    '"name"',
    '"edit"',
    '"arguments"',
    "```json\n",
    "to=functions.edit",
    "<|message|>",
    '<invoke name="edit">',
    "edit(",
    '<parameter name="edits">',
    '"edits"',
    '"oldText"',
    "\\u12",
    "true",
]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.one_of(st.text(max_size=60), st.lists(st.sampled_from(FRAGMENTS), max_size=40).map("".join)),
    st.sampled_from([None, "json", "hermes", "antml", "harmony"]),
    st.sampled_from([None, "stop", "length"]),
)
def test_scoring_never_raises(text, wire, finish):
    v = score_text(text, NESTED, wire=wire, expected_tool="edit", finish_reason=finish)
    assert v.verdict in VERDICTS


@pytest.mark.parametrize(
    "args,wire",
    [
        ({"path": "<tool_call>", "edits": []}, "json"),
        ({"path": "<tool_call>", "edits": []}, "hermes"),
        ({"path": "a", "edits": [{"oldText": "</tool_call>", "newText": "<tool_call>"}]}, "hermes"),
        ({"path": "```json\n", "edits": []}, "json"),
        ({"path": '<function_calls><invoke name="edit">', "edits": []}, "json"),
    ],
)
def test_markup_inside_a_json_string_is_content(args, wire):
    text = json.dumps(args) if wire == "json" else f"<tool_call>\n{call(args)}\n</tool_call>"
    v = score(text)
    assert v.verdict == "valid" and v.arguments == args, (v.verdict, v.errors)


# ------------------------------------------------------------------------------- did the edit work (outcome)

CRLF_CONTENT = "a = 1\r\nb = 2\r\nc = 3\r\n"
CRLF_EDITS = [{"oldText": "a = 1", "newText": "a = 10"}, {"oldText": "c = 3", "newText": "c = 30"}]
CRLF_EXPECTED = "a = 10\r\nb = 2\r\nc = 30\r\n"


@pytest.fixture(scope="module")
def crlf(tmp_path_factory):
    d = tmp_path_factory.mktemp("crlf")
    doc = {
        "id": "t-crlf-two",
        "language": "ini",
        "title": "two values",
        "path": "conf.ini",
        "content": CRLF_CONTENT,
        "task": "raise a and c",
        "diagnosis": "both are too small",
        "edits": CRLF_EDITS,
        "expected": CRLF_EXPECTED,
    }
    (d / "t-crlf-two.json").write_text(json.dumps(doc))
    return get_scenario("t-crlf-two", dirs=[d])


def outcome_of(edits, scenario, *, path=None, tools=NESTED, name="edit", extra=None):
    args = {"path": path or scenario.path, "edits": edits, **(extra or {})}
    return score(call(args, name=name), tools=tools, expected=name, scenario=scenario).outcome


def test_outcome_correct_multi_item_call(crlf):
    o = outcome_of(CRLF_EDITS, crlf)
    assert o["valid"] and o["applies"] and o["correct"] and o["exact"] and o["works"]
    assert not o["wrong_but_valid"] and o["why"] is None


def test_outcome_overlapping_edits_do_not_apply(crlf):
    # both old texts occur once, but their spans share "b"
    o = outcome_of(
        [{"oldText": "1\r\nb", "newText": "1\r\nB"}, {"oldText": "b = 2", "newText": "b = 3"}], crlf
    )
    assert o["valid"] and not o["applies"] and not o["correct"] and o["wrong_but_valid"]
    assert "overlap" in o["why"]
    # the same item twice overlaps itself
    o = outcome_of([CRLF_EDITS[0], CRLF_EDITS[0]], crlf)
    assert not o["applies"] and "overlap" in o["why"]


def test_outcome_non_unique_and_missing_old_text(crlf, scenario):
    o = outcome_of([{"oldText": " = ", "newText": "="}], crlf)
    assert not o["applies"] and "2 or more" in o["why"] and o["wrong_but_valid"]
    o = outcome_of([{"oldText": "d = 4", "newText": "d = 5"}], crlf)
    assert not o["applies"] and "0 times" in o["why"]
    o = outcome_of([{"oldText": "", "newText": "x"}], crlf)
    assert not o["applies"] and "empty" in o["why"]


def test_outcome_crlf_line_endings_count(crlf):
    # an old text written with LF does not match the CRLF file
    o = outcome_of([{"oldText": "a = 1\nb = 2", "newText": "a = 10\nb = 2"}, CRLF_EDITS[1]], crlf)
    assert not o["applies"] and "0 times" in o["why"]
    # a new text that turns a CRLF line into LF applies but is not correct: line endings are not trailing
    # whitespace
    o = outcome_of([{"oldText": "a = 1\r\n", "newText": "a = 10\n"}, CRLF_EDITS[1]], crlf)
    assert (
        o["applies"] and not o["correct"] and o["wrong_but_valid"] and o["why"] == "the edited file differs"
    )


def test_outcome_correct_up_to_trailing_whitespace(crlf):
    o = outcome_of([{"oldText": "a = 1", "newText": "a = 10  \t"}, CRLF_EDITS[1]], crlf)
    assert o["applies"] and o["correct"] and not o["exact"] and o["works"]
    o = outcome_of([CRLF_EDITS[0], {"oldText": "c = 3\r\n", "newText": "c = 30\r\n\r\n\r\n"}], crlf)
    assert o["correct"] and not o["exact"]
    # whitespace inside a line is not trailing
    o = outcome_of([{"oldText": "a = 1", "newText": "a =  10"}, CRLF_EDITS[1]], crlf)
    assert o["applies"] and not o["correct"]


def test_outcome_items_match_the_original_file_except_for_multiedit(crlf):
    # item 0 writes text that item 1 looks for: in the original file "c = 3" occurs once, so the nested
    # edit tool applies both; MultiEdit applies them in sequence and finds "c = 3" twice
    edits = [{"oldText": "a = 1", "newText": "c = 3"}, {"oldText": "c = 3", "newText": "c = 30"}]
    o = outcome_of(edits, crlf)
    assert o["applies"] and not o["correct"]
    multi = [{"old_string": e["oldText"], "new_string": e["newText"]} for e in edits]
    args = {"file_path": crlf.path, "edits": multi}
    v = score(call(args, name="MultiEdit"), tools=MULTI, expected="MultiEdit", scenario=crlf)
    assert v.verdict == "valid" and not v.outcome["applies"] and "2 times" in v.outcome["why"]
    ok = [{"old_string": e["oldText"], "new_string": e["newText"]} for e in CRLF_EDITS]
    v = score(call({"file_path": crlf.path, "edits": ok}, name="MultiEdit"), tools=MULTI, expected="MultiEdit",
              scenario=crlf)  # fmt: skip
    assert v.outcome["works"]


def test_outcome_wrong_path_invented_key_and_no_call(crlf):
    o = outcome_of(CRLF_EDITS, crlf, path="other.ini")
    assert o["valid"] and not o["applies"] and "path" in o["why"] and o["wrong_but_valid"]
    assert outcome_of(CRLF_EDITS, crlf, path="./conf.ini")["works"]
    o = outcome_of(CRLF_EDITS, crlf, extra={"dryRun": False})
    assert not o["valid"] and o["applies"] and o["correct"] and not o["works"] and not o["wrong_but_valid"]
    o = score("I would rather not.", scenario=crlf).outcome
    assert o == {"valid": False, "applies": False, "correct": False, "exact": False, "cut": False,
                 "why": "verdict no_call", "works": False, "wrong_but_valid": False}  # fmt: skip
    truncated = call({"path": crlf.path, "edits": CRLF_EDITS})[:-12]
    cut = score(truncated, scenario=crlf, finish="length").outcome
    assert cut["why"] == "verdict truncated" and cut["cut"]
    assert score(call({"path": crlf.path, "edits": CRLF_EDITS})).outcome is None  # no scenario


def test_stored_outcome_recomputes_records_scored_before_it(scenario_dir, scenario):
    from tooldecode.scoring import stored_outcome

    prefill = '<tool_call>\n{"name": "edit", "arguments": {'
    args = {"path": "src/paths.py", "edits": [{"oldText": OLD, "newText": NEW + "x\n"}]}
    record = make_sample(
        json.dumps(args)[1:] + "}\n</tool_call>",
        arm={"mode": "loose", "toolset": "nested", "wire": "hermes"},
        key="a/t-join-path/0/1",
        scenario="t-join-path",
        index=1,
        prefill=prefill,
    )
    out = score_stored(record, {"config": {"scenario_dirs": [str(scenario_dir)]}})
    assert out["outcome"]["valid"] and out["outcome"]["applies"] and out["outcome"]["wrong_but_valid"]
    old = {k: v for k, v in out.items() if k != "outcome"}
    assert stored_outcome(old, scenario, NESTED, "stop") == out["outcome"]
