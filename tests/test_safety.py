"""Run safety and bad input: nothing lost, nothing silent (one regression test per known hole)."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import SMALL_SPEC, make_sample
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tooldecode.errors import ModelError, RunError, ToolDecodeError
from tooldecode.experiments import SpecError, load_spec, run_spec
from tooldecode.models import TEST_MODEL, resolve
from tooldecode.runs import SAMPLE_FIELDS, RunStore, build_manifest, sample_of, score_stored
from tooldecode.scoring import MAX_JSON_DEPTH, extract_calls, score_text, toolset_tools

ROOT = Path(__file__).resolve().parent.parent
TOOLS = toolset_tools("nested")


def _cli(*args: str, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tooldecode", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, **(env or {})},
        timeout=600,
    )


def _one_line_error(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("tooldecode: error:"), proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


def _spec(tmp_path: Path, body: str, name: str = "s.toml") -> Path:
    path = tmp_path / name
    path.write_text(body)
    return path


SMALL = SMALL_SPEC  # the spec of conftest's small_run
# the runs a test makes itself use it too: it is on the corpus's shortest prompt (a run's cost is its prefill)
SHORT = SMALL
assert 'scenarios = ["json-tsconfig-path-aliases"]' in SHORT


# ------------------------------------------------------------------------------- 1. --fresh and names


def test_fresh_refuses_a_folder_that_is_not_a_run(tmp_path):
    user = tmp_path / "mine"
    user.mkdir()
    (user / "thesis.tex").write_text("years of work")
    spec = _spec(tmp_path, SMALL)
    proc = _cli("run", str(spec), "--fresh", "--out", str(user), "--no-progress")
    line = _one_line_error(proc)
    assert "not a tooldecode run directory" in line
    assert (user / "thesis.tex").read_text() == "years of work"


def test_fresh_refuses_a_manifest_not_written_by_tooldecode(tmp_path):
    out = tmp_path / "looks-like-a-run"
    out.mkdir()
    (out / "manifest.json").write_text('{"hello": 1}')
    (out / "samples.jsonl").write_text("")
    (out / "notes.txt").write_text("keep me")
    spec = load_spec(_spec(tmp_path, SMALL))
    with pytest.raises(SpecError, match="not a tooldecode run"):
        run_spec(spec, out, fresh=True, progress=False)
    assert (out / "notes.txt").exists()


@pytest.mark.parametrize("name", [".", "..", "../../x", "a/b", "/abs", "", ".hidden", "x" * 200])
def test_spec_names_must_be_plain(tmp_path, name):
    body = SMALL.replace('name = "tiny"', f"name = {json.dumps(name)}")
    with pytest.raises(SpecError, match="name"):
        load_spec(_spec(tmp_path, body))


# --------------------------------------------------------------------------------- 6. spec validation

BAD_SPECS = [
    ("n = 0", "'n'"),
    ("n = -3", "'n'"),
    ('n = "four"', "'n'"),
    ("n = true", "'n'"),
    ("temperatures = [-0.5]", "negative"),
    ("temperatures = [1.0, 1.0]", "twice"),
    ("max_new_tokens = 0", "max_new_tokens"),
    ("top_p = 0", "top_p"),
    ("top_p = 1.5", "top_p"),
    ("batch_size = 0", "batch_size"),
    ("seeds = [1, 1]", "twice"),
    ('seeds = ["a"]', "'seeds'"),
    ('engine = "nope"\nmodes = ["strict"]', "unknown engine"),
    ('backend = "tpu"', "unknown backend"),
    ('ws = "roomy"', "unknown ws"),
    ('[variant]\nconditioning = ["gold-prefx"]', "conditioning"),
    ('[variant]\nhistory = ["agentic", "agentic"]', "twice"),
    ('[probe]\nfields = ["history"]', "no values"),
    ("[probe]\ndepht = 3", "unknown \\[probe\\]"),
]


@pytest.mark.parametrize("extra,match", BAD_SPECS)
def test_bad_spec_values_are_one_line_errors(tmp_path, extra, match):
    keys = {part.split("=")[0].strip() + " " for part in extra.splitlines() if "=" in part}
    lines = [line for line in SMALL.splitlines() if not any(line.startswith(k) for k in keys)]
    body = "\n".join(lines) + "\n" + extra + "\n"
    with pytest.raises(SpecError, match=match) as info:
        load_spec(_spec(tmp_path, body))
    assert "\n" not in str(info.value)


def test_more_bad_specs(tmp_path):
    with pytest.raises(SpecError, match="empty"):
        load_spec(_spec(tmp_path, SMALL.replace(f'models = ["{TEST_MODEL}"]', "models = []")))
    with pytest.raises(SpecError, match="twice"):
        load_spec(_spec(tmp_path, SMALL.replace(f'models = ["{TEST_MODEL}"]', 'models = ["a", "a"]')))
    raw = tmp_path / "latin1.toml"
    raw.write_bytes(SMALL.encode() + b'description = "caf\xe9"\n')
    with pytest.raises(SpecError, match="UTF-8"):
        load_spec(raw)
    with pytest.raises(SpecError, match="directory"):
        load_spec(tmp_path)


def test_run_validates_before_any_model_loads(tmp_path):
    spec = _spec(tmp_path, SMALL.replace('modes = ["loose"]', 'modes = ["loose", "strict"]\nengine = "gbnf"'))
    t0 = time.perf_counter()
    line = _one_line_error(_cli("run", str(spec), "--out", str(tmp_path / "out"), "--no-progress"))
    assert "unknown engine" in line and time.perf_counter() - t0 < 60
    assert not (tmp_path / "out").exists()


@pytest.mark.model
def test_llguidance_in_a_spec_gets_a_grammar_it_reads(tmp_path, smol_ref):
    body = SHORT.replace('modes = ["loose"]', 'modes = ["strict"]\nengine = "llguidance"')
    body += '[variant]\nconditioning = ["forced-tool"]\n'
    out = tmp_path / "run"
    run_spec(load_spec(_spec(tmp_path, body)), out, progress=False)
    records = list(RunStore.open(out).sample_records())
    assert len(records) == 2 and all(r["arm"]["engine"] == "llguidance" for r in records)
    assert all(r["error"] is None for r in records)


# small_run (conftest): one finished two-sample run of SMALL, shared with test_fresh; tests copy it first


@pytest.mark.model
def test_lock_is_taken_before_the_model_loads(tmp_path, small_run):
    spec, src = small_run
    out = tmp_path / "run"
    shutil.copytree(src, out)
    holder = RunStore.open(out)
    holder.lock()
    try:
        t0 = time.perf_counter()
        with pytest.raises(RunError, match="another process"):
            run_spec(spec, out, progress=False)
        assert time.perf_counter() - t0 < 30
    finally:
        holder.close()
    assert len(RunStore.open(out)) == 2


def test_failed_model_load_leaves_no_empty_run(tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + struct.pack("<I", 3) + b"\0" * 64)
    body = SMALL.replace(f'models = ["{TEST_MODEL}"]', f"models = [{json.dumps(str(bad))}]")
    out = tmp_path / "out"
    with pytest.raises(ToolDecodeError):
        run_spec(load_spec(_spec(tmp_path, body)), out, progress=False)
    assert not out.exists()


# --------------------------------------------------------------------------------- 4. model provenance


def _copy_home_with_model(tmp_path: Path) -> Path:
    src = resolve(TEST_MODEL, fetch=True).path
    home = tmp_path / "home"
    dst = home / "models" / TEST_MODEL / src.name
    dst.parent.mkdir(parents=True)
    shutil.copyfile(src, dst)
    return home


def test_model_corrupted_in_place_is_refused(tmp_path, monkeypatch):
    home = _copy_home_with_model(tmp_path)
    monkeypatch.setenv("TOOLDECODE_HOME", str(home))
    ref = resolve(TEST_MODEL)
    assert ref.sha256 == ref.digest()
    size = ref.path.stat().st_size
    with open(ref.path, "r+b") as f:  # same size, different bytes
        f.seek(size // 2)
        byte = f.read(1)
        f.seek(size // 2)
        f.write(bytes([byte[0] ^ 0xFF]))
    assert ref.path.stat().st_size == size
    with pytest.raises(ModelError, match="corrupt.*models fetch"):
        resolve(TEST_MODEL)
    line = _one_line_error(
        _cli(
            "sample",
            "--model",
            TEST_MODEL,
            "--scenario",
            "c-config-trim-crlf",
            "-n",
            "1",
            env={"TOOLDECODE_HOME": str(home)},
        )  # fmt: skip
    )
    assert "corrupt" in line


@pytest.mark.model
def test_resume_with_other_weights_is_refused(tmp_path, small_run, smol_ref):
    spec, src = small_run
    out = tmp_path / "run"
    shutil.copytree(src, out)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["model"]["sha256"] == smol_ref.digest()
    # the run was sampled from other bytes than the file now at that id's path
    manifest["model"]["sha256"] = "0" * 64
    (out / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(SpecError, match="mix two models"):
        run_spec(spec, out, progress=False)
    assert len(RunStore.open(out)) == 2


# ------------------------------------------------------------------------------------ 5. run readers


def _store_with(tmp_path: Path, lines: list[str]) -> RunStore:
    RunStore.create(tmp_path / "r", build_manifest({"spec": "t"}))
    with open(tmp_path / "r" / "samples.jsonl", "a") as f:
        f.writelines(line + "\n" for line in lines)
    return RunStore.open(tmp_path / "r")


def _sample(key: str) -> dict:
    return make_sample(
        "{}", arm={"mode": "loose", "wire": "json", "expected_tool": "edit"}, key=key, token_ids=[1]
    )


def test_duplicate_line_stops_every_reader(tmp_path):
    line = json.dumps(_sample("a/0"))
    store = _store_with(tmp_path, [line, json.dumps(_sample("a/1")), line])
    with pytest.raises(RunError, match="line 3: duplicate key"):
        list(store.iter_samples())
    for cmd in (["rescore"], ["repair"], ["report"]):
        proc = _cli(*cmd, str(store.path))
        assert "duplicate key" in _one_line_error(proc)


def test_key_only_line_is_not_a_phantom_sample(tmp_path):
    store = _store_with(tmp_path, [json.dumps(_sample("a/0")), '{"key": "ghost"}'])
    assert [r["key"] for r in store.iter_samples()] == ["a/0", "ghost"]  # generic reader
    assert [r["key"] for r in store.sample_records()] == ["a/0"]  # skipped, counted, named
    assert store.skipped == [(2, "record 'ghost' lacks field(s) arm, scenario, text")]
    assert set(SAMPLE_FIELDS) <= set(_sample("x"))
    proc = _cli("report", str(store.path))
    assert proc.returncode == 0 and "line 2: record 'ghost' lacks field" in proc.stderr


# --------------------------------------------------------------------------- 3. pathological nesting

DEEP = '{"name": "edit", "arguments": ' + '[{"a":' * 260 + "1" + "}]" * 260 + "}"


def test_deep_sample_gets_a_verdict_and_the_run_still_scores(tmp_path):
    rec = _sample("deep/0") | {"text": DEEP}
    out = score_stored(rec, {})
    assert out["verdict"] == "too_deep"
    store = _store_with(tmp_path, [json.dumps(rec), json.dumps(_sample("ok/0"))])
    for cmd in (["rescore"], ["repair"], ["report"]):
        proc = _cli(*cmd, str(store.path))
        assert proc.returncode == 0, proc.stderr
        assert "Traceback" not in proc.stderr
    verdicts = [json.loads(x) for x in next(store.path.glob("verdicts-*.jsonl")).read_text().splitlines()]
    assert [v["verdict"] for v in verdicts][0] == "too_deep"


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH - 2, MAX_JSON_DEPTH + 1, 1000, 5000])
def test_any_depth_scores(depth):
    text = '{"path": "a", "edits": ' + "[" * depth + "]" * depth + "}"
    v = score_text(text, TOOLS, wire="json", expected_tool="edit")
    assert v.verdict == ("too_deep" if depth + 1 > MAX_JSON_DEPTH else "wrong_type")


# ---------------------------------------------------------- 7. corrupt GGUF, disk full, unwritable run


def _gguf_with_string_length(n: int) -> bytes:
    head = b"GGUF" + struct.pack("<IQQ", 3, 0, 1)
    return head + struct.pack("<Q", n) + b"key"


@pytest.mark.parametrize("length", [2**63 + 5, 2**40])
def test_corrupt_gguf_metadata_is_a_one_line_error(tmp_path, length):
    bad = tmp_path / "weird-qwen.gguf"
    bad.write_bytes(_gguf_with_string_length(length) + b"\0" * 64)
    line = _one_line_error(_cli("sample", "--model", str(bad), "--scenario", "c-config-trim-crlf", "-n", "1"))
    assert "GGUF" in line and "models fetch weird-qwen" not in line


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores file permissions")
def test_unwritable_samples_file(tmp_path):
    store = RunStore.create(tmp_path / "r", build_manifest({"spec": "t"}))
    os.chmod(tmp_path / "r" / "samples.jsonl", 0o444)
    with pytest.raises(RunError, match="not writable"):
        store.append([{"key": "a"}])


@pytest.fixture
def tiny_disk(tmp_path):
    """A real 128 kB filesystem (tmpfs; needs root, as in CI)."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=128k", "tmpfs", str(mnt)], capture_output=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.decode().strip()}")
    yield mnt
    subprocess.run(["umount", str(mnt)], check=False)


def test_disk_full_keeps_what_was_written(tiny_disk):
    store = RunStore.create(tiny_disk / "r", build_manifest({"spec": "t"}))
    written = 0
    with pytest.raises(RunError, match="disk full.*kept.*resume"):
        for i in range(10_000):
            store.append([{"key": f"a/{i}", "pad": "x" * 3000}])
            written += 1
    store.close()
    assert written > 5
    assert [r["key"] for r in RunStore.open(tiny_disk / "r").iter_samples()] == [
        f"a/{i}" for i in range(written)
    ]


def test_file_size_limit_is_a_one_line_error(tmp_path):
    """Writes refused by the kernel (RLIMIT_FSIZE → EFBIG) end the run with one line; samples stay."""
    code = f"""
import resource, signal, sys
from tooldecode.runs import RunStore, build_manifest
from tooldecode.errors import RunError
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
store = RunStore.create({str(tmp_path / "r")!r}, build_manifest({{"spec": "t"}}))
resource.setrlimit(resource.RLIMIT_FSIZE, (60_000, 60_000))
try:
    for i in range(100):
        store.append([{{"key": f"a/{{i}}", "pad": "x" * 3000}}])
except RunError as err:
    print(err)
    sys.exit(3)
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 3, proc.stderr
    assert "cannot write" in proc.stdout and "kept" in proc.stdout
    keys = [r["key"] for r in RunStore.open(tmp_path / "r").iter_samples()]
    assert keys == [f"a/{i}" for i in range(len(keys))] and len(keys) >= 10


# ------------------------------------------------------------------------- 8. linear scoring and repair


def _cost(text: str) -> float:
    from tooldecode.repair import repair_text

    t0 = time.perf_counter()
    score_text(text, TOOLS, wire="hermes", expected_tool="edit")
    repair_text(text, TOOLS, wire="hermes", expected_tool="edit")
    return time.perf_counter() - t0


@pytest.mark.parametrize(
    "unit",
    [
        '{"a":',
        'prose {"path": here ',
        '[{"x": "',
        '{"a": {"b": 1} x',
        '"{',
        "{'a': ",
        '<tool_call>{"a":',
        '```json\n{"a":',
        '<function_calls><invoke name="edit">',
        "edit(path=",
    ],
)
def test_scoring_is_linear_in_unterminated_json(unit):
    small, big = unit * 2000, unit * 16000  # 8× the text
    _cost(small)
    t_small = min(_cost(small) for _ in range(3))
    t_big = min(_cost(big) for _ in range(2))
    # linear: ~8×; quadratic would be ~64×. Room for a noisy machine, half way to quadratic.
    assert t_big < 32 * max(t_small, 1e-3), (t_small, t_big)


JSONISH = st.text(alphabet='{}[]":,ab \\\n0', max_size=400)


@st.composite
def nested(draw):
    depth = draw(st.integers(0, 3000))
    opener = draw(st.sampled_from(['{"a":', "[", '[{"edits":', '{"newText": "x", ']))
    tail = draw(JSONISH)
    closed = draw(st.booleans())
    closer = {'{"a":': "}", "[": "]", '[{"edits":': "}]", '{"newText": "x", ': "}"}[opener]
    return opener * depth + tail + (closer * depth if closed else "")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(JSONISH, nested()), st.sampled_from([None, "json", "hermes", "call-json", "antml"]))
def test_scoring_and_repair_never_raise(text, wire):
    from tooldecode.repair import repair_record

    base = _sample("f/0")
    rec = base | {"text": text, "arm": {**base["arm"], "wire": wire, "expected_tool": "edit"}}
    t0 = time.perf_counter()
    out = score_stored(rec, {})
    assert out["verdict"] in (
        "valid", "invented_key", "missing_required", "wrong_type", "json_syntax", "truncated",
        "too_deep", "no_call", "wrong_tool",
    )  # fmt: skip
    repaired = repair_record(sample_of(rec), {})
    json.dumps(out)
    json.dumps(repaired)
    extract_calls(text, wire=wire, lenient=True)
    # stated bound: 2 s for up to ~20 kB of text (linear work is a few ms per kB here)
    assert time.perf_counter() - t0 < 2 + len(text) / 10_000


# --------------------------------------------------------------------------------------- 9. messages


def test_report_on_a_file_says_so(tmp_path):
    f = tmp_path / "samples.jsonl"
    f.write_text("")
    line = _one_line_error(_cli("report", str(f)))
    assert "is a file" in line and str(tmp_path) in line


def test_models_verify_on_a_path_says_what_it_does(tmp_path):
    f = tmp_path / "mine.gguf"
    f.write_bytes(b"GGUF")
    line = _one_line_error(_cli("models", "verify", str(f)))
    assert "by id" in line and "or pass a path" not in line


def test_scenarios_show_refuses_a_scenario_check_rejects(tmp_path):
    src = next((ROOT / "tooldecode" / "scenarios" / "data").glob("*.yaml"))
    text = src.read_text()
    sid = next(line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("id:"))
    broken = tmp_path / "broken.yaml"
    # gold edits that do not apply: the expected file no longer matches
    broken.write_text(text.replace("expected: |", "expected: |\n  NOT THE RESULT", 1))
    check = _cli("scenarios", "check", str(tmp_path))
    assert check.returncode == 1
    line = _one_line_error(_cli("scenarios", "show", sid, "--dir", str(tmp_path), "--model", TEST_MODEL))
    assert "scenarios check" in line


# ------------------------------------------------------------------ model identity is its content


def _flip_keeping_stat(path: Path) -> None:
    """Change one byte in place with size, inode and mtime as they were (what a stat memo cannot see)."""
    st = path.stat()
    with open(path, "r+b") as f:
        f.seek(st.st_size // 2)
        byte = f.read(1)
        f.seek(st.st_size // 2)
        f.write(bytes([byte[0] ^ 0xFF]))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_mtime_ns == st.st_mtime_ns and path.stat().st_size == st.st_size


@pytest.mark.model
def test_verify_finding_corrupt_invalidates_the_stamp(tmp_path, monkeypatch):
    from tooldecode.models import verify_model

    home = _copy_home_with_model(tmp_path)
    monkeypatch.setenv("TOOLDECODE_HOME", str(home))
    ref = resolve(TEST_MODEL)  # writes the memo
    _flip_keeping_stat(ref.path)
    assert verify_model(TEST_MODEL).status == "corrupt"
    with pytest.raises(ModelError, match="corrupt"):
        resolve(TEST_MODEL)  # `sample` resolves the same way: it will not load it


@pytest.mark.model
def test_a_run_records_the_bytes_it_loads(tmp_path, monkeypatch):
    home = _copy_home_with_model(tmp_path)
    monkeypatch.setenv("TOOLDECODE_HOME", str(home))
    ref = resolve(TEST_MODEL)  # memo of the good bytes
    _flip_keeping_stat(ref.path)
    out = tmp_path / "out"
    with pytest.raises(ModelError, match="corrupt"):
        run_spec(load_spec(_spec(tmp_path, SMALL)), out, progress=False)
    assert not (out / "samples.jsonl").exists()


@pytest.mark.model
def test_a_user_file_is_recorded_by_content_and_a_resume_on_other_bytes_refused(tmp_path, smol_ref):
    from tooldecode.models import sha256_file

    mine = tmp_path / "mine.gguf"
    shutil.copyfile(smol_ref.path, mine)
    body = SHORT.replace(f'models = ["{TEST_MODEL}"]', f"models = [{json.dumps(str(mine))}]")
    spec = load_spec(_spec(tmp_path, body))
    out = tmp_path / "run"
    run_spec(spec, out, progress=False)
    assert json.loads((out / "manifest.json").read_text())["model"]["sha256"] == sha256_file(mine)
    _flip_keeping_stat(mine)
    with pytest.raises(SpecError, match="mix two models"):
        run_spec(spec, out, progress=False)
    assert len(RunStore.open(out)) == 2
