"""The close-brace probe rows of a spec's ``[probe]`` table, and exact-probe suites (``experiments/p*.toml``),
written to a run's ``probe.jsonl``; each probe is a ``tooldecode.trial.Trial``'s."""

from __future__ import annotations

import hashlib
import itertools
import json
import random
import re
import time
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tooldecode.experiments.spec import PROBE_BOUNDS, VARIANT_FIELDS, Spec, SpecError, as_list
from tooldecode.trial import VIEWS, ModelCache, Trial


def _free_trial(model: str, backend: str, variant: dict[str, Any], sc: Any, ref: Any, **kw: Any) -> Trial:
    """The trial the probe runs: ``variant``'s transcript fields, nothing forced (conditioning ``free``)."""
    fields = {k: v for k, v in variant.items() if k in VARIANT_FIELDS}
    arm = {"model": model, "backend": backend, "mode": "loose", "temperature": 1.0, **fields}
    return Trial({**arm, "conditioning": "free"}, sc, ref=ref, **kw)


def run_probe(spec: Spec, store: Any, scenarios: list, models: ModelCache, done: set[str], bar: Any) -> None:
    """The ``[probe]`` table of ``spec``: probe rows per model × variant × scenario not in ``probe.jsonl`` yet.

    A variant whose prompt, gold call and tools render byte-identically to an earlier variant's in a
    scenario is not probed again: its rows are copies marked ``same_prompt_as`` (the first variant's
    label), so each comparison reads them and the findings count them once."""
    from tooldecode.models import resolve

    probe = spec.probe
    variants = [
        {k: v for k, v in zip(probe.get("fields", []), combo, strict=True)}
        for combo in itertools.product(*[as_list(probe[f]) for f in probe.get("fields", [])])
    ] or [{}]
    rows = []
    existing = store.derived_path("probe.jsonl")
    if existing.exists():
        rows = [json.loads(line) for line in existing.read_text().splitlines() if line.strip()]
    have = {(r["model"], r["variant_label"], r["scenario"]) for r in rows}
    # variants whose prompt, gold call and tools are byte-identical in a scenario are probed once
    seen: dict[tuple[str, str, str], str] = {}
    t = bar.add_task("probe", total=len(spec.models) * len(variants) * len(scenarios))
    for model in spec.models:
        be = models.get(spec.backend, model)
        ref = resolve(model)
        for var in variants:
            base = dict(probe.get("variant", {}), **var)
            vlabel = ",".join(f"{k}={v}" for k, v in sorted(base.items())) or "default"
            for sc in scenarios:
                bar.advance(t)
                trial = _free_trial(model, spec.backend, base, sc, ref)
                prompt, call = trial.prompt, trial.call
                first = seen.setdefault((model, sc.id, _identity(prompt, call)), vlabel)
                if (model, vlabel, sc.id) in have:
                    continue
                if first != vlabel:
                    # the same bytes as a variant already probed: its rows, once, marked as a copy
                    rows += [
                        dict(r, variant=base, variant_label=vlabel, same_prompt_as=first)
                        for r in rows
                        if (r["model"], r["variant_label"], r["scenario"]) == (model, first, sc.id)
                    ]
                    store.write_derived("probe.jsonl", rows)
                    continue
                pts = trial.probe(
                    be,
                    select=probe.get("select"),
                    config=probe_config(probe),
                    samples=int(probe.get("samples", 0)),
                    seed=0,
                )
                n_items = len(sc.edits)
                for dp in pts:
                    row = dp.to_dict()
                    row.update(
                        model=model,
                        variant=base,
                        variant_label=vlabel,
                        scenario=sc.id,
                        wire=prompt.wire,
                        call_style=trial.options.call_style,
                        n_items=n_items,
                        item_index=_item_index(dp.path),
                        newtext_lines=dp.value_lines,
                        newtext_chars=dp.value_chars,
                        newtext_escapes=dp.value_escapes,
                    )
                    rows.append(row)
                store.write_derived("probe.jsonl", rows)


def probe_config(probe: dict[str, Any]) -> Any:
    """The ``ProbeConfig`` of a ``[probe]`` table: its bounds where given, the library's defaults elsewhere."""
    from tooldecode.probe import ProbeConfig

    default = ProbeConfig()
    return ProbeConfig(**{k: type(getattr(default, k))(probe[k]) for k in PROBE_BOUNDS if k in probe})


def _identity(prompt: Any, call: str) -> str:
    """What a probe row depends on besides the model: prompt bytes, gold call, tools shown, expected tool."""
    tools = json.dumps([(tl.name, tl.parameters) for tl in prompt.tools], sort_keys=True, default=str)
    blob = "\0".join((prompt.text, call, tools, str(prompt.expected_tool), str(prompt.wire)))
    return hashlib.sha256(blob.encode()).hexdigest()


def _item_index(path: str) -> int | None:
    m = re.search(r"\[(\d+)\]$", path)
    return int(m.group(1)) if m else None


# ---------------------------------------------------------------------------------------------
# exact-probe suites: variants (transcript options and a tool view) over the corpus in a shuffled order

# the suites' probe bounds where a spec's [probe] table gives none
SUITE_BOUNDS = {"depth": 3, "key_depth": 4, "min_mass": 1e-3, "max_branches": 16, "tail": 1e-4}
ITEMS = ("all", "first-last", "last")


def load_suite(path: Path) -> dict[str, Any]:
    """Read an exact-probe suite spec (``experiments/p*.toml``): ``name``, ``[[variants]]`` (each a
    ``name``, transcript fields and an optional ``tool_view``), ``[probe]`` bounds, ``select``, ``items``,
    ``order_seed``.

    Raises
    ------
    SpecError
        One line naming the file and the field.
    """
    try:
        spec = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SpecError(f"probe-suite spec {path} not found") from None
    except tomllib.TOMLDecodeError as err:
        raise SpecError(f"{path}: invalid TOML ({err})") from None
    for key in ("name", "variants"):
        if key not in spec:
            raise SpecError(f"{path}: missing field {key!r}")
    for v in spec["variants"]:
        if "name" not in v:
            raise SpecError(f"{path}: every [[variants]] entry needs a name")
        unknown = sorted(set(v) - {"name", "tool_view", *VARIANT_FIELDS})
        if unknown:
            raise SpecError(
                f"{path}: variant {v['name']}: unknown field(s) {', '.join(unknown)}; known: name, tool_view, "
                + ", ".join(VARIANT_FIELDS)
            )
        if v.get("tool_view", "as-written") not in VIEWS:
            raise SpecError(f"{path}: variant {v['name']}: tool_view must be one of {', '.join(VIEWS)}")
    if spec.get("items", "all") not in ITEMS:
        raise SpecError(f"{path}: items must be one of {', '.join(ITEMS)}")
    return spec


def _suite_item(items: str, k: int, n_items: int) -> int:
    if items == "last":
        return n_items - 1
    if items == "first-last":
        return k if k == 0 or n_items <= 2 else n_items - 1
    return k


def _suite_points(call: str, select: str, items: str) -> list[Any]:
    """The value ends of ``call`` the suite probes: after ``select``, all, the first and last, or the last."""
    from tooldecode.probe import find_value_ends

    ends = [v for v in find_value_ends(call) if v.key == select]
    if items == "first-last" and len(ends) > 2:
        return [ends[0], ends[-1]]
    return ends[-1:] if items == "last" else ends


def _suite_manifest(
    spec: dict[str, Any], path: Path, out: Path, model: str, ref: Any, scenarios: list, cfg: Any
) -> dict:
    from tooldecode.runs import build_manifest

    config = {
        "spec": spec["name"],
        "suite": "probe",
        "model": model,
        "variants": spec["variants"],
        "scenarios": [s.id for s in scenarios],
        "order_seed": int(spec.get("order_seed", 0)),
        "probe": {**spec.get("probe", {}), **cfg.__dict__},
        "select": spec.get("select", "newText"),
    }
    manifest = build_manifest(
        config,
        model={"id": ref.id, "sha256": ref.digest(), "path": str(ref.path)},
        scenarios={s.id: s.sha256() for s in scenarios},
    )
    manifest["claim"] = spec.get("claim", "")
    manifest["description"] = spec.get("description", "")
    manifest["command"] = f"tooldecode probe-suite {path} --out {out} --model {model}"
    return manifest


def _suite_done(probe_path: Path) -> set[tuple[str, str]]:
    """(variant, scenario) pairs ``probe.jsonl`` holds (a torn last line is redone)."""
    have: set[tuple[str, str]] = set()
    if probe_path.exists():
        for line in probe_path.read_text().splitlines():
            if line.strip():
                try:
                    r = json.loads(line)
                except json.JSONDecodeError:
                    continue
                have.add((r["variant_label"], r["scenario"]))
    return have


def run_probe_suite(
    path: Path,
    out: Path,
    model: str,
    *,
    max_scenarios: int | None = None,
    hours: float | None = None,
    say: Callable[[str], None] = print,
) -> bool:
    """Run an exact-probe suite into ``out`` (resuming what ``probe.jsonl`` holds); True when complete.

    Scenarios run in a fixed shuffled order (``order_seed``), every variant of a scenario before the
    next, so a run stopped early (``hours`` spent) holds paired data over a random subset of the corpus.
    Variants whose prompts and gold calls render byte-identically for a scenario are probed once; the
    copy's rows record ``same_prompt_as``. Rows are appended to ``probe.jsonl``, never rewritten.
    """
    from tooldecode.models import resolve, verified
    from tooldecode.probe import ProbeConfig
    from tooldecode.runs import RunStore
    from tooldecode.scenarios import load_scenarios

    spec = load_suite(path)
    scenarios = sorted(load_scenarios(), key=lambda s: s.id)
    random.Random(int(spec.get("order_seed", 0))).shuffle(scenarios)
    if max_scenarios:
        scenarios = scenarios[:max_scenarios]
    bounds = {**SUITE_BOUNDS, **spec.get("probe", {})}
    cfg = ProbeConfig(**{k: type(SUITE_BOUNDS[k])(bounds[k]) for k in SUITE_BOUNDS})
    select, items = spec.get("select", "newText"), spec.get("items", "all")
    ref = verified(resolve(model, fetch=True))  # the manifest records the hash of the bytes loaded
    store = RunStore.create(out, _suite_manifest(spec, path, out, model, ref, scenarios, cfg))
    probe_path = out / "probe.jsonl"
    have = _suite_done(probe_path)
    store.close()
    t0 = time.time()
    with ModelCache(branches=cfg.max_branches) as models:
        be = models.get("llamacpp", model)
        for sc in scenarios:
            done_prompts: dict[str, tuple[str, list[dict]]] = {}
            for var in spec["variants"]:
                if hours and time.time() - t0 > hours * 3600:
                    say("time budget spent; rerun the same command to resume")
                    return False
                label = var["name"]
                view = var.get("tool_view", "as-written")
                trial = _free_trial(model, "llamacpp", var, sc, ref, tool_view=view)
                psha = hashlib.sha256((trial.text + "\x00" + trial.call).encode()).hexdigest()
                if (label, sc.id) in have:
                    continue
                t1 = time.time()
                same_as = None
                if psha in done_prompts:
                    same_as, rows_src = done_prompts[psha]
                    pts_rows = [dict(r) for r in rows_src]
                else:
                    points = _suite_points(trial.call, select, items)
                    pts_rows = [p.to_dict() for p in trial.probe(be, points=points, config=cfg)]
                    done_prompts[psha] = (label, pts_rows)
                n_items = len(sc.edits)
                with probe_path.open("a") as f:
                    for k, row in enumerate(pts_rows):
                        row = dict(row)
                        row.update(
                            model=model,
                            variant={kk: vv for kk, vv in var.items() if kk != "name"},
                            variant_label=label,
                            scenario=sc.id,
                            wire=trial.prompt.wire,
                            n_items=n_items,
                            item_index=_suite_item(items, k, n_items),
                            prompt_sha256=psha,
                            same_prompt_as=same_as,
                            seconds=round(time.time() - t1, 2),
                        )
                        f.write(json.dumps(row, ensure_ascii=False) + "\n")
                say(f"{sc.id} {label}: {len(pts_rows)} points in {time.time() - t1:.0f}s")
    say("suite complete")
    return True
