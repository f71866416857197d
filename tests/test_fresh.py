"""``run --fresh`` and the write lock: nothing of a live or a user's run is lost."""

from __future__ import annotations

import dataclasses
import json
import shutil
import struct
import time
from pathlib import Path

import pytest
from conftest import SMALL_SPEC

from tooldecode.errors import ModelError, RunError
from tooldecode.experiments import SpecError, load_spec, run_spec
from tooldecode.runs import RunLock, RunStore, build_manifest, clear_run, is_store_file

SMALL = SMALL_SPEC  # the spec of conftest's small_run


def _spec(tmp_path: Path, body: str = SMALL):
    path = tmp_path / "s.toml"
    path.write_text(body)
    return load_spec(path)


# small_run (conftest): one finished run of SMALL, shared with test_safety; tests copy it first


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


# ------------------------------------------------------------------------------------ store level


def test_the_lock_is_on_the_folder_and_outlives_its_files(tmp_path):
    store = RunStore.create(tmp_path / "r", build_manifest({"spec": "t"}), lock=True)
    with pytest.raises(RunError, match="another process"):
        RunStore.open(tmp_path / "r").lock()
    (tmp_path / "r" / "samples.jsonl").unlink()  # a deleted file releases no lock
    (tmp_path / "r" / "samples.jsonl").touch()
    with pytest.raises(RunError, match="another process"):
        RunLock(tmp_path / "r")
    store.close()
    RunLock(tmp_path / "r").release()


def test_clear_run_deletes_only_what_tooldecode_wrote(tmp_path):
    run = tmp_path / "r"
    RunStore.create(run, build_manifest({"spec": "t"})).close()
    for name in ("verdicts-s1.jsonl", "repaired-r1.jsonl", "summary.md", "timing.json", "probe.jsonl"):
        (run / name).write_text("x")
    (run / "notes.txt").write_text("mine")
    (run / "verdicts-s1.jsonl.bak").write_text("mine too")
    (run / "sub").mkdir()
    lock = RunLock(run)
    assert clear_run(run, lock) == ["notes.txt", "sub", "verdicts-s1.jsonl.bak"]
    assert sorted(p.name for p in run.iterdir()) == ["notes.txt", "sub", "verdicts-s1.jsonl.bak"]
    lock.release()
    with pytest.raises(RunError, match="held write lock"):
        clear_run(run, lock)
    assert is_store_file("manifest.json.tmp-123") and not is_store_file("thesis.tex.tmp-1")


# ------------------------------------------------------------------------------------- run --fresh


@pytest.mark.model
@pytest.mark.model
def test_fresh_under_a_live_writer_is_refused_and_deletes_nothing(tmp_path, small_run):
    spec, src = small_run
    out = _copy(src, tmp_path / "run")
    holder = RunStore.open(out)
    holder.lock()
    try:
        t0 = time.perf_counter()
        with pytest.raises(RunError, match="another process"):
            run_spec(spec, out, fresh=True, progress=False)
        assert time.perf_counter() - t0 < 30
        assert (out / "manifest.json").exists()
        assert len(RunStore.open(out)) == 2
    finally:
        holder.close()


@pytest.mark.model
@pytest.mark.model
def test_fresh_with_a_model_id_that_does_not_resolve_keeps_the_run(tmp_path, small_run):
    spec, src = small_run
    out = _copy(src, tmp_path / "run")
    spec = dataclasses.replace(spec, models=["no-such-model-typo"])
    with pytest.raises(ModelError, match="deleted nothing"):
        run_spec(spec, out, fresh=True, progress=False)
    assert len(RunStore.open(out)) == 2


@pytest.mark.model
@pytest.mark.model
def test_fresh_with_weights_that_do_not_load_keeps_the_run(tmp_path, small_run):
    spec, src = small_run
    out = _copy(src, tmp_path / "run")
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + struct.pack("<I", 3) + b"\0" * 64)
    spec = dataclasses.replace(spec, models=[str(bad)])
    with pytest.raises(ModelError):
        run_spec(spec, out, fresh=True, progress=False)
    assert len(RunStore.open(out)) == 2
    assert (out / "manifest.json").exists()


@pytest.mark.model
@pytest.mark.model
def test_fresh_keeps_and_names_a_users_file(tmp_path, small_run, capsys):
    spec, src = small_run
    out = _copy(src, tmp_path / "run")
    (out / "notes.txt").write_text("keep me")
    before = json.loads((out / "manifest.json").read_text())["created"]
    run_spec(spec, out, fresh=True, progress=False)
    assert (out / "notes.txt").read_text() == "keep me"
    assert "notes.txt" in capsys.readouterr().err
    assert len(RunStore.open(out)) == 2
    assert json.loads((out / "manifest.json").read_text())["created"] >= before


@pytest.mark.model
@pytest.mark.model
def test_fresh_on_a_symlink_is_refused(tmp_path, small_run):
    spec, src = small_run
    real = _copy(src, tmp_path / "real")
    link = tmp_path / "link"
    link.symlink_to(real)
    with pytest.raises(SpecError, match="symlink"):
        run_spec(spec, link, fresh=True, progress=False)
    assert len(RunStore.open(real)) == 2


# ------------------------------------------------------------------------- runs that would be empty


def test_a_filter_selecting_no_scenario_is_an_error_before_any_model(tmp_path):
    body = SMALL.replace('scenarios = ["json-tsconfig-path-aliases"]', 'tags = ["no-such-tag"]')
    assert body != SMALL
    spec = _spec(tmp_path, body)
    spec.models = ["no-such-model"]  # never resolved: the filter is refused first
    with pytest.raises(SpecError, match="selects no scenario"):
        run_spec(spec, tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()


def test_an_empty_engine_list_is_an_error(tmp_path):
    body = SMALL.replace('modes = ["loose"]', 'modes = ["loose", "strict"]\nengine = []')
    with pytest.raises(SpecError, match="engine"):
        _spec(tmp_path, body)


CHILD = """
import os, signal, sys
from tooldecode.experiments import load_spec, run_spec
from tooldecode.trial import session

real_get = session.ModelCache.get

def get(self, backend, model):  # SIGTERM while the model loads, as `kill` would send it
    os.kill(os.getpid(), signal.SIGTERM)
    return real_get(self, backend, model)

session.ModelCache.get = get
run_spec(load_spec(sys.argv[1]), __import__("pathlib").Path(sys.argv[2]), progress=False)
"""


@pytest.mark.model
def test_sigterm_while_the_model_loads_leaves_no_empty_run(tmp_path, smol_ref):
    import subprocess
    import sys

    (tmp_path / "s.toml").write_text(SMALL)
    (tmp_path / "child.py").write_text(CHILD)
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, str(tmp_path / "child.py"), str(tmp_path / "s.toml"), str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode != 0
    assert not out.exists(), sorted(p.name for p in out.iterdir())


def _chattr(flag: str, path: Path) -> bool:
    import subprocess

    try:
        return subprocess.run(["chattr", flag, str(path)], capture_output=True).returncode == 0
    except OSError:
        return False


@pytest.mark.model
def test_a_run_into_an_immutable_run_folder_stops_before_sampling(small_run, tmp_path):
    """An immutable run folder (chattr +i: not even root can add a file) is a one-line error before any
    sample is drawn, and the samples already there stay as they were."""
    spec, run = small_run
    folder = tmp_path / "run"
    shutil.copytree(run, folder)
    lines = (folder / "samples.jsonl").read_bytes().splitlines(keepends=True)
    (folder / "samples.jsonl").write_bytes(b"".join(lines[:-1]))  # one sample still to draw
    before = (folder / "samples.jsonl").read_bytes()
    more = tmp_path / "s.toml"
    more.write_text(SMALL_SPEC)
    if not _chattr("+i", folder):
        pytest.skip("chattr +i is not available here (needs root and a file system with immutable files)")
    try:
        with pytest.raises(RunError) as err:
            run_spec(load_spec(more), folder, progress=False)
    finally:
        _chattr("-i", folder)
    msg = str(err.value)
    assert "\n" not in msg and "cannot write files in run folder" in msg, msg
    assert (folder / "samples.jsonl").read_bytes() == before
