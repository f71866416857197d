"""Sessions, faithfully: no silent any-JSON, no guessed schema without asking, the active branch after a
rewind, thinking and the context Pi and Anthropic add kept, and imported scenarios loading everywhere."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tooldecode.errors import ScenarioError, SchemaError
from tooldecode.grammar import arguments_schema, load_tools, render, render_toolset
from tooldecode.scenarios import load_scenario, load_scenarios
from tooldecode.scenarios.importers import (
    REDACTED_THINKING,
    call_problem,
    from_anthropic,
    from_claude_code,
    from_openai,
    from_pi,
    infer_schema,
    load_session,
)
from tooldecode.scenarios.sessions import (
    SessionScenario,
    check_session_scenario,
    session_scenario,
    strip_thinking,
)

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).parent / "data" / "sessions"


def _cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    import os

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, "-m", "tooldecode", *args], capture_output=True, text=True, cwd=cwd, env=env
    )


def _jsonl(rows: list[dict]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


# ------------------------------------------------------------------------------------ never any-JSON


@pytest.mark.parametrize(
    "tool",
    [
        {"type": "function", "function": {"name": "ping", "parameters": {}}},  # OpenAI
        {"name": "ping", "inputSchema": {}},  # MCP
        {"name": "ping", "input_schema": {"description": "no arguments"}},  # annotations only
        {"type": "function", "function": {"name": "ping"}},  # no parameters at all
    ],
)
def test_an_empty_schema_is_the_closed_empty_object_in_every_wire(tool):
    assert render(tool, format="regex", wire="call-json") == r'\{"name":"ping","arguments":\{\}\}'
    lark = render(tool, format="lark", wire="hermes")
    assert "null" not in lark and "number" not in lark  # no any-JSON value rules
    assert re.fullmatch(render(tool, format="regex", wire="json"), "{}")
    assert not re.fullmatch(render(tool, format="regex", wire="json"), "42")


def test_spec_mode_keeps_an_empty_schema_open_but_an_object():
    from tooldecode.grammar import compile_schema

    sir = compile_schema(arguments_schema({}), mode="spec")
    assert sir.accepts({"any": 1}) and not sir.accepts(42) and not sir.accepts(None)
    text = render({"name": "ping", "inputSchema": {}}, format="gbnf", wire="json", mode="spec")
    assert text.startswith('root ::= "{}" | "{" key')


def test_arguments_that_are_never_an_object_are_refused_naming_the_tool():
    with pytest.raises(SchemaError, match="tool 'shout'.*type 'string'"):
        render({"name": "shout", "parameters": {"type": "string"}}, wire="hermes")
    assert arguments_schema({"type": ["object", "null"]}) == {"type": "object"}
    assert arguments_schema(True) == {"type": "object"}
    # a bare schema on the json wire is a value, not a tool's arguments: it is rendered as written
    assert render({"type": "boolean"}, format="regex") == "true|false"


def test_a_tool_set_with_no_argument_tools_renders_each_closed():
    tools = load_tools([{"name": "now", "inputSchema": {}}, {"name": "ping", "parameters": {}}])
    text = render_toolset(tools, format="regex", wire="call-json")
    assert re.fullmatch(text, '{"name":"now","arguments":{}}')
    assert not re.fullmatch(text, '{"name":"now","arguments":{"x":1}}')


# ------------------------------------------------------------------------------------ guessed schemas

MY_TOOL_SESSION = [
    {"type": "user", "uuid": "u1", "parentUuid": None, "message": {"role": "user", "content": "fix it"}},
    {
        "type": "assistant",
        "uuid": "a1",
        "parentUuid": "u1",
        "message": {
            "id": "m1",
            "role": "assistant",
            "content": [
                {
                    "type": "tool_use",
                    "id": "t1",
                    "name": "apply_patch",
                    "input": {"path": "a.py", "edits": [{"oldText": "x", "newText": "y"}]},
                }
            ],
        },
    },
    {
        "type": "user",
        "uuid": "u2",
        "parentUuid": "a1",
        "message": {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}],
        },
    },
]


def test_a_tool_without_definition_is_refused_unless_the_guess_is_asked_for(tmp_path):
    f = tmp_path / "s.jsonl"
    f.write_text(_jsonl(MY_TOOL_SESSION))
    with pytest.raises(ScenarioError, match=r"'apply_patch'.*--tools FILE.*--guess-tools"):
        load_session(f)
    s = load_session(f, guess=True)
    assert s.guessed == ["apply_patch"]
    edits = s.tools[0]["parameters"]["properties"]["edits"]
    assert edits["items"]["properties"]["newText"] == {"type": "string"}  # not an array of any JSON
    data = session_scenario(s, 1)
    assert data["source"]["guessed_tools"] == ["apply_patch"]
    out = _cli("scenarios", "import", str(f), "--call", "1", "-o", str(tmp_path / "out"))
    assert out.returncode == 2 and "--guess-tools" in out.stderr and "Traceback" not in out.stderr
    out = _cli("scenarios", "import", str(f), "--call", "1", "-o", str(tmp_path / "out"), "--guess-tools")
    assert out.returncode == 0, out.stderr
    assert "guessed the schema of 'apply_patch'" in out.stderr and '"newText"' in out.stderr
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps([{"name": "apply_patch", "input_schema": {"type": "object"}}]))
    assert load_session(f, tools=str(tools)).guessed == []


def test_infer_schema_follows_arrays_and_objects():
    schema = infer_schema([{"a": 1, "b": "x"}, {"a": 2.5}])
    assert schema["properties"] == {"a": {"type": "number"}, "b": {"type": "string"}}
    assert schema["required"] == ["a"]
    nested = infer_schema([{"e": [{"k": 1}, {"k": 2, "v": True}]}])
    assert nested["properties"]["e"]["items"]["required"] == ["k"]


# ------------------------------------------------------------------------------------ active branch


def test_claude_code_follows_parent_uuid_past_a_rewind():
    def line(uid, parent, role, text):
        msg = {"role": role, "content": [{"type": "text", "text": text}]}
        if role == "assistant":
            msg["id"] = f"m-{uid}"
        return {"type": role, "uuid": uid, "parentUuid": parent, "message": msg}

    abandoned = [
        line(f"x{i}", f"x{i - 1}" if i else "a1", "user" if i % 2 else "assistant", f"old {i}")
        for i in range(10)
    ]
    rows = [
        line("u1", None, "user", "task"),
        line("a1", "u1", "assistant", "looking"),
        *abandoned,
        line("u2", "a1", "user", "no, do it differently"),  # the rewind: back to a1
        MY_TOOL_SESSION[1] | {"uuid": "a2", "parentUuid": "u2"},
    ]
    s = from_claude_code(_jsonl(rows))
    texts = [m["content"] for m in s.messages]
    assert texts[:3] == ["task", "looking", "no, do it differently"]
    assert not any(t.startswith("old") for t in texts) and len(s.messages) == 4


# ------------------------------------------------------------------------------------ thinking and context


def test_thinking_is_kept_by_every_importer_and_strip_thinking_removes_it():
    oa = from_openai(
        {
            "messages": [
                {"role": "user", "content": "q"},
                {"role": "assistant", "content": "a", "reasoning_content": "hmm"},
            ]
        }
    )
    assert oa.messages[1]["thinking"] == "hmm"
    an = from_anthropic(
        {
            "messages": [
                {"role": "user", "content": "q"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "thinking", "thinking": "plan", "signature": "s"},
                        {"type": "redacted_thinking", "data": "xyz"},
                        {"type": "tool_use", "id": "t", "name": "f", "input": {}},
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "t", "content": "boom", "is_error": True}
                    ],
                },
            ]
        }
    )
    assert an.messages[1]["thinking"] == f"plan\n\n{REDACTED_THINKING}"
    assert an.messages[2]["is_error"] is True
    pi = load_session(DATA / "pi-session.jsonl")
    assert pi.messages[1]["thinking"] == "Read the file first."
    data = session_scenario(pi, 1)
    assert data["history"][-1]["role"] == "user" and data["before_call"]["thinking"] == "Read the file first."
    bare = strip_thinking(data)
    assert "thinking" not in bare["before_call"] and not any("thinking" in m for m in bare["history"])
    assert data["before_call"]["thinking"]  # the scenario itself is unchanged


def test_the_thinking_is_rendered_before_the_content():
    from tooldecode.prompts.session import lower_messages

    msgs = [{"role": "assistant", "content": "done", "thinking": "why"}]
    assert lower_messages(msgs, "hermes", True)[0]["content"] == "<think>\nwhy\n</think>\n\ndone"
    assert lower_messages(msgs, "hermes", True, reasoning_field=True)[0] == {
        "role": "assistant",
        "content": "done",
        "reasoning_content": "why",
    }


def test_pi_keeps_shell_runs_extension_messages_and_branch_summaries():
    rows = [
        {"type": "session", "id": "s", "version": 3},
        {
            "type": "message",
            "id": "e1",
            "parentId": None,
            "message": {"role": "user", "content": "make test pass"},
        },
        {
            "type": "message",
            "id": "e2",
            "parentId": "e1",
            "message": {
                "role": "bashExecution",
                "command": "make test",
                "output": "FAILED t.py",
                "exitCode": 2,
            },
        },
        {
            "type": "custom_message",
            "id": "e3",
            "parentId": "e2",
            "customType": "note",
            "content": "lint is on",
            "display": True,
        },
        {"type": "branch_summary", "id": "e4", "parentId": "e3", "fromId": "zz", "summary": "tried X"},
        {
            "type": "message",
            "id": "e5",
            "parentId": "e4",
            "message": {
                "role": "assistant",
                "content": [{"type": "toolCall", "id": "c", "name": "read", "arguments": {"path": "t.py"}}],
            },
        },
        {
            "type": "message",
            "id": "e6",
            "parentId": "e5",
            "message": {
                "role": "toolResult",
                "toolCallId": "c",
                "toolName": "read",
                "content": "nope",
                "isError": True,
            },
        },
    ]
    s = from_pi(_jsonl(rows))
    users = [m["content"] for m in s.messages if m["role"] == "user"]
    assert users[1] == "Ran `make test`\n```\nFAILED t.py\n```\n\nCommand exited with code 2"
    assert users[2] == "lint is on"
    assert (
        users[3].startswith("The following is a summary of a branch")
        and "<summary>\ntried X</summary>" in users[3]
    )
    assert s.messages[-1]["is_error"] is True


def test_pi_after_a_compaction_the_model_saw_the_summary_and_the_kept_entries():
    def msg(i, parent, role, text):
        return {"type": "message", "id": i, "parentId": parent, "message": {"role": role, "content": text}}

    rows = [
        msg("e1", None, "user", "old task"),
        msg("e2", "e1", "assistant", "old answer"),
        msg("e3", "e2", "user", "kept question"),
        {"type": "compaction", "id": "c", "parentId": "e3", "summary": "did X", "firstKeptEntryId": "e3"},
        msg("e4", "c", "user", "new question"),
    ]
    texts = [m["content"] for m in from_pi(_jsonl(rows)).messages]
    assert (
        texts[0].startswith("The conversation history before this point was compacted")
        and "did X" in texts[0]
    )
    assert texts[1:] == ["kept question", "new question"]


@pytest.mark.parametrize("name", sorted(p.name for p in DATA.iterdir()))
def test_round_trip_every_text_the_model_saw_reaches_the_rendered_messages(name, tmp_path):
    """import -> scenario file -> load -> chat messages: each message's text, thinking and each call's
    arguments of the source are in the rendered conversation (the provider's own text where it has one)."""
    from tooldecode.prompts.session import lower_messages

    s = load_session(DATA / name)
    data = session_scenario(s, len(s.calls()))
    f = tmp_path / f"{data['id']}.json"
    f.write_text(json.dumps(data))
    sc = load_scenario(f)
    assert isinstance(sc, SessionScenario) and sc.data == data
    rendered = "\n".join(m["content"] for m in lower_messages(sc.data["history"], "hermes", True))
    for m in s.messages[: s.calls()[-1][0]]:
        assert m["content"] in rendered
        if m.get("thinking"):
            assert m["thinking"] in rendered
        for c in m.get("tool_calls", []):
            assert json.dumps(c["arguments"], ensure_ascii=False) in rendered


# ------------------------------------------------------------------------------------ invented keys


def test_an_invented_key_is_named():
    s = load_session(DATA / "anthropic-messages.json")
    data = session_scenario(s, 2)
    data["tools"] = [
        {**t, "parameters": {**t["parameters"], "additionalProperties": False}} for t in data["tools"]
    ]
    data["call"]["arguments"]["colour"] = "red"
    (problem,) = check_session_scenario(data, f"{data['id']}.json")
    assert "invented key 'colour'" in problem
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    assert call_problem({"a": "x", "b": 1}, schema) is None  # open as written
    assert "invented key 'b'" in call_problem({"a": "x", "b": 1}, schema, strict=True)


# ------------------------------------------------------------------------------------ everywhere


def test_imported_scenarios_load_list_and_check_with_the_edit_scenarios(tmp_path):
    out = _cli(
        "scenarios", "import", str(DATA / "pi-session.jsonl"), "--call", "2", "-o", str(tmp_path / "mine")
    )
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "mine").is_dir()  # `-o DIR` that does not exist yet is a folder
    shutil.copy(
        ROOT / "tooldecode" / "scenarios" / "data" / "py-pagination-off-by-one.yaml", tmp_path / "mine"
    )
    (sc,) = [s for s in load_scenarios([tmp_path / "mine"]) if isinstance(s, SessionScenario)]
    assert sc.kind == "session" and sc.call["name"] == "edit" and sc.sha256() == sc.sha256()
    out = _cli("scenarios", "list", str(tmp_path / "mine"))
    assert out.returncode == 0 and "pi-session-call-2" in out.stdout, out.stderr
    out = _cli("scenarios", "check", str(tmp_path / "mine"))
    assert out.returncode == 0 and "1 session scenario(s) OK" in out.stdout, out.stdout + out.stderr


def test_readme_import_example_works_on_a_fresh_clone(tmp_path):
    lines = [
        line.split("#")[0].split()
        for line in (ROOT / "README.md").read_text().splitlines()
        if line.startswith("tooldecode scenarios import ")
    ]
    assert lines
    shutil.copytree(DATA, tmp_path / "tests" / "data" / "sessions")
    for argv in lines:
        out = _cli(*argv[1:], cwd=tmp_path)
        assert out.returncode == 0, (argv, out.stderr)
    written = sorted((tmp_path / "out").glob("*.json"))
    assert written and (tmp_path / "out").is_dir()


def test_replay_flags_give_one_line_errors(tmp_path):
    for flags, what in (
        (["--calls", "x"], "--calls 'x'"),
        (["--calls", "9"], "from 1 to"),
        (["--threshold", "nan"], "--threshold"),
    ):
        out = _cli("replay", str(DATA / "claude-code.jsonl"), *flags)
        assert out.returncode == 2 and what in out.stderr and "Traceback" not in out.stderr, out.stderr


def test_replay_table_counts_the_session_calls_and_marks_strict_unreachable():
    from tooldecode.cli.replay import format_table

    row = {
        "call": 6,
        "tool": "Edit",
        "points": 1,
        "min_p_close_loose": 0.5,
        "min_p_close_strict": float("nan"),
        "max_p_continue_loose": 0.5,
        "max_p_masked_loose": 0.2,
        "worst_at": "a.b",
        "worst_kinds": {},
        "at_risk": True,
        "strict_problem": "invented key 'x' at (root): the schema does not declare it",
    }
    text = format_table([row], 0.05, total=7)
    assert "call 6 of 7" in text and "n/a" in text and "strict cannot write this call" in text


def test_grammar_name_picks_a_tool_of_a_list(tmp_path):
    f = tmp_path / "tools.json"
    f.write_text(
        json.dumps(
            [
                {"name": "a", "parameters": {}},
                {"name": "b", "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}},
            ]
        )
    )
    out = _cli("grammar", str(f), "--name", "b", "--wire", "call-json", "--format", "regex")
    assert out.returncode == 0 and '"b"' in out.stdout and '"a"' not in out.stdout, out.stderr
    out = _cli("grammar", str(f), "--name", "c")
    assert out.returncode == 2 and "no tool named 'c'" in out.stderr


def test_a_provider_tool_in_a_request_body_is_skipped_not_refused():
    body = {
        "tools": [
            {"type": "web_search_20250305", "name": "web_search", "max_uses": 5},
            {"type": "text_editor_20250124", "name": "str_replace_editor"},
            {"name": "lookup", "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}}},
        ]
    }
    with pytest.warns(UserWarning, match="web_search.*str_replace_editor"):
        tools = load_tools(body)
    assert [t.name for t in tools] == ["lookup"]
    with pytest.warns(UserWarning):
        assert [t.name for t in load_tools([{"type": "web_search_preview"}, *body["tools"][2:]])] == [
            "lookup"
        ]


# ------------------------------------------------------------------------------------ on a model

WEATHER = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "maxLength": 40}, "unit": {"enum": ["c", "f"]}},
                "required": ["city"],
            },
        },
    },
    {"type": "function", "function": {"name": "ping", "parameters": {}}},
]


@pytest.mark.model
def test_sample_draws_masked_calls_of_your_own_tools(tmp_path, smol_ref):
    f = tmp_path / "tools.json"
    f.write_text(json.dumps(WEATHER))
    out = _cli(
        "sample", "--tools", str(f), "--tool", "get_weather", "--ask", "Weather in Paris?",
        "--model", "smollm2-135m-instruct", "--mode", "strict", "-n", "3", "--max-new-tokens", "32", "--json",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert len(rows) == 3
    for r in rows:
        assert r["invented_keys"] == [] and r["verdict"] in ("valid", "wrong_tool", "truncated"), r["text"]


@pytest.mark.model
def test_run_samples_an_imported_session_and_a_tool_list_loose_and_strict(tmp_path, smol_ref):
    sc = tmp_path / "sc"
    out = _cli("scenarios", "import", str(DATA / "pi-session.jsonl"), "--call", "2", "-o", str(sc))
    assert out.returncode == 0, out.stderr
    tools = load_tools(WEATHER)
    mine = {
        "id": "weather",
        "kind": "session",
        "tools": [{"name": t.name, "parameters": t.parameters} for t in tools],
        "history": [{"role": "user", "content": "What is the weather in Paris?"}],
        "call": {"name": "get_weather", "arguments": {"city": "Paris"}},
    }
    (sc / "weather.json").write_text(json.dumps(mine))
    spec = tmp_path / "spec.toml"
    spec.write_text(
        'name = "mine"\ndescription = "d"\nmodels = ["smollm2-135m-instruct"]\nbackend = "llamacpp"\n'
        'scenarios = "all"\nscenario_dirs = ["sc"]\nn = 2\nseeds = [0]\ntemperatures = [1.0]\n'
        'max_new_tokens = 16\nmodes = ["loose", "strict"]\nengine = "xgrammar"\nbatch_size = 2\n'
    )
    out = _cli("run", str(spec), "--out", "out", "--report", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    verdicts = [
        json.loads(x) for x in next((tmp_path / "out").glob("verdicts-*.jsonl")).read_text().splitlines()
    ]
    assert {(v["scenario"], v["arm"]["mode"]) for v in verdicts} == {
        (s, m) for s in ("pi-session-call-2", "weather") for m in ("loose", "strict")
    }
    for v in verdicts:
        assert v["arm"]["expected_tool"] == ("edit" if v["scenario"] != "weather" else "get_weather")
        if v["arm"]["mode"] == "strict":
            assert v["invented_keys"] == [], v
    assert 'class="tokstrip"' in (tmp_path / "out" / "report.html").read_text()


@pytest.mark.model
def test_scenarios_show_and_probe_dir_take_an_imported_scenario(tmp_path, smol_ref):
    sc = tmp_path / "sc"
    assert (
        _cli("scenarios", "import", str(DATA / "pi-session.jsonl"), "--call", "2", "-o", str(sc)).returncode
        == 0
    )
    out = _cli("scenarios", "show", "pi-session-call-2", "--dir", str(sc), "--model", "smollm2-135m-instruct")
    assert out.returncode == 0, out.stderr
    assert "<think>\nRead the file first.\n</think>" in out.stdout  # the thinking, as the model saw it
    assert "session (its history as imported)" in out.stderr and "expects edit in call-list" in out.stderr
    out = _cli(
        "probe", "--scenario", "pi-session-call-2", "--dir", str(sc), "--model", "smollm2-135m-instruct",
        "--depth", "1", "--key-depth", "0", "--select", "newText",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "session scenario pi-session-call-2, call edit" in out.stdout
