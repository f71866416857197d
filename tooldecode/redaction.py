"""The one redaction step: every error line (``tooldecode.errors.ToolDecodeError``), every log line
(``tooldecode.guard.RedactingFilter``) and every traceback the command line prints pass through
``redact``. Standard library only, so the error types can use it."""

from __future__ import annotations

import re

_SECRETS: set[str] = set()
MASK = "***"

_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # an Authorization header, in any quoting: keep the header's name, drop its value
    (
        re.compile(r"(?i)(authorization['\"]?\s*[:=]\s*['\"]?)(?:bearer\s+|basic\s+)?[^\s'\",}]+"),
        r"\1" + MASK,
    ),
    (re.compile(r"(?i)\b(bearer)\s+[A-Za-z0-9._~+/=:-]{4,}"), r"\1 " + MASK),
    # OpenAI-style secret keys (sk-..., sk-proj-...)
    (re.compile(r"\bsk-[A-Za-z0-9_-]{6,}"), "sk-" + MASK),
    # api_key=..., "api-key": "...", x-api-key: ...
    (
        re.compile(r"(?i)((?:x-)?api[_-]?key['\"]?\s*[:=]\s*['\"]?)[^\s'\"&,}]+"),
        r"\1" + MASK,
    ),
    # URL user information: scheme://user:password@host
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/?#\s@'\"]+@"), r"\1" + MASK + "@"),
)


def register_secret(value: str | None) -> None:
    """Remember ``value`` (an API key) so that ``redact`` masks it wherever it appears.

    Parameters
    ----------
    value : str or None
        The secret; values shorter than 4 characters are not registered (they would mask ordinary text).
    """
    if value and len(value) >= 4:
        _SECRETS.add(value)
        for part in value.split():  # a key with a line break: each piece is secret too
            if len(part) >= 4:
                _SECRETS.add(part)


def redact(text: str) -> str:
    """``text`` with every secret masked: registered keys, Authorization values, Bearer tokens, ``sk-``
    keys, ``api_key=`` values and URL user information.

    Parameters
    ----------
    text : str
        An error or log line.

    Returns
    -------
    str
        The same line with each secret replaced by ``***``.

    Examples
    --------
    >>> from tooldecode.guard import redact
    >>> redact("GET http://me:hunter22@host/v1 with Authorization: Bearer abcdef123")
    'GET http://***@host/v1 with Authorization: ***'
    """
    for secret in sorted(_SECRETS, key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, MASK)
    for pattern, repl in _PATTERNS:
        text = pattern.sub(repl, text)
    return text
