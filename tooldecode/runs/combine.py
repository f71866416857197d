"""Runs of one spec made model by model, read as one run (``model_split_runs``).

A spec with many models (the organisms' seven) is often run one model at a time: ``tooldecode run SPEC
--model M --out runs/<spec>-<m>`` for each, as each model becomes available, or each on its own machine.
Those folders differ only in their models: the same scenarios (with the same file hashes), the same
draws per arm, seeds, caps and per-scenario streams. A draw's random stream is keyed by its seed, its
scenario's stream word and its index, never by the model, so the split runs hold exactly the draws one
run over all the models would hold, and arms of different models share their random numbers either way.
``model_split_runs`` returns one combined ``Run`` per such group, for the stages that pair arms of two
models within one run (a claimed effect between two models).

Runs are combined only when each has per-scenario streams (or draws nothing: a probe-only run's exact
rows), each was made from the spec (its config names
it), their configs agree in every field but the arms' models, and their model sets are disjoint (a model
run twice is two measurements, not one: those runs are left apart).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tooldecode.records import VerdictRecord
from tooldecode.runs.load import Run

__all__ = ["model_split_runs", "split_key"]


def _arm_without_model(arm: dict[str, Any]) -> str:
    return json.dumps({k: v for k, v in arm.items() if k != "model"}, sort_keys=True)


def split_key(run: Run) -> str | None:
    """What a run shares with the other model-by-model runs of its spec (None: not combinable).

    The key is the run's config with each arm's model taken out (the model-free arms as a set) plus the
    scenarios' file hashes; two runs with one key differ only in their models."""
    config = run.manifest.get("config", {})
    if not (run.samples or run.probe) or run.shared_streams or "spec" not in config:
        return None  # a probe-only run draws nothing: its exact rows need no stream to be combined
    arms = config.get("arms", [])
    if not arms or any("model" not in a for a in arms):
        return None
    rest = {k: v for k, v in config.items() if k != "arms"}
    shape = {
        "config": rest,
        "arms": sorted({_arm_without_model(a) for a in arms}),
        "scenario_sha256": run.manifest.get("scenarios", {}),
    }
    return json.dumps(shape, sort_keys=True, default=str)


def _model_info(run: Run) -> dict[str, Any]:
    """The manifest's ``model`` block by model id (a one-model run stores the block itself)."""
    info = run.manifest.get("model", {})
    models = sorted(run.models)
    if len(models) == 1 and isinstance(info, dict) and "sha256" in info:
        return {models[0]: info}
    return dict(info) if isinstance(info, dict) else {}


def _combine(parts: list[Run]) -> Run:
    parts = sorted(parts, key=lambda r: r.name)
    manifest = copy.deepcopy(parts[0].manifest)
    manifest["config"]["arms"] = [a for r in parts for a in r.manifest["config"]["arms"]]
    manifest["model"] = {m: i for r in parts for m, i in _model_info(r).items()}
    shas = sorted({r.git_sha for r in parts})
    dirty = [r.git_dirty for r in parts]
    manifest["tooldecode"] = dict(
        manifest.get("tooldecode", {}),
        git_sha=shas[0] if len(shas) == 1 else "+".join(shas),
        git_dirty=True
        if any(d is True for d in dirty)
        else (False if all(d is False for d in dirty) else None),
    )
    manifest["created"] = max(str(r.manifest.get("created", "")) for r in parts)
    manifest["command"] = "; ".join(r.command() for r in parts)
    manifest["parts"] = [r.name for r in parts]
    verdicts: dict[str, VerdictRecord] = {}
    for r in parts:
        verdicts.update(r.verdicts)
    return Run(
        name=" + ".join(r.name for r in parts),
        path=Path(parts[0].path).parent,
        manifest=manifest,
        samples=[s for r in parts for s in r.samples],
        verdicts=verdicts,
        probe=[row for r in parts for row in r.probe],
        parts=tuple(parts),
    )


def model_split_runs(runs: Iterable[Run]) -> list[Run]:
    """One combined ``Run`` for each group of two or more runs of one spec made model by model.

    Parameters
    ----------
    runs
        Loaded runs (``load_run``) with samples or probe rows; runs that cannot be combined are skipped.

    Returns
    -------
    list of Run
        Each combined run's ``name`` joins its parts' names with ``" + "``, its ``parts`` are the runs it
        was made of, its samples and verdicts are theirs, and its manifest's ``git_sha`` is their commit
        (their commits joined with ``+`` when they differ; ``git_dirty`` is true when any part's is).
        A group in which one model appears in two runs is not combined.
    """
    groups: dict[str, list[Run]] = {}
    for run in runs:
        if run.parts:
            continue
        key = split_key(run)
        if key is not None:
            groups.setdefault(key, []).append(run)
    out = []
    for parts in groups.values():
        if len(parts) < 2:
            continue
        seen: set[str] = set()
        disjoint = True
        for r in parts:
            models = r.models
            if models & seen:
                disjoint = False
                break
            seen |= models
        if disjoint:
            out.append(_combine(parts))
    return sorted(out, key=lambda r: r.name)
