"""The doors of tooldecode: secrets kept out of every printed line, inputs read within bounds, outputs
that never replace an input.

Secrets
    ``redact`` is the one redaction step every error and log line goes through (``tooldecode.cli.main``
    and the ``tooldecode`` loggers' handler): API keys registered with ``register_secret`` (the value
    of ``--api-key-env``), ``Authorization`` headers and ``Bearer`` tokens, ``sk-`` style keys and the
    user name and password of URLs. ``check_api_key`` refuses a key with a control character or space
    (a paste error) without echoing it; ``check_base_url`` refuses a URL that carries credentials.

Inputs
    ``read_text`` reads a user's file: regular files only (a FIFO, device or socket is refused before
    a byte is read), at most ``MAX_INPUT_BYTES``, strict UTF-8 with an error naming the byte.
    ``parse_json`` parses JSON with its nesting depth (``MAX_NESTING``) and integer size
    (``MAX_INT_DIGITS``) bounded before the parser runs, and ``NaN``/``Infinity`` refused.

Outputs
    ``check_output`` refuses an output path that is one of the command's inputs, or an existing file
    that tooldecode did not write.
"""

from __future__ import annotations

import json
import logging
import os
import re
import stat
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from tooldecode.errors import ToolDecodeError
from tooldecode.redaction import MASK, redact, register_secret

# --- secrets ------------------------------------------------------------------------------------------


class RedactingFilter(logging.Filter):
    """A logging filter that passes every record through ``redact`` (message and arguments merged)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a record whose arguments do not fit its format: leave it to the handler
            return True
        record.msg, record.args = redact(message), None
        if record.exc_info and record.exc_info[1] is not None:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
            record.exc_info = None
        return True


def check_api_key(key: str, source: str) -> str:
    """``key`` if it can travel in an HTTP header; a one-line error that never shows the key otherwise.

    Parameters
    ----------
    key : str
        The API key.
    source : str
        Where it came from, for the message (e.g. ``--api-key-env OPENAI_API_KEY``).

    Returns
    -------
    str
        The key, unchanged.

    Raises
    ------
    ToolDecodeError
        The key holds a control character, a space or a non-ASCII character.
    """
    register_secret(key)
    for i, ch in enumerate(key):
        if not 0x21 <= ord(ch) <= 0x7E:
            kind = (
                "a control character (a line break?)"
                if ord(ch) < 0x20 or ord(ch) == 0x7F
                else ("a space" if ch.isspace() else "a non-ASCII character")
            )
            raise ToolDecodeError(
                f"{source}: the API key is malformed: it holds {kind} at position {i + 1} of "
                f"{len(key)}; set it again as one line of printable ASCII (the key is not shown)"
            )
    return key


def check_base_url(url: str, flag: str = "--base-url") -> None:
    """Refuse a server URL that carries a user name or password (``http://user:KEY@host``).

    Raises
    ------
    ToolDecodeError
        One line, with the credentials masked.
    """
    from urllib.parse import urlsplit

    try:
        netloc = urlsplit(url).netloc
    except ValueError:
        netloc = url
    if "@" in netloc:
        user_info = netloc.rpartition("@")[0]
        register_secret(user_info)
        register_secret(user_info.partition(":")[2])  # the password (a user name alone is no secret)
        raise ToolDecodeError(
            f"{flag} {redact(url)!r} carries a user name or password; tooldecode does not send "
            "credentials in URLs: drop them from the URL and pass the key with --api-key-env VAR"
        )


# --- inputs -------------------------------------------------------------------------------------------

MAX_INPUT_BYTES = 256 * 1024 * 1024  # one file a command reads (session logs, tool lists, specs, recipes)
MAX_NESTING = 256  # arrays and objects inside each other in one JSON or TOML document (a schema's own
# bound, tooldecode.grammar.schema.MAX_DEPTH, is 128 levels of schema, inside a tool list's wrapping)
MAX_INT_DIGITS = 4300  # digits of one number in a document read (Python's own int() bound)


class InputError(ToolDecodeError):
    """A file a command reads that is not a regular UTF-8 file within bounds, or not parseable."""


def check_regular(
    path: Path, what: str = "input", error: type[ToolDecodeError] = InputError
) -> os.stat_result:
    """The ``stat`` of ``path`` when it is a regular file; one line otherwise (missing, a folder, a FIFO,
    a device or a socket: nothing is opened, so an endless input never blocks).
    """
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise error(f"{path}: no such {what} file; check the path") from None
    except OSError as err:
        raise error(f"{path}: cannot read the {what} ({err.strerror or err})") from None
    if stat.S_ISDIR(st.st_mode):
        raise error(f"{path}: is a directory; give a {what} file")
    if not stat.S_ISREG(st.st_mode):
        raise error(
            f"{path}: is not a regular file (a FIFO, device or socket); tooldecode reads a {what} only "
            "from a regular file: save it to one first"
        )
    return st


def read_bytes(
    path: str | os.PathLike[str],
    what: str = "input",
    *,
    max_bytes: int = MAX_INPUT_BYTES,
    error: type[ToolDecodeError] = InputError,
) -> bytes:
    """The bytes of a regular file of at most ``max_bytes``; one-line ``error`` otherwise."""
    p = Path(path)
    st = check_regular(p, what, error)
    if st.st_size > max_bytes:
        raise error(
            f"{p}: the {what} is {st.st_size} bytes, more than the {max_bytes} tooldecode reads; "
            "give a smaller file"
        )
    try:
        with open(p, "rb") as f:
            data = f.read(max_bytes + 1)
    except OSError as err:
        raise error(f"{p}: cannot read the {what} ({err.strerror or err})") from None
    if len(data) > max_bytes:  # grew while read
        raise error(
            f"{p}: the {what} is more than the {max_bytes} bytes tooldecode reads; give a smaller file"
        )
    return data


def decode_utf8(
    data: bytes, where: str, what: str = "input", error: type[ToolDecodeError] = InputError
) -> str:
    """``data`` as UTF-8 text (a leading byte-order mark dropped); one line naming the bad byte otherwise."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise error(
            f"{where}: the {what} is not UTF-8 text (byte {err.start}: {data[err.start : err.start + 1]!r}); "
            "save it as UTF-8"
        ) from None
    return text[1:] if text.startswith("\ufeff") else text


def read_text(
    path: str | os.PathLike[str],
    what: str = "input",
    *,
    max_bytes: int = MAX_INPUT_BYTES,
    error: type[ToolDecodeError] = InputError,
) -> str:
    """The UTF-8 text of a regular file of at most ``max_bytes``.

    Parameters
    ----------
    path : str or PathLike
        The file.
    what : str
        What the file is, for messages ("session log", "tool list", "recipe").
    max_bytes : int
        The most bytes read.
    error : type
        The ``ToolDecodeError`` subclass raised.

    Returns
    -------
    str
        The text.

    Raises
    ------
    ToolDecodeError
        One line: missing, a folder, not a regular file, too big, unreadable or not UTF-8.
    """
    return decode_utf8(read_bytes(path, what, max_bytes=max_bytes, error=error), str(path), what, error)


_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
_TOML_STRING = re.compile(
    r'"""(?:[^\\]|\\.)*?"""|\'\'\'.*?\'\'\'|"(?:[^"\\\n]|\\.)*"|\'[^\'\n]*\'|#[^\n]*', re.S
)
_DIGITS = re.compile(r"[0-9][0-9_]*")
_OPEN = frozenset("[{")


def nesting_problem(text: str, *, toml: bool = False, max_depth: int = MAX_NESTING) -> str | None:
    """What is too deep or too big in a JSON (or TOML) document, before it is parsed, or None.

    Strings are set aside, then the brackets are counted and each run of digits measured, so a
    parser never recurses past ``max_depth`` nor converts an integer of more than ``MAX_INT_DIGITS``
    digits.
    """
    bare = (_TOML_STRING if toml else _JSON_STRING).sub('""', text)
    depth = deepest = 0
    for ch in re.findall(r"[\[\]{}]", bare):
        depth = depth + 1 if ch in _OPEN else max(0, depth - 1)
        if depth > deepest:
            deepest = depth
            if deepest > max_depth:
                return f"nested too deeply (more than {max_depth} levels)"
    for m in _DIGITS.finditer(bare):
        if m.end() - m.start() > MAX_INT_DIGITS:
            return f"holds a number of more than {MAX_INT_DIGITS} digits"
    return None


def _bounded_int(text: str) -> int:
    if len(text) > MAX_INT_DIGITS + 1:
        raise ValueError(f"an integer of {len(text)} digits")
    return int(text)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_json(text: str, where: str, what: str = "JSON", error: type[ToolDecodeError] = InputError) -> Any:
    """The JSON value of ``text``, with depth and integer size bounded before parsing.

    Raises
    ------
    ToolDecodeError
        One line naming ``where``: too deep, a too-long integer, ``NaN``/``Infinity``, or not JSON
        (with the line and column).
    """
    problem = nesting_problem(text)
    if problem:
        raise error(f"{where}: the {what} is {problem}; tooldecode reads at most that: simplify it")
    try:
        return json.loads(text, parse_int=_bounded_int, parse_constant=_no_constant)
    except json.JSONDecodeError as e:
        raise error(
            f"{where}: not valid JSON ({e.msg} at line {e.lineno} column {e.colno}); fix the {what}"
        ) from None
    except (ValueError, RecursionError) as e:
        raise error(f"{where}: the {what} cannot be read ({e}); fix the {what}") from None


def parse_toml(
    text: str, where: str, what: str = "TOML file", error: type[ToolDecodeError] = InputError
) -> dict[str, Any]:
    """The table of a TOML document, with its nesting bounded before parsing."""
    import tomllib

    problem = nesting_problem(text, toml=True)
    if problem:
        raise error(f"{where}: the {what} is {problem}; tooldecode reads at most that: simplify it")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise error(f"{where}: invalid TOML ({err}); fix the {what}") from None
    except (ValueError, RecursionError) as err:
        raise error(f"{where}: the {what} cannot be read ({type(err).__name__}); fix the {what}") from None


# --- outputs ------------------------------------------------------------------------------------------


def _same(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return a.resolve() == b.resolve()


def check_output(
    out: str | os.PathLike[str],
    inputs: Iterable[str | os.PathLike[str] | None] = (),
    *,
    ours: Callable[[Path], bool] | None = None,
    what: str = "output",
    error: type[ToolDecodeError] = ToolDecodeError,
) -> Path:
    """``out`` when writing it replaces no input and no file tooldecode did not write.

    Parameters
    ----------
    out : str or PathLike
        The file about to be written.
    inputs : iterable of paths
        The command's input files (``None`` entries are skipped).
    ours : callable, optional
        Whether an existing file is tooldecode's own output of this kind (it may be replaced);
        without it, any existing file is refused.
    what : str
        What is written, for the message.
    error : type
        The ``ToolDecodeError`` subclass raised.

    Returns
    -------
    Path
        ``out``.

    Raises
    ------
    ToolDecodeError
        ``out`` is one of ``inputs`` (the same file, by any path or link), not a regular file, or an
        existing file that ``ours`` does not accept.
    """
    p = Path(out)
    for src in inputs:
        if src is not None and (_same(p, Path(src)) or p.resolve() == Path(src).resolve()):
            raise error(f"{p}: the {what} would overwrite the input {src}; choose another output path (-o)")
    if os.path.lexists(p):
        try:
            st = os.stat(p)
        except OSError:
            st = None
        if st is None or not stat.S_ISREG(st.st_mode):
            raise error(f"{p}: exists and is not a regular file; choose another output path (-o)")
        try:
            own = ours is not None and ours(p)
        except (OSError, ValueError, ToolDecodeError):
            own = False
        if not own:
            raise error(
                f"{p}: exists and is not a {what} tooldecode wrote; tooldecode does not replace it: "
                "choose another output path (-o) or remove the file first"
            )
    return p


__all__ = [
    "MASK",
    "MAX_INPUT_BYTES",
    "MAX_INT_DIGITS",
    "MAX_NESTING",
    "InputError",
    "RedactingFilter",
    "check_api_key",
    "check_base_url",
    "check_output",
    "check_regular",
    "decode_utf8",
    "nesting_problem",
    "parse_json",
    "parse_toml",
    "read_bytes",
    "read_text",
    "redact",
    "register_secret",
]
