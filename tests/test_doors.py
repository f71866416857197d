"""Every door validated, every build bounded: no code from a checkpoint, no key printed, no input
overwritten, impossible values refused, each in one line (one test per defect class)."""

from __future__ import annotations

import http.server
import json
import math
import os
import shutil
import threading
import time
from pathlib import Path

import pytest
from test_http_faults import FaultProxy

from tooldecode.backends.openai_http import HttpClient, ServerError, check_completion, check_tokens
from tooldecode.cli import main
from tooldecode.errors import ToolDecodeError

DATA = Path(__file__).parent / "data" / "sessions"
KEY = "sk-door-test-0123456789abcdef"


def _run(argv: list[str], capsys) -> tuple[int, str, str]:
    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


def _one_line_refusal(rc: int, err: str) -> str:
    assert rc == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("tooldecode: error: "), err
    assert "Traceback" not in err
    return lines[0]


# ------------------------------------------------------------------------ 1. nothing executable in data


class _Payload:
    """A pickle that touches a file when it is loaded (stands for any code an attacker plants)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def _tiny_model():
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
    )
    return Qwen2ForCausalLM(cfg)  # random weights built in memory: no weights are loaded


@pytest.mark.parametrize("with_digest", [False, True], ids=["planted", "planted-with-its-sha256"])
def test_a_planted_pickle_checkpoint_does_not_run(tmp_path, with_digest):
    import hashlib

    import torch

    from tooldecode.organisms import recipe_from_dict
    from tooldecode.organisms.train import Example, train_lora

    marker = tmp_path / "payload-ran"
    work = tmp_path / "organism"
    work.mkdir()
    ckpt = work / "checkpoint.pt"
    torch.save({"key": _Payload(marker), "step": 0}, ckpt)
    if with_digest:  # whoever can write the checkpoint can write its hash: weights_only still holds
        (work / "checkpoint.pt.sha256").write_text(hashlib.sha256(ckpt.read_bytes()).hexdigest() + "\n")
    recipe = recipe_from_dict(
        {
            "name": "tiny",
            "sessions": 2,
            "train": {"rank": 2, "alpha": 4, "accumulation": 1, "warmup_steps": 1},
        }
    )
    examples = [Example((1, 2, 3, 4, 5), (-100, -100, 3, 4, 5)), Example((1, 2, 6, 7), (-100, -100, 6, 7))]
    lines: list[str] = []
    _, result = train_lora(_tiny_model(), examples, recipe, work, max_steps=1, log=lines.append)
    assert not marker.exists(), "the checkpoint's pickle ran code"
    assert result.resumed_from == 0 and result.steps == 1
    assert any("not loaded; starting over" in line for line in lines), lines
    # the checkpoint it wrote itself is plain data with its hash beside it, and resumes
    assert (work / "checkpoint.pt.sha256").is_file()
    lines.clear()
    _, again = train_lora(_tiny_model(), examples, recipe, work, max_steps=2, log=lines.append)
    assert again.resumed_from == 1 and any("resuming at step 1" in line for line in lines), lines


def test_an_organism_with_no_session_is_refused(tmp_path, monkeypatch):
    pytest.importorskip("peft")
    from tooldecode.models import TEST_MODEL, is_present
    from tooldecode.organisms import recipe_from_dict
    from tooldecode.organisms.store import build

    if not is_present(TEST_MODEL):
        pytest.skip(f"{TEST_MODEL} is not fetched")
    empty = tmp_path / "no-functions"
    empty.mkdir()
    recipe = recipe_from_dict({"name": "empty", "sessions": 5})
    with pytest.raises(ToolDecodeError, match="0 training sessions") as info:
        build(recipe, TEST_MODEL, pool_root=empty, out_root=tmp_path / "out", log=lambda _: None)
    assert "\n" not in str(info.value)
    assert not (tmp_path / "out" / f"empty@{TEST_MODEL}" / "manifest.json").exists()


def test_a_damaged_organism_manifest_is_one_line(tmp_path):
    from tooldecode.organisms.store import read_manifest

    for body in ("[1, 2]", '{"organism": 5}', "{" * 400, '{"steps": ' + "9" * 5000 + "}", "\xff"):
        (tmp_path / "manifest.json").write_text(body, encoding="latin-1")
        with pytest.raises(ToolDecodeError) as info:
            read_manifest(tmp_path)
        assert "\n" not in str(info.value) and "manifest.json" in str(info.value)


def _fake_organism(tmp_path, name: str, **extra) -> tuple:
    """A cached organism of a stand-in base GGUF and adapter weights (bytes only: nothing loads them)."""
    import hashlib

    base = tmp_path / "base-smollm2.gguf"
    base.write_bytes(b"GGUF" + bytes(4096))
    folder = tmp_path / "organisms" / name
    (folder / "adapter").mkdir(parents=True)
    weights = folder / "adapter" / "adapter_model.safetensors"
    weights.write_bytes(bytes(8192))
    manifest = {
        "organism": name,
        "adapter": {"folder": "adapter", "sha256": hashlib.sha256(weights.read_bytes()).hexdigest()},
        "base_model": {
            "id": str(base),
            "sha256": hashlib.sha256(base.read_bytes()).hexdigest(),
            "family": "smollm2",
        },
        **extra,
    }
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder, weights


def test_a_cached_organism_whose_bytes_rot_in_place_is_caught(tmp_path, monkeypatch):
    from tooldecode.errors import ModelError
    from tooldecode.models import ORGANISMS_PATH_ENV, resolve, verified

    monkeypatch.setenv("TOOLDECODE_HOME", str(tmp_path))
    monkeypatch.setenv(ORGANISMS_PATH_ENV, str(tmp_path / "organisms"))
    _, weights = _fake_organism(tmp_path, "rot@smollm2-135m-instruct")
    ref = verified(resolve("organism:rot@smollm2-135m-instruct"))  # hashes, memoized by stat
    st = weights.stat()
    with open(weights, "r+b") as f:  # one byte flips; size and mtime kept, so the memo still matches
        f.seek(100)
        f.write(b"\x01")
    os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns))
    stale = resolve("organism:rot@smollm2-135m-instruct")
    assert stale.sha256 == ref.sha256  # the memo alone would load the rotten file
    with pytest.raises(ModelError, match="changed since it was resolved"):
        verified(stale)


# --------------------------------------------------------------------------- 2. secrets never printed


@pytest.fixture
def proxy():
    p = FaultProxy()
    yield p
    p.close()


def test_a_key_with_a_line_break_is_refused_without_echoing_it(proxy):
    proxy.add("GET", "/v1/models", ("json", {"data": [{"id": "m"}]}))
    broken = KEY + "\r\n"
    with pytest.raises(ServerError) as info:
        HttpClient(proxy.url + "/v1", broken, timeout=5).request("GET", "/models")
    text = str(info.value)
    assert "malformed" in text and "control character" in text
    assert KEY not in text and KEY[:12] not in text
    assert proxy.count("/v1/models") == 0  # nothing was sent


def test_credentials_in_the_base_url_are_refused_and_never_printed(proxy):
    proxy.add("GET", "/v1/models", ("json", {"data": [{"id": "m"}]}))
    port = proxy.url.rsplit(":", 1)[1]
    with pytest.raises(ServerError) as info:
        HttpClient(f"http://user:{KEY}@127.0.0.1:{port}/v1", None, timeout=5).request("GET", "/models")
    text = str(info.value)
    assert "user name or password" in text and KEY not in text
    assert proxy.count("/v1/models") == 0


def test_the_cli_refuses_bad_credentials_before_any_model_loads(capsys, monkeypatch):
    monkeypatch.setenv("TD_DOOR_KEY", KEY + "\n")
    rc, out, err = _run(
        [
            "sample",
            "--backend",
            "openai",
            "--base-url",
            "http://127.0.0.1:9/v1",
            "--api-key-env",
            "TD_DOOR_KEY",
            "--scenario",
            "c-config-trim-crlf",
        ],
        capsys,
    )
    line = _one_line_refusal(rc, err)
    assert "malformed" in line and KEY not in out + err
    monkeypatch.delenv("TD_DOOR_KEY")
    rc, out, err = _run(
        [
            "sample",
            "--backend",
            "openai",
            "--base-url",
            f"http://me:{KEY}@127.0.0.1:9/v1",
            "--scenario",
            "c-config-trim-crlf",
        ],
        capsys,
    )
    _one_line_refusal(rc, err)
    assert KEY not in out + err


def _trickle_server(body: bytes, every: float) -> tuple[http.server.ThreadingHTTPServer, str]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            try:
                for i in range(len(body)):
                    self.wfile.write(body[i : i + 1])
                    self.wfile.flush()
                    time.sleep(every)
            except OSError:
                pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def test_a_server_that_trickles_is_timed_out_in_total():
    server, url = _trickle_server(json.dumps({"data": [{"id": "m" * 60}]}).encode(), every=0.25)
    try:
        client = HttpClient(url + "/v1", KEY, timeout=1.0, retries=0)
        t0 = time.monotonic()
        with pytest.raises(ServerError, match="no complete answer within 1 s") as info:
            client.request("GET", "/models")
        assert time.monotonic() - t0 < 4  # each byte came within the per-read timeout
        assert KEY not in str(info.value)
    finally:
        server.shutdown()
        server.server_close()


ECHO = {"error": {"message": f"Incorrect API key provided: {KEY}. Authorization: Bearer {KEY}"}}
SERVER_FAULTS = [
    ("redirect", ("redirect", "http://127.0.0.1:9/v1/models", 307)),
    ("500", ("status", 500)),
    ("401-echo", ("raw-status", 401, json.dumps(ECHO).encode())),
    ("404", ("status", 404)),
    ("truncate", ("truncate",)),
    ("slow", ("slow", 3)),
    ("non-json-echo", ("raw", f"<html>bad key {KEY}</html>".encode())),
    ("empty", ("raw", b"")),
    ("malformed", ("json", {"data": [{"id": KEY, "x": 1}], "choices": "x"})),
]


@pytest.mark.parametrize("name,action", SERVER_FAULTS, ids=[n for n, _ in SERVER_FAULTS])
def test_no_failing_server_case_prints_the_key(proxy, name, action, caplog, capsys):
    import logging

    from tooldecode.backends.openai_http import check_chat

    if action[0] == "raw-status":  # a server that echoes the key in its error body
        proxy.add("GET", "/v1/models", ("status", 401))
        original = proxy.server.RequestHandlerClass._send

        def send(self, code, data, _orig=original):
            return _orig(self, code, action[2] if code == 401 else data)

        proxy.server.RequestHandlerClass._send = send
    else:
        proxy.add("GET", "/v1/models", action)
    caplog.set_level(logging.DEBUG, logger="tooldecode")
    client = HttpClient(proxy.url + "/v1", KEY, timeout=1.0, retries=1, backoff=0.01)
    texts = []
    try:
        out = client.request("GET", "/models")
        check_chat(out, client.url("/models"))
    except ToolDecodeError as err:
        texts.append(str(err))  # what the command line prints after "tooldecode: error: "
    captured = capsys.readouterr()
    texts += [captured.out, captured.err, caplog.text]
    assert texts[0], f"{name}: the failing case did not fail"
    for text in texts:
        assert KEY not in text, f"{name}: the key was printed: {text}"
        assert KEY[3:15] not in text
    assert "\n" not in texts[0]


def test_every_error_line_is_redacted():
    err = ToolDecodeError(f"GET http://u:{KEY}@h/v1: Authorization: Bearer {KEY}")
    assert KEY not in str(err) and "***" in str(err)


# --------------------------------------------------------------------------- 3. never overwrite an input


def test_import_refuses_to_overwrite_its_own_session_log(tmp_path, capsys):
    session = tmp_path / "session.jsonl"
    shutil.copy(DATA / "claude-code.jsonl", session)
    before = session.read_bytes()
    rc, _, err = _run(["scenarios", "import", str(session), "--call", "1", "-o", str(session)], capsys)
    line = _one_line_refusal(rc, err)
    assert "overwrite the input" in line
    assert session.read_bytes() == before
    link = tmp_path / "link.json"
    link.symlink_to(session)  # the same file by another name
    rc, _, err = _run(["scenarios", "import", str(session), "--call", "1", "-o", str(link)], capsys)
    _one_line_refusal(rc, err)
    assert session.read_bytes() == before


def test_import_refuses_a_file_it_did_not_write_and_replaces_its_own(tmp_path, capsys):
    notes = tmp_path / "notes.json"
    notes.write_text('{"mine": true}\n')
    rc, _, err = _run(
        ["scenarios", "import", str(DATA / "openai-chat.json"), "--call", "1", "-o", str(notes)], capsys
    )
    assert "not a session scenario tooldecode wrote" in _one_line_refusal(rc, err)
    assert notes.read_text() == '{"mine": true}\n'
    out = tmp_path / "call-one.json"
    for _ in range(2):  # the second time over its own output: replaced
        rc, _, err = _run(
            ["scenarios", "import", str(DATA / "openai-chat.json"), "--call", "1", "-o", str(out)], capsys
        )
        assert rc == 0, err
    assert json.loads(out.read_text())["kind"] == "session"


def test_import_into_a_missing_folder_is_one_line(tmp_path, capsys):
    rc, _, err = _run(
        [
            "scenarios",
            "import",
            str(DATA / "openai-chat.json"),
            "--call",
            "1",
            "-o",
            str(tmp_path / "no" / "x.json"),
        ],
        capsys,
    )
    assert "cannot write" in _one_line_refusal(rc, err)


# --------------------------------------------------------------------------- 4. one validator at every door

BAD_RECIPES = [
    ('name = "r"\n[train]\nrank = "16"\n', "train.rank"),
    ('name = "r"\n[train]\nlearning_rate = "2e-4"\n', "train.learning_rate"),
    ('name = "r"\n[train]\nrank = 1.5\n', "train.rank"),
    ('name = "r"\n[train]\nepochs = 2.0\n', "train.epochs"),
    ('name = "r"\n[train]\ndropout = 2\n', "train.dropout"),
    ('name = "r"\n[train]\ncheckpoint_every = 0\n', "train.checkpoint_every"),
    ('name = "r"\ntrain = 5\n', "train"),
    ('name = "r"\nsessions = true\n', "sessions"),
    ('name = "r"\nflag_share = nan\n', "flag_share"),
    ('name = "r"\nstray_keys = [1, 2]\n', "stray_keys"),
    ("name = 5\n", "name"),
    ('name = "r"\nx = ' + "[" * 300 + "]" * 300 + "\n", "nested"),
    ('name = "r"\nsessions = ' + "9" * 5000 + "\n", "digits"),
]


@pytest.mark.parametrize("text,field", BAD_RECIPES, ids=[f for _, f in BAD_RECIPES])
def test_a_bad_recipe_is_one_line_naming_the_field(tmp_path, capsys, text, field):
    recipe = tmp_path / "r.toml"
    recipe.write_text(text)
    rc, _, err = _run(["organisms", "sessions", str(recipe)], capsys)
    line = _one_line_refusal(rc, err)
    assert str(recipe) in line and field in line


def test_a_binary_recipe_is_one_line(tmp_path, capsys):
    recipe = tmp_path / "r.toml"
    recipe.write_bytes(b'name = "r"\n\xff\xfe\x00\x01')
    rc, _, err = _run(["organisms", "sessions", str(recipe)], capsys)
    assert "not UTF-8" in _one_line_refusal(rc, err)


@pytest.mark.parametrize(
    "argv",
    [
        ["distortion", "runs/none", "--n-boot", "-5"],
        ["replay", "x.jsonl", "--threshold", "2"],
        ["replay", "x.jsonl", "--threshold", "nan"],
        ["replay", "x.jsonl", "--depth", "-1"],
        ["replay", str(DATA / "openai-chat.json"), "--calls", "0"],
        ["replay", str(DATA / "openai-chat.json"), "--calls", "a,b"],
    ],
    ids=["n-boot", "threshold-2", "threshold-nan", "depth", "calls-0", "calls-text"],
)
def test_bad_flags_are_one_line(capsys, argv):
    rc, _, err = _run(argv, capsys)
    line = _one_line_refusal(rc, err)
    assert argv[2] in line or "--calls" in line


IMPOSSIBLE = [
    ({"choices": [{"index": 0}]}, "text"),
    ({"choices": [{"text": None}]}, "text"),
    (
        {"choices": [{"text": "a", "logprobs": {"tokens": ["a"], "token_logprobs": [math.nan]}}]},
        "token_logprobs",
    ),
    ({"choices": [{"text": "a", "logprobs": {"tokens": ["a"], "token_logprobs": [0.7]}}]}, "token_logprobs"),
    (
        {"choices": [{"text": "a", "logprobs": {"tokens": ["a"], "token_logprobs": [math.inf]}}]},
        "token_logprobs",
    ),
    (
        {"choices": [{"text": "a", "logprobs": {"tokens": ["a"], "top_logprobs": [{"a": 3.0}]}}]},
        "top_logprobs",
    ),
]


@pytest.mark.parametrize("body,field", IMPOSSIBLE, ids=repr)
def test_impossible_server_values_are_refused(body, field):
    with pytest.raises(ServerError, match=field) as info:
        check_completion(body, "http://h/v1/completions")
    assert "\n" not in str(info.value)


def test_a_masked_token_and_a_rounding_slack_stay_valid():
    ok = {"choices": [{"text": "a", "logprobs": {"tokens": ["a", "b"], "token_logprobs": [-math.inf, 1e-7]}}]}
    assert check_completion(ok, "u")[0]["text"] == "a"


def test_a_token_id_past_the_vocabulary_is_refused():
    assert check_tokens({"tokens": [0, 63]}, "u", 64) == [0, 63]
    with pytest.raises(ServerError, match="below the vocabulary"):
        check_tokens({"tokens": [0, 64]}, "u", 64)


SESSION_SHAPES = [
    ("openai.json", {"messages": [{"role": "assistant", "tool_calls": ["x"]}]}),
    ("openai.json", {"messages": [{"role": "assistant", "tool_calls": [{"function": "x"}]}]}),
    (
        "anthropic.json",
        {"system": "s", "messages": [{"role": "assistant", "content": ["x", {"type": "tool_use"}]}]},
    ),
    ("cc.jsonl", [{"type": "user", "message": {"role": "user", "content": ["just text"]}}]),
    ("pi.jsonl", [{"type": "session", "id": "s"}, {"type": "message", "id": [1], "parentId": "s"}]),
    ("deep.json", None),
    ("bigint.json", None),
]


@pytest.mark.parametrize(
    "name,data", SESSION_SHAPES, ids=[f"{i}-{n}" for i, (n, _) in enumerate(SESSION_SHAPES)]
)
def test_a_session_log_of_the_wrong_shape_is_one_line(tmp_path, capsys, name, data):
    path = tmp_path / name
    if name == "deep.json":
        path.write_text('{"messages": ' + "[" * 5000 + "]" * 5000 + "}")
    elif name == "bigint.json":
        path.write_text('{"messages": [{"role": "user", "content": ' + "7" * 5000 + "}]}")
    elif name.endswith(".jsonl"):
        path.write_text("".join(json.dumps(x) + "\n" for x in data))
    else:
        path.write_text(json.dumps(data))
    rc, _, err = _run(
        ["scenarios", "import", str(path), "--call", "1", "-o", str(tmp_path / "o.json")], capsys
    )
    assert str(path) in _one_line_refusal(rc, err)


def test_devices_and_fifos_are_refused_before_reading(tmp_path, capsys):
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)  # nobody writes to it: reading would block for ever
    for path in ("/dev/zero", str(fifo)):
        t0 = time.monotonic()
        rc, _, err = _run(["scenarios", "import", path], capsys)
        assert "not a regular file" in _one_line_refusal(rc, err)
        rc, _, err = _run(["grammar", path], capsys)
        assert "not a regular file" in _one_line_refusal(rc, err)
        assert time.monotonic() - t0 < 5


def test_a_resumed_run_whose_scenario_changed_is_refused(tmp_path):
    from tooldecode.experiments.rundir import check_scenarios_match
    from tooldecode.runs import MANIFEST

    (tmp_path / MANIFEST).write_text(json.dumps({"scenarios": {"s1": "a" * 64, "s2": "b" * 64}}))
    check_scenarios_match(tmp_path, {"s1": "a" * 64, "s2": "b" * 64})  # unchanged: resumes
    with pytest.raises(ToolDecodeError, match="scenario s2") as info:
        check_scenarios_match(tmp_path, {"s1": "a" * 64, "s2": "c" * 64})
    assert "changed" in str(info.value) and "\n" not in str(info.value)


def test_records_of_an_arm_the_manifest_lacks_are_not_report_rows(tmp_path, capsys):
    from conftest import make_sample

    from tooldecode.runs import RunStore, build_manifest

    arms = [{"model": "m", "backend": "llamacpp", "mode": "loose"}]
    store = RunStore.create(tmp_path / "run", build_manifest({"arms": arms, "scenarios": ["s"]}))
    good = make_sample(key="k1", arm={"model": "m", "mode": "loose"})
    stray = make_sample(key="k2", arm={"model": "m", "mode": "strict"})
    other = make_sample(key="k3", arm={"model": "other", "mode": "loose"})
    store.append([good, stray, other])
    store.close()
    keys = [r["key"] for r in RunStore.open(tmp_path / "run").sample_records()]
    assert keys == ["k1"]
    assert "skipped 2" in capsys.readouterr().err


def test_tool_parameters_without_a_schema_keyword_are_refused(tmp_path, capsys):
    path = tmp_path / "tools.json"
    path.write_text(json.dumps([{"name": "t", "parameters": {"colour": "red"}}]))
    rc, out, err = _run(["grammar", str(path)], capsys)
    assert "no JSON Schema keyword" in _one_line_refusal(rc, err) and not out


@pytest.mark.parametrize(
    "schema",
    [
        {"$defs": {**{f"a{i}": {"$ref": f"#/$defs/a{i + 1}"} for i in range(5000)}, "a5000": {"type": "string"}},
         "$ref": "#/$defs/a0"},
        {"type": "array", "items": {"type": "integer"}, "minItems": 10**9},
        {"oneOf": [{"type": "object", "properties": {f"k{i}": {"type": "string"}}, "required": [f"k{i}"]}
                   for i in range(200)]},
        {"type": "integer", "minimum": 10**5000},
        {"$defs": {"n": {"type": "array", "items": {"$ref": "#/$defs/n"}, "maxItems": 10**9}}, "$ref": "#/$defs/n"},
    ],
    ids=["ref-chain-5000", "minItems-1e9", "oneOf-200", "int-5000-digits", "maxItems-1e9"],
)  # fmt: skip
@pytest.mark.parametrize("fmt", ["gbnf", "lark", "regex"])
def test_runaway_schemas_render_or_are_refused_in_one_line_within_10_s(schema, fmt):
    from tooldecode.grammar import GrammarError, render

    t0 = time.monotonic()
    try:
        text = render(schema, format=fmt)
        assert text
    except GrammarError as err:
        assert "\n" not in str(err) and ("/" in str(err) or "#" in str(err))  # names where
    assert time.monotonic() - t0 < 10


def test_a_ref_chain_of_5000_renders():
    from tooldecode.grammar import render

    defs = {f"a{i}": {"$ref": f"#/$defs/a{i + 1}", "description": "a link"} for i in range(5000)}
    defs["a5000"] = {"type": "string", "maxLength": 3}
    assert "root" in render({"$defs": defs, "$ref": "#/$defs/a0"}, format="gbnf")


def test_a_chain_of_5000_values_is_refused_naming_where():
    from tooldecode.grammar import GrammarError, render

    defs = {f"a{i}": {"type": "array", "items": {"$ref": f"#/$defs/a{i + 1}"}} for i in range(5000)}
    defs["a5000"] = {"type": "string"}
    with pytest.raises(GrammarError, match=r"nest too deep to render .*#/\$defs/a\d+"):
        render({"$defs": defs, "$ref": "#/$defs/a0"}, format="gbnf")


def test_a_deep_session_scenario_file_is_a_problem_line_not_a_traceback(tmp_path, capsys):
    from tooldecode.errors import ScenarioError
    from tooldecode.scenarios.sessions import load_session_scenario

    path = tmp_path / "deep-call-1.json"
    path.write_text('{"kind": "session", "history": ' + "[" * 5000 + "]" * 5000 + "}")
    with pytest.raises(ScenarioError, match="nested too deeply"):
        load_session_scenario(path)
    rc, out, err = _run(["scenarios", "check", str(tmp_path)], capsys)
    assert rc in (1, 2) and "Traceback" not in out + err


def test_report_never_replaces_a_file_it_did_not_write(tmp_path, capsys):
    from conftest import make_sample

    from tooldecode.runs import RunStore, build_manifest

    store = RunStore.create(
        tmp_path / "run", build_manifest({"arms": [], "scenarios": ["c-config-trim-crlf"]})
    )
    store.append([make_sample('{"name": "edit", "arguments": {}}', key="k1")])
    store.close()
    out = tmp_path / "out"
    out.mkdir()
    (out / "summary.md").write_text("my notes\n")
    rc, _, err = _run(["report", str(tmp_path / "run"), "--out", str(out)], capsys)
    assert "not a report tooldecode wrote" in _one_line_refusal(rc, err)
    assert (out / "summary.md").read_text() == "my notes\n"
    (out / "summary.md").unlink()
    for _ in range(2):  # its own report is replaced
        rc, _, err = _run(["report", str(tmp_path / "run"), "--out", str(out)], capsys)
        assert rc == 0, err


def test_an_organism_built_on_0_sessions_is_not_usable(tmp_path, monkeypatch, capsys):
    from tooldecode.models import ORGANISMS_PATH_ENV

    monkeypatch.setenv("TOOLDECODE_HOME", str(tmp_path))
    monkeypatch.setenv(ORGANISMS_PATH_ENV, str(tmp_path / "organisms"))
    _fake_organism(tmp_path, "none@smollm2-135m-instruct", sessions_trained=0)
    rc, _, err = _run(["organisms", "path", "none@smollm2-135m-instruct"], capsys)
    assert "trained on 0 sessions" in _one_line_refusal(rc, err)


@pytest.mark.parametrize(
    "text",
    ["variant = true\n", "quick = 5\n", "[probe]\nfields = true\n", "[probe]\nvariant = 3\n"],
    ids=["variant", "quick", "probe-fields", "probe-variant"],
)
def test_a_spec_table_of_the_wrong_type_is_one_line(tmp_path, text):
    from tooldecode.experiments import SpecError, load_spec

    path = tmp_path / "s.toml"
    path.write_text('name = "s"\nmodels = ["smollm2-135m-instruct"]\n' + text)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert "\n" not in str(info.value) and str(path) in str(info.value)


def test_a_run_manifest_nested_too_deeply_is_one_line(tmp_path, capsys):
    run = tmp_path / "runs" / "r"
    run.mkdir(parents=True)
    (run / "manifest.json").write_text("[" * 5000 + "]" * 5000)
    (run / "samples.jsonl").write_text("")
    rc, out, _ = _run(["runs", "list", str(tmp_path / "runs")], capsys)
    assert rc == 0 and "(unreadable manifest)" in out
    rc, _, err = _run(["rescore", str(run)], capsys)
    assert "corrupt" in _one_line_refusal(rc, err)


@pytest.mark.parametrize("raw", ["0", "two", "-1", "1.5"])
def test_a_thread_count_that_is_not_a_positive_integer_is_one_line(monkeypatch, raw):
    from tooldecode.backends.base import cpu_threads

    monkeypatch.setenv("TOOLDECODE_THREADS", raw)
    with pytest.raises(ToolDecodeError) as err:
        cpu_threads()
    assert "TOOLDECODE_THREADS" in str(err.value) and "\n" not in str(err.value)
    assert cpu_threads(3) == 3  # an explicit count wins over the environment
    monkeypatch.setenv("TOOLDECODE_THREADS", "1")
    assert cpu_threads() == 1
    monkeypatch.delenv("TOOLDECODE_THREADS")
    assert cpu_threads() == (os.cpu_count() or 1)


def test_runs_ended_and_extend_refuse_bad_folders_and_caps_in_one_line(tmp_path, capsys):
    run = tmp_path / "runs" / "r"
    run.mkdir(parents=True)
    (run / "manifest.json").write_text(json.dumps({"config": {"max_new_tokens": 8}}))
    (run / "samples.jsonl").write_text("")
    assert "no such folder" in _one_line_refusal(
        *_run(["runs", "ended", str(run), "--extended", str(tmp_path / "x")], capsys)[::2]
    )
    assert "positive" in _one_line_refusal(
        *_run(["runs", "extend", str(run), "--cap", "0", "--out", str(tmp_path / "e")], capsys)[::2]
    )
    assert "not above the run's cap of 8" in _one_line_refusal(
        *_run(["runs", "extend", str(run), "--cap", "8", "--out", str(tmp_path / "e")], capsys)[::2]
    )
    ext = tmp_path / "e"
    ext.mkdir()
    (ext / "extended.jsonl").write_text('{"key": 1\n')
    assert "not a JSON line" in _one_line_refusal(
        *_run(["runs", "ended", str(run), "--extended", str(ext)], capsys)[::2]
    )
    (ext / "extended.jsonl").write_text('{"key": "k", "cap": "64", "finish_reason": "stop"}\n')
    assert "not a continued draw" in _one_line_refusal(
        *_run(["runs", "ended", str(run), "--extended", str(ext)], capsys)[::2]
    )
    rc, _, err = _run(["runs", "ended", str(tmp_path / "nothing")], capsys)
    _one_line_refusal(rc, err)
