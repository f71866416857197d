"""`tooldecode replay`: every call of a session probed, one row per call, the first call at risk."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tooldecode.cli.replay import call_row, format_table, strict_view

DATA = Path(__file__).parent / "data" / "sessions"


def _point(actual="close", close=0.5, kinds=None, path="[0].arguments", after="x"):
    kinds = kinds or {}
    return SimpleNamespace(
        actual=actual,
        p_close=close,
        p_continue=sum(kinds.values()),
        p_continue_by_kind=kinds,
        path=path,
        after=after,
    )


def test_strict_renormalises_over_what_the_grammar_admits():
    p = _point(close=0.2, kinds={"declared": 0.2, "invented": 0.4})
    assert strict_view(p) == pytest.approx((0.5, 0.5))


def test_the_first_call_at_risk_is_named():
    rows = [
        call_row(1, "Read", [_point(kinds={"declared": 0.3})], 0.05),
        call_row(2, "Edit", [_point(kinds={"invented": 0.1}, after="new_string")], 0.05),
        call_row(3, "Bash", [_point(kinds={"repeat": 0.2})], 0.05),
    ]
    assert [r["at_risk"] for r in rows] == [False, True, True]
    table = format_table(rows, 0.05)
    assert "first call at risk: call 2 of 3 (Edit) at [0].arguments.new_string" in table
    assert "no call at risk" in format_table(rows[:1], 0.05)


@pytest.mark.model
@pytest.mark.slow
def test_replay_prints_the_per_call_table_on_the_claude_code_sample(smol_ref):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "tooldecode",
            "replay",
            str(DATA / "claude-code.jsonl"),
            "--model",
            "smollm2-135m-instruct",
            "--depth",
            "1",
            "--key-depth",
            "0",
        ],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("session claude-code.jsonl (claude-code), model smollm2-135m-instruct")
    assert lines[1].split()[:3] == ["call", "tool", "pts"]
    assert [line.split()[1] for line in lines[2:5]] == ["Read", "Edit", "Bash"]
    assert lines[-1].startswith(("first call at risk: call ", "no call at risk"))


def test_a_session_call_is_a_trial(qwen_ref):
    """The replay is a view over the trial: a session scenario renders through ``Trial`` (its history,
    its own tools, the called tool expected, the call as the gold call), with no renderer or backend of
    the command's own."""
    import ast

    from tooldecode.scenarios.importers import load_session, session_scenario
    from tooldecode.trial import Trial

    session = load_session(DATA / "claude-code.jsonl")
    data = session_scenario(session, 2)
    trial = Trial(
        {"model": qwen_ref.id, "backend": "llamacpp", "mode": "loose", "temperature": 1.0}, data, ref=qwen_ref
    )
    names = [t.name for t in trial.prompt.tools]
    assert names == [t["name"] for t in data["tools"]] and trial.prompt.expected_tool == data["call"]["name"]
    assert trial.prompt.prefill == "" and trial.text.endswith(trial.prompt.text[-20:])
    assert data["call"]["name"] in trial.call and trial.call not in trial.text
    assert trial.key(0, 0).split("/")[-3] == data["id"]
    src = (Path(__file__).resolve().parents[1] / "tooldecode" / "cli" / "replay.py").read_text(
        encoding="utf-8"
    )
    called = {ast.unparse(n.func).split(".")[-1] for n in ast.walk(ast.parse(src)) if isinstance(n, ast.Call)}
    assert not called & {"apply_template", "load_backend", "probe_call", "render_prompt", "render_session"}
