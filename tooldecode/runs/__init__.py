"""Run directories: the store that writes them and the one loader that reads them back.

Modules, in the order data flows: ``files`` (atomic writes, fsync, one-line OS reasons) and
``manifest`` (a run's config plus provenance) → ``store`` (``RunStore``: the manifest written once,
append-only samples, derived files beside them) → ``load`` (``load_run``: a run directory as typed
records, verdicts scored once) → ``combine`` (runs of one spec made model by model, read as one).
docs/runs.md describes the folder.
"""

from __future__ import annotations

from tooldecode.runs.combine import model_split_runs
from tooldecode.runs.load import PROBE_FILE, Run, load_run, load_runs, sample_of, score_stored
from tooldecode.runs.manifest import FORMAT_VERSION, build_manifest
from tooldecode.runs.store import (
    MANIFEST,
    SAMPLE_FIELDS,
    SAMPLES,
    DerivedWriteError,
    RunLock,
    RunStore,
    clear_run,
    is_store_file,
    rescore,
)

__all__ = [
    "FORMAT_VERSION",
    "MANIFEST",
    "PROBE_FILE",
    "SAMPLES",
    "SAMPLE_FIELDS",
    "DerivedWriteError",
    "RunLock",
    "Run",
    "RunStore",
    "build_manifest",
    "clear_run",
    "is_store_file",
    "load_run",
    "load_runs",
    "model_split_runs",
    "rescore",
    "sample_of",
    "score_stored",
]
