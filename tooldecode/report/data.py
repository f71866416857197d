"""A run as the report sees it (``run_data``): the loaded run (``tooldecode.runs.load_run``, verdicts
scored once) with its samples kept without token-level arrays, and the rescue accounting."""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tooldecode.errors import ToolDecodeError
from tooldecode.records import SampleRecord, VerdictRecord
from tooldecode.runs import Run, load_run

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
NEW_TEXT_KEYS = ("newText", "new_string", "new_str", "newString")


class ReportError(ToolDecodeError):
    """Runs that cannot be reported (none given, an output folder that is a file)."""


# --- the report's view of a run --------------------------------------------------------------------


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
    """One run as the report sees it; ``run`` is the loaded run it was made from."""

    path: Path
    name: str
    manifest: dict
    samples: list[Sample]
    verdict_file: Path | None  # None: scored in memory (the run directory was not writable), or no samples
    verdicts_written: bool  # loading the run (re)wrote verdict_file
    probe: list[dict] = field(default_factory=list)  # the run's ProbeRows in their stored form (to_json)
    # tooldecode.repair's rescue accounting as Markdown, when the run has loose samples
    rescue: str | None = None
    run: Run | None = None

    @property
    def command(self) -> str | None:
        cmd = self.manifest.get("command")
        if isinstance(cmd, list):
            return shlex.join(str(c) for c in cmd)
        return str(cmd) if cmd else None


def verdict_order() -> tuple[str, ...]:
    """The scorer's verdict classes in precedence order, looked up when called."""
    from tooldecode import scoring

    return tuple(scoring.PRECEDENCE)


def _sample(run: str, r: SampleRecord, verdict: VerdictRecord | None) -> Sample:
    arm = r.arm.to_json()
    kept = {f: getattr(r, f) for f in ("key", "seed", "index", "prefill", "text", "finish_reason", "error")}
    return Sample(
        run=run,
        arm={k: v for k, v in arm.items() if k not in NOT_ARM_FIELDS},
        scenario=r.scenario or "-",
        verdict=verdict.to_json() if verdict is not None else {},
        **kept,
    )


def run_data(run: Run | str | os.PathLike[str]) -> RunData:
    """The report's view of ``run`` (a loaded run, or a run folder to load with ``tooldecode.runs.load_run``)."""
    if not isinstance(run, Run):
        run = load_run(run)
    samples = [_sample(run.name, r, run.verdict(r)) for r in run.samples]
    return RunData(
        run.path,
        run.name,
        run.manifest,
        samples,
        run.verdict_file,
        run.verdicts_written,
        [r.to_json() for r in run.probe],
        _rescue(run),
        run,
    )


def _rescue(run: Run) -> str | None:
    """The lenient-harness rescue accounting of a run (Markdown), or None without loose samples."""
    from tooldecode.repair import format_rescue, rescue_accounting

    summary = rescue_accounting(run.samples, run.manifest, verdicts=run.verdicts)
    return format_rescue(summary) if summary.get("n_loose") else None


# --- outcomes --------------------------------------------------------------------------------------


def payload_correct(v: dict) -> bool:
    """Whether a verdict's payload check found the edited file byte-correct."""
    payload = v.get("payload")
    return isinstance(payload, dict) and bool(payload.get("file_correct"))


def shows_metric(metric: str, verdict: dict) -> bool:
    """Whether a (scored) sample's verdict counts for ``metric``: a verdict class or a headline metric."""
    if metric == "payload_correct":
        return payload_correct(verdict)
    if metric == "payload_correct_schema_invalid":
        return payload_correct(verdict) and verdict.get("verdict") != "valid"
    return verdict.get("verdict") == metric


def metric_title(metric: str) -> str:
    """The column title of a metric."""
    return dict(HEADLINE).get(metric, metric.replace("_", " "))
