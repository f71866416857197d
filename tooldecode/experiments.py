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
import functools
import itertools
import json
import os
import re
import sys
import time
import tomllib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tooldecode.errors import ToolDecodeError

# masked modes: "strict" (every object closed), "strict-spec" (the schema as written) and
# "strict-aligned" (strict, with masked particles resampled by importance weight: tooldecode.sampling)
STRICT_MODES = ("strict", "strict-spec", "strict-aligned")
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
    engine: str | list[str] = "xgrammar"  # an engine setting (tooldecode.engines.ENGINES) or a list of them
    ws: str = "bounded"
    batch_size: int = 8
    variant: dict[str, list[Any]] = field(default_factory=dict)
    probe: dict[str, Any] = field(default_factory=dict)
    # strict-aligned options: particles (masked draws per sample), method ('sir' or 'rejection') and
    # target ('complete' or 'prefix'; see tooldecode.sampling.sample_aligned)
    aligned: dict[str, Any] = field(default_factory=dict)
    claim: str = ""
    # the claim's effect and the findings rows built from this spec's runs (read by the findings
    # builder in experiments/findings.py; see docs/report.md)
    findings: dict[str, Any] = field(default_factory=dict)
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
                # one strict arm per engine setting
                for engine in _as_list(self.engine):
                    out.append(dict(arm, engine=engine))
                continue
            out.append(arm)
        return out


def _as_list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else [v]


def load_spec(path: str | os.PathLike[str], *, quick: bool = False) -> Spec:
    """Read and validate an experiment spec (every field checked before any model loads).

    Raises
    ------
    SpecError
        One line naming the file, the field and the allowed values.
    """
    p = Path(path)
    if p.is_dir():
        raise SpecError(f"{p} is a directory; pass a spec file such as experiments/e1_strict_vs_loose.toml")
    try:
        raw = tomllib.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SpecError(f"experiment spec {p} not found; see experiments/ for examples") from None
    except UnicodeDecodeError as err:
        raise SpecError(f"{p}: not UTF-8 text (byte {err.start}); save the spec as UTF-8") from None
    except OSError as err:
        raise SpecError(f"cannot read experiment spec {p}: {err.strerror or err}") from None
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
    _check_types(raw, p)
    try:
        spec = Spec(**raw, variant=variant, path=p, quick=quick)
    except TypeError as err:
        raise SpecError(f"{p}: {err}") from None
    validate_spec(spec)
    return spec


# field -> (accepted types, description) for the scalar and list fields of a spec
_FIELD_TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    "name": ((str,), "a plain name"),
    "description": ((str,), "text"),
    "claim": ((str,), "text"),
    "backend": ((str,), "a backend name"),
    "engine": ((str, list), "an engine setting or a list of them (see `tooldecode sample --help`)"),
    "ws": ((str,), "a whitespace mode"),
    "n": ((int,), "a whole number ≥ 1"),
    "max_new_tokens": ((int,), "a whole number ≥ 1"),
    "batch_size": ((int,), "a whole number ≥ 1"),
    "max_scenarios": ((int,), "a whole number ≥ 1"),
    "top_p": ((int, float), "a number in (0, 1]"),
}
_LIST_TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    "models": ((str,), "model ids or paths"),
    "seeds": ((int,), "whole numbers"),
    "temperatures": ((int, float), "numbers ≥ 0"),
    "modes": ((str,), "'loose', 'strict', 'strict-spec'"),
    "tags": ((str,), "scenario tags"),
}
# a run name becomes a folder under runs/: one plain path component
_PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def _check_types(raw: dict[str, Any], p: Path) -> None:
    def ok(v: Any, types: tuple[type, ...]) -> bool:
        return isinstance(v, types) and not (isinstance(v, bool) and bool not in types)

    for key, (types, what) in _FIELD_TYPES.items():
        if key in raw and not ok(raw[key], types):
            raise SpecError(f"{p}: field '{key}' must be {what}, got {raw[key]!r}")
    for key, (types, what) in _LIST_TYPES.items():
        if key in raw and not all(ok(v, types) for v in raw[key]):
            bad = next(v for v in raw[key] if not ok(v, types))
            raise SpecError(f"{p}: field '{key}' must list {what}, got {bad!r}")
    if "scenarios" in raw and not (
        raw["scenarios"] == "all"
        or isinstance(raw["scenarios"], list)
        and all(isinstance(x, str) for x in raw["scenarios"])
    ):
        raise SpecError(f"{p}: field 'scenarios' must be \"all\" or a list of scenario ids")
    for key in ("probe", "aligned"):
        if key in raw and not isinstance(raw[key], dict):
            raise SpecError(f"{p}: [{key}] must be a table")


def _check_aligned(aligned: dict[str, Any], fail: Callable[[str], None]) -> None:
    """The [aligned] table: particles ≥ 1, method 'sir'/'rejection', target of ALIGNED_TARGETS."""
    from tooldecode.sampling import ALIGNED_TARGETS

    unknown = sorted(set(aligned) - {"particles", "method", "target"})
    if unknown:
        fail(f"[aligned] has unknown keys {unknown}; use particles, method, target")
    k = aligned.get("particles", 1)
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        fail(f"[aligned] particles must be a whole number ≥ 1, got {k!r}")
    if aligned.get("method", "sir") not in ("sir", "rejection"):
        fail(f"[aligned] method must be 'sir' or 'rejection', got {aligned['method']!r}")
    if aligned.get("target", "complete") not in ALIGNED_TARGETS:
        fail(f"[aligned] target must be one of {', '.join(ALIGNED_TARGETS)}, got {aligned['target']!r}")


def validate_spec(spec: Spec) -> None:
    """Check a spec's values (ranges, duplicates, engines, backends, transcript words).

    Raises
    ------
    SpecError
        One line naming the spec file, the field and what is allowed.
    """
    from tooldecode.backends import BACKENDS
    from tooldecode.grammar import WS_POLICIES
    from tooldecode.prompts import PromptError, TranscriptOptions

    where = spec.path if spec.path is not None else spec.name

    def fail(msg: str) -> None:
        raise SpecError(f"{where}: {msg}")

    if not _PLAIN_NAME.fullmatch(spec.name) or spec.name.strip(".") == "":
        fail(f"name {spec.name!r} must be a plain name (letters, digits, '.', '_', '-'; no '/' or '..')")
    if not spec.models:
        fail("'models' is empty; name at least one model id or path (see `tooldecode models list`)")
    probe_only = bool(spec.probe.get("only"))
    _check_aligned(spec.aligned, fail)
    if spec.n < (0 if probe_only else 1):
        fail(f"'n' must be ≥ 1 (0 only with [probe] only = true), got {spec.n}")
    for key in ("max_new_tokens", "batch_size"):
        if getattr(spec, key) < 1:
            fail(f"'{key}' must be ≥ 1, got {getattr(spec, key)}")
    if spec.max_scenarios is not None and spec.max_scenarios < 1:
        fail(f"'max_scenarios' must be ≥ 1, got {spec.max_scenarios}")
    if not 0 < spec.top_p <= 1:
        fail(f"'top_p' must be in (0, 1], got {spec.top_p}")
    if not spec.temperatures:
        fail("'temperatures' is empty; give at least one (e.g. [1.0])")
    if not spec.seeds:
        fail("'seeds' is empty; give at least one (e.g. [0])")
    if not spec.modes:
        fail("'modes' is empty; use 'loose', 'strict' or 'strict-spec'")
    for t in spec.temperatures:
        if t < 0:
            fail(f"temperature {t} is negative; temperatures must be ≥ 0")
    for key in ("models", "seeds", "temperatures", "modes"):
        values = getattr(spec, key)
        dup = [v for i, v in enumerate(values) if v in values[:i]]
        if dup:
            fail(f"'{key}' lists {dup[0]!r} twice; each value once")
    if spec.backend not in BACKENDS:
        fail(f"unknown backend {spec.backend!r}; choose one of: {', '.join(BACKENDS)}")
    # on --backend openai the server's own strict field takes tooldecode's GBNF: no engine to check
    if any(m in STRICT_MODES for m in spec.modes) and spec.backend != "openai":
        from tooldecode.engines import EngineError, check_engine

        for engine in _as_list(spec.engine):
            try:
                check_engine(engine, backend=spec.backend, modes=[m for m in spec.modes if m != "loose"])
            except EngineError as err:
                fail(str(err))
    if spec.ws not in WS_POLICIES:
        fail(f"unknown ws {spec.ws!r}; choose one of: {', '.join(WS_POLICIES)}")
    for key, values in spec.variant.items():
        dup = [v for i, v in enumerate(values) if v in values[:i]]
        if dup:
            fail(f"variant '{key}' lists {dup[0]!r} twice; each value once")
    for key, values in spec.variant.items():
        for value in values:
            try:
                TranscriptOptions(**{key: value})
            except (PromptError, TypeError) as err:
                fail(f"variant '{key}' = {value!r}: {err}")
    if spec.probe:
        known = {"only", "fields", "variant", "select", "depth", "samples", *VARIANT_FIELDS}
        unknown = set(spec.probe) - known
        if unknown:
            fail(f"unknown [probe] field(s) {', '.join(sorted(unknown))}; known: {', '.join(sorted(known))}")
        for f in spec.probe.get("fields", []):
            if f not in VARIANT_FIELDS:
                fail(f"[probe] fields: {f!r} is not a variant field ({', '.join(VARIANT_FIELDS)})")
            if f not in spec.probe:
                fail(f"[probe] fields names {f!r} but gives no values for it")


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
    if arm.get("engine", "xgrammar") != "xgrammar":  # the default engine stays out of older runs' keys
        parts.append(f"engine={arm['engine']}")
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


def _grammar_for(prompt: Any, ws: str, mode: str = "strict", engine: str = "xgrammar") -> str:
    """The mask grammar of an arm, in the format ``engine`` reads: ``strict`` closes every object;
    ``strict-spec`` follows the schema as written (``additionalProperties`` defaults to true, so
    unknown keys stay possible)."""
    from tooldecode.grammar import render_toolset
    from tooldecode.masking import engine_format

    grammar_mode = "spec" if mode == "strict-spec" else "strict"
    return render_toolset(
        list(prompt.tools), format=engine_format(engine), wire=prompt.wire, mode=grammar_mode, ws=ws
    )


def _is_run_dir(path: Path) -> bool:
    """A directory holding a manifest written by tooldecode (the only kind ``--fresh`` may delete)."""
    from tooldecode.runstore import MANIFEST, SAMPLES

    mpath = path / MANIFEST
    if not (path.is_dir() and mpath.is_file() and (path / SAMPLES).is_file()):
        return False
    try:
        manifest = json.loads(mpath.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(manifest, dict) and {"format", "config", "tooldecode"} <= set(manifest)


def _remove_run(out: Path) -> None:
    """``--fresh``: delete the run at ``out``, refusing anything that is not a tooldecode run."""
    import shutil

    if not out.exists():
        return
    if not _is_run_dir(out):
        raise RunStoreRefusal(
            f"--fresh refuses to delete {out}: it is not a tooldecode run directory (no manifest written by "
            "tooldecode); choose another --out or remove it yourself"
        )
    shutil.rmtree(out)


class RunStoreRefusal(SpecError):
    """An output folder that tooldecode will not touch."""


def _check_models_match(out: Path, models_info: dict[str, dict]) -> None:
    """Refuse to resume a run whose stored weights hash differs from the weights loaded now."""
    from tooldecode.runstore import MANIFEST

    mpath = out / MANIFEST
    if not mpath.is_file():
        return
    try:
        stored = json.loads(mpath.read_text(encoding="utf-8")).get("model")
    except (OSError, ValueError, AttributeError):
        return  # RunStore.create reports the corrupt manifest
    if not isinstance(stored, dict):
        return
    by_id = {stored["id"]: stored} if "id" in stored else stored
    for name, now in models_info.items():
        before = by_id.get(now["id"]) or by_id.get(name)
        if isinstance(before, dict) and before.get("sha256") and before["sha256"] != now["sha256"]:
            raise RunStoreRefusal(
                f"run {out} was sampled from '{name}' with sha256 {str(before['sha256'])[:12]}…, but the weights "
                f"at {now['path']} hash to {now['sha256'][:12]}…; resuming would mix two models' samples: "
                "restore those weights or use a new --out"
            )


def run_spec(
    spec: Spec, out: Path, *, fresh: bool = False, progress: bool = True, server: dict[str, Any] | None = None
) -> Path:
    """Run every arm × scenario × seed of ``spec`` into ``out`` (resuming what is already there).

    ``server``: options of the ``openai`` backend (``base_url``, ``api_key_env``, ``kind``); where the
    server is is not part of the run's config, so a run resumes against a restarted server."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from tooldecode.engines import OutlinesSampler, build_strict
    from tooldecode.engines import draw as engine_draw
    from tooldecode.masking import ENGINE_FORMATS, compile_mask
    from tooldecode.models import resolve
    from tooldecode.prompts import render_prompt
    from tooldecode.runstore import MANIFEST, RunStore, build_manifest
    from tooldecode.sampling import SamplingParams, sample, sample_aligned

    validate_spec(spec)
    if fresh:
        _remove_run(out)
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
    if spec.aligned:
        config["aligned"] = spec.aligned
    models_info = {}
    for m in spec.models:
        ref = resolve(m, fetch=True)
        models_info[m] = {"id": ref.id, "sha256": ref.digest(), "path": str(ref.path)}
    _check_models_match(out, models_info)
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
    new_run = not (out / MANIFEST).exists()
    new_dir = not out.exists()
    store = RunStore.create(out, manifest)
    try:
        # the write lock before any model loads: a second writer learns of it at once
        store.lock()
    except BaseException:
        store.close()
        raise
    done = store.completed_keys()
    models = _Models(n_ctx=8192, max_seqs=max(spec.batch_size, 16) + 1, server=server)
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
                    if arm["mode"] in STRICT_MODES and arm["backend"] == "openai":
                        if arm["mode"] == "strict-aligned":
                            raise SpecError(
                                f"{spec.path}: mode 'strict-aligned' needs the full logits; "
                                "--backend openai runs 'loose', 'strict' and 'strict-spec'"
                            )
                        mask = _grammar_for(prompt, spec.ws, arm["mode"], "xgrammar")  # GBNF for the server
                    elif arm["mode"] in STRICT_MODES:
                        engine = arm.get("engine", spec.engine)
                        if engine in ENGINE_FORMATS:
                            grammar = _grammar_for(prompt, spec.ws, arm["mode"], engine)
                            mask = compile_mask(engine, grammar, be)
                        else:  # an engine setting: its own grammar of the schema, or its own sampler
                            mask = build_strict(
                                engine, prompt.tools, prompt.wire, be, mode=arm["mode"], ws=spec.ws
                            )
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
                    # strict-aligned: masked particles resampled by their importance weights
                    draw: Any = sample
                    if arm["mode"] == "strict-aligned":
                        draw = functools.partial(sample_aligned, **spec.aligned)
                    if isinstance(mask, OutlinesSampler):
                        draw = engine_draw
                    if arm["backend"] == "openai":  # the server draws; its own strict mode takes the GBNF
                        from tooldecode.backends.openai import draw
                    for start, count in _runs(todo):
                        draw(
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
    except BaseException:
        models.close()
        store.close()
        if new_run and len(store) == 0 and not store.derived_path("probe.jsonl").exists():
            _discard_empty_run(out, remove_dir=new_dir)
        raise
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


def _discard_empty_run(out: Path, *, remove_dir: bool) -> None:
    """Remove the manifest and empty samples file of a run that failed before its first sample."""
    from tooldecode.runstore import MANIFEST, SAMPLES

    for name in (MANIFEST, SAMPLES):
        (out / name).unlink(missing_ok=True)
    if remove_dir:
        try:
            out.rmdir()  # only if nothing else is in it
        except OSError:
            pass


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
    # keep top-k only at structural decision points (tokens carrying , } ] " :) to bound run size;
    # a server's sample may lack token ids, top-k, log-probabilities or entropies (None: absent)
    if rec["top"] is not None and rec["token_ids"] is not None:
        rec["top"] = [
            t if t is not None and _STRUCT & set(be.token_bytes(tok).decode("utf-8", "ignore")) else None
            for t, tok in zip(rec["top"], rec["token_ids"], strict=True)
        ]
    if rec["logprobs"] is not None:
        rec["logprobs"] = [round(x, 5) for x in rec["logprobs"]]
    if rec["entropy"] is not None:
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
                    config=ProbeConfig(
                        depth=int(probe.get("depth", 3)), key_depth=int(probe.get("key_depth", 6))
                    ),
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


def _item_index(path: str) -> int | None:
    import re

    m = re.search(r"\[(\d+)\]$", path)
    return int(m.group(1)) if m else None


# ---------------------------------------------------------------------------------------------
# CLI


def _cmd_run(args: argparse.Namespace) -> int:
    spec = load_spec(args.spec, quick=args.quick)
    if args.model:
        spec.models = list(args.model)
        validate_spec(spec)
    server = None
    if args.backend:
        spec.backend = args.backend
        validate_spec(spec)
    if spec.backend == "openai":
        from tooldecode.backends.openai import server_kwargs

        server = server_kwargs(args)
    out = Path(args.out) if args.out else Path("runs") / (spec.name + ("-quick" if args.quick else ""))
    run_spec(spec, out, fresh=args.fresh, progress=not args.no_progress, server=server)
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
    p.add_argument(
        "--model",
        action="append",
        metavar="ID_OR_PATH",
        help="run on this model instead of the spec's (id, .gguf file or model folder; repeatable)",
    )
    p.add_argument(
        "--fresh",
        action="store_true",
        help="delete an existing run directory (and only a run directory) first",
    )
    p.add_argument("--report", action="store_true", help="write summary.md and report.html when done")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--backend", help="run on this backend instead of the spec's (llamacpp, hf, openai)")
    from tooldecode.backends.openai import add_server_arguments

    add_server_arguments(p)
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
