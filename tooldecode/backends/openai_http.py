"""The HTTP side of the ``openai`` backend: server kinds, what each accepts, errors, and a small JSON client.

Standard library only (``urllib``); every failure is one line that says what, where and what to do.
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from tooldecode.errors import ModelError

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


class HttpClient:
    """JSON over HTTP to one server.

    Parameters
    ----------
    base_url : str
        The API root, e.g. ``http://127.0.0.1:8000/v1``; ``root`` is the same without ``/v1``.
    api_key : str, optional
        Sent as a Bearer token.
    timeout : float
        Seconds to wait for one response.
    """

    def __init__(self, base_url: str, api_key: str | None, timeout: float) -> None:
        base = base_url.rstrip("/")
        parts = urllib.parse.urlsplit(base)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ServerError(f"--base-url {base_url!r} is not an http(s) URL; e.g. http://127.0.0.1:8000/v1")
        self.base = base
        root_path = parts.path[: -len("/v1")] if parts.path.endswith("/v1") else parts.path
        self.root = urllib.parse.urlunsplit((parts.scheme, parts.netloc, root_path, "", ""))
        self.api_key = api_key
        self.timeout = timeout

    def request(self, method: str, path: str, body: Any = None, *, root: bool = False) -> Any:
        """The decoded JSON answer to ``method path`` (under ``root`` or the API root); ``ServerError``
        (one line) when the server cannot be reached, ``ServerHTTPError`` on an error status."""
        url = (self.root if root else self.base) + path
        data = None if body is None else json.dumps(body).encode("utf-8")
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as err:
            detail = _detail(err.read())
            raise ServerHTTPError(f"{method} {url}: HTTP {err.code}: {detail}", err.code, detail) from None
        except (urllib.error.URLError, ConnectionError, http.client.HTTPException, OSError) as err:
            reason = getattr(err, "reason", None) or err
            raise ServerError(
                f"cannot reach the server at {url} ({type(reason).__name__}: {reason}); "
                "start it or fix --base-url (completed samples are kept; rerun to resume)"
            ) from None
        try:
            return json.loads(raw)
        except ValueError:
            raise ServerError(f"{method} {url}: the server answered with non-JSON ({raw[:80]!r})") from None
