"""json-repair's results on disk (``TOOLDECODE_JSONREPAIR_MEMO=DIR``; off by default).

``json_repair.repair_json`` is a pure function of its input text and the library's version, and it is
slow: its string scanner is written in Python, and a report that rescores every loose call of the
committed runs hands it thousands of texts. The memo keeps each result under the sha256 of the text, in
one SQLite file per json-repair version (``json-repair-<version>.sqlite``), so a later report, in this
process or another, reads it back instead. The folder is a cache: deleting it loses nothing. An entry
that cannot be read or written costs speed, never a result.
"""

from __future__ import annotations

import functools
import hashlib
import sqlite3
from pathlib import Path

from tooldecode.cachedirs import folder_from_env

ENV = "TOOLDECODE_JSONREPAIR_MEMO"


class RepairMemo:
    """One SQLite file of ``sha256(text) -> (repaired JSON text, failure)``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.hits = self.writes = 0
        self._db: sqlite3.Connection | None = None
        try:
            db = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=OFF")
            db.execute("CREATE TABLE IF NOT EXISTS r (k TEXT PRIMARY KEY, repaired TEXT, failure TEXT)")
            self._db = db
        except sqlite3.Error:
            self._db = None

    @staticmethod
    def key(text: str) -> str:
        return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()

    def get(self, text: str) -> tuple[str, str | None] | None:
        if self._db is None:
            return None
        try:
            row = self._db.execute(
                "SELECT repaired, failure FROM r WHERE k = ?", (self.key(text),)
            ).fetchone()
        except sqlite3.Error:
            return None
        if row is None:
            return None
        self.hits += 1
        return str(row[0]), (None if row[1] is None else str(row[1]))

    def put(self, text: str, repaired: str, failure: str | None) -> None:
        if self._db is None:
            return
        try:
            self._db.execute("INSERT OR IGNORE INTO r VALUES (?, ?, ?)", (self.key(text), repaired, failure))
            self.writes += 1
        except sqlite3.Error:
            return


@functools.cache
def repair_memo(version: str | None) -> RepairMemo | None:
    """The memo of json-repair ``version`` under ``$TOOLDECODE_JSONREPAIR_MEMO`` (None when that is unset or
    empty, or the version is unknown). Read once per process and version.

    Raises
    ------
    tooldecode.errors.ToolDecodeError
        The folder cannot be made.
    """
    if not version:
        return None
    folder = folder_from_env(ENV)
    if folder is None:
        return None
    return RepairMemo(folder / f"json-repair-{version}.sqlite")
