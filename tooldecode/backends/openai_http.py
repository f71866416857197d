"""The HTTP side of the ``openai`` backend: server kinds, what each accepts, errors, and a small JSON client.

Standard library only (``urllib``); every failure is one line that says what, where and what to do.
"""

from __future__ import annotations

import http.client
import json
import math
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from tooldecode.errors import ModelError, ToolDecodeError
from tooldecode.guard import check_api_key, check_base_url

KINDS = ("auto", "llama-cpp-python", "vllm", "sglang")


class ServerError(ModelError):
    """The server could not be reached, went away, or answered with an error."""


class ServerHTTPError(ServerError):
    """The server answered with an HTTP error status."""

    def __init__(self, message: str, status: int, detail: str) -> None:
        super().__init__(message)
        self.status = status
        self.detail = detail


class ChannelError(ServerError):
    """The server would not evaluate the tokens tooldecode rendered (tokenization differs)."""


@dataclass(frozen=True)
class Caps:
    """What a server kind accepts."""

    token_ids: bool  # the Completions prompt may be a list of token ids
    honours_n: bool  # ``n`` > 1 returns n choices
    strict_field: str  # where a GBNF grammar goes
    tokenize_path: str  # the tokenize endpoint (relative to the server root)
    masked_logprobs: bool  # under the strict field, reported log-probabilities are the masked distribution's


CAPS = {
    "llama-cpp-python": Caps(False, False, "grammar", "/extras/tokenize", False),
    "vllm": Caps(True, True, "structured_outputs", "/tokenize", True),
    "sglang": Caps(True, True, "ebnf", "/tokenize", True),
}


def _detail(raw: bytes) -> str:
    try:
        body = json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace").strip()[:300]
    err = body.get("error", body.get("detail", body)) if isinstance(body, dict) else body
    if isinstance(err, dict):
        err = err.get("message", err)
    return " ".join(str(err).split())[:300]


class _Redirected(Exception):
    """A 3xx answer (never followed: the API key stays with the server named)."""

    def __init__(self, code: int, target: str) -> None:
        super().__init__(code, target)
        self.code, self.target = code, target


class _RefuseRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str) -> None:
        raise _Redirected(code, newurl)


# status codes worth asking again (a server restarting or overloaded); others are answers
_RETRY_STATUS = frozenset({500, 502, 503, 504})


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if value == [] or value == {}:
        return "empty"
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return f"the positive number {value!r}" if abs(value) < 1e15 else "a positive number"
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), "a number" if isinstance(value, int | float) else type(value).__name__
    )


def malformed(url: str, field: str, value: Any, expected: str) -> ServerError:
    """The one-line error for a response whose ``field`` is not what an OpenAI-compatible server sends."""
    return ServerError(
        f"{url} answered a malformed response: {field} is {_kind(value)}, expected {expected}; "
        "is --base-url an OpenAI-compatible server of the --server-kind given?"
    )


class HttpClient:
    """JSON over HTTP to one server.

    Redirects are never followed (a redirect is an error naming its target, so the API key goes to
    no other host); an HTTP 500/502/503/504 or a body cut short is asked again up to ``retries`` times
    with a doubling pause from ``backoff`` seconds.

    Parameters
    ----------
    base_url : str
        The API root, e.g. ``http://127.0.0.1:8000/v1``; ``root`` is the same without ``/v1``.
    api_key : str, optional
        Sent as a Bearer token.
    timeout : float
        Seconds to wait for one response.
    retries : int
        Further tries after a transient failure.
    backoff : float
        Seconds before the first retry (doubled for each further one).
    """

    def __init__(
        self, base_url: str, api_key: str | None, timeout: float, *, retries: int = 2, backoff: float = 0.5
    ) -> None:
        base = base_url.rstrip("/")
        try:
            check_base_url(base)  # no credentials in the URL (they would be printed and resolved as a host)
            if api_key is not None:
                check_api_key(api_key, "the API key")  # a line break in a header would print the key
        except ToolDecodeError as err:
            raise ServerError(str(err)) from None
        try:
            parts = urllib.parse.urlsplit(base)
        except ValueError:
            parts = urllib.parse.urlsplit("")
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ServerError(f"--base-url {base_url!r} is not an http(s) URL; e.g. http://127.0.0.1:8000/v1")
        self.base = base
        root_path = parts.path[: -len("/v1")] if parts.path.endswith("/v1") else parts.path
        self.root = urllib.parse.urlunsplit((parts.scheme, parts.netloc, root_path, "", ""))
        self.api_key = api_key
        self.timeout = timeout
        self.retries = max(0, int(retries))
        self.backoff = float(backoff)
        self._opener = urllib.request.build_opener(_RefuseRedirects)

    def url(self, path: str, *, root: bool = False) -> str:
        """The full URL of ``path`` under the server root or the API root."""
        return (self.root if root else self.base) + path

    def request(self, method: str, path: str, body: Any = None, *, root: bool = False) -> Any:
        """The decoded JSON answer to ``method path`` (under ``root`` or the API root); ``ServerError``
        (one line) when the server cannot be reached, redirects, or answers with a body that is not
        JSON, ``ServerHTTPError`` on an error status (after the bounded retries for 5xx)."""
        url = self.url(path, root=root)
        for attempt in range(self.retries + 1):
            last = attempt == self.retries
            try:
                raw = self._once(method, url, body)
            except ServerHTTPError as err:
                if last or err.status not in _RETRY_STATUS:
                    raise
            except _CutShort as err:
                if last:
                    raise ServerError(
                        f"{method} {url}: the server's answer was cut short ({err}) after "
                        f"{self.retries + 1} tries; check the server (completed samples are kept)"
                    ) from None
            else:
                try:
                    return json.loads(raw)
                except ValueError:
                    raise ServerError(
                        f"{method} {url}: the server answered with non-JSON ({raw[:80]!r}); "
                        "is --base-url an OpenAI-compatible server?"
                    ) from None
            time.sleep(self.backoff * (2**attempt))
        raise AssertionError("unreachable")  # pragma: no cover

    def _once(self, method: str, url: str, body: Any) -> bytes:
        data = None if body is None else json.dumps(body).encode("utf-8")
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        deadline = time.monotonic() + self.timeout  # the whole answer, not each read (a trickling server)
        try:
            with self._opener.open(req, timeout=self.timeout) as resp:
                return _read_within(resp, deadline)
        except _Redirected as err:
            raise ServerError(
                f"{method} {url}: the server redirects (HTTP {err.code}) to {err.target}; tooldecode does not "
                "follow redirects (the API key would go along): pass the final URL as --base-url"
            ) from None
        except urllib.error.HTTPError as err:
            try:
                fp = getattr(err, "fp", None)  # the error's body, under the same total deadline
                detail = _detail(_read_within(fp, deadline) if hasattr(fp, "read1") else err.read())
            except (OSError, http.client.HTTPException):
                detail = err.reason if isinstance(err.reason, str) else ""
            raise ServerHTTPError(f"{method} {url}: HTTP {err.code}: {detail}", err.code, detail) from None
        except (http.client.IncompleteRead, ConnectionResetError, http.client.RemoteDisconnected) as err:
            raise _CutShort(type(err).__name__) from None
        except TimeoutError as err:
            raise ServerError(
                f"{method} {url}: no complete answer within {self.timeout:g} s ({err}); the server is slow "
                "or stuck: check it (completed samples are kept; rerun to resume)"
            ) from None
        except (urllib.error.URLError, ConnectionError, http.client.HTTPException, OSError) as err:
            reason = getattr(err, "reason", None) or err
            if isinstance(reason, TimeoutError):
                raise ServerError(
                    f"{method} {url}: no answer within {self.timeout:g} s; the server is slow or stuck: "
                    "check it (completed samples are kept; rerun to resume)"
                ) from None
            raise ServerError(
                f"cannot reach the server at {url} ({type(reason).__name__}: {reason}); "
                "start it or fix --base-url (completed samples are kept; rerun to resume)"
            ) from None


class _CutShort(Exception):
    """The connection closed before the whole answer came (retried)."""


def _read_within(resp: Any, deadline: float) -> bytes:
    """The body of ``resp``, read in pieces until ``deadline`` (``time.monotonic``); ``TimeoutError``
    past it, so a server that sends a byte now and then cannot hold a request open for ever."""
    parts: list[bytes] = []
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the answer was still coming at the deadline")
        sock = getattr(getattr(resp, "fp", None), "raw", None)
        sock = getattr(sock, "_sock", None)
        if sock is not None:
            sock.settimeout(max(0.01, left))
        piece = resp.read1(65536) if hasattr(resp, "read1") else resp.read(65536)
        if not piece:
            break
        parts.append(piece)
    data = b"".join(parts)
    length = resp.getheader("Content-Length") if hasattr(resp, "getheader") else None
    if length is not None and length.isdigit() and len(data) < int(length):
        raise http.client.IncompleteRead(data, int(length) - len(data))
    return data


# --- the shape of each answer: checked before it is read (a malformed one is a one-line error) -------


def _num(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


# a log-probability is ≤ 0 (a little above, for the servers' float rounding) and not NaN; -inf is a
# token the grammar or the sampler removed
LOGPROB_SLACK = 1e-4
LOGPROB = "a log-probability (a number ≤ 0, not NaN)"


def _logprob(v: Any) -> bool:
    return _num(v) and not math.isnan(v) and v <= LOGPROB_SLACK


def _need(ok: bool, url: str, field: str, value: Any, expected: str) -> None:
    if not ok:
        raise malformed(url, field, value, expected)


def _obj(out: Any, url: str, what: str) -> dict:
    _need(isinstance(out, dict), url, "the body", out, f"an object ({what})")
    return out


def check_models(out: Any, url: str) -> list[dict]:
    """The ``data`` entries of a ``GET /models`` answer (each an object with a string ``id``)."""
    data = _obj(out, url, "with a 'data' list").get("data")
    _need(isinstance(data, list) and bool(data), url, "data", data, "a non-empty list of models")
    for i, entry in enumerate(data):
        _need(isinstance(entry, dict), url, f"data[{i}]", entry, "an object")
        _need(isinstance(entry.get("id"), str), url, f"data[{i}].id", entry.get("id"), "a string")
    return data


def check_tokens(out: Any, url: str, n_vocab: int | None = None) -> list[int]:
    """The ``tokens`` of a tokenize answer (a list of whole numbers ≥ 0, each below ``n_vocab`` when
    it is given)."""
    tokens = _obj(out, url, "with a 'tokens' list").get("tokens")
    _need(isinstance(tokens, list), url, "tokens", tokens, "a list of token ids")
    top = n_vocab if n_vocab is not None else float("inf")
    expected = "a token id (a whole number ≥ 0" + (
        f" and below the vocabulary's {n_vocab})" if n_vocab else ")"
    )
    for i, t in enumerate(tokens):
        _need(_int(t) and 0 <= t < top, url, f"tokens[{i}]", t, expected)
    return tokens


def _check_usage(out: dict, url: str) -> None:
    usage = out.get("usage")
    _need(usage is None or isinstance(usage, dict), url, "usage", usage, "an object or null")
    for k in ("prompt_tokens", "completion_tokens"):
        v = (usage or {}).get(k)
        _need(v is None or (_int(v) and v >= 0), url, f"usage.{k}", v, "a whole number ≥ 0")


def _check_logprobs(lp: Any, url: str, at: str) -> None:
    _need(lp is None or isinstance(lp, dict), url, at, lp, "an object or null")
    if not lp:
        return
    tokens = lp.get("tokens")
    _need(tokens is None or isinstance(tokens, list), url, f"{at}.tokens", tokens, "a list")
    for j, t in enumerate(tokens or []):
        _need(isinstance(t, str), url, f"{at}.tokens[{j}]", t, "a string")
    values = lp.get("token_logprobs")
    _need(values is None or isinstance(values, list), url, f"{at}.token_logprobs", values, "a list")
    for j, v in enumerate(values or []):
        _need(v is None or _logprob(v), url, f"{at}.token_logprobs[{j}]", v, LOGPROB)
    top = lp.get("top_logprobs")
    _need(top is None or isinstance(top, list), url, f"{at}.top_logprobs", top, "a list")
    for j, alts in enumerate(top or []):
        _need(alts is None or isinstance(alts, dict), url, f"{at}.top_logprobs[{j}]", alts, "an object")
        for k, v in (alts or {}).items():
            _need(v is None or _logprob(v), url, f"{at}.top_logprobs[{j}][{k!r}]", v, LOGPROB)


def check_completion(out: Any, url: str) -> list[dict]:
    """The ``choices`` of a Completions answer, each checked (``index``, ``text``, ``finish_reason``,
    ``logprobs``), and its ``usage``."""
    out = _obj(out, url, "with a 'choices' list")
    choices = out.get("choices")
    _need(isinstance(choices, list), url, "choices", choices, "a list")
    for i, c in enumerate(choices):
        at = f"choices[{i}]"
        _need(isinstance(c, dict), url, at, c, "an object")
        _need(
            c.get("index") is None or _int(c["index"]), url, f"{at}.index", c.get("index"), "a whole number"
        )
        _need(
            isinstance(c.get("text"), str), url, f"{at}.text", c.get("text"), "a string (the sample's text)"
        )
        fin = c.get("finish_reason")
        _need(fin is None or isinstance(fin, str), url, f"{at}.finish_reason", fin, "a string or null")
        _check_logprobs(c.get("logprobs"), url, f"{at}.logprobs")
    _check_usage(out, url)
    return choices


def check_chat(out: Any, url: str) -> dict:
    """The first choice of a chat-completions answer (with its ``message`` and ``tool_calls`` checked)."""
    out = _obj(out, url, "with a 'choices' list")
    choices = out.get("choices")
    _need(isinstance(choices, list) and bool(choices), url, "choices", choices, "a non-empty list")
    c = choices[0]
    _need(isinstance(c, dict), url, "choices[0]", c, "an object")
    msg = c.get("message")
    _need(msg is None or isinstance(msg, dict), url, "choices[0].message", msg, "an object")
    content = (msg or {}).get("content")
    _need(content is None or isinstance(content, str), url, "choices[0].message.content", content, "a string")
    calls = (msg or {}).get("tool_calls")
    _need(calls is None or isinstance(calls, list), url, "choices[0].message.tool_calls", calls, "a list")
    for j, call in enumerate(calls or []):
        at = f"choices[0].message.tool_calls[{j}]"
        _need(isinstance(call, dict), url, at, call, "an object")
        fn = call.get("function")
        _need(fn is None or isinstance(fn, dict), url, f"{at}.function", fn, "an object")
        name = (fn or {}).get("name")
        _need(name is None or isinstance(name, str), url, f"{at}.function.name", name, "a string")
    fin = c.get("finish_reason")
    _need(fin is None or isinstance(fin, str), url, "choices[0].finish_reason", fin, "a string or null")
    _check_usage(out, url)
    return c
