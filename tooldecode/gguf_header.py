"""A GGUF file's header, read without loading tensors or decoding what is not asked for.

``gguf.GGUFReader`` decodes every metadata element in Python (a 49k-token vocabulary takes seconds);
here array values are stepped over unless named in ``keep``, and tensor infos are read only on request.
Imports nothing beyond the standard library, so the chat templates read it without torch or llama.cpp.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tooldecode.errors import ModelError

__all__ = ["GGUFHeader", "read_gguf_header"]

# GGUF value types: fixed-size scalars; 8 is a string, 9 an array
SCALARS = {
    0: "<B",
    1: "<b",
    2: "<H",
    3: "<h",
    4: "<I",
    5: "<i",
    6: "<f",
    7: "<?",
    10: "<Q",
    11: "<q",
    12: "<d",
}
STRING, ARRAY = 8, 9
_U64 = struct.Struct("<Q")


@dataclass(frozen=True)
class GGUFHeader:
    """``fields``: scalar and string metadata; ``arrays``: the array values named in ``keep`` (strings
    or numbers); ``tensors``: name → dimensions as stored (``ne``, innermost first), when asked for."""

    fields: dict[str, Any]
    arrays: dict[str, list[Any]] = field(default_factory=dict)
    tensors: dict[str, tuple[int, ...]] = field(default_factory=dict)


def read_gguf_header(
    path: str | Path, *, keep: frozenset[str] = frozenset(), tensors: bool = False
) -> GGUFHeader:
    """The header of the GGUF file at ``path``.

    Parameters
    ----------
    path
        The ``.gguf`` file.
    keep
        Array-valued keys to decode (e.g. ``tokenizer.ggml.tokens``); other arrays are stepped over.
    tensors
        Also read the tensor infos (names and dimensions).

    Raises
    ------
    ModelError
        One line naming the file, when it is not a GGUF, too old, or cut short / corrupt.
    """
    try:
        with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            return _read(buf, str(path), keep, tensors)
    except ModelError:
        raise
    except (OSError, struct.error, ValueError, OverflowError, MemoryError, UnicodeDecodeError) as err:
        raise ModelError(
            f"{path}: cannot read GGUF metadata ({type(err).__name__}: {err}); the file is corrupt or not a "
            "GGUF: download or convert it again (an embedded model: `tooldecode models fetch ID --force`)"
        ) from None


class _Cursor:
    """A position in the mapped file and the reads the header needs, each bounds-checked."""

    def __init__(self, buf: mmap.mmap, path: str) -> None:
        self.buf, self.path, self.pos, self.size = buf, path, 0, len(buf)

    def unpack(self, fmt: str) -> tuple[Any, ...]:
        out = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += struct.calcsize(fmt)
        return out

    def count(self, n: int, what: str) -> int:
        if n > self.size:
            raise ValueError(f"{what} of {n} in a file of {self.size} bytes")
        return n

    def string(self, decode: bool = True) -> str:
        (n,) = self.unpack("<Q")
        self.pos += self.count(n, "a string")
        return bytes(self.buf[self.pos - n : self.pos]).decode("utf-8", errors="replace") if decode else ""

    def array(self, key: str, decode: bool) -> list[Any]:
        kind, n = self.unpack("<IQ")
        n = self.count(n, f"an array in GGUF key {key}")
        if kind == STRING:
            if decode:
                return [self.string() for _ in range(n)]
            read, buf, pos, size = _U64.unpack_from, self.buf, self.pos, self.size
            for _ in range(n):  # stepped over: the hot loop of a vocabulary
                (length,) = read(buf, pos)
                if length > size:
                    raise ValueError(f"a string of {length} bytes in GGUF key {key}")
                pos += 8 + length
            self.pos = pos
            return []
        if kind == ARRAY:
            for _ in range(n):
                self.array(key, False)
            return []
        fmt = SCALARS.get(kind)
        if fmt is None:
            raise ModelError(f"{self.path}: unknown GGUF value type {kind} in key {key}")
        values = list(struct.unpack_from(f"<{n}{fmt[1]}", self.buf, self.pos)) if decode else []
        self.pos += struct.calcsize(fmt) * n
        return values

    def value(self, key: str) -> Any:
        (kind,) = self.unpack("<I")
        if kind == STRING:
            return self.string()
        fmt = SCALARS.get(kind)
        if fmt is None:
            raise ModelError(f"{self.path}: unknown GGUF value type {kind} for key {key}")
        return self.unpack(fmt)[0]


def _read(buf: mmap.mmap, path: str, keep: frozenset[str], want_tensors: bool) -> GGUFHeader:
    if buf[:4] != b"GGUF":
        raise ModelError(f"{path}: not a GGUF file (no GGUF magic); point at the model's .gguf")
    cur = _Cursor(buf, path)
    cur.pos = 4
    version, n_tensors, n_kv = cur.unpack("<IQQ")
    if version < 2:
        raise ModelError(f"{path}: GGUF version {version} is too old; convert the model again")
    fields: dict[str, Any] = {}
    arrays: dict[str, list[Any]] = {}
    for _ in range(cur.count(n_kv, "a metadata key count")):
        key = cur.string()
        (kind,) = struct.unpack_from("<I", buf, cur.pos)
        if kind == ARRAY:
            cur.pos += 4
            values = cur.array(key, key in keep)
            if key in keep:
                arrays[key] = values
        else:
            fields[key] = cur.value(key)
    dims: dict[str, tuple[int, ...]] = {}
    if want_tensors:
        for _ in range(cur.count(n_tensors, "a tensor count")):
            name = cur.string()
            (n_dims,) = cur.unpack("<I")
            if n_dims > 8:
                raise ValueError(f"tensor {name} has {n_dims} dimensions")
            dims[name] = cur.unpack(f"<{n_dims}Q")
            cur.unpack("<IQ")  # the type and the data offset
    return GGUFHeader(fields, arrays, dims)
