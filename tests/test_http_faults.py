"""The ``openai`` backend's HTTP channel under faults: a fault-injecting proxy on loopback in front of
a real llama-cpp-python server. Every fault is a one-line error or a bounded retry; the API key never
goes to another host."""

from __future__ import annotations

import http.server
import json
import threading
import time
import urllib.request
from typing import Any

import pytest

from tooldecode.backends.openai_http import HttpClient, ServerError, ServerHTTPError

KEY = "sk-test-do-not-forward"


class FaultProxy:
    """A loopback HTTP server: each request matching a rule gets that rule's fault, every other one is
    forwarded to ``upstream`` (a real server's root URL); ``seen`` records (method, path, headers)."""

    def __init__(self, upstream: str | None = None) -> None:
        self.upstream = upstream
        self.rules: list[list[Any]] = []  # [method, path suffix, action, times left or None]
        self.seen: list[tuple[str, str, dict[str, str]]] = []
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _handle(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                proxy.seen.append((self.command, self.path, dict(self.headers)))
                action = proxy.take(self.command, self.path)
                if action is None:
                    return self._forward(body)
                kind, *arg = action
                if kind == "json":
                    return self._send(200, json.dumps(arg[0]).encode())
                if kind == "raw":
                    return self._send(200, arg[0])
                if kind == "status":
                    return self._send(arg[0], json.dumps({"error": {"message": "injected"}}).encode())
                if kind == "redirect":
                    self.send_response(arg[1] if len(arg) > 1 else 307)
                    self.send_header("Location", arg[0])
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return None
                if kind == "truncate":
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", "1000")
                    self.end_headers()
                    self.wfile.write(b'{"choices": [')
                    self.wfile.flush()
                    self.close_connection = True
                    return None
                if kind == "slow":
                    self.send_response(200)
                    self.send_header("Content-Length", "2")
                    self.end_headers()
                    self.wfile.flush()
                    time.sleep(arg[0])
                    try:
                        self.wfile.write(b"{}")
                    except OSError:
                        pass
                    return None
                raise AssertionError(kind)

            def _send(self, code: int, data: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _forward(self, body: bytes) -> None:
                assert proxy.upstream, f"no rule for {self.command} {self.path} and no upstream"
                req = urllib.request.Request(
                    proxy.upstream + self.path,
                    data=body or None,
                    method=self.command,
                    headers={"Content-Type": "application/json"},
                )
                try:
                    with urllib.request.urlopen(req, timeout=120) as r:
                        self._send(r.status, r.read())
                except urllib.error.HTTPError as err:
                    self._send(err.code, err.read())

            do_GET = do_POST = _handle

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def add(self, method: str, suffix: str, action: tuple, times: int | None = None) -> None:
        self.rules.append([method, suffix, action, times])

    def take(self, method: str, path: str) -> tuple | None:
        for rule in self.rules:
            if rule[0] == method and path.endswith(rule[1]) and (rule[3] is None or rule[3] > 0):
                if rule[3] is not None:
                    rule[3] -= 1
                return rule[2]
        return None

    def count(self, suffix: str) -> int:
        return sum(1 for _, p, _ in self.seen if p.endswith(suffix))

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def proxy():
    p = FaultProxy()
    yield p
    p.close()


def _one_line(err: BaseException) -> str:
    text = str(err)
    assert "\n" not in text and text
    return text


# ---------------------------------------------------------------------------- transport faults


@pytest.mark.parametrize("code", [301, 302, 303, 307, 308])
def test_a_redirect_is_an_error_and_the_key_goes_nowhere(proxy, code):
    target = FaultProxy()
    try:
        target.add("GET", "/models", ("json", {"data": [{"id": "x"}]}))
        proxy.add("GET", "/v1/models", ("redirect", target.url + "/v1/models", code))
        client = HttpClient(proxy.url + "/v1", KEY, timeout=10, backoff=0.01)
        with pytest.raises(ServerError, match="redirects") as info:
            client.request("GET", "/models")
        assert target.url in _one_line(info.value) and KEY not in str(info.value)
        assert target.seen == []  # nothing, let alone the key, reached the other port
        assert proxy.count("/v1/models") == 1
    finally:
        target.close()


def test_500s_are_retried_a_bounded_number_of_times(proxy):
    proxy.add("GET", "/v1/models", ("status", 500))
    client = HttpClient(proxy.url + "/v1", KEY, timeout=10, retries=2, backoff=0.05)
    t0 = time.perf_counter()
    with pytest.raises(ServerHTTPError, match="HTTP 500") as info:
        client.request("GET", "/models")
    _one_line(info.value)
    assert proxy.count("/v1/models") == 3  # one try and two retries, no storm
    assert time.perf_counter() - t0 >= 0.05 + 0.1  # with backoff between them


def test_a_transient_500_then_an_answer_succeeds(proxy):
    proxy.add("GET", "/v1/models", ("status", 503), times=1)
    proxy.add("GET", "/v1/models", ("json", {"data": [{"id": "m"}]}))
    client = HttpClient(proxy.url + "/v1", KEY, timeout=10, backoff=0.01)
    assert client.request("GET", "/models") == {"data": [{"id": "m"}]}
    assert proxy.count("/v1/models") == 2


def test_a_4xx_is_not_retried(proxy):
    proxy.add("POST", "/v1/completions", ("status", 400))
    client = HttpClient(proxy.url + "/v1", KEY, timeout=10, backoff=0.01)
    with pytest.raises(ServerHTTPError, match="HTTP 400"):
        client.request("POST", "/completions", {"prompt": "a"})
    assert proxy.count("/v1/completions") == 1


def test_a_truncated_body_is_retried_then_one_line(proxy):
    proxy.add("POST", "/v1/completions", ("truncate",))
    client = HttpClient(proxy.url + "/v1", KEY, timeout=10, retries=2, backoff=0.01)
    with pytest.raises(ServerError, match="cut short") as info:
        client.request("POST", "/completions", {"prompt": "a"})
    _one_line(info.value)
    assert proxy.count("/v1/completions") == 3


def test_a_slow_body_times_out_in_one_line(proxy):
    proxy.add("GET", "/v1/models", ("slow", 3.0))
    client = HttpClient(proxy.url + "/v1", KEY, timeout=0.5, retries=0)
    t0 = time.perf_counter()
    with pytest.raises(ServerError, match="within 0.5 s") as info:
        client.request("GET", "/models")
    _one_line(info.value)
    assert time.perf_counter() - t0 < 2.5


@pytest.mark.parametrize("raw", [b"", b"{", b"<html>oops</html>", b"\xff\xfe", b"[1, 2"])
def test_malformed_json_is_one_line(proxy, raw):
    proxy.add("GET", "/v1/models", ("raw", raw))
    client = HttpClient(proxy.url + "/v1", KEY, timeout=10, backoff=0.01)
    with pytest.raises(ServerError, match="non-JSON") as info:
        client.request("GET", "/models")
    assert proxy.url in _one_line(info.value)


# ------------------------------------------------------------------- malformed 200s, on the backend

MODELS_FAULTS = [[], None, {}, {"data": []}, {"data": [1]}, {"data": [{"id": 5}]}, {"data": "x"}]
COMPLETION_FAULTS = [
    ([], "the body"),
    (None, "the body"),
    ({}, "choices"),
    ({"choices": []}, "choices"),
    ({"choices": None}, "choices"),
    ({"choices": [1]}, r"choices\[0\]"),
    ({"choices": [{"index": "x", "text": "a"}]}, r"choices\[0\].index"),
    ({"choices": [{"text": 5}]}, r"choices\[0\].text"),
    ({"choices": [{"text": "a", "logprobs": []}]}, r"choices\[0\].logprobs"),
    ({"choices": [{"text": "a", "logprobs": {"tokens": "ab"}}]}, "tokens"),
    ({"choices": [{"text": "a", "logprobs": {"tokens": ["a"], "token_logprobs": ["x"]}}]}, "token_logprobs"),
    ({"choices": [{"text": "a", "logprobs": {"tokens": ["a"], "top_logprobs": [[1]]}}]}, "top_logprobs"),
    ({"choices": [{"text": "a"}], "usage": []}, "usage"),
    ({"choices": [{"text": "a"}], "usage": {"prompt_tokens": "7"}}, "prompt_tokens"),
]
TOKENIZE_FAULTS = [[], None, {"tokens": "x"}, {"tokens": [1, "a"]}, {"tokens": [-1]}, {"tokens": [True]}]


@pytest.fixture(scope="module")
def fronted(llama_server):
    p = FaultProxy(upstream=llama_server.base_url[: -len("/v1")])
    yield p
    p.close()


def _backend(smol_ref, fronted, monkeypatch):
    from tooldecode.backends import load_backend

    monkeypatch.setenv("TD_TEST_KEY", KEY)
    return load_backend(
        "openai", smol_ref, base_url=fronted.url + "/v1", api_key_env="TD_TEST_KEY", kind="llama-cpp-python"
    )


def _params():
    from tooldecode.sampling import SamplingParams

    return SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=4, seed=0, top_logprobs=5)


@pytest.mark.model
@pytest.mark.parametrize("body", MODELS_FAULTS, ids=repr)
def test_a_malformed_model_list_is_one_line(smol_ref, fronted, monkeypatch, body):
    fronted.rules[:] = []
    fronted.add("GET", "/v1/models", ("json", body))
    with pytest.raises(ServerError, match="malformed response: (the body|data)") as info:
        _backend(smol_ref, fronted, monkeypatch)
    assert "/v1/models" in _one_line(info.value)


@pytest.mark.model
@pytest.mark.parametrize("body,field", COMPLETION_FAULTS, ids=repr)
def test_a_malformed_completion_is_one_line_and_bounded(smol_ref, fronted, monkeypatch, body, field):
    fronted.rules[:] = []
    be = _backend(smol_ref, fronted, monkeypatch)
    try:
        fronted.add("POST", "/v1/completions", ("json", body))
        before = fronted.count("/v1/completions")
        with pytest.raises(ServerError, match=field) as info:
            be.sample("Hello", 2, _params())
        assert "/v1/completions" in _one_line(info.value)
        assert fronted.count("/v1/completions") - before <= 2  # no storm
        with pytest.raises(ServerError, match=field):
            be.next_logprobs(be.tokenize("Hello"))  # the probe's channel too
    finally:
        be.close()
        fronted.rules[:] = []


@pytest.mark.model
@pytest.mark.parametrize("body", TOKENIZE_FAULTS, ids=repr)
def test_a_malformed_tokenize_answer_is_one_line(smol_ref, fronted, monkeypatch, body):
    fronted.rules[:] = []
    be = _backend(smol_ref, fronted, monkeypatch)
    try:
        fronted.add("POST", "/extras/tokenize", ("json", body))
        with pytest.raises(ServerError, match="malformed response: (the body|tokens)") as info:
            be.sample("Hello there", 1, _params())
        assert "/extras/tokenize" in _one_line(info.value)
    finally:
        be.close()
        fronted.rules[:] = []


@pytest.mark.model
def test_the_key_reaches_only_the_server_named(smol_ref, fronted, monkeypatch):
    fronted.rules[:] = []
    be = _backend(smol_ref, fronted, monkeypatch)
    try:
        out = be.sample("Hello", 1, _params())
        assert len(out) == 1 and out[0].error is None
    finally:
        be.close()
    assert all(h.get("Authorization") == f"Bearer {KEY}" for _, _, h in fronted.seen[-3:])
