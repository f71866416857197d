"""From a spec to what it runs: an arm's label and the scenarios chosen (``tooldecode.trial`` draws each arm)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tooldecode.experiments.spec import Spec, SpecError, as_list
from tooldecode.records import label


def arm_label(arm: dict[str, Any]) -> str:
    """The arm's part of a sample key: model, level, mode and the variant fields it sets
    (``tooldecode.records.label``, the one definition)."""
    return label(arm)


def select_scenarios(spec: Spec) -> list[Any]:
    """The scenarios a spec runs: its ids (or all), filtered by tags, spread down to ``max_scenarios``."""
    from tooldecode.scenarios import load_scenarios

    dirs = [Path(d) for d in spec.scenario_dirs]
    missing = [str(d) for d in dirs if not d.is_dir()]
    if missing:
        raise SpecError(
            f"{spec.path}: scenario_dirs names {missing[0]}, which is not a folder (paths are relative to "
            "where the run starts); give a folder of scenario files"
        )
    allsc = load_scenarios(dirs or None)
    if spec.scenarios != "all":
        ids = set(as_list(spec.scenarios))
        chosen = [s for s in allsc if s.id in ids]
        missing = ids - {s.id for s in chosen}
        if missing:
            raise SpecError(f"{spec.path}: unknown scenario id(s) {', '.join(sorted(missing))}")
    else:
        chosen = allsc
    if spec.tags:
        chosen = [s for s in chosen if set(spec.tags) & set(s.tags)]
    if spec.max_scenarios:
        # spread the pick over the corpus (sorted by id) rather than taking the first few
        step = max(1, len(chosen) // spec.max_scenarios)
        chosen = chosen[::step][: spec.max_scenarios]
    return chosen
