"""A run folder read back: its manifest, raw samples, verdicts (scored once) and probe rows (``load_run``).

Verdicts come from the current scorer: a run's ``verdicts-<SCORER_VERSION>.jsonl`` is used when it covers
exactly the run's samples; otherwise the run is scored again and that file is (re)written, as
``tooldecode rescore`` writes it (in memory only where the folder is read-only). A run without samples
(a probe-only run) has no verdicts and gets no verdict file.

Samples, verdicts and probe rows are handed on as the typed records of ``tooldecode.records``
(``SampleRecord``, ``VerdictRecord``, ``ProbeRow``); a sample of a run written before samples carried the
tools their prompt showed gets its arm's at load (the one fallback, ``tooldecode.scoring.shown_tools``).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tooldecode.errors import RunError
from tooldecode.records import (
    Condition,
    OfferedTool,
    ProbeRow,
    SampleRecord,
    VerdictRecord,
    samples_per_arm,
)
from tooldecode.records import label as arm_label
from tooldecode.runs.manifest import effective_config
from tooldecode.runs.store import MANIFEST, SAMPLE_FIELDS, DerivedWriteError, RunStore, rescore

__all__ = ["PROBE_FILE", "Run", "load_run", "load_runs", "sample_of", "score_stored"]

PROBE_FILE = "probe.jsonl"


_RETIRED_SUITE_SCRIPT = "python scripts/probe_suite.py"


@dataclass
class Run:
    """One run folder as the stages after it read it.

    ``samples``: the run's ``SampleRecord``s in file order (records lacking ``SAMPLE_FIELDS`` are
    skipped by the store), each with the tools its prompt showed (``tooldecode.scoring.shown_tools``
    for a run written before samples carried them); ``verdicts``: ``VerdictRecord``s by sample key;
    ``probe``: the ``ProbeRow``s of ``probe.jsonl``. ``verdict_file`` is None when nothing was read or
    written (no samples, or scored in memory); ``verdicts_written``: this load (re)wrote it.
    ``parts``: for runs of one spec made model by model and read as one (``tooldecode.runs.combine``),
    the runs it was made of; empty for a folder."""

    name: str
    path: Path
    manifest: dict[str, Any]
    samples: list[SampleRecord]
    verdicts: dict[str, VerdictRecord]
    probe: list[ProbeRow]
    verdict_file: Path | None = None
    verdicts_written: bool = False
    parts: tuple[Run, ...] = ()

    @property
    def shared_streams(self) -> bool:
        """Whether the run sampled at all and its manifest lacks per-scenario streams (``"streams":
        "scenario"`` in its config): every scenario then drew from the same random stream, so its
        scenarios are not independent clusters (its samples have no ``stream``)."""
        return bool(self.samples) and self.manifest.get("config", {}).get("streams") != "scenario"

    def verdict(self, sample: SampleRecord) -> VerdictRecord | None:
        """The verdict of one of the run's samples (None: not scored)."""
        return self.verdicts.get(sample.key)

    def command(self) -> str:
        """The command that makes the run today: its manifest's, else the spec's ``tooldecode run``.

        Probe suites made by the retired ``python scripts/probe_suite.py`` read as ``tooldecode
        probe-suite``, which takes the same arguments and resumes them."""
        spec = self.manifest.get("config", {}).get("spec", self.name)
        cmd = self.manifest.get("command") or f"tooldecode run experiments/{spec}.toml"
        return cmd.replace(_RETIRED_SUITE_SCRIPT, "tooldecode probe-suite", 1)

    @property
    def spec(self) -> str:
        """The name of the spec the run was made from (the folder's name without one)."""
        return str(self.manifest.get("config", {}).get("spec", self.name))

    @property
    def models(self) -> set[str]:
        """The models of the run's arms, from its manifest."""
        return {str(a["model"]) for a in self.manifest.get("config", {}).get("arms", []) if a.get("model")}

    @property
    def git_dirty(self) -> bool | None:
        """Whether the tree the run was made from had uncommitted changes (None: unknown)."""
        return self.manifest.get("tooldecode", {}).get("git_dirty")

    @property
    def git_sha(self) -> str:
        """The commit the run was made from (``"?"`` when unknown)."""
        return str(self.manifest.get("tooldecode", {}).get("git_sha") or "?")

    @property
    def expected_samples(self) -> int:
        """Samples the run's config asks for: each arm's ``n`` (or its mode's and level's ``n_by_mode``) × scenarios ×
        seeds (0 for a probe-only run), after any amendment that narrowed them
        (``runs.manifest.effective_config``)."""
        c = effective_config(self.manifest)
        per_mode = c.get("n_by_mode", {})
        per_scenario = sum(
            samples_per_arm(per_mode, int(c.get("n") or 0), a.get("mode"), a.get("level"))
            for a in c.get("arms", [])
        )
        return per_scenario * len(c.get("scenarios", [])) * len(c.get("seeds", [0]))

    @property
    def missing_samples(self) -> int:
        """Samples the run still has to draw: ``expected_samples`` less the stored ones, each (arm,
        scenario, seed) counted up to what its arm asks for now (an arm that an amendment narrowed keeps
        the draws it made before, and they do not stand in for another arm's)."""
        c = effective_config(self.manifest)
        per_mode, n = c.get("n_by_mode", {}), int(c.get("n") or 0)
        have, arms = self._draw_counts()
        want = {label: samples_per_arm(per_mode, n, a.mode, a.level) for label, a in arms.items()}
        counted = sum(min(k, want[label]) for (label, _, _), k in have.items())
        return max(0, self.expected_samples - counted)

    def _draw_counts(self) -> tuple[Counter[tuple[str, str, int]], dict[str, Condition]]:
        """The stored samples counted by (arm label, scenario, seed), and each label's arm."""
        have: Counter[tuple[str, str, int]] = Counter()
        arms: dict[str, Condition] = {}
        for s in self.samples:
            label = arm_label(s.arm)
            have[label, s.scenario, s.seed] += 1
            arms.setdefault(label, s.arm)
        return have, arms

    @property
    def planned_scenarios(self) -> list[str]:
        """The scenarios the run's config plans, after any amendment that narrowed them
        (``runs.manifest.effective_config``)."""
        return [str(sc) for sc in effective_config(self.manifest).get("scenarios", [])]

    def arm_progress(self, arm: Condition) -> tuple[int, int]:
        """How far one of the run's arms got: the planned scenarios whose stored draws for ``arm`` reach
        what the arm asks for (its ``n``, or its mode's and level's ``n_by_mode``) in every seed, and the
        planned scenarios (``runs.manifest.effective_config``). A run stopped mid-way (the queue's
        ``--until``) leaves an arm with fewer full scenarios than planned: its figures are interim."""
        c = effective_config(self.manifest)
        want = samples_per_arm(c.get("n_by_mode", {}), int(c.get("n") or 0), arm.mode, arm.level)
        label = arm_label(arm)
        have, _ = self._draw_counts()
        planned = self.planned_scenarios
        seeds = [int(x) for x in c.get("seeds", [0])]
        full = sum(all(have[label, sc, seed] >= want for seed in seeds) for sc in planned)
        return full, len(planned)

    def unfinished_arms(self, samples: Iterable[SampleRecord]) -> list[tuple[Condition, int, int]]:
        """The arms of ``samples`` that are not drawn in full over the run's planned scenarios, each with
        its full and planned scenario counts (``arm_progress``), in label order."""
        arms = {s.arm.label(): s.arm for s in samples}
        out = []
        for label in sorted(arms):
            full, planned = self.arm_progress(arms[label])
            if full < planned:
                out.append((arms[label], full, planned))
        return out

    def progress_note(self, samples: Iterable[SampleRecord]) -> str:
        """``unfinished_arms`` in words ("" when every arm of ``samples`` is drawn in full), e.g.
        ``"L1 loose of m: 20 of 36 scenarios drawn in full"``."""
        return "; ".join(
            f"{arm.level or 'L2'} {arm.mode}{f' ({arm.engine})' if arm.engine else ''} of {arm.model}: "
            f"{full} of {planned} scenarios drawn in full"
            for arm, full, planned in self.unfinished_arms(samples)
        )


def sample_of(
    stored: dict[str, Any], tools: dict[str, tuple[OfferedTool, ...]] | None = None
) -> SampleRecord:
    """The ``SampleRecord`` of a stored sample, with the tools its prompt showed: a sample written before
    records carried them gets its arm's (``tooldecode.scoring.shown_tools``; ``tools`` memoizes them by
    arm label across the samples of one run).

    Raises
    ------
    tooldecode.records.RecordError
        A stored object that is no sample tooldecode wrote.
    """
    if tools is None:
        tools = {}
    from tooldecode.scoring import shown_tools

    rec = SampleRecord.from_json(stored)
    if rec.tools is not None:
        return rec
    if rec.label not in tools:
        tools[rec.label] = shown_tools(rec.arm)
    return dataclasses.replace(rec, tools=tools[rec.label])


def score_stored(stored: dict[str, Any], manifest: dict[str, Any]) -> dict[str, Any]:
    """The verdict line of a stored sample of a run with ``manifest``: ``tooldecode.scoring.score_record``
    of its record (``sample_of``) and its scenario, as ``verdicts-<SCORER_VERSION>.jsonl`` stores it
    (what ``rescore`` writes)."""
    from tooldecode.scoring import record_scenario, score_record

    rec = sample_of(stored, {})
    scenario = record_scenario(rec.scenario, manifest) if rec.scenario else None
    return score_record(rec, scenario).to_json()


def _read_jsonl(path: Path) -> list[dict]:
    """The objects of a derived ``.jsonl`` file; a torn last line (an append cut short) is left out."""
    out: list[dict] = []
    with open(path, encoding="utf-8") as f:
        lines = f.readlines()
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except (ValueError, RecursionError) as err:  # ValueError: also an over-long integer
            if lineno == len(lines) and not line.endswith("\n"):
                break  # the torn tail of a file still being written
            msg = getattr(err, "msg", None) or " ".join(str(err).split())[:120]
            raise RunError(
                f"{path} line {lineno}: not valid JSON ({msg}); delete the file and load the run again"
            ) from None
        if not isinstance(rec, dict):
            raise RunError(f"{path} line {lineno}: not a JSON object; delete the file and load the run again")
        out.append(rec)
    return out


def _verdicts_of(
    store: RunStore, samples: list[SampleRecord], *, again: bool
) -> tuple[dict[str, VerdictRecord], Path | None, bool]:
    """Verdicts by key: from ``verdicts-<version>.jsonl`` if it covers exactly the samples' keys (and
    ``again`` is off), else scored now and written; in memory where the folder is read-only."""
    from tooldecode.scoring import SCORER_VERSION, record_scenario, score_record

    path = store.derived_path(f"verdicts-{SCORER_VERSION}.jsonl")
    keys = {s.key for s in samples}
    if not again and path.is_file():
        try:
            records = _read_jsonl(path)
        except (RunError, OSError, UnicodeDecodeError):
            records = []
        by_key = {str(r.get("key")): r for r in records}
        if len(by_key) == len(records) and set(by_key) == keys and all("key" in r for r in records):
            return {k: VerdictRecord.from_json(v) for k, v in by_key.items()}, path, False
    if not samples and not again:
        return {}, None, False
    try:
        written = rescore(store, score_stored, SCORER_VERSION, require=SAMPLE_FIELDS)
    except (OSError, DerivedWriteError):
        if again:
            raise
        scored = {
            s.key: score_record(s, record_scenario(s.scenario, store.manifest) if s.scenario else None)
            for s in samples
        }
        return scored, None, False
    return {r["key"]: VerdictRecord.from_json(r) for r in _read_jsonl(written)}, written, True


def load_run(path: str | os.PathLike[str], *, rescore: bool = False) -> Run:
    """The run at ``path``: manifest, samples, verdicts (scored once: see the module docstring) and
    probe rows.

    Parameters
    ----------
    path
        The run folder (it must hold ``manifest.json``).
    rescore
        Score every sample again and rewrite the verdict file even when it is current (what
        ``tooldecode rescore`` does); a read-only folder is then an error, not scored in memory.

    Raises
    ------
    RunError
        When the folder is not a run, or a derived file is damaged.
    """
    store = RunStore.open(path)
    tools: dict[str, tuple[OfferedTool, ...]] = {}
    try:
        samples = [sample_of(s, tools) for s in store.sample_records()]
        verdicts, vpath, written = _verdicts_of(store, samples, again=rescore)
        probe_path = store.derived_path(PROBE_FILE)
        probe = [ProbeRow.from_json(r) for r in _read_jsonl(probe_path)] if probe_path.is_file() else []
    finally:
        store.close()
    return Run(store.name, store.path, store.manifest, samples, verdicts, probe, vpath, written)


def load_runs(runs_dir: str | os.PathLike[str]) -> dict[str, Run]:
    """Every run directly under ``runs_dir`` (folders with a manifest) by folder name."""
    root = Path(runs_dir)
    if not root.is_dir():
        return {}
    return {p.name: load_run(p) for p in sorted(root.iterdir()) if (p / MANIFEST).is_file()}
