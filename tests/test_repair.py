"""Lenient-harness repairs, the rescue accounting and ``tooldecode repair RUN``."""

from __future__ import annotations

import argparse
import copy
import json
import subprocess
import sys

import pytest
from conftest import make_sample
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tooldecode.repair import (
    REPAIR_VERSION,
    REPAIRS,
    RepairError,
    format_rescue,
    repair_arguments,
    repair_text,
    rescue_accounting,
)
from tooldecode.runs import sample_of
from tooldecode.scoring import extract_calls, toolset_tools

NESTED = toolset_tools("nested")
FLAT = toolset_tools("flat-edit")
MULTI = toolset_tools("multiedit")
EDIT, READ, WRITE, BASH = NESTED
FLAT_EDIT = FLAT[0]
MULTI_EDIT = MULTI[0]
CATALOG = {t.name: t for t in NESTED + FLAT + MULTI}

CONTENT = 'import re\n\nNUMBER = re.compile(r"\\d")\n\n\ndef parse(s):\n    return NUMBER.findall(s)\n'
OLD = 'NUMBER = re.compile(r"\\d")\n'
NEW = 'NUMBER = re.compile(r"-?\\d+(?:\\.\\d+)?")\n'
EXPECTED = CONTENT.replace(OLD, NEW)
GOLD = {"path": "calc/numbers.py", "edits": [{"oldText": OLD, "newText": NEW}]}


def hermes(args, name="edit"):
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"


def kinds_and_paths(result):
    return [(c.kind, c.path) for c in result.changes]


# ------------------------------------------------------------------------------------------- each repair


def test_already_valid_call_is_returned_untouched():
    args = copy.deepcopy(GOLD)
    r = repair_arguments(args, EDIT)
    assert r.valid and r.changes == [] and r.arguments is args and args == GOLD


def test_parse_string_container_edits_sent_as_a_json_string():
    args = {"path": GOLD["path"], "edits": json.dumps(GOLD["edits"])}
    r = repair_text(hermes(args), NESTED, wire="hermes", expected_tool="edit")
    assert r.valid and r.arguments == GOLD
    assert kinds_and_paths(r) == [("parse_string_container", "edits")]
    assert r.changes[0].before == args["edits"] and r.changes[0].after == GOLD["edits"]


def test_parse_string_container_whole_arguments_as_a_string():
    r = repair_arguments(json.dumps(GOLD), EDIT)
    assert r.valid and r.arguments == GOLD and kinds_and_paths(r) == [("parse_string_container", "$")]


def test_wrap_single_object():
    args = {"path": GOLD["path"], "edits": GOLD["edits"][0]}
    r = repair_arguments(args, EDIT)
    assert r.valid and r.arguments == GOLD
    assert kinds_and_paths(r) == [("wrap_single_object", "edits")]


def test_fold_flat_edit_top_level_old_and_new_text():
    args = {"path": GOLD["path"], "oldText": OLD, "newText": NEW}
    r = repair_arguments(args, EDIT)
    assert r.valid and r.arguments == GOLD
    assert kinds_and_paths(r) == [("fold_flat_edit", "edits")]


def test_fold_flat_edit_with_the_flat_tool_habit_of_another_harness():
    args = {"file_path": GOLD["path"], "old_string": OLD, "new_string": NEW, "replace_all": False}
    r = repair_arguments(args, EDIT)
    assert r.valid and r.arguments == GOLD
    assert kinds_and_paths(r) == [
        ("fold_flat_edit", "edits"),
        ("aliases", "file_path"),
        ("aliases", "edits[0].old_string"),
        ("aliases", "edits[0].new_string"),
        ("drop_unknown_keys", "replace_all"),
    ]


def test_fold_flat_edit_leaves_an_existing_edits_list_alone():
    args = {"path": "a.py", "edits": [{"oldText": "a", "newText": "b"}], "oldText": "c", "newText": "d"}
    r = repair_arguments(args, EDIT)
    assert r.arguments == {"path": "a.py", "edits": [{"oldText": "a", "newText": "b"}]}
    assert [c.kind for c in r.changes] == ["drop_unknown_keys", "drop_unknown_keys"]


def test_aliases_from_the_catalog_in_items_and_at_top_level():
    args = {"filePath": GOLD["path"], "edits": [{"old_str": OLD, "new_str": NEW}]}
    r = repair_arguments(args, EDIT)
    assert r.valid and r.arguments == GOLD
    assert kinds_and_paths(r) == [
        ("aliases", "filePath"),
        ("aliases", "edits[0].old_str"),
        ("aliases", "edits[0].new_str"),
    ]
    assert (r.changes[1].before, r.changes[1].after) == ("old_str", "oldText")


def test_aliases_keep_the_canonical_key_when_both_are_present():
    args = {"path": "a.py", "file_path": "b.py", "edits": [{"oldText": "a", "newText": "b"}]}
    r = repair_arguments(args, EDIT)
    assert r.arguments["path"] == "a.py"
    assert kinds_and_paths(r) == [("drop_unknown_keys", "file_path")]


def test_aliases_for_multiedit_items_and_write_content():
    args = {"file_path": "a.py", "edits": [{"oldText": "a", "newText": "b"}]}
    r = repair_arguments(args, MULTI_EDIT)
    assert r.valid and r.arguments == {"file_path": "a.py", "edits": [{"old_string": "a", "new_string": "b"}]}
    r = repair_arguments({"file": "a.txt", "contents": "hello\n"}, WRITE)
    assert r.valid and r.arguments == {"path": "a.txt", "content": "hello\n"}


def test_aliases_by_spelling_case_and_underscores():
    r = repair_arguments({"Path": "a.py", "Edits": [{"old_text": "a", "NewText": "b"}]}, EDIT)
    assert r.valid and r.arguments == {"path": "a.py", "edits": [{"oldText": "a", "newText": "b"}]}


def test_coerce_types_only_where_the_schema_asks():
    r = repair_arguments(
        {"file_path": "a.py", "old_string": "a", "new_string": "b", "replace_all": "true"}, FLAT_EDIT
    )
    assert r.valid and r.arguments["replace_all"] is True
    assert kinds_and_paths(r) == [("coerce_types", "replace_all")]
    r = repair_arguments({"path": "a.py", "offset": "10", "limit": "20.0"}, READ)
    assert r.valid and r.arguments == {"path": "a.py", "offset": 10, "limit": 20}
    assert type(r.arguments["limit"]) is int
    r = repair_arguments({"command": "make test", "timeout": "30"}, BASH)
    assert r.valid and r.arguments["timeout"] == 30
    r = repair_arguments({"file_path": "a.py", "old_string": 42, "new_string": "43"}, FLAT_EDIT)
    assert r.valid and r.arguments["old_string"] == "42"


def test_coerce_types_refuses_what_is_not_that_type():
    r = repair_arguments(
        {"file_path": "a.py", "old_string": "a", "new_string": "b", "replace_all": "yes"}, FLAT_EDIT
    )
    assert not r.valid and r.arguments["replace_all"] == "yes"
    r = repair_arguments({"path": "a.py", "offset": "ten"}, READ)
    assert not r.valid and r.changes == []


def test_fix_escapes_invalid_escapes_and_raw_control_characters_in_the_text():
    # A model writes the regex without doubling its backslashes and puts a raw newline and tab in a string.
    text = (
        '<tool_call>{"name": "edit", "arguments": {"path": "calc/numbers.py", "edits": [{"oldText": '
        '"NUMBER = re.compile(r\\"\\d\\")\n", "newText": "NUMBER = re.compile(r\\"-?\\d+(?:\\.\\d+)?\\")\n"}]}}'
        "</tool_call>"
    )
    with pytest.raises(json.JSONDecodeError):
        json.loads(text[len("<tool_call>") : -len("</tool_call>")])
    r = repair_text(text, NESTED, wire="hermes", expected_tool="edit")
    assert r.valid and r.arguments == GOLD
    assert kinds_and_paths(r) == [("fix_escapes", "edits[0].oldText"), ("fix_escapes", "edits[0].newText")]


def test_fix_escapes_broken_unicode_escape_and_lone_surrogate():
    text = hermes({"path": "a.py", "edits": [{"oldText": "caf\\u00e", "newText": "x"}]}).replace(
        "\\\\u00e", "\\u00e"
    )
    r = repair_text(text, NESTED, wire="hermes", expected_tool="edit")
    assert r.valid and r.arguments["edits"][0]["oldText"] == "caf\\u00e"
    r = repair_text(
        hermes({"path": "a.py", "edits": [{"oldText": "a", "newText": "smile \ud83d"}]}),
        NESTED,
        wire="hermes",
        expected_tool="edit",
    )
    assert r.arguments["edits"][0]["newText"] == "smile \ufffd"
    assert r.valid and kinds_and_paths(r) == [("fix_escapes", "edits[0].newText")]
    r = repair_arguments(
        {"path": "a.py", "edits": [{"oldText": "a", "newText": "\udc00"}]},
        EDIT,
        enabled=["drop_unknown_keys"],
    )
    assert not r.valid and r.errors == [
        "edits[0].newText: lone surrogate; the text cannot be encoded as UTF-8"
    ]


def test_drop_unknown_keys_at_any_depth_with_paths_and_values():
    args = {
        "path": GOLD["path"],
        "notes": "fix regex",
        "edits": [{"oldText": OLD, "newText": NEW, "requireUnique": True, "forceMatchCount": 1}],
    }
    r = repair_arguments(args, EDIT)
    assert r.valid and r.arguments == GOLD
    assert [(c.kind, c.path, c.before) for c in r.changes] == [
        ("drop_unknown_keys", "notes", "fix regex"),
        ("drop_unknown_keys", "edits[0].requireUnique", True),
        ("drop_unknown_keys", "edits[0].forceMatchCount", 1),
    ]


def test_repairs_are_switchable():
    args = {"path": "a.py", "edits": [{"oldText": "a", "newText": "b", "unique": True}]}
    r = repair_arguments(args, EDIT, enabled=[k for k in REPAIRS if k != "drop_unknown_keys"])
    assert not r.valid and r.changes == [] and "unique" in r.errors[0]
    r = repair_arguments({"file_path": "a.py", "edits": [{"oldText": "a", "newText": "b"}]}, EDIT, enabled=[])
    assert not r.valid and r.changes == []
    with pytest.raises(RepairError, match="unknown repair"):
        repair_arguments(args, EDIT, enabled=["drop_unknown_keys", "guess_intent"])


def test_unrepairable_calls_stay_invalid():
    r = repair_text(
        '{"name": "edit", "arguments": {"path": "a.py", "edits": [{"oldText": """a""", "newText": "b"}]}}',
        NESTED,
        wire="call-json",
        expected_tool="edit",
    )
    assert not r.valid and r.arguments is None and r.errors[0].startswith("invalid JSON")
    r = repair_text(hermes({"path": "a.py"}, name="read"), NESTED, wire="hermes", expected_tool="edit")
    assert not r.valid and r.tool == "read"
    r = repair_text("The bug is the regex.", NESTED, wire="hermes", expected_tool="edit")
    assert not r.valid and r.errors == ["no tool call found"] and not r.retry_signal


# --------------------------------------------------------------------------------------------- retry signal


def test_retry_signal_for_markup_leaked_into_visible_text():
    clean = hermes(GOLD)
    assert not repair_text(clean, NESTED, wire="hermes", expected_tool="edit").retry_signal
    antml = (
        '<function_calls><invoke name="edit"><parameter name="path">calc/numbers.py</parameter>'
        f'<parameter name="edits">{json.dumps(GOLD["edits"])}</parameter></invoke></function_calls>'
    )
    r = repair_text(antml, NESTED, wire="hermes", expected_tool="edit")
    assert r.valid and r.retry_signal  # a hermes server shows antml markup as text
    assert not repair_text(antml, NESTED, wire="antml", expected_tool="edit").retry_signal
    broken = "I will call <tool_call> edit on calc/numbers.py now."
    assert repair_text(broken, NESTED, wire="hermes", expected_tool="edit").retry_signal
    smol = "<tool_call>[" + json.dumps({"name": "edit", "arguments": GOLD}) + "]</tool_call>"
    assert not repair_text(smol, NESTED, wire="call-list", expected_tool="edit").retry_signal
    stray = clean + "\nDone. </tool_call>"
    assert repair_text(stray, NESTED, wire="hermes", expected_tool="edit").retry_signal


# ----------------------------------------------------------------------------------------- property tests

KEYS = [
    "path",
    "edits",
    "oldText",
    "newText",
    "old_str",
    "new_string",
    "file_path",
    "filePath",
    "requireUnique",
    "replace_all",
    "type",
    "additionalProperties",
    "command",
    "offset",
    "limit",
    "content",
    "Path",
    "",
]
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
    | st.sampled_from(
        [
            '[{"oldText": "a", "newText": "b"}]',
            '{"oldText": "a"}',
            "true",
            "3",
            "3.0",
            "\ud83d",
            '"[]"',
            "null",
            '{"x": "\\d"}',
        ]
    )
)
JSON = st.recursive(
    SCALARS,
    lambda ch: (
        st.lists(ch, max_size=4)
        | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=6), ch, max_size=5)
    ),
    max_leaves=25,
)
FRAGMENTS = list('{}[]":,\\ \nab') + [
    "<tool_call>",
    "</tool_call>",
    '"name": "edit"',
    '"arguments"',
    "```json\n",
    "to=functions.edit",
    "<|message|>",
    '<invoke name="edit">',
    "</invoke>",
    '<parameter name="edits">',
    "</parameter>",
    '"edits"',
    '"oldText"',
    '"newText"',
    "\\u12",
    "\\ud83d",
    "\\d",
    '"path"',
    '"file_path"',
    '"""',
    "true",
    "3",
]
TEXT = st.one_of(st.text(max_size=80), st.lists(st.sampled_from(FRAGMENTS), max_size=50).map("".join))
PROPERTY = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def dumps(x):
    return json.dumps(x, sort_keys=True)


@PROPERTY
@given(JSON, st.sampled_from(sorted(CATALOG)))
def test_property_never_raises_and_is_idempotent_on_arbitrary_json(args, tool_name):
    tool = CATALOG[tool_name]
    snapshot = dumps(args)
    first = repair_arguments(args, tool)
    assert dumps(args) == snapshot  # the input is not mutated
    second = repair_arguments(first.arguments, tool)
    assert second.changes == [] and dumps(second.arguments) == dumps(first.arguments)
    assert second.valid == first.valid


@PROPERTY
@given(TEXT, st.sampled_from([None, "json", "call-json", "hermes", "antml", "harmony"]))
def test_property_never_raises_on_arbitrary_text_and_is_idempotent(text, wire):
    first = repair_text(text, NESTED, wire=wire, expected_tool="edit")
    if first.arguments is not None and first.tool == "edit":
        second = repair_arguments(first.arguments, EDIT)
        assert second.changes == [] and dumps(second.arguments) == dumps(first.arguments)


@pytest.mark.parametrize("wire", ["hermes", "json"])
def test_a_reasoning_block_inside_a_string_value_keeps_the_call(wire):
    """A ``<think>`` or ``<tool_response>`` tag inside a JSON string is content (scorer s2), while the
    same region outside any JSON value is still skipped, also after such a string."""
    for path in ("<think></think>", "<tool_response>x", "a <think> b"):
        args = {"path": path, "edits": [{"oldText": "a", "newText": "b"}]}
        text = hermes(args, name=EDIT.name) if wire == "hermes" else json.dumps(args)
        r = repair_text(text, [EDIT], wire=wire, expected_tool=EDIT.name)
        assert r.valid and r.changes == [] and dumps(r.arguments) == dumps(args), path
    # an unclosed tag in a string does not swallow a real reasoning block after the call
    args = {"path": "<think>", "edits": [{"oldText": "a", "newText": "b"}]}
    fake = {"path": "q", "edits": [{"oldText": "c", "newText": "d"}]}
    text = (hermes(args, name=EDIT.name) if wire == "hermes" else json.dumps(args)) + (
        f"\n<think>{hermes(fake, name=EDIT.name)}</think>"
    )
    calls = extract_calls(text, wire=wire, tools=[EDIT], expected_tool=EDIT.name)
    assert [c.arguments for c in calls] == [args]


EDIT_ITEMS = st.fixed_dictionaries({"oldText": st.text(max_size=30), "newText": st.text(max_size=30)})
VALID_EDIT = st.fixed_dictionaries({"path": st.text(max_size=20), "edits": st.lists(EDIT_ITEMS, max_size=3)})
VALID_FLAT = st.fixed_dictionaries(
    {
        "file_path": st.text(max_size=20),
        "old_string": st.text(max_size=20),
        "new_string": st.text(max_size=20),
    },
    optional={"replace_all": st.booleans()},
)


@PROPERTY
@given(
    st.one_of(VALID_EDIT.map(lambda a: (a, EDIT)), VALID_FLAT.map(lambda a: (a, FLAT_EDIT))),
    st.sampled_from(["hermes", "json", "antml"]),
)
def test_property_valid_calls_are_never_changed(case, wire):
    args, tool = case
    snapshot = dumps(args)
    r = repair_arguments(args, tool)
    assert r.valid and r.changes == [] and dumps(r.arguments) == snapshot
    if wire == "hermes":
        text = hermes(args, name=tool.name)
    elif wire == "json":
        text = json.dumps(args)
    else:
        params = "".join(
            f'<parameter name="{k}">{v if isinstance(v, str) else json.dumps(v)}</parameter>'
            for k, v in args.items()
        )
        text = f'<function_calls><invoke name="{tool.name}">{params}</invoke></function_calls>'
        if any(("<" in v or ">" in v) for v in args.values() if isinstance(v, str)):
            return  # raw markup inside a string parameter is ambiguous in antml
    r = repair_text(text, [tool], wire=wire, expected_tool=tool.name)
    assert r.valid and r.changes == [] and dumps(r.arguments) == snapshot


def test_imports_without_model_libraries():
    code = (
        "import sys\n"
        "for name in ('torch', 'transformers', 'llama_cpp'):\n"
        "    sys.modules[name] = None\n"
        "import tooldecode.repair, tooldecode.scoring, tooldecode.cli.repair\n"
        "assert not {'torch', 'transformers', 'llama_cpp'} & {k for k, v in sys.modules.items() if v}\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# ---------------------------------------------------------------------------------------- rescue accounting

LOOSE = {"model": "m", "mode": "loose", "toolset": "nested", "wire": "hermes"}
STRICT = {**LOOSE, "mode": "strict"}


@pytest.fixture(scope="module")
def scenario_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("scenarios")
    doc = {
        "id": "t-number-regex",
        "language": "python",
        "title": "negative numbers are not parsed",
        "path": "calc/numbers.py",
        "content": CONTENT,
        "task": "parse('-2.5') gives ['2', '5']",
        "diagnosis": "The regex only matches single digits.",
        "edits": [{"oldText": OLD, "newText": NEW}],
        "expected": EXPECTED,
    }
    (d / "t-number-regex.json").write_text(json.dumps(doc))
    return d


def record(arm, index, text, finish="stop"):
    return make_sample(
        text,
        arm=arm,
        key=f"{arm['mode']}/t-number-regex/0/{index}",
        scenario="t-number-regex",
        index=index,
        finish_reason=finish,
    )


def run_records():
    wrong_new = {"path": GOLD["path"], "edits": json.dumps([{"oldText": OLD, "newText": "NUMBER = None\n"}])}
    loose = [
        hermes(GOLD),  # valid
        hermes({"path": GOLD["path"], "edits": [{"oldText": OLD, "newText": NEW, "requireUnique": True}]}),
        hermes({"file_path": GOLD["path"], "old_string": OLD, "new_string": NEW}),  # another harness's shape
        hermes(wrong_new),  # rescued, payload wrong
        "The regex only matches one digit; I'd use -?\\d+ instead.",  # no call
        '<tool_call>{"name": "edit", "arguments": {"path": "calc/numbers.py", "edits": [{"oldText": """x"""}]}}',
    ]
    records = [record(LOOSE, i, t) for i, t in enumerate(loose)]
    records += [record(STRICT, i, hermes(GOLD)) for i in range(4)]
    records.append({**record(LOOSE, 99, ""), "error": "backend failed"})
    return records


def test_rescue_accounting(scenario_dir):
    manifest = {"config": {"scenario_dirs": [str(scenario_dir)]}}
    s = rescue_accounting([sample_of(r) for r in run_records()], manifest)
    assert (s["n_loose"], s["n_strict"], s["n_failing_strict"], s["n_rescued"], s["n_rescued_payload"]) == (
        6,
        4,
        5,
        3,
        2,
    )
    assert s["rescued_share"]["k"] == 3 and s["rescued_share"]["n"] == 5
    assert 0 < s["rescued_share"]["lo"] < 0.6 < s["rescued_share"]["hi"] < 1
    assert s["kinds"]["drop_unknown_keys"] == {"samples": 1, "changes": 1, "rescued": 1}
    assert s["kinds"]["fold_flat_edit"]["samples"] == 1 and s["kinds"]["aliases"]["changes"] == 3
    assert s["kinds"]["parse_string_container"] == {"samples": 1, "changes": 1, "rescued": 1}
    assert s["by_verdict"]["invented_key"] == {"n": 2, "rescued": 2, "rescued_payload": 2}
    assert s["by_verdict"]["no_call"]["rescued"] == 0 and "json_syntax" in s["by_verdict"]
    table = {row["method"]: row for row in s["table"]}
    assert [r["condition"] for r in s["table"]] == ["all"] * 4  # strict and loose arms differ only in mode
    assert (table["strict"]["valid"]["k"], table["strict"]["valid"]["n"]) == (4, 4)
    assert (table["loose"]["valid"]["k"], table["loose"]["valid"]["n"]) == (1, 6)
    assert (table["loose+repair"]["valid"]["k"], table["loose+repair"]["valid_payload"]["k"]) == (4, 3)
    # pairs (0,1) (2,3) (4,5): only the first pair ends valid
    assert (table["loose+retry"]["valid"]["k"], table["loose+retry"]["valid"]["n"]) == (1, 3)
    text = format_rescue(s)
    assert "| loose+repair |" in text and "| drop_unknown_keys | 1 | 1 | 1 |" in text


# ---------------------------------------------------------------------------------------------------- CLI


def test_cli_writes_repaired_file_beside_raw_samples(scenario_dir, tmp_path, capsys):
    from tooldecode.cli.repair import register
    from tooldecode.runs import RunStore, build_manifest

    run_dir = tmp_path / "run"
    store = RunStore.create(run_dir, build_manifest({"scenario_dirs": [str(scenario_dir)]}))
    store.append(run_records())
    store.close()
    raw = (run_dir / "samples.jsonl").read_bytes()

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(["repair", str(run_dir)])
    assert args.func(args) == 0
    out = run_dir / f"repaired-{REPAIR_VERSION}.jsonl"
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 11 and (run_dir / "samples.jsonl").read_bytes() == raw
    row = next(r for r in rows if r["key"] == "loose/t-number-regex/0/1")
    assert row["strict_verdict"] == "invented_key" and row["valid"] and row["payload_ok"]
    assert row["changes"] == [
        {"kind": "drop_unknown_keys", "path": "edits[0].requireUnique", "before": True, "after": None}
    ]
    assert "rescued by repair: 3/5 = 60.0%" in capsys.readouterr().out

    args = parser.parse_args(["repair", str(run_dir), "--disable", "drop_unknown_keys", "--json"])
    assert args.func(args) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["n_rescued"] == 2
    assert (run_dir / f"repaired-{REPAIR_VERSION}-no-drop_unknown_keys.jsonl").exists()


def test_json_repair_results_on_disk_are_the_librarys_own(tmp_path, monkeypatch):
    """The memo (``TOOLDECODE_JSONREPAIR_MEMO``) gives back what json-repair returned, in a new process's
    memo too; a damaged file costs the memo, not the result; a folder that cannot be made is one line."""
    from tooldecode.errors import ToolDecodeError
    from tooldecode.repair import jsonrepair, memo

    texts = ['{"path": "a", "edits": [{"oldText": "x", "newText": "y"', "{'a': 1,}", "not json at all"]
    monkeypatch.setenv(memo.ENV, "")
    memo.repair_memo.cache_clear()
    jsonrepair._repaired.cache_clear()
    plain = [jsonrepair._repaired(t) for t in texts]
    monkeypatch.setenv(memo.ENV, str(tmp_path / "m"))
    memo.repair_memo.cache_clear()
    jsonrepair._repaired.cache_clear()
    assert [jsonrepair._repaired(t) for t in texts] == plain
    m = memo.repair_memo(jsonrepair.json_repair_version())
    assert m is not None and m.writes == 3 and m.hits == 0
    fresh = memo.RepairMemo(m.path)  # another process's view of the same file
    assert [fresh.get(t) for t in texts] == plain and fresh.hits == 3
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"this is no database" * 100)
    broken = memo.RepairMemo(bad)
    broken.put("x", "1", None)
    assert broken.get("x") is None
    (tmp_path / "file").write_text("x")
    monkeypatch.setenv(memo.ENV, str(tmp_path / "file" / "sub"))
    memo.repair_memo.cache_clear()
    with pytest.raises(ToolDecodeError, match="cannot make the folder") as err:
        memo.repair_memo("1.0")
    assert "\n" not in str(err.value)
    memo.repair_memo.cache_clear()
    jsonrepair._repaired.cache_clear()
