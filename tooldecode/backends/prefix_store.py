"""Prompt KV on disk, at ``n_batch``-aligned prefixes (``TOOLDECODE_PREFIX_CACHE=DIR``; off by default).

llama.cpp evaluates a prompt in chunks aligned to absolute position 0 (``LlamaCppBackend``), so the KV of
the first ``k·n_batch`` tokens is the same bytes whatever follows them. This store keeps those bytes
(``llama_state_seq_get_data`` of the sequence right after its chunk ``k``), keyed by the model's sha256,
the settings that shape the cache and the tokens, and gives them back to a later prompt with the same
prefix, in this process or another: the rest is then evaluated in the same aligned chunks, as it would
have been. Many prompts of a study share a long head (the system turn and the tools), and the tests
evaluate the same scenarios again and again.

A file is written under a temporary name and renamed into place, so readers see whole files; an entry
that cannot be read or restored is ignored (the prefix is evaluated instead). The folder is a cache:
deleting it loses nothing.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from tooldecode.cachedirs import folder_from_env
from tooldecode.errors import ModelError

ENV = "TOOLDECODE_PREFIX_CACHE"


class PrefixStore:
    """Aligned prompt prefixes of one model and context setting, one file each."""

    def __init__(self, folder: Path, setting: str, n_batch: int) -> None:
        self.folder, self.setting, self.n_batch = folder, setting, n_batch
        self.hits = self.writes = 0

    @classmethod
    def from_env(cls, setting: str, n_batch: int) -> PrefixStore | None:
        """The store under ``$TOOLDECODE_PREFIX_CACHE``, or None when it is unset or empty."""
        folder = folder_from_env(ENV, ModelError)
        if folder is None:
            return None
        return cls(folder, setting, n_batch)

    def _path(self, ids: Sequence[int], end: int) -> Path:
        h = hashlib.sha256(self.setting.encode())
        h.update(np.asarray(ids[:end], dtype=np.int32).tobytes())
        return self.folder / f"{h.hexdigest()[:40]}-{end}.kv"

    def longest(self, ids: Sequence[int], upto: int) -> int:
        """The longest stored aligned prefix of ``ids`` of at most ``upto`` tokens (0 if none)."""
        for end in range(upto - upto % self.n_batch, 0, -self.n_batch):
            if self._path(ids, end).is_file():
                return end
        return 0

    def read(self, ids: Sequence[int], end: int) -> bytes | None:
        try:
            return self._path(ids, end).read_bytes()
        except OSError:
            return None

    def has(self, ids: Sequence[int], end: int) -> bool:
        return self._path(ids, end).is_file()

    def write(self, ids: Sequence[int], end: int, data: bytes) -> None:
        """Store ``data`` for ``ids[:end]``; a full or read-only cache costs speed, never a run."""
        path = self._path(ids, end)
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=self.folder)
        except OSError:
            return
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, path)
            self.writes += 1
        except OSError:
            Path(tmp).unlink(missing_ok=True)
