"""Cache folders named by an environment variable (the prompt KV store, the json-repair memo)."""

from __future__ import annotations

import os
from pathlib import Path

from tooldecode.errors import ToolDecodeError


def folder_from_env(name: str, error: type[ToolDecodeError] = ToolDecodeError) -> Path | None:
    """The folder ``$name`` names, made if missing; None when the variable is unset or empty.

    Raises
    ------
    ToolDecodeError
        (or ``error``) One line, when the folder cannot be made.
    """
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    folder = Path(raw).expanduser()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise error(
            f"{name}={raw!r}: cannot make the folder ({err.strerror}); point it at a writable folder or unset it"
        ) from None
    return folder
