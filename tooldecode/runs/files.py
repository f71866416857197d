"""File helpers of the run store: atomic writes, directory fsync, one-line OS reasons, JSON round-trips."""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = [
    "TMP_MARK",
    "WRITE_CHUNK",
    "atomic_write",
    "first_difference",
    "fsync_dir",
    "jsonable",
    "os_reason",
    "write_all",
]

# writes go in chunks of this many bytes (one os.write each)
WRITE_CHUNK = 1 << 20
# a temp file beside its target: <name>.tmp-<pid>
TMP_MARK = ".tmp-"


def fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def os_reason(err: OSError) -> str:
    if err.errno == errno.ENOSPC:
        return "disk full"
    if err.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return "not writable"
    return err.strerror or str(err)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view[:WRITE_CHUNK])
        view = view[written:]


def atomic_write(target: Path, chunks: Iterable[bytes]) -> None:
    """Write ``chunks`` to a temp file beside ``target``, fsync, then rename over ``target``."""
    tmp = target.with_name(f"{target.name}{TMP_MARK}{os.getpid()}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            for chunk in chunks:
                write_all(fd, chunk)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(target.parent)


def jsonable(value: Any) -> Any:
    """``value`` as it reads back from JSON (tuples become lists; dates, paths become strings)."""
    return json.loads(json.dumps(value, default=str))


def first_difference(old: Any, new: Any, where: str = "") -> str | None:
    """Dotted path of the first field where two JSON values differ (``""`` for the root), else None."""
    if isinstance(old, dict) and isinstance(new, dict):
        for key in list(old) + [k for k in new if k not in old]:
            sub = f"{where}.{key}" if where else str(key)
            if key not in old or key not in new:
                return sub
            found = first_difference(old[key], new[key], sub)
            if found is not None:
                return found
        return None
    if isinstance(old, list) and isinstance(new, list):
        for i, (a, b) in enumerate(zip(old, new, strict=False)):
            found = first_difference(a, b, f"{where}[{i}]")
            if found is not None:
                return found
        return None if len(old) == len(new) else f"{where}[{min(len(old), len(new))}]"
    if (
        isinstance(old, bool) != isinstance(new, bool)
        or type(old) is not type(new)
        and not (isinstance(old, int | float) and isinstance(new, int | float))
    ):
        return where
    return None if old == new else where
