"""Run store: create / open / append / resume, torn lines, kill -9 and resume, derived files, rescore."""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tooldecode.cli import runs as runstore_cli
from tooldecode.errors import RunError
from tooldecode.runs import RunStore, build_manifest, rescore

CONFIG = {"arms": [{"model": "m", "mode": "loose"}], "sampling": {"temperature": 1.0, "n": 4}}


def _manifest(config: dict | None = None, **extra: object) -> dict:
    return {"config": CONFIG if config is None else config, **extra}


def _rec(key: str, **fields: object) -> dict:
    return {
        "key": key,
        "scenario": key.split("/")[0],
        "text": f"call for {key}",
        "arm": {"mode": "loose"},
        **fields,
    }


def _raw_lines(path: Path) -> list[dict]:
    """samples.jsonl parsed independently of RunStore; every line must be complete and valid."""
    data = (path / "samples.jsonl").read_bytes()
    assert data == b"" or data.endswith(b"\n"), "samples.jsonl ends in a torn line"
    return [json.loads(line) for line in data.splitlines()]


# --- create / open / resume ------------------------------------------------------------------------


def test_create_writes_manifest_and_empty_samples(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "r1"
    store = RunStore.create(run, _manifest(note=("a", "b")))
    assert store.path == run
    assert json.loads((run / "manifest.json").read_text()) == {"config": CONFIG, "note": ["a", "b"]}
    assert store.manifest == {"config": CONFIG, "note": ["a", "b"]}
    assert (run / "samples.jsonl").read_bytes() == b""
    assert sorted(p.name for p in run.iterdir()) == ["manifest.json", "samples.jsonl"]
    assert store.completed_keys() == set() and list(store.iter_samples()) == []


def test_resume_with_same_config_keeps_the_original_manifest(tmp_path: Path) -> None:
    run = tmp_path / "r"
    with RunStore.create(run, _manifest(created="first")) as store:
        store.append([_rec("s1/0"), _rec("s1/1")])
    manifest_bytes = (run / "manifest.json").read_bytes()
    # Same config, other provenance (a later start), ints where floats were: still the same run.
    same = json.loads(json.dumps(CONFIG))
    same["sampling"]["temperature"] = 1
    resumed = RunStore.create(run, _manifest(same, created="second"))
    assert resumed.manifest["created"] == "first"
    assert (run / "manifest.json").read_bytes() == manifest_bytes
    assert resumed.completed_keys() == {"s1/0", "s1/1"}
    resumed.append([_rec("s1/2")])
    assert [r["key"] for r in resumed.iter_samples()] == ["s1/0", "s1/1", "s1/2"]


def test_a_resume_from_another_commit_is_recorded_once_in_the_manifest(tmp_path: Path) -> None:
    run = tmp_path / "r"

    def at(sha: str, dirty: bool, created: str) -> dict:
        return _manifest(created=created, tooldecode={"version": "0", "git_sha": sha, "git_dirty": dirty})

    RunStore.create(run, at("aaa", False, "t0")).close()
    RunStore.create(run, at("aaa", False, "t1")).close()  # the same commit: nothing to add
    assert "resumed" not in json.loads((run / "manifest.json").read_text())
    RunStore.create(run, at("bbb", False, "t2")).close()
    RunStore.create(run, at("bbb", False, "t3")).close()  # once per commit
    RunStore.create(run, at("bbb", True, "t4")).close()  # dirty is another provenance
    stored = json.loads((run / "manifest.json").read_text())
    assert stored["tooldecode"]["git_sha"] == "aaa" and stored["created"] == "t0"
    assert stored["resumed"] == [
        {"git_sha": "bbb", "git_dirty": False, "at": "t2"},
        {"git_sha": "bbb", "git_dirty": True, "at": "t4"},
    ]
    assert RunStore.open(run).manifest["resumed"] == stored["resumed"]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda c: c["sampling"].update(temperature=0.7), "sampling.temperature"),
        (lambda c: c["arms"][0].update(mode="strict"), "arms[0].mode"),
        (lambda c: c["arms"].append({"model": "x"}), "arms[1]"),
        (lambda c: c.update(extra=True), "extra"),
        (lambda c: c["sampling"].pop("n"), "sampling.n"),
        (lambda c: c["sampling"].update(n=True), "sampling.n"),
    ],
)
def test_resume_with_a_different_config_names_the_field(tmp_path: Path, change, field: str) -> None:
    run = tmp_path / "r"
    RunStore.create(run, _manifest()).close()
    other = json.loads(json.dumps(CONFIG))
    change(other)
    with pytest.raises(RunError) as err:
        RunStore.create(run, _manifest(other))
    msg = str(err.value)
    assert f"run {run} was made with a different config (field {field} differs)" in msg
    assert "--fresh" in msg and "\n" not in msg


def test_existing_run_without_resume_and_non_run_dirs_are_refused(tmp_path: Path) -> None:
    run = tmp_path / "r"
    RunStore.create(run, _manifest()).close()
    with pytest.raises(RunError, match="already exists"):
        RunStore.create(run, _manifest(), resume=False)
    other = tmp_path / "notes"
    other.mkdir()
    (other / "readme.txt").write_text("hi")
    with pytest.raises(RunError, match="not a run"):
        RunStore.create(other, _manifest())
    empty = tmp_path / "empty"
    empty.mkdir()
    assert RunStore.create(empty, _manifest()).completed_keys() == set()


def test_open_errors_are_one_line_and_say_where(tmp_path: Path) -> None:
    with pytest.raises(RunError, match="does not exist"):
        RunStore.open(tmp_path / "nope")
    (tmp_path / "plain").mkdir()
    with pytest.raises(RunError, match="no manifest.json"):
        RunStore.open(tmp_path / "plain")
    run = tmp_path / "r"
    RunStore.create(run, _manifest()).close()
    (run / "manifest.json").write_text('{"config": ')
    with pytest.raises(RunError) as err:
        RunStore.open(run)
    assert str(run / "manifest.json") in str(err.value) and "\n" not in str(err.value)


# --- append ----------------------------------------------------------------------------------------


def test_append_is_append_only_and_fsyncs_once_per_batch(tmp_path: Path, monkeypatch) -> None:
    store = RunStore.create(tmp_path / "r", _manifest())
    fsyncs: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (fsyncs.append(fd), real_fsync(fd))[1])
    store.append([_rec(f"s/{i}") for i in range(5)])
    assert len(fsyncs) == 1
    first = (tmp_path / "r" / "samples.jsonl").read_bytes()
    store.append([_rec("s/5", text="ünïcode ✓", logprobs=[-0.5, float("-inf")])])
    assert len(fsyncs) == 2
    after = (tmp_path / "r" / "samples.jsonl").read_bytes()
    assert after.startswith(first) and after.count(b"\n") == 6
    last = list(store.iter_samples())[-1]
    assert last["text"] == "ünïcode ✓" and last["logprobs"][1] == float("-inf")


def test_append_rejects_duplicate_keys_without_writing(tmp_path: Path) -> None:
    store = RunStore.create(tmp_path / "r", _manifest())
    store.append([_rec("a/0"), _rec("a/1")])
    before = (tmp_path / "r" / "samples.jsonl").read_bytes()
    with pytest.raises(RunError, match="'a/1' is already in"):
        store.append([_rec("a/2"), _rec("a/1")])
    with pytest.raises(RunError, match="within one batch"):
        store.append([_rec("a/3"), _rec("a/3")])
    with pytest.raises(ValueError):
        store.append([{"text": "no key"}])
    assert (tmp_path / "r" / "samples.jsonl").read_bytes() == before
    # A second store object on the same run sees the keys written by the first.
    store.close()
    with pytest.raises(RunError, match="already in"):
        RunStore.open(tmp_path / "r").append([_rec("a/0")])


def test_text_that_is_not_valid_unicode_round_trips(tmp_path: Path) -> None:
    store = RunStore.create(tmp_path / "r", _manifest())
    store.append([_rec("a/0", text="half a pair: \ud83d")])
    assert next(store.iter_samples())["text"] == "half a pair: \ud83d"


def test_one_writer_at_a_time(tmp_path: Path) -> None:
    first = RunStore.create(tmp_path / "r", _manifest())
    first.append([_rec("a/0")])
    second = RunStore.open(tmp_path / "r")
    with pytest.raises(RunError, match="being written by another process"):
        second.append([_rec("a/1")])
    assert second.completed_keys() == {"a/0"}  # reading needs no lock
    first.close()
    second.append([_rec("a/1")])
    assert RunStore.open(tmp_path / "r").completed_keys() == {"a/0", "a/1"}


# --- torn and corrupt lines ------------------------------------------------------------------------


def test_torn_last_line_is_skipped_and_cut_by_the_next_append(tmp_path: Path) -> None:
    run = tmp_path / "r"
    store = RunStore.create(run, _manifest())
    store.append([_rec("a/0"), _rec("a/1")])
    store.close()
    good = (run / "samples.jsonl").read_bytes()
    # What a kill -9 in the middle of writing a line leaves behind.
    (run / "samples.jsonl").write_bytes(good + b'{"key": "a/2", "text": "cut he')
    store = RunStore.open(run)
    assert [r["key"] for r in store.iter_samples()] == ["a/0", "a/1"]
    assert store.skipped == []  # a torn tail is no bad record
    assert store.completed_keys() == {"a/0", "a/1"}
    store.append([_rec("a/2"), _rec("a/3")])
    store.close()
    assert [r["key"] for r in _raw_lines(run)] == ["a/0", "a/1", "a/2", "a/3"]
    assert (run / "samples.jsonl").read_bytes().startswith(good + b'{"key": "a/2", "scenario"')


def test_a_whole_last_record_without_its_newline_is_read_and_kept(tmp_path: Path) -> None:
    run = tmp_path / "r"
    store = RunStore.create(run, _manifest())
    store.append([_rec("a/0"), _rec("a/1")])
    store.close()
    last = json.dumps(_rec("a/2")).encode()
    (run / "samples.jsonl").write_bytes((run / "samples.jsonl").read_bytes() + last)
    store = RunStore.open(run)
    assert [r["key"] for r in store.iter_samples()] == ["a/0", "a/1", "a/2"]
    assert store.completed_keys() == {"a/0", "a/1", "a/2"}
    store.append([_rec("a/3")])  # ends the unterminated line first
    store.close()
    assert [r["key"] for r in _raw_lines(run)] == ["a/0", "a/1", "a/2", "a/3"]
    assert last + b"\n" in (run / "samples.jsonl").read_bytes()


def test_corrupt_line_in_the_middle_is_skipped_with_a_warning_naming_its_line(tmp_path: Path, capsys) -> None:
    run = tmp_path / "r"
    RunStore.create(run, _manifest()).close()
    lines = [json.dumps(_rec(f"a/{i}")) for i in range(4)]
    lines[2] = lines[2][:-5]
    (run / "samples.jsonl").write_text("\n".join(lines) + "\n")
    store = RunStore.open(run)
    assert [r["key"] for r in store.iter_samples()] == ["a/0", "a/1", "a/3"]
    assert [n for n, _ in store.skipped] == [3]
    err = capsys.readouterr().err
    assert "samples.jsonl: skipped 1 unreadable record(s) (line 3: not valid JSON" in err
    assert err.count("\n") == 1
    assert store.completed_keys() == {"a/0", "a/1", "a/3"}  # a/2 is redone on resume
    # A complete (newline-terminated) last line that does not parse is a bad record, not a torn tail.
    (run / "samples.jsonl").write_text(json.dumps(_rec("a/0")) + "\n" + "{oops\n")
    store = RunStore.open(run)
    assert [r["key"] for r in store.iter_samples()] == ["a/0"] and [n for n, _ in store.skipped] == [2]
    (run / "samples.jsonl").write_text('{"key": "a/0"}\n[1, 2]\n')
    store = RunStore.open(run)
    assert [r["key"] for r in store.iter_samples()] == ["a/0"]
    assert 'not a JSON object with a string "key"' in store.skipped[0][1]


# --- kill -9 and resume, in real processes ---------------------------------------------------------

CHILD = textwrap.dedent(
    """
    import os, sys, time
    from tooldecode.runs import RunStore

    mode, path = sys.argv[1], sys.argv[2]
    store = RunStore.create(path, {"config": {"experiment": "kill-test"}})

    def rec(i, size):
        return {"key": f"k/{i:05d}", "i": i, "text": f"{i:05d}" * (size // 5)}

    if mode == "loop":  # resume to `target` records, `batch` per append, a short sleep between batches
        target, batch, size, pause = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6])
        done = store.completed_keys()
        todo = [i for i in range(target) if f"k/{i:05d}" not in done]
        print("start", len(done), flush=True)
        for j in range(0, len(todo), batch):
            store.append([rec(i, size) for i in todo[j : j + batch]])
            print("batch", j + batch, flush=True)
            time.sleep(pause)
        print("done", flush=True)
    elif mode == "torn":  # ten small records, then a 5 MB batch that stalls after its first chunk
        first, count, size, marker = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
        store.append([rec(i, 50) for i in range(first)])
        real_write = os.write
        def stalling_write(fd, data):
            n = real_write(fd, data)
            open(marker, "w").close()
            time.sleep(60)
            return n
        os.write = stalling_write
        store.append([rec(first + i, size) for i in range(count)])
        print("not reached", flush=True)
    """
)


def _env() -> dict[str, str]:
    root = str(Path(__file__).resolve().parents[1])
    return {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}


def _spawn(script: Path, *args: object) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(script), *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )


def _check_run(run: Path, expected: range, size: int) -> None:
    records = _raw_lines(run)
    keys = [r["key"] for r in records]
    assert len(keys) == len(set(keys)), "duplicated keys"
    assert set(keys) == {f"k/{i:05d}" for i in expected}, "lost keys"
    for r in records:  # every record intact, none interleaved with another
        assert r["key"] == f"k/{r['i']:05d}" and r["text"] == f"{r['i']:05d}" * (size // 5)


def _env() -> dict[str, str]:
    root = str(Path(__file__).resolve().parents[1])
    return {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}


def _spawn(script: Path, *args: object) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(script), *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )


def _check_run(run: Path, expected: range, size: int) -> None:
    records = _raw_lines(run)
    keys = [r["key"] for r in records]
    assert len(keys) == len(set(keys)), "duplicated keys"
    assert set(keys) == {f"k/{i:05d}" for i in expected}, "lost keys"
    for r in records:  # every record intact, none interleaved with another
        assert r["key"] == f"k/{r['i']:05d}" and r["text"] == f"{r['i']:05d}" * (size // 5)


def test_kill_9_during_a_run_then_resume_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    run, target, batch, size = tmp_path / "run", 300, 10, 20_000  # 200 kB per batch
    rng = random.Random(1234)
    progress = [0]
    for _cycle in range(3):
        child = _spawn(script, "loop", run, target, batch, size, 0.01)
        assert child.stdout is not None
        assert child.stdout.readline().startswith("start")
        for _ in range(rng.randint(2, 5)):  # let a few batches land, then kill at a random moment
            assert child.stdout.readline().startswith("batch")
        time.sleep(rng.uniform(0.0, 0.012))
        assert child.poll() is None, "the child finished before it could be killed"
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
        assert child.returncode == -signal.SIGKILL
        done = RunStore.open(run).completed_keys()
        assert progress[-1] < len(done) < target
        progress.append(len(done))
        assert done == {r["key"] for r in RunStore.open(run).iter_samples()}
    child = _spawn(script, "loop", run, target, batch, size, 0.0)
    out, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    assert out.splitlines()[0] == f"start {progress[-1]}" and out.splitlines()[-1] == "done"
    _check_run(run, range(target), size)


@pytest.mark.parametrize(
    ("count", "size"),
    [(4, 1_300_000), (5000, 1000)],  # 5 MB either way: four huge records, or many small ones
    ids=["torn-inside-first-record", "torn-mid-batch"],
)
def test_kill_9_in_the_middle_of_a_write_leaves_a_torn_line_that_resume_repairs(
    tmp_path: Path, count: int, size: int
) -> None:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    run, marker, first = tmp_path / "run", tmp_path / "stalled", 10
    child = _spawn(script, "torn", run, first, count, size, marker)
    deadline = time.monotonic() + 20
    while not marker.exists():  # the child has written the first 1 MiB chunk of the batch and stalls
        assert child.poll() is None, child.communicate()[1]
        assert time.monotonic() < deadline
        time.sleep(0.005)
    # While the child holds the run, nobody else may append to it.
    with pytest.raises(RunError, match="another process"):
        RunStore.open(run).append([{"key": "intruder"}])
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=10)

    data = (run / "samples.jsonl").read_bytes()
    assert not data.endswith(b"\n"), "expected a torn last line"
    whole_lines = data.count(b"\n")
    # The complete lines of the batch's first 1 MiB chunk survive; the next one is torn.
    ends = itertools.accumulate(
        len(json.dumps({"key": f"k/{i:05d}", "i": i, "text": f"{i:05d}" * (size // 5)})) + 1
        for i in range(first, first + count)
    )
    assert whole_lines == first + sum(1 for end in ends if end <= 1 << 20)
    store = RunStore.open(run)
    assert len(list(store.iter_samples())) == whole_lines
    assert store.completed_keys() == {f"k/{i:05d}" for i in range(whole_lines)}

    target = first + count
    child = _spawn(script, "loop", run, target, 50, size, 0.0)
    out, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    assert out.splitlines()[0] == f"start {whole_lines}"
    records = _raw_lines(run)
    assert [r["key"] for r in records] == [f"k/{i:05d}" for i in range(target)]
    assert all(r["text"] == f"{r['i']:05d}" * ((50 if r["i"] < first else size) // 5) for r in records)


# --- derived files and rescore ---------------------------------------------------------------------


def test_write_derived(tmp_path: Path) -> None:
    store = RunStore.create(tmp_path / "r", _manifest())
    p = store.write_derived("summary.md", "# Summary\nok\n")
    assert p == tmp_path / "r" / "summary.md" and p.read_text() == "# Summary\nok\n"
    q = store.write_derived("tables/verdicts-x.jsonl", iter([{"key": "a", "v": 1}, {"key": "b", "v": 2}]))
    assert [json.loads(line) for line in q.read_text().splitlines()] == [
        {"key": "a", "v": 1},
        {"key": "b", "v": 2},
    ]
    store.write_derived("summary.md", "again\n")
    assert p.read_text() == "again\n"
    assert store.derived_path("summary.md") == p
    for bad in ["manifest.json", "samples.jsonl", "./samples.jsonl", "x/../manifest.json", "../escape.md",
                str(tmp_path / "abs.md"), "", "."]:  # fmt: skip
        with pytest.raises(RunError):
            store.write_derived(bad, "no")
    assert not (tmp_path / "escape.md").exists() and not (tmp_path / "abs.md").exists()
    assert json.loads((tmp_path / "r" / "manifest.json").read_text()) == {"config": CONFIG}
    assert not [f for f in (tmp_path / "r").rglob("*") if ".tmp-" in f.name]


def _toy_scorer(record: dict, manifest: dict) -> dict:
    ok = "bad" not in record["text"]
    return {"verdict": "valid" if ok else "json_syntax", "config_n": manifest["config"]["sampling"]["n"]}


def test_rescore_writes_verdicts_and_never_touches_raw_files(tmp_path: Path) -> None:
    run = tmp_path / "r"
    store = RunStore.create(run, _manifest())
    store.append([_rec("a/0"), _rec("a/1", text="bad call"), _rec("a/2")])
    raw = {name: (run / name).read_bytes() for name in ("manifest.json", "samples.jsonl")}
    mtimes = {name: (run / name).stat().st_mtime_ns for name in raw}
    out = rescore(store, _toy_scorer, "t1")
    assert out == run / "verdicts-t1.jsonl"
    verdicts = [json.loads(line) for line in out.read_text().splitlines()]
    assert verdicts == [
        {"key": "a/0", "verdict": "valid", "config_n": 4},
        {"key": "a/1", "verdict": "json_syntax", "config_n": 4},
        {"key": "a/2", "verdict": "valid", "config_n": 4},
    ]
    first = out.read_bytes()
    assert rescore(RunStore.open(run), _toy_scorer, "t1") == out and out.read_bytes() == first
    for name, data in raw.items():
        assert (run / name).read_bytes() == data and (run / name).stat().st_mtime_ns == mtimes[name]
    with pytest.raises(ValueError):
        rescore(store, _toy_scorer, "../x")
    with pytest.raises(ValueError, match="changed the key"):
        rescore(store, lambda r, m: {"key": "other", "verdict": "valid"}, "t2")
    assert not (run / "verdicts-t2.jsonl").exists()


def test_build_manifest_records_provenance_without_importing_torch(tmp_path: Path) -> None:
    code = (
        "import json, sys\n"
        "from tooldecode.runs import build_manifest\n"
        "m = build_manifest({'a': 1}, model={'id': 'x', 'sha256': 'ab', 'path': '/m'}, seeds=[1, 2],"
        " scenarios={'s1': 'h1'})\n"
        "print(json.dumps({'manifest': m, 'torch_imported': 'torch' in sys.modules}))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["torch_imported"] is False
    m = result["manifest"]
    assert m["config"] == {"a": 1} and m["seeds"] == [1, 2] and m["scenarios"] == {"s1": "h1"}
    assert m["model"] == {"id": "x", "sha256": "ab", "path": "/m"}
    assert set(m["libraries"]) == {"numpy", "torch", "transformers", "llama_cpp", "xgrammar", "llguidance",
                                   "outlines"}  # fmt: skip
    assert m["libraries"]["numpy"]  # installed here
    sha = m["tooldecode"]["git_sha"]
    assert sha == "unknown" or (len(sha) == 40 and int(sha, 16) >= 0)
    assert m["tooldecode"]["version"] and m["python"].count(".") == 2 and m["platform"]
    assert m["created"].endswith("+00:00")
    # The manifest goes into a run as is.
    store = RunStore.create(tmp_path / "r", build_manifest({"a": 1}))
    assert store.manifest["config"] == {"a": 1}


# --- command line ----------------------------------------------------------------------------------


def _cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="tooldecode")
    runstore_cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return args.func(args)


def test_cli_runs_list(tmp_path: Path, capsys) -> None:
    runs = tmp_path / "runs"
    a = RunStore.create(
        runs / "alpha", {**build_manifest(CONFIG, model={"id": "qwen-0.5b"}), "created": "T1"}
    )
    a.append([_rec(f"a/{i}") for i in range(3)])
    RunStore.create(runs / "beta", _manifest(created="T2"))
    (runs / "not-a-run").mkdir()
    assert _cli(["runs", "list", str(runs)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["name", "samples", "model", "created"]
    assert [line.split() for line in lines[1:]] == [
        ["alpha", "3", "qwen-0.5b", "T1"],
        ["beta", "0", "-", "T2"],
    ]
    with pytest.raises(RunError, match="no runs folder"):
        _cli(["runs", "list", str(tmp_path / "missing")])


def test_cli_rescore_prints_path_and_counts(tmp_path: Path, capsys) -> None:
    from conftest import make_sample

    from tooldecode.scoring import SCORER_VERSION

    gold = (
        '{"name": "edit", "arguments": {"path": "src/config.c", "edits": [{"oldText": "a", "newText": "b"}]}}'
    )
    arm = {
        "model": "m",
        "wire": "call-json",
        "expected_tool": "edit",
        "toolset": "nested",
    }  # an arm of CONFIG
    runs = []
    for name, texts in [("one", [gold, "no call", "no call"]), ("two", [gold])]:
        store = RunStore.create(tmp_path / name, _manifest())
        store.append([make_sample(t, arm=arm, index=i) for i, t in enumerate(texts)])
        store.close()
        runs.append(str(tmp_path / name))
    assert _cli(["rescore", *runs]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [
        str(tmp_path / "one" / f"verdicts-{SCORER_VERSION}.jsonl"),
        "  3 samples: no_call 2, valid 1",
        str(tmp_path / "two" / f"verdicts-{SCORER_VERSION}.jsonl"),
        "  1 samples: valid 1",
    ]
    with pytest.raises(RunError, match="does not exist"):
        _cli(["rescore", str(tmp_path / "missing")])


def test_a_manifest_names_the_settings_it_ran_under(monkeypatch):
    """``environment``: the ``TOOLDECODE_*`` variables (a credential's name left out); a resume under other
    settings lists them beside its commit."""
    from tooldecode.runs.manifest import build_manifest, with_resume

    monkeypatch.setenv("TOOLDECODE_PREFIX_CACHE", "/tmp/kv")
    monkeypatch.setenv("TOOLDECODE_API_KEY", "sk-secret")
    first = build_manifest({"spec": "t"})
    assert first["environment"]["TOOLDECODE_PREFIX_CACHE"] == "/tmp/kv"
    assert "TOOLDECODE_API_KEY" not in first["environment"]
    monkeypatch.delenv("TOOLDECODE_PREFIX_CACHE")
    later = {**build_manifest({"spec": "t"}), "tooldecode": {"git_sha": "b" * 40, "git_dirty": False}}
    resumed = with_resume(first, later)
    assert resumed is not None
    assert "TOOLDECODE_PREFIX_CACHE" not in resumed["resumed"][-1]["environment"]


def _levels_config(n_by_mode: dict) -> dict:
    arms = [
        {"model": "m", "mode": m, "level": lv} for m in ("loose", "strict-aligned") for lv in ("L1", "L2")
    ]
    return {"arms": arms, "scenarios": ["s1", "s2"], "n": 8, "seeds": [0], "n_by_mode": n_by_mode}


def test_an_amendment_that_draws_fewer_of_an_arm_resumes_and_is_recorded(tmp_path: Path) -> None:
    from tooldecode.runs import load_run

    run = tmp_path / "r"
    first = {"strict-aligned": 4, "loose@L2": 4}
    at = {"tooldecode": {"version": "0", "git_sha": "aaa", "git_dirty": False}}
    RunStore.create(run, _manifest(_levels_config(first), created="t0", **at)).close()
    assert load_run(run).expected_samples == 2 * (8 + 4 + 4 + 4)
    narrowed = {**first, "strict-aligned@L2": 2}
    later = {"tooldecode": {"version": "0", "git_sha": "bbb", "git_dirty": False}}
    RunStore.create(run, _manifest(_levels_config(narrowed), created="t1", **later)).close()
    stored = json.loads((run / "manifest.json").read_text())
    assert stored["config"]["n_by_mode"] == first  # the manifest's config stays as it was made
    assert stored["resumed"] == [{"git_sha": "bbb", "git_dirty": False, "at": "t1", "n_by_mode": narrowed}]
    assert load_run(run).expected_samples == 2 * (8 + 4 + 4 + 2)
    # the same amended spec again from the same commit adds nothing; the first spec again is recorded
    RunStore.create(run, _manifest(_levels_config(narrowed), created="t2", **later)).close()
    assert len(json.loads((run / "manifest.json").read_text())["resumed"]) == 1
    RunStore.create(run, _manifest(_levels_config(first), created="t3", **later)).close()
    assert json.loads((run / "manifest.json").read_text())["resumed"][-1]["n_by_mode"] == first
    assert load_run(run).expected_samples == 2 * (8 + 4 + 4 + 4)


@pytest.mark.parametrize(
    "change",
    [
        lambda c: c["n_by_mode"].update({"strict-aligned@L2": 5}),  # more draws than the run was made with
        lambda c: c["n_by_mode"].pop("loose@L2"),  # loose at L2 back to n = 8
        lambda c: c.update(n=4, scenarios=["s1"]),  # fewer draws, and another field
    ],
)
def test_an_amendment_that_widens_or_changes_more_is_refused(tmp_path: Path, change) -> None:
    run = tmp_path / "r"
    config = _levels_config({"strict-aligned": 4, "loose@L2": 4})
    RunStore.create(run, _manifest(config)).close()
    other = json.loads(json.dumps(config))
    change(other)
    with pytest.raises(RunError, match="was made with a different config"):
        RunStore.create(run, _manifest(other))
    assert "resumed" not in json.loads((run / "manifest.json").read_text())


ADAPTIVE = {"method": "adaptive", "target": "complete", "particles": 8, "max_rounds": 64}


def test_an_amendment_that_gives_strict_aligned_a_smaller_budget_resumes_and_is_recorded(
    tmp_path: Path,
) -> None:
    from tooldecode.runs.manifest import effective_config

    run = tmp_path / "r"
    first = {**_levels_config({"strict-aligned": 4}), "aligned": ADAPTIVE}
    RunStore.create(run, _manifest(first, created="t0")).close()
    budget = {**ADAPTIVE, "max_walk_tokens": 4096}
    narrowed = {**_levels_config({"strict-aligned": 4, "strict-aligned@L2": 2}), "aligned": budget}
    later = {"tooldecode": {"version": "0", "git_sha": "bbb", "git_dirty": False}}
    RunStore.create(run, _manifest(narrowed, created="t1", **later)).close()
    stored = json.loads((run / "manifest.json").read_text())
    assert stored["config"]["aligned"] == ADAPTIVE  # the config stays as the run was made
    assert stored["resumed"][-1]["aligned"] == budget
    assert stored["resumed"][-1]["n_by_mode"] == {"strict-aligned": 4, "strict-aligned@L2": 2}
    assert effective_config(stored)["aligned"] == budget
    # a smaller budget again resumes; a larger one, or a budget with another sampler, is refused
    smaller = {**narrowed, "aligned": {**budget, "max_walk_tokens": 2048, "max_rounds": 8}}
    RunStore.create(run, _manifest(smaller, created="t2", **later)).close()
    for aligned in (
        {**budget, "max_rounds": 128},
        {**budget, "particles": 4},
        {**budget, "method": "rejection"},
    ):
        with pytest.raises(RunError, match="was made with a different config"):
            RunStore.create(run, _manifest({**narrowed, "aligned": aligned}))


def test_a_resume_on_another_cpu_is_recorded_even_from_the_runs_own_commit(tmp_path: Path) -> None:
    """Another CPU's kernels can draw otherwise from the same streams, so a run names every kind of CPU
    that wrote some of its rows; the same CPU and commit again adds nothing."""
    from tooldecode.provenance import cpu
    from tooldecode.runs.manifest import build_manifest, with_resume

    x86 = tmp_path / "cpuinfo"
    x86.write_text(
        "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse2 avx avx2 fma avx512f avx512_bf16\n\n"
        "processor\t: 1\nmodel name\t: other\nflags\t\t: fpu\n"
    )
    assert cpu(x86) == "AMD EPYC; avx avx2 fma avx512f avx512_bf16"
    arm = tmp_path / "arm"
    arm.write_text("processor\t: 0\nFeatures\t: fp asimd sve\nCPU implementer\t: 0x41\n")
    assert cpu(arm) == "0x41; asimd sve"
    assert cpu(tmp_path / "missing")  # falls back to the platform's own name

    first = build_manifest({"spec": "t"})
    assert first["cpu"] == cpu()
    assert with_resume(first, {**first, "created": "t1"}) is None  # same commit, same CPU
    elsewhere = {**first, "cpu": "AMD EPYC; avx avx2 fma", "created": "t1"}
    resumed = with_resume(first, elsewhere)
    assert resumed is not None
    entry = resumed["resumed"][-1]
    assert entry["cpu"] == "AMD EPYC; avx avx2 fma" and entry["git_sha"] == first["tooldecode"]["git_sha"]
    assert with_resume(resumed, {**elsewhere, "created": "t2"}) is None  # already listed
    # a run made before CPUs were recorded names the first CPU that resumes it
    old = {k: v for k, v in first.items() if k != "cpu"}
    assert with_resume(old, {**first, "created": "t3"})["resumed"][-1]["cpu"] == cpu()
