"""The ``[decision]`` table of a spec: the exact decision after the gold ``newText`` under each policy
(``tooldecode.distortion.decision``), one set of rows per model × scenario, written to the run's
``decision.jsonl`` (resumed: a (model, scenario) already there is not computed again)."""

from __future__ import annotations

import json
from typing import Any

from tooldecode.experiments.spec import Spec
from tooldecode.trial import ModelCache


def decision_config(decision: dict[str, Any]) -> Any:
    """The ``DecisionConfig`` of a ``[decision]`` table: its bounds where given, the defaults elsewhere."""
    from tooldecode.distortion.decision import DecisionConfig
    from tooldecode.experiments.spec import DECISION_BOUNDS

    default = DecisionConfig()
    return DecisionConfig(
        **{k: type(getattr(default, k))(decision[k]) for k in DECISION_BOUNDS if k in decision}
    )


def _digests(manifest: dict[str, Any]) -> dict[str, str]:
    """Model name (and id) → the sha256 the run's manifest records for it."""
    stored = manifest.get("model")
    if not isinstance(stored, dict):
        return {}
    by_name = {stored["id"]: stored} if "id" in stored else stored
    out = {}
    for name, info in by_name.items():
        if isinstance(info, dict):
            out[name] = str(info.get("sha256", ""))
            out[str(info.get("id", name))] = str(info.get("sha256", ""))
    return out


def run_decision(spec: Spec, store: Any, scenarios: list, models: ModelCache, bar: Any) -> None:
    """Rows of every model × scenario of ``spec`` not in ``decision.jsonl`` yet, written after each
    scenario (the file is rewritten whole, atomically)."""
    from tooldecode.distortion.decision import DECISION_FILE, decision_rows
    from tooldecode.models import resolve

    table = spec.decision
    cfg = decision_config(table)
    engines = list(table.get("engines", ["xgrammar"]))
    variant = dict(table.get("variant", {}))
    g = float(table.get("goes_on_valid", 1.0))
    path = store.derived_path(DECISION_FILE)
    rows = (
        [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    )
    have = {(r["model"], r["scenario"]) for r in rows}
    digests = _digests(store.manifest)
    task = bar.add_task("decision", total=len(spec.models) * len(scenarios))
    for model in spec.models:
        be = models.get(spec.backend, model)
        ref = resolve(model)
        for sc in scenarios:
            bar.advance(task)
            if (model, sc.id) in have:
                continue
            new = decision_rows(
                be,
                sc,
                model=model,
                ref=ref,
                variant=variant,
                engines=engines,
                config=cfg,
                goes_on_valid=g,
                model_sha256=digests.get(model) or digests.get(ref.id, ""),
            )
            rows += [r.to_json() for r in new]
            store.write_derived(DECISION_FILE, rows)
