"""tooldecode.classify: the key-resolved kinds of what follows a value, for samples and the probe."""

from __future__ import annotations

import json

import pytest

from tooldecode.classify import (
    CLOSE,
    CONTINUE,
    OTHER,
    UNDETERMINED,
    KeyContext,
    classify_continuation,
    key_context,
    open_object_keys,
    tool_words,
)
from tooldecode.grammar import load_tool

PREFIX = '{"name": "edit", "arguments": {"path": "a.py", "edits": [{"oldText": "x", "newText": "y = 1\\n'
TOOLS = [load_tool(n) for n in ("edit", "read", "write", "bash")]


@pytest.fixture(scope="module")
def ctx() -> KeyContext:
    return key_context(PREFIX, TOOLS, expected_tool="edit")


def test_context_from_the_call_prefix_and_the_tools(ctx):
    assert ctx.present == {"oldText", "newText"}
    assert ctx.declared == {"oldText", "newText"}
    assert ctx.elsewhere == {"path", "edits"}
    assert {"required", "properties", "type", "description", "command"} <= ctx.schema_words
    assert not ctx.schema_words & (ctx.present | ctx.elsewhere)


def test_the_wire_envelope_declares_name_and_arguments():
    env = key_context('<tool_call>\n{"name": "edit', TOOLS, expected_tool="edit")
    assert env.present == {"name"} and env.declared == {"name", "arguments"}
    c = classify_continuation('", "arguments": {', context=env)
    assert (c.group, c.kind) == (CONTINUE, "declared")
    assert classify_continuation('", "tool": 1', context=env).kind != "declared"


@pytest.mark.parametrize(
    "text,group,kind,key",
    [
        ('"}]}}', CLOSE, "close", None),
        ('" }', CLOSE, "close", None),
        ('"]', OTHER, "wrong_closer", None),
        ("\\n    return x", OTHER, "string_goes_on", None),
        ('"x', OTHER, "stray", None),
        ('", "required": ["oldText"]}', CONTINUE, "schema_word", "required"),
        ('", "additionalProperties": false', CONTINUE, "invented", "additionalProperties"),  # not shown
        ('", "newText": "z"', CONTINUE, "repeat", "newText"),
        ('", "oldText_2": ""', CONTINUE, "repeat", "oldText_2"),
        ('", "newText1": ""', CONTINUE, "repeat", "newText1"),
        ('", "newText\\": "', CONTINUE, "repeat", 'newText": '),
        ('", "newText\': ', CONTINUE, "repeat", "newText': "),
        ('", "newText proof', CONTINUE, "repeat", "newText proof"),
        ('", "path": "b"', CONTINUE, "wrong_level", "path"),
        ('", "matchCase": true', CONTINUE, "invented", "matchCase"),
        ('", "newTextual": 1', CONTINUE, "invented", "newTextual"),
        ('", {"oldText": "a"', CONTINUE, "next_item", None),
        ('", }', CONTINUE, "other", None),
        ('", "required", "x"', CONTINUE, "other", "required"),  # no ':' after it: not a key
        ('",\n  "notes"  :  1', CONTINUE, "invented", "notes"),
    ],
)
def test_kinds(ctx, text, group, kind, key):
    c = classify_continuation(text, context=ctx, final=True)
    assert (c.group, c.kind, c.key) == (group, kind, key)


@pytest.mark.parametrize("text", ['"', '",', '", "', '", "requ', '", "required"', '", "newText'])
def test_open_text_is_undetermined_until_final(ctx, text):
    c = classify_continuation(text, context=ctx)
    assert c.kind == UNDETERMINED
    assert classify_continuation(text, context=ctx, final=True).kind != UNDETERMINED


def test_incremental_view_agrees_with_the_whole_string(ctx):
    for whole in ('", "matchCase": true}', '", "newText\\": "', '"}]}}', '", "required": []'):
        final = classify_continuation(whole, context=ctx, final=True)
        for i in range(len(whole) + 1):
            c = classify_continuation(whole[:i], context=ctx)
            assert c.kind in (UNDETERMINED, final.kind)
            assert c.group in (UNDETERMINED, final.group)


def test_pending_bytes_and_arrays():
    # the forced prefix ended two bytes before the decision: "y" and the quote are pending
    assert classify_continuation('y"}', pending='y"').kind == "close"
    assert classify_continuation("yy", pending='y"').kind == "string_goes_on"
    assert classify_continuation("1]", pending="1", container="array", in_string=False).kind == "close"
    assert classify_continuation("1, {", pending="1", container="array", in_string=False).kind == "next_item"
    assert classify_continuation("1}", pending="1", container="array", in_string=False).kind == "wrong_closer"
    # bytes split inside a UTF-8 character are fine
    assert classify_continuation('", "caf\xc3'.encode("latin-1")).kind == UNDETERMINED


def test_open_object_keys():
    assert open_object_keys(PREFIX) == ["oldText", "newText"]
    assert open_object_keys('<tool_call>\n[{"name": "edit", "arguments": {"path": "a", "ed') == ["path"]
    assert open_object_keys('{"a": {"b": 1}, "c": "x\\"}", "d": [1, {"e": 2}], "f": "') == [
        "a",
        "c",
        "d",
        "f",
    ]
    assert open_object_keys("no json here") is None


def test_tool_words_are_keys_and_word_values():
    words = tool_words([load_tool("edit")])
    assert {"type", "function", "name", "edit", "parameters", "properties", "required", "string"} <= words
    assert not any(" " in w for w in words)  # descriptions are sentences, not words
    assert tool_words([json.loads('{"type": "function", "function": {"name": "x"}}')]) >= {"x", "function"}


def test_schema_words_follow_the_schema_shown():
    from tooldecode.grammar import strictify

    tool = load_tool("edit")
    closed = {"type": "function", "function": {"name": "edit", "parameters": strictify(tool.parameters)}}
    text = '", "additionalProperties": false'
    assert (
        classify_continuation(text, context=key_context(PREFIX, [closed]), final=True).kind == "schema_word"
    )
    assert classify_continuation(text, context=key_context(PREFIX, [tool]), final=True).kind == "invented"


@pytest.mark.parametrize("duplicates,accepted", [("forbid", False), ("admit", True)])
def test_spec_grammar_duplicate_option_and_the_repeat_kind(duplicates, accepted):
    """The open (spec) grammar either forbids an extra member named like a declared key or admits it;
    either way what the model would write there is classified as a repeat, not an invented key."""
    from tooldecode.grammar import check, render_toolset

    dup = '{"name": "edit", "arguments": {"path": "a", "edits": [{"oldText": "x", "newText": "y", "newText": "z"}]}}'
    new = '{"name": "edit", "arguments": {"path": "a", "edits": [{"oldText": "x", "newText": "y", "note": "z"}]}}'
    g = render_toolset(
        TOOLS[:1], format="gbnf", wire="call-json", mode="spec", ws="bounded", duplicates=duplicates
    )
    assert check.accepts("xgrammar", g, dup) is accepted
    assert check.accepts("xgrammar", g, new)
    cut = dup.index('", "newText": "z"')
    ctx = key_context(dup[:cut], TOOLS, expected_tool="edit")
    assert classify_continuation(dup[cut:], context=ctx, final=True).kind == "repeat"
    with pytest.raises(Exception, match="duplicates"):
        render_toolset(TOOLS[:1], mode="spec", duplicates="sometimes")


# ------------------------------------------------------------------------------- outcomes of extra keys

L2_ARM = {"model": "m", "mode": "loose", "level": "L2", "temperature": 1.0, "history": "agentic",
          "toolset": "nested", "wire": "call-json", "expected_tool": "edit"}  # fmt: skip


def l2_sample(text: str, finish_reason: str = "stop", **arm):
    from conftest import make_record

    return make_record(text, arm={**L2_ARM, **arm}, key=text, scenario="s0", prefill=PREFIX,
                       finish_reason=finish_reason)  # fmt: skip


def test_source_shaped_failure_parses_and_only_adds_a_key_inside_an_item():
    from tooldecode.measures import sample_outcome, sample_verdict

    s = l2_sample('", "required": ["oldText", "newText"]}]}}')
    assert sample_verdict(s).verdict == "invented_key"
    assert sample_outcome(s) == "source_shaped"
    wrong_level = l2_sample('", "path": "b.py"}]}}')  # a key of another level, inside the item
    assert sample_outcome(wrong_level) == "source_shaped"


def test_duplicate_key_is_json_legal_and_never_a_validation_failure():
    from tooldecode.measures import sample_outcome, sample_verdict

    s = l2_sample('", "newText": "z"}]}}')
    v = sample_verdict(s)
    assert v.verdict == "valid" and v.duplicate_keys  # json.loads keeps the last value
    assert sample_outcome(s) == "duplicate"
    # a repeat that runs on until the token budget is still a duplicate, not a derailment
    cut = l2_sample('", "newText": "z", "oldText": "x", "newText": "', finish_reason="length")
    assert sample_outcome(cut) == "duplicate"


def test_derailment_is_an_extra_key_after_which_the_call_does_not_parse():
    from tooldecode.measures import sample_outcome, sample_verdict

    s = l2_sample('", "size": 8}\\n ceramic"}')
    assert sample_verdict(s).verdict == "json_syntax"
    assert sample_outcome(s) == "derailment"


def test_run_on_string_and_close_keep_their_kind():
    from tooldecode.measures import sample_outcome

    assert sample_outcome(l2_sample("z = 2\\n    return x")) == "string_goes_on"
    assert sample_outcome(l2_sample('"}]}}')) == "close"


def test_prior_arm_schema_words_include_the_earlier_tools():
    from tooldecode.measures import sample_continuation

    for text, key in (
        ('", "replace_all": true}]}}', "replace_all"),
        ('", "oldString": "x"}]}}', "oldString"),
    ):
        prior = sample_continuation(l2_sample(text, prior=True))
        assert (prior.kind, prior.key) == ("schema_word", key)
        assert sample_continuation(l2_sample(text)).kind == "invented"  # the flat Edit tool is not shown


@pytest.mark.parametrize("key", ["newTextDoc", "newTextArgs", "oldTextModifier", "myNewText", "new_text"])
def test_mangled_spellings_of_a_present_key_are_repeats(ctx, key):
    c = classify_continuation(f'", "{key}": 1', context=ctx, final=True)
    assert (c.kind, c.key) == ("repeat", key)
    assert classify_continuation('", "newTextual": 1', context=ctx, final=True).kind == "invented"


def test_a_mangled_repeat_in_a_call_that_parses_is_the_source_failure_not_a_duplicate():
    from tooldecode.measures import sample_outcome

    assert sample_outcome(l2_sample('", "newTextDoc": "z"}]}}')) == "source_shaped"


def test_call_outcome_other_failures():
    from tooldecode.classify import Continuation, call_outcome

    extra = Continuation(CONTINUE, "invented", "notes")
    missing = {"verdict": "invented_key", "flags": [], "invented_keys": [{"path": "edits[0].notes"}],
               "errors": ["edits[0]: Additional properties are not allowed ('notes' was unexpected)",
                          "$: 'path' is a required property"]}  # fmt: skip
    assert call_outcome(extra, missing) == "extra_other"
    top = {"verdict": "invented_key", "flags": [], "invented_keys": [{"path": "notes"}],
           "errors": ["$: Additional properties are not allowed ('notes' was unexpected)"]}  # fmt: skip
    assert call_outcome(extra, top) == "extra_other"
    assert call_outcome(extra, {**missing, "errors": missing["errors"][:1]}) == "source_shaped"
    assert call_outcome(extra, {"verdict": "truncated"}) == "derailment"
    # the verdict of a later call of the same tool: the call at the decision point did not parse
    shaped = {**missing, "errors": missing["errors"][:1], "tool": "edit"}
    assert call_outcome(extra, shaped, tool="edit", parsed_here=False) == "derailment"
    assert call_outcome(extra, shaped, tool="edit", parsed_here=True) == "source_shaped"
    assert call_outcome(Continuation(CLOSE, "close"), None) == "close"
    with pytest.raises(ValueError, match="verdict"):
        call_outcome(extra, None)
