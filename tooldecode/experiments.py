"""Declarative experiments: a TOML spec → arms → runs on disk (resumable), and the probe suite.

A spec crosses models × transcript variant fields × modes (loose/strict) × temperatures; every arm
samples ``n`` calls per scenario per seed. Levels (see ``docs/experiments.md``):

- L0 free: ``conditioning = "free"`` — the model decides whether and how to call;
- L1 forced tool: ``conditioning = "forced-tool"`` — the call's opening is prefilled;
- L2 gold-conditioned: ``conditioning = "gold-prefix"`` — the gold call is forced through the end
  of ``newText``'s content and the model writes what follows;
- L3 exact probe: ``[probe]`` — P(close)/P(continue) at every decision point of the gold call.

Strict arms mask every token with the grammar of the offered tools in the prompt's wire format
(``tooldecode.grammar``, mode "strict": closed objects), advanced over the prefill.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tooldecode.errors import ToolDecodeError

# masked modes: "strict" (every object closed) and "strict-spec" (the schema as written)
STRICT_MODES = ("strict", "strict-spec")
LEVELS = {"free": "L0", "forced-tool": "L1", "gold-prefix": "L2"}
VARIANT_FIELDS = (
    "history",
    "thinking",
    "prior",
    "toolset",
    "schema_view",
    "call_format",
    "conditioning",
    "gold_cut",
    "call_style",
    "schema_extra",
)


class SpecError(ToolDecodeError):
    """An experiment spec that is malformed."""


@dataclass
class Spec:
    name: str
    description: str
    models: list[str]
    backend: str = "llamacpp"
    scenarios: list[str] | str = "all"
    tags: list[str] = field(default_factory=list)
    max_scenarios: int | None = None
    n: int = 8
    seeds: list[int] = field(default_factory=lambda: [0])
    temperatures: list[float] = field(default_factory=lambda: [1.0])
    top_p: float = 1.0
    max_new_tokens: int = 384
    modes: list[str] = field(default_factory=lambda: ["loose"])
    engine: str = "xgrammar"
    ws: str = "bounded"
    batch_size: int = 8
    variant: dict[str, list[Any]] = field(default_factory=dict)
    probe: dict[str, Any] = field(default_factory=dict)
    claim: str = ""
    path: Path | None = None
    quick: bool = False

    def arms(self) -> list[dict[str, Any]]:
        fields = [f for f in VARIANT_FIELDS if f in self.variant]
        values = [self.variant[f] for f in fields]
        out = []
        for model, combo, mode, temp in itertools.product(
            self.models, itertools.product(*values), self.modes, self.temperatures
        ):
            arm = {"model": model, "backend": self.backend, "mode": mode, "temperature": temp}
            arm.update(dict(zip(fields, combo, strict=True)))
            arm["level"] = LEVELS[arm.get("conditioning", "free")]
            if mode in STRICT_MODES:
                arm["engine"] = self.engine
            out.append(arm)
        return out


def _as_list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else [v]


def load_spec(path: str | os.PathLike[str], *, quick: bool = False) -> Spec:
    p = Path(path)
    try:
        raw = tomllib.loads(p.read_text())
    except FileNotFoundError:
        raise SpecError(f"experiment spec {p} not found; see experiments/ for examples") from None
    except tomllib.TOMLDecodeError as err:
        raise SpecError(f"{p}: invalid TOML ({err})") from None
    quick_over = raw.pop("quick", {})
    if quick:
        raw.update(quick_over)
    known = set(Spec.__dataclass_fields__) - {"path", "quick"}
    unknown = set(raw) - known
    if unknown:
        raise SpecError(
            f"{p}: unknown field(s) {', '.join(sorted(unknown))}; known: {', '.join(sorted(known))}"
        )
    for req in ("name", "models"):
        if req not in raw:
            raise SpecError(f"{p}: missing field '{req}'")
    raw.setdefault("description", "")
    variant = {k: _as_list(v) for k, v in raw.pop("variant", {}).items()}
    bad = set(variant) - set(VARIANT_FIELDS)
    if bad:
        raise SpecError(
            f"{p}: unknown variant field(s) {', '.join(sorted(bad))}; known: {', '.join(VARIANT_FIELDS)}"
        )
    for key in ("models", "seeds", "temperatures", "modes"):
        if key in raw:
            raw[key] = _as_list(raw[key])
    for mode in raw.get("modes", []):
        if mode not in ("loose", *STRICT_MODES):
            raise SpecError(f"{p}: modes must be 'loose', 'strict' or 'strict-spec', got {mode!r}")
    return Spec(**raw, variant=variant, path=p, quick=quick)


# ---------------------------------------------------------------------------------------------
# running


def arm_label(arm: dict[str, Any]) -> str:
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
    return ",".join(parts)


def _select_scenarios(spec: Spec) -> list[Any]:
    from tooldecode.scenarios import load_scenarios

    allsc = load_scenarios()
    if spec.scenarios != "all":
        ids = set(_as_list(spec.scenarios))
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


def _options(arm: dict[str, Any]):
    from tooldecode.prompts import TranscriptOptions

    kw = {k: arm[k] for k in VARIANT_FIELDS if k in arm}
    return TranscriptOptions(**kw)


class _Models:
    """Load each model once per run (per backend)."""

    def __init__(self, n_ctx: int, max_seqs: int) -> None:
        self.cache: dict[tuple[str, str], Any] = {}
        self.n_ctx, self.max_seqs = n_ctx, max_seqs

    def get(self, backend: str, model: str):
        from tooldecode.backends import load_backend
        from tooldecode.models import resolve

        key = (backend, model)
        if key not in self.cache:
            for other in list(self.cache):
                self.cache.pop(other).close()
            ref = resolve(model, fetch=True)
            kw = {"n_ctx": self.n_ctx, "max_seqs": self.max_seqs} if backend == "llamacpp" else {}
            self.cache[key] = load_backend(backend, ref, **kw)
        return self.cache[key]

    def close(self) -> None:
        for be in self.cache.values():
            be.close()
        self.cache.clear()


def _grammar_for(prompt: Any, ws: str, mode: str = "strict") -> str:
    """The mask grammar of an arm: ``strict`` closes every object; ``strict-spec`` follows the schema as
    written (``additionalProperties`` defaults to true, so unknown keys stay possible)."""
    from tooldecode.grammar import render_toolset

    grammar_mode = "spec" if mode == "strict-spec" else "strict"
    return render_toolset(list(prompt.tools), format="gbnf", wire=prompt.wire, mode=grammar_mode, ws=ws)


def run_spec(spec: Spec, out: Path, *, fresh: bool = False, progress: bool = True) -> Path:
    """Run every arm × scenario × seed of ``spec`` into ``out`` (resuming what is already there)."""
    import shutil

    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from tooldecode.masking import compile_mask
    from tooldecode.models import resolve
    from tooldecode.prompts import render_prompt
    from tooldecode.runstore import RunStore, build_manifest
    from tooldecode.sampling import SamplingParams, sample

    if fresh and out.exists():
        shutil.rmtree(out)
    scenarios = _select_scenarios(spec)
    arms = spec.arms()
    config = {
        "spec": spec.name,
        "arms": arms,
        "scenarios": [s.id for s in scenarios],
        "n": spec.n,
        "seeds": spec.seeds,
        "max_new_tokens": spec.max_new_tokens,
        "top_p": spec.top_p,
        "ws": spec.ws,
        "batch_size": spec.batch_size,
        "probe": spec.probe,
    }
    models_info = {}
    for m in spec.models:
        ref = resolve(m, fetch=True)
        models_info[m] = {"id": ref.id, "sha256": ref.digest(), "path": str(ref.path)}
    manifest = build_manifest(
        config,
        model=models_info if len(models_info) > 1 else next(iter(models_info.values())),
        seeds=spec.seeds,
        scenarios={s.id: s.sha256() for s in scenarios},
    )
    manifest["claim"] = spec.claim
    manifest["description"] = spec.description
    manifest["command"] = " ".join(
        ["tooldecode", "run", _rel(spec.path)] + (["--quick"] if spec.quick else []) + ["--out", _rel(out)]
    )
    store = RunStore.create(out, manifest)
    done = store.completed_keys()
    models = _Models(n_ctx=8192, max_seqs=max(spec.batch_size, 16) + 1)
    # model-major (one model loaded at a time), then scenario-major: arms of one scenario share the
    # prompt prefix, which stays in the KV cache
    jobs = [
        (arm, sc, seed)
        for model in spec.models
        for sc in scenarios
        for seed in spec.seeds
        for arm in arms
        if arm["model"] == model
    ]
    total = len(jobs) * spec.n if not spec.probe.get("only") else 0
    t_start = time.perf_counter()
    cols = [
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    ]
    try:
        with Progress(*cols, disable=not progress, transient=False) as bar:
            task = bar.add_task(spec.name, total=total)
            bar.advance(task, sum(1 for k in done if not k.startswith("probe/")))
            if not spec.probe.get("only"):
                for arm, sc, seed in jobs:
                    label = arm_label(arm)
                    keys = [f"{label}/{sc.id}/{seed}/{i}" for i in range(spec.n)]
                    todo = [i for i, k in enumerate(keys) if k not in done]
                    if not todo:
                        continue
                    be = models.get(arm["backend"], arm["model"])
                    prompt = render_prompt(sc, resolve(arm["model"]), _options(arm))
                    mask = None
                    if arm["mode"] in STRICT_MODES:
                        grammar = _grammar_for(prompt, spec.ws, arm["mode"])
                        mask = compile_mask(arm.get("engine", spec.engine), grammar, be)
                    params = SamplingParams(
                        temperature=arm["temperature"],
                        top_p=spec.top_p,
                        max_new_tokens=spec.max_new_tokens,
                        stop=tuple(prompt.stop),
                        seed=seed,
                        top_logprobs=20,
                        keep_top="all",
                    )
                    arm_rec = dict(arm, wire=prompt.wire, expected_tool=prompt.expected_tool)
                    import hashlib

                    psha = hashlib.sha256(prompt.text.encode()).hexdigest()

                    def write(
                        batch: list,
                        arm_rec: dict = arm_rec,
                        label: str = label,
                        sc: Any = sc,
                        seed: int = seed,
                        psha: str = psha,
                        be: Any = be,
                        prefill: str = prompt.prefill,
                    ) -> None:
                        recs = [_record(s, arm_rec, label, sc.id, seed, psha, prefill, be) for s in batch]
                        store.append(recs)
                        bar.advance(task, len(recs))

                    # contiguous runs of missing indices keep per-index seeds identical on resume
                    for start, count in _runs(todo):
                        sample(
                            be,
                            prompt.text,
                            count,
                            params,
                            mask=mask,
                            prefill=prompt.prefill,
                            batch_size=spec.batch_size,
                            start_index=start,
                            on_batch=write,
                        )
            if spec.probe:
                _run_probe(spec, store, scenarios, models, done, bar)
    finally:
        models.close()
        store.close()
    elapsed = time.perf_counter() - t_start
    timing = {"wall_s": round(elapsed, 1)}
    prev = store.derived_path("timing.json")
    if prev.exists():
        try:
            timing["previous_wall_s"] = json.loads(prev.read_text()).get("wall_s")
        except ValueError:
            pass
    store.write_derived("timing.json", json.dumps(timing) + "\n")
    return out


def _rel(path: Path | None) -> str:
    if path is None:
        return "?"
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _runs(indices: list[int]) -> Iterable[tuple[int, int]]:
    start = prev = None
    for i in indices:
        if start is None:
            start = prev = i
        elif i == prev + 1:
            prev = i
        else:
            yield start, prev - start + 1
            start = prev = i
    if start is not None:
        yield start, prev - start + 1


_STRUCT = set(',}]":')


def _record(
    s: Any, arm: dict, label: str, scenario: str, seed: int, psha: str, prefill: str, be: Any
) -> dict:
    rec = s.to_record()
    # keep top-k only at structural decision points (tokens carrying , } ] " :) to bound run size
    rec["top"] = [
        t if t is not None and _STRUCT & set(be.token_bytes(tok).decode("utf-8", "ignore")) else None
        for t, tok in zip(rec["top"], rec["token_ids"], strict=True)
    ]
    rec["logprobs"] = [round(x, 5) for x in rec["logprobs"]]
    rec["entropy"] = [round(x, 4) for x in rec["entropy"]]
    for k in ("entropy_masked", "mask_removed"):
        if rec[k] is not None:
            rec[k] = [round(x, 5) for x in rec[k]]
    return {
        "key": f"{label}/{scenario}/{seed}/{s.index}",
        "arm": arm,
        "scenario": scenario,
        "seed": seed,
        "index": s.index,
        "prompt_sha256": psha,
        "prefill": prefill,
        **{k: v for k, v in rec.items() if k not in ("index", "seed")},
    }


def _run_probe(spec: Spec, store: Any, scenarios: list, models: _Models, done: set[str], bar: Any) -> None:
    from tooldecode.models import resolve
    from tooldecode.probe import ProbeConfig, probe_call
    from tooldecode.prompts import TranscriptOptions, gold_call_text, render_prompt

    probe = spec.probe
    variants = [
        {k: v for k, v in zip(probe.get("fields", []), combo, strict=True)}
        for combo in itertools.product(*[_as_list(probe[f]) for f in probe.get("fields", [])])
    ] or [{}]
    rows = []
    existing = store.derived_path("probe.jsonl")
    if existing.exists():
        rows = [json.loads(line) for line in existing.read_text().splitlines() if line.strip()]
    have = {(r["model"], r["variant_label"], r["scenario"]) for r in rows}
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
                if (model, vlabel, sc.id) in have:
                    continue
                free = TranscriptOptions(**{**opts.__dict__, "conditioning": "free"})
                prompt = render_prompt(sc, ref, free)
                call = gold_call_text(sc, free, ref.family)
                pts = probe_call(
                    be,
                    prompt.text,
                    call,
                    select=probe.get("select"),
                    config=ProbeConfig(depth=int(probe.get("depth", 3))),
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
                        call_style=opts.call_style,
                        n_items=n_items,
                        item_index=_item_index(dp.path),
                        newtext_lines=dp.value_lines,
                        newtext_chars=dp.value_chars,
                        newtext_escapes=dp.value_escapes,
                    )
                    rows.append(row)
                store.write_derived("probe.jsonl", rows)


def _item_index(path: str) -> int | None:
    import re

    m = re.search(r"\[(\d+)\]$", path)
    return int(m.group(1)) if m else None


# ---------------------------------------------------------------------------------------------
# CLI


def _cmd_run(args: argparse.Namespace) -> int:
    spec = load_spec(args.spec, quick=args.quick)
    out = Path(args.out) if args.out else Path("runs") / (spec.name + ("-quick" if args.quick else ""))
    run_spec(spec, out, fresh=args.fresh, progress=not args.no_progress)
    print(f"run written: {out}")
    if args.report:
        from tooldecode.report import report

        paths = report([out], out)
        for p in paths.values() if isinstance(paths, dict) else paths:
            print(f"report: {p}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run an experiment spec (experiments/*.toml); resumable")
    p.add_argument("spec")
    p.add_argument("--out", help="run directory (default runs/<name>)")
    p.add_argument("--quick", action="store_true", help="use the spec's [quick] overrides (small N)")
    p.add_argument("--fresh", action="store_true", help="delete an existing run directory first")
    p.add_argument("--report", action="store_true", help="write summary.md and report.html when done")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=_cmd_run)


def run_demo(model: str) -> int:
    """``make demo``: E1 and E5 at small N on ``model``, then the table and the report path."""
    root = Path(__file__).resolve().parent.parent
    runs = []
    for name in ("e1_strict_vs_loose.toml", "e5_close_brace.toml"):
        spec = load_spec(root / "experiments" / name, quick=True)
        spec.models = [model]
        out = Path("out") / "demo" / spec.name
        print(f"\n== {spec.name} (quick): {spec.description}")
        run_spec(spec, out)
        runs.append(out)
    from tooldecode.report import report

    paths = report(runs, Path("out") / "demo" / "report")
    print(Path(paths["summary"]).read_text())
    print(f"report: {Path(paths['html']).resolve()}")
    sys.stdout.flush()
    return 0
