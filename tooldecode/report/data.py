"""Loading a run for a report: samples, verdicts (scored once, then read back), probe rows, rescue accounting."""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tooldecode.errors import ToolDecodeError
from tooldecode.runs import SAMPLE_FIELDS, DerivedWriteError, RunStore, rescore

# Fields of a record's arm dict that do not define the arm (they vary within it).
NOT_ARM_FIELDS = ("seed", "index")
# Arm fields that follow from others (conditioning <-> level, engine <- mode, wire <- call format and model,
# expected_tool <- toolset): they do not count as a second difference between two arms, and they are left
# out of labels where the other varying fields determine them.
DERIVED_FIELDS = ("conditioning", "engine", "wire", "expected_tool")
# Headline metrics: (name, column title). Verdict classes come from tooldecode.scoring.
HEADLINE = (
    ("invented_key", "invented key"),
    ("valid", "valid"),
    ("payload_correct", "payload correct"),
    ("payload_correct_schema_invalid", "payload correct, schema-invalid"),
)
# Metrics compared between arms that differ in one field, and plotted with their intervals.
COMPARED = ("invented_key", "valid", "payload_correct")
PROBE_FILE = "probe.jsonl"
NEW_TEXT_KEYS = ("newText", "new_string", "new_str", "newString")


class ReportError(ToolDecodeError):
    """Runs that cannot be reported (none given, unreadable verdict or probe files)."""


# --- loading ---------------------------------------------------------------------------------------


@dataclass
class Sample:
    """What the report keeps of one raw sample (token-level arrays are dropped) and its verdict."""

    run: str
    key: str
    arm: dict
    scenario: str
    seed: Any
    index: Any
    prefill: str
    text: str
    finish_reason: str | None
    error: str | None
    verdict: dict

    @property
    def scored(self) -> bool:
        return self.verdict.get("verdict") is not None


@dataclass
class RunData:
    """One run as the report sees it."""

    path: Path
    name: str
    manifest: dict
    samples: list[Sample]
    verdict_file: Path | None  # None: scored in memory (the run directory was not writable)
    verdicts_written: bool  # the report (re)wrote verdict_file
    probe: list[dict] = field(default_factory=list)
    # tooldecode.repair's rescue accounting as Markdown, when the run has loose samples
    rescue: str | None = None

    @property
    def command(self) -> str | None:
        cmd = self.manifest.get("command")
        if isinstance(cmd, list):
            return shlex.join(str(c) for c in cmd)
        return str(cmd) if cmd else None


def current_scorer() -> tuple[str, Callable[[dict, dict], dict], tuple[str, ...]]:
    """(version, ``score_record``, verdict precedence) of the scorer, looked up when called."""
    from tooldecode import scoring

    return scoring.SCORER_VERSION, scoring.score_record, tuple(scoring.PRECEDENCE)


def _read_jsonl(path: Path) -> list[dict]:
    out: list[dict] = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except (ValueError, RecursionError) as err:  # ValueError: also an over-long integer
                msg = getattr(err, "msg", None) or " ".join(str(err).split())[:120]
                raise ReportError(
                    f"{path} line {lineno}: not valid JSON ({msg}); delete the file and run the report again"
                ) from None
            if not isinstance(rec, dict):
                raise ReportError(f"{path} line {lineno}: not a JSON object; delete the file and run again")
            out.append(rec)
    return out


def _verdicts_of(store: RunStore, keys: set[str]) -> tuple[dict[str, dict], Path | None, bool]:
    """Verdicts by key: from ``verdicts-<version>.jsonl`` if it covers exactly ``keys``, else scored now."""
    version, score_record, _ = current_scorer()
    path = store.derived_path(f"verdicts-{version}.jsonl")
    if path.is_file():
        try:
            records = _read_jsonl(path)
        except (ReportError, OSError, UnicodeDecodeError):
            records = []
        by_key = {str(r.get("key")): r for r in records}
        if len(by_key) == len(records) and set(by_key) == keys and all("key" in r for r in records):
            return by_key, path, False
    try:
        written = rescore(store, score_record, version, require=SAMPLE_FIELDS)
    except (OSError, DerivedWriteError):  # read-only run directory: score in memory only
        scored = {
            r["key"]: {"key": r["key"], **score_record(r, store.manifest)} for r in store.sample_records()
        }
        return scored, None, False
    return {r["key"]: r for r in _read_jsonl(written)}, written, True


def load_run(path: str | os.PathLike[str]) -> RunData:
    """Read a run's manifest, samples, verdicts (scoring and writing them if needed) and probe rows."""
    store = RunStore.open(path)
    samples: list[Sample] = []
    for r in store.sample_records():  # keep what the report shows, not the token-level arrays
        raw_arm = r.get("arm")
        arm: dict[str, Any] = raw_arm if isinstance(raw_arm, dict) else {}
        samples.append(
            Sample(
                run=store.name,
                key=r["key"],
                arm={k: v for k, v in arm.items() if k not in NOT_ARM_FIELDS},
                scenario=str(r.get("scenario") or "-"),
                seed=r.get("seed", arm.get("seed")),
                index=r.get("index", arm.get("index")),
                prefill=r.get("prefill") or "",
                text=r.get("text") or "",
                finish_reason=r.get("finish_reason"),
                error=r.get("error"),
                verdict={},
            )
        )
    verdicts, vpath, written = _verdicts_of(store, {s.key for s in samples})
    for s in samples:
        s.verdict = verdicts[s.key]
    probe_path = store.derived_path(PROBE_FILE)
    probe = _read_jsonl(probe_path) if probe_path.is_file() else []
    return RunData(
        store.path, store.name, store.manifest, samples, vpath, written, probe, _rescue(store, verdicts)
    )


def _rescue(store: RunStore, verdicts: dict[str, dict]) -> str | None:
    """The lenient-harness rescue accounting of a run (Markdown), or None without loose samples."""
    from tooldecode.repair import format_rescue, rescue_accounting

    summary = rescue_accounting(store.sample_records(), store.manifest, verdicts=verdicts)
    return format_rescue(summary) if summary.get("n_loose") else None


# --- outcomes --------------------------------------------------------------------------------------


def payload_correct(v: dict) -> bool:
    """Whether a verdict's payload check found the edited file byte-correct."""
    payload = v.get("payload")
    return isinstance(payload, dict) and bool(payload.get("file_correct"))


def outcome(metric: str, verdict: dict) -> bool:
    """Whether a (scored) sample's verdict counts for ``metric``: a verdict class or a headline metric."""
    if metric == "payload_correct":
        return payload_correct(verdict)
    if metric == "payload_correct_schema_invalid":
        return payload_correct(verdict) and verdict.get("verdict") != "valid"
    return verdict.get("verdict") == metric


def metric_title(metric: str) -> str:
    """The column title of a metric."""
    return dict(HEADLINE).get(metric, metric.replace("_", " "))
