"""From an arm to what it runs: its label, its transcript options, its grammar, the scenarios chosen, models loaded once."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tooldecode.experiments.spec import VARIANT_FIELDS, Spec, SpecError, as_list


def arm_label(arm: dict[str, Any]) -> str:
    """The arm's part of a sample key: model, level, mode and the variant fields it sets."""
    keys = [
        "model",
        "level",
        "mode",
        "history",
        "thinking",
        "prior",
        "toolset",
        "schema_view",
        "call_format",
        "temperature",
        "gold_cut",
        "call_style",
    ]
    parts = []
    for k in keys:
        if k in arm:
            v = arm[k]
            if k == "model":
                v = str(v).replace("qwen2.5-coder-", "qwen-").replace("-instruct", "")
            parts.append(f"{v}" if k in ("model", "level", "mode") else f"{k}={v}")
    if arm.get("schema_extra"):
        parts.append("extra=" + json.dumps(arm["schema_extra"], sort_keys=True, separators=(",", ":")))
    if arm.get("engine", "xgrammar") != "xgrammar":  # the default engine stays out of older runs' keys
        parts.append(f"engine={arm['engine']}")
    if arm.get("duplicates", "forbid") != "forbid":
        parts.append(f"duplicates={arm['duplicates']}")
    return ",".join(parts)


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


def transcript_options(arm: dict[str, Any]):
    """The ``TranscriptOptions`` an arm's variant fields set."""
    from tooldecode.prompts import TranscriptOptions

    kw = {k: arm[k] for k in VARIANT_FIELDS if k in arm}
    return TranscriptOptions(**kw)


class ModelCache:
    """Load each model once per run (per backend)."""

    def __init__(self, n_ctx: int, max_seqs: int, server: dict[str, Any] | None = None) -> None:
        self.cache: dict[tuple[str, str], Any] = {}
        self.n_ctx, self.max_seqs = n_ctx, max_seqs
        self.server = server or {}  # load_backend("openai", …) options: base_url, api_key_env, kind

    def get(self, backend: str, model: str):
        from tooldecode.backends import load_backend
        from tooldecode.models import resolve

        key = (backend, model)
        if key not in self.cache:
            for other in list(self.cache):
                self.cache.pop(other).close()
            ref = resolve(model, fetch=True)
            kw = {"n_ctx": self.n_ctx, "max_seqs": self.max_seqs} if backend == "llamacpp" else {}
            if backend == "openai":
                kw = dict(self.server)
            self.cache[key] = load_backend(backend, ref, **kw)
        return self.cache[key]

    def close(self) -> None:
        for be in self.cache.values():
            be.close()
        self.cache.clear()


def arm_grammar(
    prompt: Any, ws: str, mode: str = "strict", engine: str = "xgrammar", duplicates: str = "forbid"
) -> str:
    """The mask grammar of an arm, in the format ``engine`` reads: ``strict`` closes every object;
    ``strict-spec`` follows the schema as written (``additionalProperties`` defaults to true, so
    unknown keys stay possible; ``duplicates`` says whether a key the object already has may come again)."""
    from tooldecode.grammar import render_toolset
    from tooldecode.masking import engine_format

    grammar_mode = "spec" if mode == "strict-spec" else "strict"
    return render_toolset(
        list(prompt.tools),
        format=engine_format(engine),
        wire=prompt.wire,
        mode=grammar_mode,
        ws=ws,
        duplicates=duplicates,
    )
