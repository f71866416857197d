"""Run directories: a manifest written once, append-only raw samples, derived files beside them.

```
runs/<name>/
  manifest.json    config + provenance (versions, git sha, model, seeds, scenario hashes); written once,
                   then a resume from another commit is added to its ``resumed``
  samples.jsonl    raw sample records, one JSON object per line, appended and fsynced per batch
  <derived>        verdicts-<scorer version>.jsonl, summary.md, ...: rewritten at will, never raw
```

Crash safety: ``append`` writes whole lines and fsyncs once per batch. A ``kill -9`` in the middle of
a batch can leave a torn last line (no trailing newline); readers skip it, and the next ``append``
cuts it off before writing, so the file stays valid JSONL and the torn record is simply redone on
resume (it never counted as completed). One writer at a time: a writer holds an exclusive ``flock``
on the run *directory* (``RunLock``) from ``lock()`` or its first ``append`` until ``close()``; the
directory outlives its files, so ``--fresh`` can clear a run while holding the lock and no second
writer slips in between. ``clear_run`` deletes only the files the run store writes (``is_store_file``).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from tooldecode.errors import RunError
from tooldecode.runs.files import (
    TMP_MARK,
    atomic_write,
    first_difference,
    fsync_dir,
    jsonable,
    os_reason,
    write_all,
)
from tooldecode.runs.manifest import narrowed_config, with_resume

# fmt: off
__all__ = ["MANIFEST", "SAMPLE_FIELDS", "DerivedWriteError", "SAMPLES", "RunLock", "RunStore", "clear_run",
           "is_store_file", "rescore"]
# fmt: on

MANIFEST = "manifest.json"
SAMPLES = "samples.jsonl"
RAW_FILES = frozenset({MANIFEST, SAMPLES})
# Fields a sampled-call record always has (what scoring, reports and repair read).
SAMPLE_FIELDS = ("key", "arm", "scenario", "text")

# Libraries whose versions go into the manifest: manifest name -> distribution name.

# Files the run store and tooldecode's stages write into a run folder (``--fresh`` deletes only these).
_STORE_NAMES = frozenset(
    {
        MANIFEST,
        SAMPLES,
        "timing.json",
        "probe.jsonl",
        "decision.jsonl",
        "summary.md",
        "report.html",
        "reference-validity.json",
    }
)
_STORE_PATTERNS = (
    re.compile(r"verdicts-[A-Za-z0-9._+-]+\.jsonl"),
    re.compile(r"repaired-[A-Za-z0-9._+-]+\.jsonl"),
)


def _json_line(record: dict) -> bytes:
    """One JSON line; text with lone surrogates (undecodable model output) falls back to ASCII escapes."""
    try:
        return json.dumps(record, ensure_ascii=False).encode("utf-8") + b"\n"
    except UnicodeEncodeError:
        return json.dumps(record, ensure_ascii=True).encode("ascii") + b"\n"


def _line_error(path: Path, lineno: int, why: str) -> RunError:
    return RunError(
        f"{path} line {lineno}: {why}; the run is corrupt: restore the file from a backup or start a new run"
    )


def _parse_line(raw: bytes, path: Path, lineno: int) -> dict:
    try:
        record = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as err:  # ValueError: also over-long integers
        raise _line_error(path, lineno, f"not valid JSON ({' '.join(str(err).split())[:120]})") from None
    if not isinstance(record, dict) or not isinstance(record.get("key"), str):
        raise _line_error(path, lineno, 'not a JSON object with a string "key"')
    return record


class DerivedWriteError(RunError):
    """A derived file (verdicts, report, repair, timing) that could not be written (disk full, read-only)."""


def _sample_problem(record: dict, required: tuple[str, ...]) -> str | None:
    """What makes ``record`` unusable as a sampled call (its required fields and their types), or None."""
    missing = [f for f in required if f not in record]
    if missing:
        return f"lacks field(s) {', '.join(missing)}"
    if "text" in required and not isinstance(record["text"], str):
        return f"text is {type(record['text']).__name__}, not a string"
    if "scenario" in required and not isinstance(record["scenario"], str):
        return f"scenario is {type(record['scenario']).__name__}, not a string"
    if "text" in required and not isinstance(record.get("prefill", ""), str | None):
        return f"prefill is {type(record['prefill']).__name__}, not a string"
    if "arm" in required:
        arm = record["arm"]
        if not isinstance(arm, dict):
            return f"arm is {type(arm).__name__}, not an object"
        if not isinstance(arm.get("mode"), str):
            return "arm has no mode"
    return None


def _manifest_arms(manifest: dict) -> set[tuple[str, str]] | None:
    """(model, mode) of every arm the manifest's config lists; None when it lists none (a probe run)."""
    config = manifest.get("config") if isinstance(manifest, dict) else None
    arms = config.get("arms") if isinstance(config, dict) else None
    if not isinstance(arms, list) or not arms:
        return None
    if not all(isinstance(a, dict) and isinstance(a.get("mode"), str) for a in arms):
        return None  # arms of another shape: nothing to check a record against
    return {(str(a.get("model")), a["mode"]) for a in arms}


def _warn_skipped(path: Path, skipped: list[tuple[int, str]]) -> None:
    """One stderr line counting the records a reader skipped, naming the first few lines."""
    if not skipped:
        return
    shown = "; ".join(f"line {n}: {why}" for n, why in skipped[:3])
    more = f"; and {len(skipped) - 3} more" if len(skipped) > 3 else ""
    print(
        f"tooldecode: warning: {path}: skipped {len(skipped)} unreadable record(s) ({shown}{more}); "
        "the other records are used",
        file=sys.stderr,
    )


def is_store_file(name: str) -> bool:
    """Whether a file of this name in a run folder is one tooldecode writes (raw, derived or a temp file)."""
    return (
        name in _STORE_NAMES
        or any(p.fullmatch(name) for p in _STORE_PATTERNS)
        or (TMP_MARK in name and is_store_file(name.split(TMP_MARK, 1)[0]))
    )


class RunLock:
    """The exclusive write lock of a run folder: an ``flock`` on the directory itself.

    Parameters
    ----------
    path
        The run folder (it must exist).

    Raises
    ------
    RunError
        When another process holds the lock, or the folder cannot be opened.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY)
        except OSError as err:
            raise RunError(f"cannot open run folder {self.path} ({os_reason(err)}); check the path") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            os.close(fd)
            if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise RunError(
                    f"run {self.path} is being written by another process; wait for it or stop it first"
                ) from None
            raise RunError(f"cannot lock run folder {self.path} ({os_reason(err)})") from None
        self._fd: int | None = fd

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Release the lock (idempotent)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __del__(self) -> None:
        try:
            self.release()
        except Exception:
            pass


def clear_run(path: str | os.PathLike[str], lock: RunLock) -> list[str]:
    """``--fresh``: delete the files tooldecode wrote in run folder ``path``, holding its ``lock``.

    The folder itself stays (its lock lives on it). Returns the names of what was left: files and
    folders tooldecode did not write (a user's), sorted.

    Raises
    ------
    RunError
        When ``lock`` is not this folder's held lock, or a file cannot be deleted.
    """
    path = Path(path)
    if not lock.held or lock.path.resolve() != path.resolve():
        raise RunError(f"clear_run needs the held write lock of {path}; take RunLock({str(path)!r}) first")
    kept: list[str] = []
    # the manifest last: a run cleared halfway still reads as a run (and --fresh can finish it)
    names = sorted(os.listdir(path), key=lambda n: n == MANIFEST)
    for name in names:
        entry = path / name
        if not is_store_file(name) or (entry.is_dir() and not entry.is_symlink()):
            kept.append(name)
            continue
        try:
            entry.unlink(missing_ok=True)
        except OSError as err:
            raise RunError(f"--fresh cannot delete {entry} ({os_reason(err)}); fix that and rerun") from None
    fsync_dir(path)
    return sorted(kept)


# --- the run store ---------------------------------------------------------------------------------


class RunStore:
    """One run directory. Create with ``RunStore.create`` (new or resumed) or ``RunStore.open``."""

    path: Path
    manifest: dict

    def __init__(self, path: Path, manifest: dict) -> None:
        self.path = path
        self.manifest = manifest
        self._samples = path / SAMPLES
        self._keys: set[str] = set()
        self._scanned = 0  # byte offset up to which complete lines have been read into _keys
        self._scanned_lines = 0
        self._unterminated = False  # the last line scanned is a whole record without its newline
        self.skipped: list[tuple[int, str]] = []  # (line, why) of the records the last read skipped
        self._fd: int | None = None  # append descriptor
        self._lock: RunLock | None = None  # the folder's write lock, from lock() or the first append

    # -- construction --

    @classmethod
    def create(
        cls,
        path: str | os.PathLike[str],
        manifest: dict,
        *,
        resume: bool = True,
        lock: RunLock | bool = False,
        keep: Iterable[str] = (),
    ) -> RunStore:
        """Start a new run at ``path``, or resume the run there if its config equals ``manifest["config"]``.

        ``lock``: ``True`` takes the folder's write lock before anything is written (a second writer
        is refused at once); a held ``RunLock`` of ``path`` is adopted. The store releases it on ``close``.
        ``keep``: names of files a new run may find beside it (those ``clear_run`` left: a user's).
        """
        path = Path(path)
        if lock is True and not (path.exists() and not path.is_dir()):
            try:
                path.mkdir(parents=True, exist_ok=True)
            except OSError as err:
                raise RunError(f"cannot create run {path} ({os_reason(err)}); choose another --out") from None
            lock = RunLock(path)
        held = lock if isinstance(lock, RunLock) else None
        if held is not None and (not held.held or held.path.resolve() != path.resolve()):
            raise RunError(f"the lock passed for run {path} is not that folder's held lock")
        try:
            store = cls._create(path, manifest, resume, frozenset(keep))
        except BaseException:
            if held is not None:
                held.release()
            raise
        if held is not None:
            store.adopt_lock(held)
        return store

    @classmethod
    def _create(cls, path: Path, manifest: dict, resume: bool, keep: frozenset[str]) -> RunStore:
        if "config" not in manifest:
            raise ValueError('manifest has no "config"; build it with build_manifest(config, ...)')
        if (path / MANIFEST).exists():
            if not resume:
                raise RunError(
                    f"run {path} already exists; resume it, choose a new --out, or remove the directory"
                )
            store = cls.open(path)
            stored, incoming = store.manifest.get("config"), jsonable(manifest["config"])
            diff = first_difference(stored, incoming)
            if diff is not None and narrowed_config(stored or {}, incoming) is None:
                raise RunError(
                    f"run {path} was made with a different config (field {diff or '<root>'} differs); "
                    "use a new --out or pass --fresh"
                )
            store.note_resume(manifest, incoming.get("n_by_mode", {}), incoming.get("aligned"))
            return store
        if path.exists():
            if not path.is_dir():
                raise RunError(f"{path} exists and is not a directory; choose another --out")
            leftovers = [
                p.name
                for p in path.iterdir()
                if p.name not in keep and p.name != SAMPLES and TMP_MARK not in p.name
            ]
            samples = path / SAMPLES
            if leftovers or (samples.exists() and samples.stat().st_size > 0):
                raise RunError(
                    f"{path} is not empty and has no {MANIFEST}; it is not a run: choose another --out"
                )
        text = json.dumps(jsonable(manifest), indent=2, ensure_ascii=False) + "\n"
        try:
            path.mkdir(parents=True, exist_ok=True)
            for stale in path.glob(f"*{TMP_MARK}*"):
                stale.unlink(missing_ok=True)  # left by a creation that was killed
            # samples.jsonl first: a manifest always has its samples file beside it.
            fd = os.open(path / SAMPLES, os.O_WRONLY | os.O_CREAT, 0o644)
            os.fsync(fd)
            os.close(fd)
            atomic_write(path / MANIFEST, [text.encode("utf-8")])
        except OSError as err:
            raise RunError(f"cannot create run {path} ({os_reason(err)}); choose another --out") from None
        return cls(path, json.loads(text))

    def note_resume(self, manifest: dict, n_by_mode: dict | None = None, aligned: dict | None = None) -> None:
        """Add a resume from another commit, or one whose amended spec draws fewer of an arm (``n_by_mode``)
        or gives strict-aligned a smaller budget (``aligned``), to the manifest (``manifest.with_resume``)."""
        if (updated := with_resume(self.manifest, manifest, n_by_mode, aligned)) is not None:
            text = json.dumps(jsonable(updated), indent=2, ensure_ascii=False) + "\n"
            try:
                atomic_write(self.path / MANIFEST, [text.encode("utf-8")])
            except OSError as err:
                raise RunError(
                    f"cannot update {self.path / MANIFEST} ({os_reason(err)}); check the folder"
                ) from None
            self.manifest = updated

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> RunStore:
        """Open an existing run for reading (and appending)."""
        path = Path(path)
        if path.exists() and not path.is_dir():
            hint = (
                f"pass its folder {path.parent}"
                if path.name in RAW_FILES or path.name.startswith("verdicts-")
                else "pass a run folder (the one holding manifest.json)"
            )
            raise RunError(f"{path} is a file, not a run directory; {hint}")
        if not path.is_dir():
            raise RunError(f"run directory {path} does not exist; check the path (`tooldecode runs list`)")
        mpath = path / MANIFEST
        if not mpath.is_file():
            raise RunError(f"{path} is not a run directory (no {MANIFEST}); check the path")
        try:
            manifest = json.loads(mpath.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError) as err:  # ValueError: bad UTF-8, JSON, huge integers
            why = " ".join(str(err).split())[:160] or "nested too deeply"
            raise RunError(
                f"cannot read {mpath} ({why}); the run is corrupt: restore it or start a new run"
            ) from None
        if not isinstance(manifest, dict):
            raise RunError(f"{mpath} is not a JSON object; the run is corrupt: restore it or start a new run")
        if not (path / SAMPLES).is_file():
            raise RunError(f"{path} has no {SAMPLES}; the run is corrupt: restore it or start a new run")
        return cls(path, manifest)

    # -- reading --

    @property
    def name(self) -> str:
        return self.path.name

    def _scan(self) -> None:
        """Read complete lines past ``_scanned`` into the key set. A torn last line is left alone (the
        next append cuts it); a last line that is a whole record without its newline counts (the next
        append ends it first); a line in the middle that does not parse is skipped (its sample is
        redone on resume)."""
        with open(self._samples, "rb") as f:
            f.seek(self._scanned)
            for raw in f:
                complete = raw.endswith(b"\n")
                try:
                    record = _parse_line(raw, self._samples, self._scanned_lines + 1) if raw.strip() else None
                except RunError:
                    if not complete:
                        break  # torn tail of an interrupted append
                    record = None
                self._scanned_lines += 1
                if record is not None:
                    key = record["key"]
                    if key in self._keys:
                        raise _line_error(self._samples, self._scanned_lines, f"duplicate key {key!r}")
                    self._keys.add(key)
                self._scanned += len(raw)
                self._unterminated = not complete

    def completed_keys(self) -> set[str]:
        """Keys of all complete records in samples.jsonl (a torn last line does not count)."""
        self._scan()
        return set(self._keys)

    def __len__(self) -> int:
        self._scan()
        return len(self._keys)

    def iter_samples(self, *, require: Iterable[str] = ()) -> Iterator[dict]:
        """Yield the raw records in file order.

        Parameters
        ----------
        require
            Fields every record must carry (e.g. :data:`SAMPLE_FIELDS` for sampled calls); a record
            without one is corruption.

        Raises
        ------
        RunError
            On a duplicated key (naming the file and line). A line that does not parse, or a record
            lacking a required field (or with ``text``, ``scenario``, ``arm`` or ``arm.mode`` of the
            wrong type), is skipped and counted in ``skipped`` with one warning on stderr; a torn
            last line (interrupted append) is skipped silently, a whole last record without its
            newline is read.
        """
        required = tuple(require)
        arms = _manifest_arms(self.manifest)
        seen: set[str] = set()
        skipped: list[tuple[int, str]] = []
        self.skipped = skipped
        with open(self._samples, "rb") as f:
            for lineno, raw in enumerate(f, start=1):
                if not raw.strip():
                    continue
                try:
                    record = _parse_line(raw, self._samples, lineno)
                except RunError as err:
                    if raw.endswith(b"\n"):
                        skipped.append((lineno, str(err).split(": ", 1)[-1].split(";")[0]))
                    continue  # else the torn tail of an interrupted append
                key = record["key"]
                if key in seen:
                    raise _line_error(self._samples, lineno, f"duplicate key {key!r}")
                seen.add(key)
                problem = _sample_problem(record, required)
                if problem is None and arms is not None and "arm" in required:
                    model, mode = record["arm"].get("model"), str(record["arm"]["mode"])
                    modes = {m for _, m in arms}
                    known = modes if model is None or ("None", mode) in arms else arms
                    if (mode if known is modes else (str(model), mode)) not in known:
                        # not a row of this run's report: counted, not shown as one
                        problem = f"is of model {model!r}, mode {mode!r}: an arm the manifest does not list"
                if problem is not None:
                    skipped.append((lineno, f"record {key!r} {problem}"))
                    continue
                yield record
        _warn_skipped(self._samples, skipped)

    def sample_records(self) -> Iterator[dict]:
        """The run's sampled calls: :meth:`iter_samples` requiring :data:`SAMPLE_FIELDS`."""
        return self.iter_samples(require=SAMPLE_FIELDS)

    # -- writing --

    def _acquire(self) -> int:
        if self._fd is not None:
            return self._fd
        if self._lock is None or not self._lock.held:
            self._lock = RunLock(self.path)
        try:
            fd = os.open(self._samples, os.O_WRONLY | os.O_APPEND)
        except OSError as err:
            raise RunError(
                f"cannot open {self._samples} for writing ({os_reason(err)}); fix that and rerun"
            ) from None
        self._fd = fd
        return fd

    def lock(self) -> None:
        """Take the exclusive write lock now (``append`` takes it on first use otherwise).

        Raises
        ------
        RunError
            When another process is writing this run.
        """
        self._acquire()

    def adopt_lock(self, lock: RunLock) -> None:
        """Hold ``lock`` (this folder's, already taken) as this store's write lock; ``close`` releases it."""
        if not lock.held or lock.path.resolve() != self.path.resolve():
            raise RunError(f"the lock passed for run {self.path} is not that folder's held lock")
        if self._lock is not None and self._lock is not lock:
            self._lock.release()
        self._lock = lock

    def check_writable(self) -> None:
        """Check that files can be created in the run folder (derived files, e.g. ``timing.json``).

        Raises
        ------
        RunError
            When the folder is read-only, immutable or full: before any sample is drawn.
        """
        probe = self.path / f"timing.json{TMP_MARK}check-{os.getpid()}"
        try:
            fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            os.close(fd)
            probe.unlink()
        except OSError as err:
            raise RunError(
                f"cannot write files in run folder {self.path} ({os_reason(err)}); "
                "fix its permissions or choose another --out"
            ) from None

    def append(self, records: list[dict]) -> None:
        """Append a batch of records (one line each) and fsync once. Keys must be new and unique."""
        lines: list[bytes] = []
        batch: set[str] = set()
        for record in records:
            key = record.get("key") if isinstance(record, dict) else None
            if not isinstance(key, str) or not key:
                raise ValueError(f'every record needs a non-empty string "key"; got {key!r}')
            if key in batch:
                raise RunError(
                    f"duplicate key {key!r} within one batch for run {self.path}; keys must be unique"
                )
            batch.add(key)
            lines.append(_json_line(record))
        fd = self._acquire()
        self._scan()
        dup = batch & self._keys
        if dup:
            raise RunError(
                f"key {sorted(dup)[0]!r} is already in {self._samples} ({len(dup)} duplicate(s)); "
                "skip completed_keys() when resuming"
            )
        try:
            if os.fstat(fd).st_size > self._scanned:
                os.ftruncate(fd, self._scanned)  # cut the torn tail of an interrupted append
            if lines:
                write_all(fd, (b"\n" if self._unterminated else b"") + b"".join(lines))
                self._unterminated = False
            os.fsync(fd)
        except OSError as err:
            # a partial batch is a torn tail: never counted, cut off by the next append
            raise RunError(
                f"cannot write {self._samples} ({os_reason(err)}); the samples written before are kept: "
                "fix that and run the same command again to resume"
            ) from None
        self._keys |= batch
        self._scanned = os.fstat(fd).st_size
        self._scanned_lines += len(lines)

    def close(self) -> None:
        """Release the write lock (appending again re-acquires it)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    # -- derived files --

    def derived_path(self, name: str) -> Path:
        """Path of a derived file ``name`` inside the run directory (raw files and escapes refused)."""
        if not name or Path(name).is_absolute():
            raise RunError(f"derived file name {name!r} must be a relative path inside run {self.path}")
        root = self.path.resolve()
        target = (root / name).resolve()
        if target == root or root not in target.parents:
            raise RunError(f"derived file {name!r} would lie outside run {self.path}; use a plain file name")
        if target.parent == root and target.name in RAW_FILES:
            raise RunError(
                f"{name!r} is a raw file of run {self.path} and is never rewritten; pick another name"
            )
        if TMP_MARK in target.name:
            raise RunError(f"derived file name {name!r} must not contain {TMP_MARK!r}")
        return self.path / target.relative_to(root)

    def write_derived(self, name: str, records: Iterable[dict] | str) -> Path:
        """Write a derived file atomically: JSON lines for records, UTF-8 text for a string."""
        target = self.derived_path(name)
        if isinstance(records, str):
            chunks: Iterable[bytes] = [records.encode("utf-8")]
        else:
            chunks = (_json_line(r) for r in records)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(target, chunks)
        except OSError as err:
            raise DerivedWriteError(
                f"cannot write {target} ({os_reason(err)}); the run's raw files are untouched: "
                "free space or fix the folder's permissions and run the command again"
            ) from None
        return target


# --- rescoring -------------------------------------------------------------------------------------

_VERSION_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")


def rescore(
    run: RunStore, scorer: Callable[[dict, dict], dict], version: str, *, require: Iterable[str] = ()
) -> Path:
    """Score every raw sample again and write ``verdicts-<version>.jsonl``; raw files are only read.

    Each output record is ``{"key": <sample key>, **scorer(record, manifest)}``. Running it again
    rewrites the same derived file.
    """
    if not _VERSION_RE.fullmatch(version):
        raise ValueError(f"scorer version {version!r} must be a plain token like '3' or '2024.1'")

    def verdicts() -> Iterator[dict]:
        for record in run.iter_samples(require=require):
            out = scorer(record, run.manifest)
            if not isinstance(out, dict):
                raise TypeError(f"scorer returned {type(out).__name__} for {record['key']!r}, expected dict")
            if out.get("key", record["key"]) != record["key"]:
                raise ValueError(f"scorer changed the key of {record['key']!r} to {out['key']!r}")
            yield {"key": record["key"], **{k: v for k, v in out.items() if k != "key"}}

    return run.write_derived(f"verdicts-{version}.jsonl", verdicts())
