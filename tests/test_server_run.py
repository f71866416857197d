"""`tooldecode run … --backend openai` against llama-cpp-python's server: a killed server and a refused
connection give a one-line error and lose no sample; the run resumes against a restarted server (on
another port) and `tooldecode report` reads it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from conftest import LlamaServer, free_port

pytestmark = [pytest.mark.model, pytest.mark.slow]

SPEC = """
name = "server-run"
description = "loose and strict through llama-cpp-python's server"
models = ["smollm2-135m-instruct"]
scenarios = ["py-mutable-default-cart"]
n = 4
seeds = [0]
max_new_tokens = 8
modes = ["loose", "strict"]
batch_size = 4

[variant]
history = ["fresh"]
conditioning = ["free"]
"""


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "tooldecode", *args]


def _lines(path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_killed_server_refused_connection_resume_and_report(smol_ref, tmp_path):
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC)
    out = tmp_path / "run"
    samples = out / "samples.jsonl"
    env = dict(os.environ, PYTHONUNBUFFERED="1")

    def run(url: str) -> subprocess.Popen:
        cmd = _cli(
            "run", str(spec), "--out", str(out), "--backend", "openai", "--base-url", url, "--no-progress"
        )
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)

    # 1. the server dies (SIGKILL) in the middle of the run
    server = LlamaServer(smol_ref.path, tmp_path / "server1.log")
    try:
        proc = run(server.base_url)
        deadline = time.monotonic() + 300
        while len(_lines(samples)) < 2 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        server.kill()
        _, err = proc.communicate(timeout=120)
    finally:
        server.stop()
    assert proc.returncode == 2, err
    assert err.strip().count("\n") == 0 and err.startswith("tooldecode: error: cannot reach the server"), err
    kept = _lines(samples)
    assert 2 <= len(kept) < 8
    recs = [json.loads(line) for line in kept]
    assert len({r["key"] for r in recs}) == len(recs)

    # 2. nothing listens: refused at once, one line, nothing written
    proc = run(f"http://127.0.0.1:{free_port()}/v1")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2 and err.strip().count("\n") == 0 and "cannot reach the server" in err, err
    assert _lines(samples) == kept

    # 3. a new server on another port: the run resumes, keeps what it had, adds only what was missing
    server = LlamaServer(smol_ref.path, tmp_path / "server2.log")
    try:
        proc = run(server.base_url)
        stdout, err = proc.communicate(timeout=600)
    finally:
        server.stop()
    assert proc.returncode == 0, err
    after = _lines(samples)
    assert after[: len(kept)] == kept
    recs = [json.loads(line) for line in after]
    keys = [r["key"] for r in recs]
    assert len(keys) == len(set(keys)) == 8
    assert {r["arm"]["backend"] for r in recs} == {"openai"}
    assert {r["arm"]["mode"] for r in recs} == {"loose", "strict"}
    for r in recs:
        assert r["entropy"] is None and r["mask_removed"] is None
        assert r["finish_reason"] in ("stop", "length") and isinstance(r["text"], str)

    # 4. the report reads it like any other run
    rep = subprocess.run(_cli("report", str(out)), capture_output=True, text=True, env=env, timeout=600)
    assert rep.returncode == 0, rep.stderr
    summary = (out / "summary.md").read_text()
    assert "server-run" in summary or "smollm2" in summary
