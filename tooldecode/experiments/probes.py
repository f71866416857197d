"""The close-brace probe rows of a spec's ``[probe]`` table, written to the run's ``probe.jsonl``."""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from typing import Any

from tooldecode.experiments.arms import ModelCache
from tooldecode.experiments.spec import PROBE_BOUNDS, VARIANT_FIELDS, Spec, as_list


def run_probe(spec: Spec, store: Any, scenarios: list, models: ModelCache, done: set[str], bar: Any) -> None:
    """The ``[probe]`` table of ``spec``: probe rows per model × variant × scenario not in ``probe.jsonl`` yet.

    A variant whose prompt, gold call and tools render byte-identically to an earlier variant's in a
    scenario is not probed again: its rows are copies marked ``same_prompt_as`` (the first variant's
    label), so each comparison reads them and the findings count them once."""
    from tooldecode.models import resolve
    from tooldecode.probe import probe_call
    from tooldecode.prompts import TranscriptOptions, gold_call_text, render_prompt

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
            opts = TranscriptOptions(**{k: v for k, v in base.items() if k in VARIANT_FIELDS})
            vlabel = ",".join(f"{k}={v}" for k, v in sorted(base.items())) or "default"
            for sc in scenarios:
                bar.advance(t)
                free = TranscriptOptions(**{**opts.__dict__, "conditioning": "free"})
                prompt = render_prompt(sc, ref, free)
                call = gold_call_text(sc, free, ref.family)
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
                pts = probe_call(
                    be,
                    prompt.text,
                    call,
                    select=probe.get("select"),
                    config=probe_config(probe),
                    samples=int(probe.get("samples", 0)),
                    seed=0,
                    tools=prompt.tools,
                    expected_tool=prompt.expected_tool,
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
                        call_style=opts.call_style,
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
