"""Readers are total: a bad record is skipped with a counted warning naming its line, never the whole run
lost; derived-file writes fail in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tooldecode.errors import RunError
from tooldecode.runs import DerivedWriteError, RunStore, build_manifest
from tooldecode.scoring import SCORER_VERSION


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tooldecode", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=os.environ,
    )


def _rec(key: str, **over) -> dict:
    rec = {
        "key": key,
        "arm": {
            "model": "m",
            "backend": "llamacpp",
            "mode": "loose",
            "temperature": 1.0,
            "wire": "json",
            "expected_tool": "edit",
        },
        "scenario": "c-config-trim-crlf",
        "seed": 0,
        "index": 0,
        "prefill": "",
        "text": '{"name": "edit", "arguments": {}}',
        "token_ids": [1],
        "finish_reason": "stop",
        "error": None,
        "prompt_sha256": "0" * 64,
        "logprobs": [-0.1],
        "top": [None],
        "entropy": [0.5],
        "entropy_masked": None,
        "mask_removed": None,
        "timing": {},
    }
    rec.update(over)
    return rec


BAD = [
    '{"key": "big/0", "n": ' + "9" * 5000 + "}",  # past Python's integer-parsing limit
    json.dumps(_rec("num/0", text=12345)),
    json.dumps(_rec("null/0", text=None)),
    json.dumps(_rec("armstr/0", arm="loose")),
    json.dumps(_rec("nomode/0", arm={"model": "m", "wire": "json"})),
    json.dumps(_rec("scen/0", scenario=["x"])),
    "{not json",
]


def _run_with(tmp_path: Path, lines: list[str], *, newline_at_end: bool = True) -> Path:
    run = tmp_path / "r"
    RunStore.create(run, build_manifest({"spec": "t"})).close()
    (run / "samples.jsonl").write_text("\n".join(lines) + ("\n" if newline_at_end else ""))
    return run


def test_every_bad_record_is_skipped_and_counted(tmp_path, capsys):
    good = [json.dumps(_rec(f"a/{i}", index=i)) for i in range(3)]
    run = _run_with(tmp_path, [good[0], *BAD, good[1], good[2]])
    store = RunStore.open(run)
    assert [r["key"] for r in store.sample_records()] == ["a/0", "a/1", "a/2"]
    assert [n for n, _ in store.skipped] == list(range(2, 2 + len(BAD)))
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and f"skipped {len(BAD)} unreadable record(s)" in err and "line 2" in err
    assert store.completed_keys() >= {"a/0", "a/1", "a/2", "num/0"}


@pytest.mark.parametrize("cmd", ["rescore", "repair", "report"])
def test_rescore_repair_and_report_read_the_rest(tmp_path, cmd):
    good = [json.dumps(_rec(f"a/{i}", index=i)) for i in range(3)]
    run = _run_with(tmp_path, [good[0], *BAD, good[1], good[2]])
    proc = _cli(cmd, str(run))
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and f"skipped {len(BAD)} unreadable record(s)" in proc.stderr


def test_a_whole_last_line_without_newline_is_read(tmp_path):
    lines = [json.dumps(_rec(f"a/{i}", index=i)) for i in range(3)]
    run = _run_with(tmp_path, lines, newline_at_end=False)
    assert [r["key"] for r in RunStore.open(run).sample_records()] == ["a/0", "a/1", "a/2"]


def test_a_duplicate_key_is_still_an_error(tmp_path):
    line = json.dumps(_rec("a/0"))
    with pytest.raises(RunError, match="line 2: duplicate key"):
        list(RunStore.open(_run_with(tmp_path, [line, line])).sample_records())


def test_an_unwritable_derived_file_is_one_line(tmp_path):
    run = _run_with(tmp_path, [json.dumps(_rec("a/0"))])
    (run / "summary.md").mkdir()  # the rename over it fails, as on a full or read-only disk
    (run / "summary.md" / "x").write_text("x")
    with pytest.raises(DerivedWriteError, match="cannot write .*summary.md") as info:
        RunStore.open(run).write_derived("summary.md", "hello")
    assert "\n" not in str(info.value)
    assert not [p for p in run.iterdir() if ".tmp-" in p.name]
    (run / f"verdicts-{SCORER_VERSION}.jsonl").mkdir()
    (run / f"verdicts-{SCORER_VERSION}.jsonl" / "x").write_text("x")
    proc = _cli("rescore", str(run))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "cannot write" in proc.stderr
