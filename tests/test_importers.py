"""Sessions in: each format's hand-written sample round-trips into a session scenario that checks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tooldecode.errors import ScenarioError
from tooldecode.scenarios.importers import infer_schema, load_session, sniff
from tooldecode.scenarios.sessions import check_session_scenario, session_scenario

DATA = Path(__file__).parent / "data" / "sessions"
SAMPLES = {
    "openai-chat.json": ("openai", ["read_file", "replace_in_file"]),
    "anthropic-messages.json": ("anthropic", ["read_file", "str_replace"]),
    "claude-code.jsonl": ("claude-code", ["Read", "Edit", "Bash"]),
    "pi-session.jsonl": ("pi", ["read", "edit"]),
}


def _cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tooldecode", *args], capture_output=True, text=True, cwd=cwd
    )


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_each_sample_imports_with_its_calls_and_tools(name):
    fmt, calls = SAMPLES[name]
    path = DATA / name
    assert sniff(path, path.read_text()) == fmt
    s = load_session(path)
    assert s.format == fmt and [c["name"] for _, _, c in s.calls()] == calls
    assert {t["name"] for t in s.tools} == set(calls)
    roles = [m["role"] for m in s.messages]
    assert roles.count("tool") == len(calls) or fmt == "openai"  # every call answered
    for m in s.messages:
        assert isinstance(m["content"], str)


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_each_sample_round_trips_into_a_scenario_that_checks(name, tmp_path):
    s = load_session(DATA / name)
    for n in range(1, len(s.calls()) + 1):
        out = _cli("scenarios", "import", str(DATA / name), "--call", str(n), "-o", str(tmp_path))
        assert out.returncode == 0, out.stderr
    files = sorted(tmp_path.glob("*.json"))
    assert len(files) == len(s.calls())
    out = _cli("scenarios", "check", str(tmp_path))
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"{len(files)} session scenario(s) OK" in out.stdout
    data = json.loads(files[-1].read_text())
    assert data["call"] == {"name": s.calls()[-1][2]["name"], "arguments": s.calls()[-1][2]["arguments"]}
    assert data["history"] == s.messages[: s.calls()[-1][0]]


def test_claude_code_joins_split_assistant_messages_and_uses_the_built_in_tools():
    s = load_session(DATA / "claude-code.jsonl")
    first = next(m for m in s.messages if m["role"] == "assistant")
    assert first["content"] == "I'll read the file." and first["tool_calls"][0]["name"] == "Read"
    from tooldecode.grammar import tool_catalog

    assert next(t for t in s.tools if t["name"] == "Edit")["parameters"] == tool_catalog()["Edit"].parameters


def test_pi_follows_the_branch_to_the_last_entry():
    s = load_session(DATA / "pi-session.jsonl")
    assert [m["role"] for m in s.messages] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert s.messages[3]["tool_calls"][0]["arguments"]["edits"][0]["newText"].endswith("!`;")


def test_check_names_what_is_wrong(tmp_path):
    s = load_session(DATA / "anthropic-messages.json")
    data = session_scenario(s, 2)
    data["call"]["arguments"] = {"path": "config.py"}  # old_str / new_str missing
    (tmp_path / f"{data['id']}.json").write_text(json.dumps(data))
    out = _cli("scenarios", "check", str(tmp_path))
    assert out.returncode == 1 and "call.arguments" in out.stdout
    with pytest.raises(ScenarioError, match="out of range"):
        session_scenario(s, 9)
    assert check_session_scenario({**session_scenario(s, 1), "extra": 1}, "x")[0].endswith(
        "known fields of a session scenario: id, kind, title, source, tools, history, before_call, call"
    )


def test_infer_schema_types_and_required_keys():
    schema = infer_schema([{"a": 1, "b": "x"}, {"a": 2.5}])
    assert schema["properties"] == {"a": {"type": "number"}, "b": {"type": "string"}}
    assert schema["required"] == ["a"]


@pytest.mark.model
def test_probe_runs_on_an_imported_scenario(tmp_path, smol_ref):
    out = _cli("scenarios", "import", str(DATA / "pi-session.jsonl"), "--call", "1", "-o", str(tmp_path))
    assert out.returncode == 0, out.stderr
    (f,) = tmp_path.glob("*.json")
    out = _cli(
        "probe",
        "--scenario",
        str(f),
        "--model",
        "smollm2-135m-instruct",
        "--depth",
        "1",
        "--key-depth",
        "0",
        "--json",
    )
    assert out.returncode == 0, out.stderr
    assert "probe: decision point 1 of" in out.stderr  # progress off a terminal, point by point
    points = [json.loads(line) for line in out.stdout.splitlines()]
    assert points and all("arguments" in p["path"] for p in points)
    for p in points:
        total = p["p_close"] + p["p_continue"] + p["p_other"] + p["p_undetermined"]
        assert abs(total - 1) < 1e-3
