"""The fuzz suite: malformed session logs, recipes, specs, tool lists, manifests, checkpoints, schemas and
server answers, generated (hypothesis, derandomized: the same cases every run). Each case exits 0, or
exits 2 with one line; never a traceback, never a secret, never longer than ``MAX_CASE_S`` seconds.

In-process calls of the command line (``tooldecode.cli.main``) where a command reads the input, the
library's reader where no cheap command does; no model weights are loaded.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tooldecode.cli import main
from tooldecode.errors import ToolDecodeError

MAX_CASE_S = 10.0
SECRET = "sk-fuzz-secret-key-7f3a9c"
FUZZ = settings(
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.function_scoped_fixture,
        HealthCheck.data_too_large,
    ],
)


def _cli(argv: list[str]) -> tuple[int, str, str, float]:
    out, err = io.StringIO(), io.StringIO()
    t0 = time.monotonic()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue(), time.monotonic() - t0


def _holds(rc: int, out: str, err: str, dt: float, what: str) -> None:
    """Exit 0, or exit 2 with one line; no traceback, no secret, bounded time."""
    assert "Traceback" not in out + err, f"{what}: a traceback\n{err[-3000:]}"
    assert SECRET not in out + err, f"{what}: the secret was printed"
    assert dt < MAX_CASE_S, f"{what}: {dt:.1f} s"
    assert rc in (0, 2), f"{what}: exit {rc}\n{err[-2000:]}"
    if rc == 2:
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("tooldecode: error: "), f"{what}: {err[-2000:]}"


def _raises_one_line(fn: Any, *args: Any, what: str, **kw: Any) -> Any:
    """``fn(...)``'s value, or None when it raised a one-line ``ToolDecodeError``; bounded time."""
    t0 = time.monotonic()
    try:
        value = fn(*args, **kw)
    except ToolDecodeError as err:
        text = str(err)
        assert text and "\n" not in text, f"{what}: {text!r}"
        assert SECRET not in text, f"{what}: the secret was printed"
        value = None
    assert time.monotonic() - t0 < MAX_CASE_S, what
    return value


# --- generators ----------------------------------------------------------------------------------------

_KEYS = st.sampled_from(
    ["role", "content", "type", "text", "tool_calls", "function", "name", "arguments", "id", "parentId",
     "message", "messages", "tools", "input", "tool_use_id", "toolCallId", "toolName", "system", "isSidechain",
     "parameters", "input_schema", "properties", "items", "$ref", "$defs", "required", "enum", "const"]
)  # fmt: skip
_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
    | st.sampled_from(["user", "assistant", "tool", "system", "toolCall", "toolResult", "tool_use", "session",
                       "message", "function", "object", "string", SECRET])
)  # fmt: skip
JSON = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(_KEYS | st.text(max_size=6), inner, max_size=5)
    ),
    max_leaves=25,
)


def _deep(n: int, inner: str = "1") -> str:
    return "[" * n + inner + "]" * n


RAW_TEXT = st.sampled_from(
    [
        "",
        "\n\n",
        "{",
        "[1, 2",
        "NaN",
        '{"messages": [' + "9" * 5000 + "]}",
        '{"messages": ' + _deep(3000) + "}",
        "\ufeff{}",
        '{"a": Infinity}',
        '{"type": "user"}\n{"type":',
    ]
)


@st.composite
def session_logs(draw: Any) -> tuple[str, bytes]:
    """A session log: near one of the four formats, any JSON, or raw bytes."""
    kind = draw(st.sampled_from(["openai", "anthropic", "jsonl", "json", "raw", "bytes"]))
    if kind == "bytes":
        return ".json", draw(st.binary(max_size=200))
    if kind == "raw":
        return draw(st.sampled_from([".json", ".jsonl"])), draw(RAW_TEXT).encode()
    if kind == "json":
        return ".json", json.dumps(draw(JSON)).encode()
    msg = st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "assistant", "tool", "system", "developer"]) | _SCALARS},
        optional={"content": JSON, "tool_calls": JSON | st.lists(
            st.fixed_dictionaries({}, optional={"id": JSON, "function": JSON | st.fixed_dictionaries(
                {"name": _SCALARS}, optional={"arguments": st.text(max_size=20) | JSON})}), max_size=3),
            "tool_call_id": _SCALARS, "name": _SCALARS},
    )  # fmt: skip
    if kind == "openai":
        body = {
            "messages": draw(st.lists(msg, max_size=5)),
            **({"tools": draw(JSON)} if draw(st.booleans()) else {}),
        }
        return ".json", json.dumps(body).encode()
    if kind == "anthropic":
        block = st.fixed_dictionaries({"type": st.sampled_from(["text", "tool_use", "tool_result"]) | _SCALARS},
                                      optional={"text": JSON, "id": JSON, "name": JSON, "input": JSON,
                                                "tool_use_id": JSON, "content": JSON})  # fmt: skip
        m = st.fixed_dictionaries(
            {"role": st.sampled_from(["user", "assistant"]) | _SCALARS},
            optional={"content": st.lists(block | _SCALARS, max_size=3) | _SCALARS},
        )
        body = {"system": draw(JSON), "messages": draw(st.lists(m, max_size=5))}
        return ".json", json.dumps(body).encode()
    entry = st.fixed_dictionaries(
        {"type": st.sampled_from(["user", "assistant", "session", "message", "summary"]) | _SCALARS},
        optional={"message": JSON | msg, "id": JSON, "parentId": JSON, "isSidechain": JSON},
    )
    lines = draw(st.lists(entry, max_size=6))
    return ".jsonl", "".join(json.dumps(x) + "\n" for x in lines).encode()


@given(log=session_logs(), call=st.sampled_from([None, "1", "2", "0", "-1", "999"]))
@settings(FUZZ, max_examples=80)
def test_fuzz_session_logs(tmp_path_factory, log, call):
    folder = tmp_path_factory.mktemp("session")
    suffix, data = log
    path = folder / f"session{suffix}"
    path.write_bytes(data)
    argv = ["scenarios", "import", str(path)]
    if call is not None:
        argv += ["--call", call, "-o", str(folder / "out.json")]
    _holds(*_cli(argv), what=f"import {data[:200]!r}")
    assert path.read_bytes() == data  # the input is never touched


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return json.dumps(str(v))


def _toml(table: dict[str, Any]) -> str:
    lines = [f"{json.dumps(k)} = {_toml_value(v)}" for k, v in table.items() if not isinstance(v, dict)]
    for k, v in table.items():
        if isinstance(v, dict):
            lines.append(f"[{json.dumps(k)}]")
            lines += [
                f"{json.dumps(kk)} = {_toml_value(vv)}" for kk, vv in v.items() if not isinstance(vv, dict)
            ]
    return "\n".join(lines) + "\n"


TOML_SCALAR = (
    st.booleans()
    | st.integers(min_value=-(2**66), max_value=2**66)
    | st.floats()
    | st.text(max_size=10)
    | st.lists(st.integers(-5, 5) | st.text(max_size=5), max_size=3)
)
RECIPE_FIELDS = ["name", "description", "toolset", "flag", "flag_share", "stray_share", "stray_keys",
                 "implant_key", "implant_value", "implant_share", "thinking", "sessions", "two_edit_share",
                 "seed", "colour"]  # fmt: skip
TRAIN_FIELDS = ["rank", "alpha", "dropout", "learning_rate", "epochs", "accumulation", "warmup_steps",
                "max_tokens", "seed", "checkpoint_every", "shared_prefix", "batch"]  # fmt: skip


@st.composite
def recipe_texts(draw: Any) -> bytes:
    kind = draw(st.sampled_from(["table", "table", "raw"]))
    if kind == "raw":
        return (
            draw(RAW_TEXT | st.text(max_size=80)).encode()
            if draw(st.booleans())
            else draw(st.binary(max_size=80))
        )
    top = draw(st.dictionaries(st.sampled_from(RECIPE_FIELDS), TOML_SCALAR, max_size=6))
    if draw(st.booleans()):
        top["name"] = draw(st.sampled_from(["ok", "fuzz-recipe", "", "a/b", "..", 5]))
    if draw(st.booleans()):
        top["train"] = draw(st.dictionaries(st.sampled_from(TRAIN_FIELDS), TOML_SCALAR, max_size=5))
    elif draw(st.booleans()):
        top["train"] = draw(TOML_SCALAR)
    return _toml(top).encode()


@given(text=recipe_texts())
@settings(FUZZ, max_examples=150)
def test_fuzz_recipes(tmp_path_factory, text):
    from tooldecode.organisms import load_recipe

    path = tmp_path_factory.mktemp("recipe") / "r.toml"
    path.write_bytes(text)
    recipe = _raises_one_line(load_recipe, path, what=f"recipe {text[:200]!r}")
    if recipe is not None:  # what loads is within every rule
        t = recipe.train
        assert t.rank >= 1 and t.epochs >= 1 and 0 <= t.dropout < 1 and t.checkpoint_every >= 1
        assert isinstance(recipe.sessions, int) and recipe.sessions >= 1


SPEC_FIELDS = ["name", "description", "models", "backend", "scenarios", "tags", "max_scenarios", "n", "seeds",
               "temperatures", "top_p", "max_new_tokens", "modes", "engine", "ws", "batch_size", "streams",
               "duplicates", "claim", "wat"]  # fmt: skip


@st.composite
def spec_texts(draw: Any) -> bytes:
    if draw(st.integers(0, 5)) == 0:
        return draw(RAW_TEXT).encode()
    top = draw(st.dictionaries(st.sampled_from(SPEC_FIELDS), TOML_SCALAR, max_size=8))
    if draw(st.booleans()):
        top.update(name="fuzz", models=["smollm2-135m-instruct"])
    for table in ("variant", "probe", "aligned", "n_by_mode", "quick"):
        if draw(st.integers(0, 4)) == 0:
            top[table] = draw(st.dictionaries(st.text(max_size=8) | st.sampled_from(["depth", "particles", "loose"]),
                                              TOML_SCALAR, max_size=3))  # fmt: skip
    return _toml(top).encode()


@given(text=spec_texts())
@settings(FUZZ, max_examples=120)
def test_fuzz_specs(tmp_path_factory, text):
    from tooldecode.experiments import load_spec

    path = tmp_path_factory.mktemp("spec") / "s.toml"
    path.write_bytes(text)
    _raises_one_line(load_spec, path, what=f"spec {text[:200]!r}")


# --- schemas and tool lists ------------------------------------------------------------------------------

_TYPES = st.sampled_from(["string", "integer", "number", "boolean", "null", "object", "array", "thing"])
_BOUND = st.integers(min_value=-3, max_value=12) | st.sampled_from([10**9, 10**18, 2**70, 1.5, -1])


def _schema_kw(inner: Any) -> Any:
    return st.fixed_dictionaries(
        {},
        optional={
            "type": _TYPES | st.lists(_TYPES, max_size=3),
            "properties": st.dictionaries(st.text(max_size=5), inner, max_size=4),
            "required": st.lists(st.text(max_size=5), max_size=3) | _SCALARS,
            "items": inner,
            "prefixItems": st.lists(inner, max_size=3),
            "enum": st.lists(_SCALARS, max_size=4) | _SCALARS,
            "const": JSON,
            "minItems": _BOUND,
            "maxItems": _BOUND,
            "minimum": _BOUND,
            "maximum": _BOUND,
            "multipleOf": _BOUND,
            "minLength": st.integers(0, 8),
            "maxLength": st.integers(0, 12),
            "pattern": st.sampled_from(["^a+$", "(", "[a-z]{2,4}", "(a|b)*c", ".*"]),
            "anyOf": st.lists(inner, max_size=3),
            "oneOf": st.lists(inner, max_size=4),
            "allOf": st.lists(inner, max_size=3),
            "not": inner,
            "additionalProperties": st.booleans() | inner,
            "$ref": st.sampled_from(["#", "#/$defs/a", "#/$defs/b", "#/nope", "other.json", "http://x/s"]),
            "$defs": st.fixed_dictionaries({}, optional={"a": inner, "b": inner}),
            "format": st.sampled_from(["date", "email", "uuid", "wat"]),
        },
    )


SCHEMAS = st.recursive(st.booleans() | _schema_kw(st.just({})), _schema_kw, max_leaves=12)


def _chain(n: int) -> dict:
    defs = {f"a{i}": {"$ref": f"#/$defs/a{i + 1}"} for i in range(n)}
    defs[f"a{n}"] = {"type": "string"}
    return {"$defs": defs, "$ref": "#/$defs/a0"}


def _nested(n: int) -> dict:
    s: dict = {"type": "string"}
    for _ in range(n):
        s = {"type": "array", "items": s}
    return s


HUGE = st.sampled_from(
    [
        _chain(5000),
        _nested(200),
        {"type": "array", "items": {"type": "integer"}, "minItems": 10**9},
        {
            "oneOf": [
                {"type": "object", "properties": {f"k{i}": {"type": "string"}}, "required": [f"k{i}"]}
                for i in range(200)
            ]
        },  # fmt: skip
        {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(2000)}},
        {"enum": list(range(20_000))},
    ]
)


@st.composite
def tool_files(draw: Any) -> bytes:
    kind = draw(st.sampled_from(["schema", "schema", "tool", "list", "huge", "json", "raw"]))
    if kind == "raw":
        return draw(RAW_TEXT).encode()
    if kind == "json":
        return json.dumps(draw(JSON)).encode()
    schema = draw(HUGE) if kind == "huge" else draw(SCHEMAS)
    if kind == "tool":
        return json.dumps(
            {"name": draw(st.sampled_from(["edit", "x y", "", "ok"])), "parameters": schema}
        ).encode()
    if kind == "list":
        tool = {"type": "function", "function": {"name": "t", "parameters": schema}}
        return json.dumps([tool, draw(JSON)] if draw(st.booleans()) else [tool]).encode()
    return json.dumps(schema).encode()


@given(
    data=tool_files(),
    fmt=st.sampled_from(["gbnf", "lark", "regex"]),
    wire=st.sampled_from(["json", "hermes", "call-json"]),
)
@settings(FUZZ, max_examples=80)
def test_fuzz_tool_lists_and_schemas(tmp_path_factory, data, fmt, wire):
    path = tmp_path_factory.mktemp("tools") / "tools.json"
    path.write_bytes(data)
    argv = ["grammar", str(path), "--format", fmt, "--wire", wire]
    _holds(*_cli(argv), what=f"grammar {fmt} {wire} {data[:300]!r}")


# --- manifests ---------------------------------------------------------------------------------------------


@st.composite
def organism_manifests(draw: Any) -> bytes:
    if draw(st.integers(0, 4)) == 0:
        return draw(RAW_TEXT | st.text(max_size=40)).encode()
    base = {
        "organism": "fuzz@smollm2-135m-instruct",
        "data_sha256": "0" * 64,
        "steps": 3,
        "train_wall_s": 1.0,
        "tokens_per_s": 2.0,
        "gguf": {"file": "organism.gguf", "sha256": "0" * 64, "bytes": 4},
        "base_model": {"id": "smollm2-135m-instruct", "family": "smollm2"},
    }
    for key in draw(st.lists(st.sampled_from(list(base)), max_size=3, unique=True)):
        base[key] = draw(JSON)
    if draw(st.booleans()):
        base["gguf"] = {"file": draw(st.sampled_from(["../x", "organism.gguf", "", 5])), "sha256": draw(JSON)}
    return json.dumps(base).encode()


@given(text=organism_manifests())
@settings(FUZZ, max_examples=40)
def test_fuzz_organism_manifests(tmp_path_factory, text, monkeypatch_module):
    home = tmp_path_factory.mktemp("home")
    monkeypatch_module.setenv("TOOLDECODE_HOME", str(home))
    folder = home / "organisms" / "fuzz@smollm2-135m-instruct"
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_bytes(text)
    (folder / "organism.gguf").write_bytes(b"GGUF")
    for argv in (["organisms", "list"], ["organisms", "path", "fuzz"]):
        _holds(*_cli(argv), what=f"{argv} {text[:200]!r}")


@st.composite
def run_folders(draw: Any) -> tuple[bytes, bytes]:
    manifest = {
        "config": {"arms": [{"model": "m", "mode": "loose"}], "scenarios": ["s"], "n": 1},
        "created": "x",
    }
    for key in draw(
        st.lists(st.sampled_from(["config", "model", "scenarios", "created", "samples"]), max_size=2)
    ):
        manifest[key] = draw(JSON)
    mtext = json.dumps(manifest).encode() if draw(st.integers(0, 4)) else draw(RAW_TEXT).encode()
    lines = [json.dumps(draw(JSON)) for _ in range(draw(st.integers(0, 3)))]
    return mtext, "\n".join(lines).encode()


@given(run=run_folders())
@settings(FUZZ, max_examples=40)
def test_fuzz_run_manifests(tmp_path_factory, run):
    root = tmp_path_factory.mktemp("runs")
    (root / "r").mkdir()
    (root / "r" / "manifest.json").write_bytes(run[0])
    (root / "r" / "samples.jsonl").write_bytes(run[1])
    _holds(*_cli(["runs", "list", str(root)]), what=f"runs list {run!r}")


# --- checkpoints -------------------------------------------------------------------------------------------


class _Boom:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


@given(
    kind=st.sampled_from(["bytes", "tensors", "payload", "payload-hashed", "json"]),
    blob=st.binary(max_size=300),
    value=JSON,
)
@settings(FUZZ, max_examples=25)
def test_fuzz_checkpoints(tmp_path_factory, kind, blob, value):
    import hashlib

    import torch

    from tooldecode.organisms.train import load_checkpoint

    folder = tmp_path_factory.mktemp("ckpt")
    path = folder / "checkpoint.pt"
    marker = folder / "ran"
    if kind == "bytes":
        path.write_bytes(blob)
    elif kind == "json":
        path.write_text(json.dumps(value))
    elif kind == "tensors":
        torch.save({"key": value, "adapter": {"w": torch.zeros(2)}, "step": 1}, path)
    else:
        torch.save({"key": _Boom(str(marker)), "value": value}, path)
    if kind != "payload":  # a checkpoint whose hash matches: only weights_only stands in the way
        (folder / "checkpoint.pt.sha256").write_text(hashlib.sha256(path.read_bytes()).hexdigest())
    lines: list[str] = []
    t0 = time.monotonic()
    state = load_checkpoint(path, lines.append)
    assert time.monotonic() - t0 < MAX_CASE_S
    assert not marker.exists(), "a checkpoint ran code"
    assert state is None or isinstance(state, dict)
    assert state is None or kind == "tensors"
    assert all("\n" not in line for line in lines)


# --- server answers ----------------------------------------------------------------------------------------

_LP = st.floats() | st.none() | st.integers(-5, 5) | st.text(max_size=3)


@st.composite
def completions(draw: Any) -> Any:
    if draw(st.integers(0, 3)) == 0:
        return draw(JSON)
    choice = draw(
        st.fixed_dictionaries(
            {},
            optional={
                "index": _SCALARS,
                "text": st.text(max_size=8) | _SCALARS,
                "finish_reason": _SCALARS,
                "logprobs": st.none() | JSON | st.fixed_dictionaries({}, optional={
                    "tokens": st.lists(st.text(max_size=3) | _SCALARS, max_size=3),
                    "token_logprobs": st.lists(_LP, max_size=3),
                    "top_logprobs": st.lists(st.none() | st.dictionaries(st.text(max_size=3), _LP, max_size=3),
                                             max_size=3)}),
            },
        )
    )  # fmt: skip
    return {"choices": draw(st.lists(st.just(choice) | JSON, max_size=2)), "usage": draw(st.none() | JSON)}


@given(body=completions())
@settings(FUZZ, max_examples=200)
def test_fuzz_server_answers(body):
    from tooldecode.backends.openai_http import check_chat, check_completion, check_models, check_tokens

    url = "http://127.0.0.1:9/v1/completions"
    choices = _raises_one_line(check_completion, body, url, what=f"completion {body!r}")
    if choices is not None:  # what passes is possible: text a string, log-probabilities ≤ 0 and not NaN
        for c in choices:
            assert isinstance(c["text"], str)
            for v in (c.get("logprobs") or {}).get("token_logprobs") or []:
                assert v is None or (not math.isnan(v) and v <= 1e-4)
    _raises_one_line(check_chat, body, url, what=f"chat {body!r}")
    _raises_one_line(check_models, body, url, what=f"models {body!r}")
    _raises_one_line(check_tokens, body, url, 100, what=f"tokens {body!r}")


@pytest.fixture(scope="module")
def raw_server():
    """A loopback server whose every answer is the body in ``raw_server.body`` (status ``.status``)."""
    import http.server
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            body, status = Handler.body, Handler.status
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_POST = do_GET

    Handler.body, Handler.status = b"{}", 200
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    Handler.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield Handler
    server.shutdown()
    server.server_close()


@given(
    body=st.binary(max_size=120) | JSON.map(lambda v: json.dumps(v).encode()),
    status=st.sampled_from([200, 200, 400, 401, 404, 500, 503]),
    echo=st.booleans(),
)
@settings(FUZZ, max_examples=40)
def test_fuzz_http_answers_never_print_the_key(raw_server, body, status, echo):
    from tooldecode.backends.openai_http import HttpClient, check_chat

    raw_server.body = body + (f" Bearer {SECRET} {SECRET}".encode() if echo else b"")
    raw_server.status = status
    client = HttpClient(raw_server.url + "/v1", SECRET, timeout=2.0, retries=1, backoff=0.0)

    def ask() -> Any:
        return check_chat(client.request("POST", "/chat/completions", {}), client.url("/chat/completions"))

    _raises_one_line(ask, what=f"http {status} {body[:100]!r}")


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()
