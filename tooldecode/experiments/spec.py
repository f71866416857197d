"""Experiment specs (``experiments/*.toml``): the ``Spec`` record, ``load_spec`` and ``validate_spec``."""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tooldecode.errors import ToolDecodeError
from tooldecode.records import CONDITIONINGS, MODES, STRICT_MODES, TOOL_MODES, VARIANT_FIELDS, samples_per_arm
from tooldecode.validate import (  # noqa: F401 -- OPTION_RULES, SEED_MAX re-exported: their old home
    OPTION_RULES,
    SEED_MAX,
    _is_num,
    option_problem,
)
from tooldecode.validate import check_options as _check_options

# the modes, conditionings and variant fields of an arm have one home: tooldecode.records
ARM_MODES = MODES
LEVELS = CONDITIONINGS  # conditioning -> level
# bounds of the exact probe a [probe] table may set (tooldecode.probe.ProbeConfig's fields)
PROBE_BOUNDS = ("depth", "key_depth", "min_mass", "max_branches", "tail")
# the rule of OPTION_RULES each bound follows (the same for `tooldecode probe`'s flags)
PROBE_RULES = {
    "depth": "count0",
    "key_depth": "count0",
    "min_mass": "mass",
    "max_branches": "count",
    "tail": "mass",
}


class SpecError(ToolDecodeError):
    """An experiment spec that is malformed."""


# --- one validator for every numeric option, shared by spec fields, recipes, manifests and flags ------
# (tooldecode.validate: the rules live there; the names stay importable from here)


def check_options(values: dict[str, tuple[Any, str]], where: str = "") -> None:
    """Check command-line values: ``{"--flag": (value, rule)}`` (a ``None`` value is an unset option).

    Raises
    ------
    SpecError
        One line naming the first flag whose value breaks its rule, and what it must be.
    """
    _check_options(values, where, SpecError)


@dataclass
class Spec:
    """An experiment spec (``experiments/*.toml``): models, scenarios, arms, sizes, claim."""

    name: str
    description: str
    models: list[str]
    backend: str = "llamacpp"
    scenarios: list[str] | str = "all"
    tags: list[str] = field(default_factory=list)
    # folders of the user's own scenario files (``tooldecode scenarios import`` writes them), relative to
    # the directory the run is started from; empty: the built-in corpus
    scenario_dirs: list[str] = field(default_factory=list)
    max_scenarios: int | None = None
    n: int = 8
    # samples per (arm, scenario, seed) for particular modes, e.g. {"loose": 32}: loose samples are the
    # rejection reference of the strict arms (about 1/P(valid) of them per exact draw of P_L); a key
    # "MODE@LEVEL" (e.g. "loose@L2") sets it for that mode's arms at one level only, before "MODE" and n
    n_by_mode: dict[str, int] = field(default_factory=dict)
    # random streams: "scenario" (each scenario its own, derived from its id: rates pooled over scenarios
    # are sums of independent parts, as cluster intervals assume) or "shared" (sample i of every
    # scenario uses the same random numbers: the runs made before this option)
    streams: str = "scenario"
    seeds: list[int] = field(default_factory=lambda: [0])
    temperatures: list[float] = field(default_factory=lambda: [1.0])
    top_p: float = 1.0
    max_new_tokens: int = 384
    modes: list[str] = field(default_factory=lambda: ["loose"])
    engine: str | list[str] = "xgrammar"  # an engine setting (tooldecode.engines.ENGINES) or a list of them
    # strict-spec arms: what the open grammar does with a key its object already has ("forbid": each
    # declared key once; "admit": again, as JSON allows), one arm per value of a list
    duplicates: str | list[str] = "forbid"
    ws: str = "bounded"
    batch_size: int = 8
    # draw every job of a model from one queue (tooldecode.sampling.sample_queue): a slot whose draw ends
    # is refilled at once from any scenario and arm, not only its own job's (llama.cpp; other backends
    # draw job by job). batch_size is then the number of slots.
    fill_slots: bool = False
    variant: dict[str, list[Any]] = field(default_factory=dict)
    probe: dict[str, Any] = field(default_factory=dict)
    # the exact decision after the gold newText under each policy (tooldecode.distortion.decision):
    # engines, bounds, variant, goes_on_valid; ``only = true`` samples nothing
    decision: dict[str, Any] = field(default_factory=dict)
    # strict-aligned options: particles (masked draws per sample), method ('sir' or 'rejection') and
    # target ('complete' or 'prefix'; see tooldecode.sampling.sample_aligned)
    aligned: dict[str, Any] = field(default_factory=dict)
    claim: str = ""
    # the claim's effect and the findings rows built from this spec's runs (read by the findings
    # builder in experiments/findings.py; see docs/report.md)
    findings: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None
    quick: bool = False

    @property
    def samples_nothing(self) -> bool:
        """The spec only computes exactly (``[probe]`` or ``[decision]`` with ``only = true``)."""
        return bool(self.probe.get("only")) or bool(self.decision.get("only"))

    def n_for(self, mode: str, level: str | None = None) -> int:
        """Samples per (arm, scenario, seed) for an arm of ``mode`` at ``level``: ``n_by_mode``'s
        ``"MODE@LEVEL"``, else its ``"MODE"``, else ``n``."""
        return samples_per_arm(self.n_by_mode, self.n, mode, level)

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
                for engine in as_list(self.engine):
                    if mode != "strict-spec":
                        out.append(dict(arm, engine=engine))
                        continue
                    for dup in as_list(self.duplicates):
                        # "forbid" stays out of the arm: runs made before the option keep their keys
                        out.append(
                            dict(arm, engine=engine, **({} if dup == "forbid" else {"duplicates": dup}))
                        )
                continue
            out.append(arm)
        return out


def as_list(v: Any) -> list[Any]:
    """``v`` if it is a list, else ``[v]``."""
    return v if isinstance(v, list) else [v]


def load_spec(path: str | os.PathLike[str], *, quick: bool = False) -> Spec:
    """Read and validate an experiment spec (every field checked before any model loads).

    Raises
    ------
    SpecError
        One line naming the file, the field and the allowed values.
    """
    p = Path(path)
    raw = _read_toml(p)
    quick_over = raw.pop("quick", {})
    for key, table in (("quick", quick_over), ("variant", raw.get("variant", {}))):
        if not isinstance(table, dict):
            raise SpecError(f"{p}: [{key}] must be a table, got {table!r}; see experiments/ for examples")
    if quick:
        raw.update(quick_over)
    known = set(Spec.__dataclass_fields__) - {"path", "quick"}
    unknown = set(raw) - known
    if unknown:
        raise SpecError(
            f"{p}: unknown field(s) {', '.join(sorted(unknown))}; known: {', '.join(sorted(known))}"
        )
    reads = raw.get("findings", {}).get("reads") if isinstance(raw.get("findings"), dict) else None
    if reads and "models" not in raw:
        raise SpecError(
            f"{p}: a findings addendum of spec {reads!r}: it judges that spec's runs and runs nothing itself; "
            f"run the spec named {reads!r} (experiments/) instead"
        )
    for req in ("name", "models"):
        if req not in raw:
            raise SpecError(f"{p}: missing field '{req}'")
    raw.setdefault("description", "")
    variant = {k: as_list(v) for k, v in raw.pop("variant", {}).items()}
    bad = set(variant) - set(VARIANT_FIELDS)
    if bad:
        raise SpecError(
            f"{p}: unknown variant field(s) {', '.join(sorted(bad))}; known: {', '.join(VARIANT_FIELDS)}"
        )
    for key in ("models", "seeds", "temperatures", "modes"):
        if key in raw:
            raw[key] = as_list(raw[key])
    for mode in raw.get("modes", []):
        if mode not in ARM_MODES:
            raise SpecError(f"{p}: modes must be one of {', '.join(ARM_MODES)}; got {mode!r}")
    _check_types(raw, p)
    try:
        spec = Spec(**raw, variant=variant, path=p, quick=quick)
    except TypeError as err:
        raise SpecError(f"{p}: {err}") from None
    validate_spec(spec)
    return spec


def _read_toml(p: Path) -> dict[str, Any]:
    """The TOML table of spec file ``p`` (``SpecError`` naming what is wrong with the file)."""
    from tooldecode.guard import parse_toml, read_text

    if p.is_dir():
        raise SpecError(f"{p} is a directory; pass a spec file such as experiments/e1_strict_vs_loose.toml")
    if not p.exists():
        raise SpecError(f"experiment spec {p} not found; see experiments/ for examples")
    # a regular UTF-8 file within bounds (a FIFO is refused unread), its nesting bounded before parsing
    text = read_text(p, "experiment spec", max_bytes=16 * 1024 * 1024, error=SpecError)
    return parse_toml(text, str(p), "experiment spec", error=SpecError)


# field -> (accepted types, description) for the scalar and list fields of a spec
_TEXT: tuple[tuple[type, ...], str] = ((str,), "text")
_COUNT: tuple[tuple[type, ...], str] = ((int,), "a whole number ≥ 1")
_FIELD_TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    "name": ((str,), "a plain name"),
    "description": _TEXT,
    "claim": _TEXT,
    "backend": ((str,), "a backend name"),
    "engine": ((str, list), "an engine setting or a list of them (see `tooldecode sample --help`)"),
    "ws": ((str,), "a whitespace mode"),
    "streams": ((str,), "'scenario' or 'shared'"),
    "duplicates": ((str, list), "'forbid', 'admit' or a list of them"),
    "n": _COUNT,
    "max_new_tokens": _COUNT,
    "batch_size": _COUNT,
    "max_scenarios": _COUNT,
    "top_p": ((int, float), "a number in (0, 1]"),
    "fill_slots": ((bool,), "true or false"),
}
_LIST_TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    "models": ((str,), "model ids or paths"),
    "seeds": ((int,), "whole numbers"),
    "temperatures": ((int, float), "numbers ≥ 0"),
    "modes": ((str,), "'loose', 'strict', 'strict-spec'"),
    "tags": ((str,), "scenario tags"),
    "scenario_dirs": ((str,), "folders of scenario files"),
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
    for key in ("probe", "decision", "aligned", "n_by_mode"):
        if key in raw and not isinstance(raw[key], dict):
            raise SpecError(f"{p}: [{key}] must be a table")


def _check_aligned(aligned: dict[str, Any], fail: Callable[[str], None]) -> None:
    """The [aligned] table: particles ≥ 1, method of ALIGNED_METHODS, target of ALIGNED_TARGETS,
    max_rounds ≥ 1 (rejection: rounds of ``particles`` draws before a sample becomes an error record),
    walks ≥ 1 (adaptive only: attempts decoded together in one round), max_walk_tokens ≥ 1 (adaptive only:
    the tokens an output's walks may decode before it is an error record)."""
    from tooldecode.sampling import ALIGNED_METHODS, ALIGNED_TARGETS

    keys = ("particles", "method", "target", "max_rounds", "walks", "max_walk_tokens")
    unknown = sorted(set(aligned) - set(keys))
    if unknown:
        fail(f"[aligned] has unknown keys {unknown}; use {', '.join(keys)}")
    if "max_walk_tokens" in aligned and aligned.get("method", "sir") != "adaptive":
        fail(
            '[aligned] max_walk_tokens applies to method = "adaptive" only, '
            f"got method {aligned.get('method', 'sir')!r}"
        )
    if aligned.get("walks", 1) != 1 and aligned.get("method", "sir") != "adaptive":
        fail(
            f'[aligned] walks applies to method = "adaptive" only, got method {aligned.get("method", "sir")!r}'
        )
    for key in ("particles", "max_rounds", "walks", "max_walk_tokens"):
        k = aligned.get(key, 1)
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            fail(f"[aligned] {key} must be a whole number ≥ 1, got {k!r}")
    if aligned.get("method", "sir") not in ALIGNED_METHODS:
        fail(f"[aligned] method must be one of {', '.join(ALIGNED_METHODS)}, got {aligned['method']!r}")
    if aligned.get("target", "complete") not in ALIGNED_TARGETS:
        fail(f"[aligned] target must be one of {', '.join(ALIGNED_TARGETS)}, got {aligned['target']!r}")


def validate_spec(spec: Spec) -> None:
    """Check a spec's values (ranges, duplicates, engines, backends, transcript words).

    Raises
    ------
    SpecError
        One line naming the spec file, the field and what is allowed.
    """
    where = spec.path if spec.path is not None else spec.name

    def fail(msg: str) -> None:
        raise SpecError(f"{where}: {msg}")

    if not _PLAIN_NAME.fullmatch(spec.name) or spec.name.strip(".") == "":
        fail(f"name {spec.name!r} must be a plain name (letters, digits, '.', '_', '-'; no '/' or '..')")
    if not spec.models:
        fail("'models' is empty; name at least one model id or path (see `tooldecode models list`)")
    _check_aligned(spec.aligned, fail)
    _check_sizes(spec, fail)
    _check_engines(spec, fail)
    _check_variant(spec, fail)
    if spec.probe:
        _check_probe(spec.probe, fail)
    if spec.decision:
        _check_decision(spec.decision, fail)


def _duplicate(values: list[Any]) -> Any:
    """The first value listed twice in ``values`` (None if none is)."""
    return next((v for i, v in enumerate(values) if v in values[:i]), None)


def _check_n_by_mode(spec: Spec, fail: Callable[[str], None]) -> None:
    """[n_by_mode]: modes the spec lists (alone or as ``MODE@LEVEL`` with a level its conditionings
    give), each with a whole number ≥ 1."""
    levels = sorted({LEVELS[c] for c in spec.variant.get("conditioning", ["free"]) if c in LEVELS})
    for key, k in spec.n_by_mode.items():
        mode, _, level = key.partition("@")
        if mode not in spec.modes:
            fail(f"[n_by_mode] names mode {mode!r}, which 'modes' does not list ({', '.join(spec.modes)})")
        if level and level not in levels:
            fail(
                f"[n_by_mode] {key!r} names level {level!r}; the spec's conditionings give {', '.join(levels)}"
            )
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            fail(f"[n_by_mode] {key} must be a whole number ≥ 1, got {k!r}")


def _check_sizes(spec: Spec, fail: Callable[[str], None]) -> None:
    """Counts, ranges, empty and duplicated lists (the rules of ``OPTION_RULES``)."""
    probe_only = spec.samples_nothing
    if option_problem(spec.n, "count0" if probe_only else "count"):
        fail(f"'n' must be ≥ 1 (0 only with [probe] or [decision] only = true), got {spec.n!r}")
    _check_n_by_mode(spec, fail)
    if spec.streams not in ("scenario", "shared"):
        fail(f"'streams' must be 'scenario' or 'shared', got {spec.streams!r}")
    for key, rule in (("max_new_tokens", "count"), ("batch_size", "count"), ("top_p", "top_p")):
        problem = option_problem(getattr(spec, key), rule)
        if problem:
            fail(f"'{key}' {problem}")
    if spec.max_scenarios is not None and option_problem(spec.max_scenarios, "count"):
        fail(f"'max_scenarios' must be ≥ 1, got {spec.max_scenarios!r}")
    _check_lists(spec, fail)


def _check_lists(spec: Spec, fail: Callable[[str], None]) -> None:
    """The list fields: none empty, each value by its rule, none twice."""
    if not spec.temperatures:
        fail("'temperatures' is empty; give at least one (e.g. [1.0])")
    if not spec.seeds:
        fail("'seeds' is empty; give at least one (e.g. [0])")
    if not spec.modes:
        fail("'modes' is empty; use 'loose', 'strict' or 'strict-spec'")
    for t in spec.temperatures:
        if _is_num(t) and t < 0:
            fail(f"temperature {t} is negative; temperatures must be ≥ 0")
        if option_problem(t, "temperature"):
            fail(f"temperature {t!r} {option_problem(t, 'temperature')}")
    for seed in spec.seeds:
        if option_problem(seed, "seed"):
            fail(f"seed {seed!r} {option_problem(seed, 'seed')}")
    for key in ("models", "seeds", "temperatures", "modes"):
        values = getattr(spec, key)
        if any(v in values[:i] for i, v in enumerate(values)):
            fail(f"'{key}' lists {_duplicate(values)!r} twice; each value once")


def _check_engines(spec: Spec, fail: Callable[[str], None]) -> None:
    """The backend, the engine settings of strict modes, the whitespace policy."""
    from tooldecode.backends import BACKENDS
    from tooldecode.grammar import WS_POLICIES

    engines = as_list(spec.engine)
    if not engines:
        fail("'engine' is empty; name at least one engine setting (e.g. \"xgrammar\")")
    if any(e in engines[:i] for i, e in enumerate(engines)):
        fail(f"'engine' lists {_duplicate(engines)!r} twice; each value once")
    if spec.backend not in BACKENDS:
        fail(f"unknown backend {spec.backend!r}; choose one of: {', '.join(BACKENDS)}")
    tool_modes = [m for m in spec.modes if m in TOOL_MODES]
    if tool_modes and spec.backend != "openai":
        fail(
            f"mode {tool_modes[0]!r} sends chat requests to a server; run it with --backend openai --base-url URL"
        )
    if tool_modes and "gold-prefix" in spec.variant.get("conditioning", []):
        fail(f"mode {tool_modes[0]!r} is a chat request and cannot carry conditioning 'gold-prefix'")
    # on --backend openai the server's own strict field takes tooldecode's GBNF: no engine to check
    if any(m in STRICT_MODES for m in spec.modes) and spec.backend != "openai":
        from tooldecode.engines import EngineError, check_engine

        for engine in as_list(spec.engine):
            try:
                check_engine(engine, backend=spec.backend, modes=[m for m in spec.modes if m != "loose"])
            except EngineError as err:
                fail(str(err))
    if spec.ws not in WS_POLICIES:
        fail(f"unknown ws {spec.ws!r}; choose one of: {', '.join(WS_POLICIES)}")
    _check_duplicates(spec, fail)


def _check_duplicates(spec: Spec, fail: Callable[[str], None]) -> None:
    """``duplicates``: known values, each once, and only where an open tooldecode grammar reads it."""
    from tooldecode.grammar import DUPLICATES
    from tooldecode.masking import ENGINE_FORMATS

    dups = as_list(spec.duplicates)
    if not dups:
        fail("'duplicates' is empty; use 'forbid', 'admit' or both")
    for d in dups:
        if d not in DUPLICATES:
            fail(f"unknown duplicates {d!r}; choose one of: {', '.join(DUPLICATES)}")
    if len(set(dups)) < len(dups):
        fail(f"'duplicates' lists {_duplicate(dups)!r} twice; each value once")
    if dups == ["forbid"]:
        return
    if "strict-spec" not in spec.modes:
        fail("'duplicates' applies to the open grammar of mode 'strict-spec'; add it to 'modes'")
    for engine in as_list(spec.engine):
        if engine not in ENGINE_FORMATS and engine != "tooldecode-spec":
            fail(
                f"'duplicates' needs tooldecode's own grammar, but engine {engine!r} compiles the schema "
                "itself; use a mask engine (xgrammar, llguidance, ...) or 'tooldecode-spec'"
            )


def _check_variant(spec: Spec, fail: Callable[[str], None]) -> None:
    """Each [variant] list: no value twice, every value a transcript option."""
    from tooldecode.prompts import PromptError, TranscriptOptions

    for key, values in spec.variant.items():
        if any(v in values[:i] for i, v in enumerate(values)):
            fail(f"variant '{key}' lists {_duplicate(values)!r} twice; each value once")
    for key, values in spec.variant.items():
        for value in values:
            try:
                TranscriptOptions(**{key: value})
            except (PromptError, TypeError) as err:
                fail(f"variant '{key}' = {value!r}: {err}")


def _check_probe(probe: dict[str, Any], fail: Callable[[str], None]) -> None:
    """The [probe] table: known fields; each field it varies is a variant field with values."""
    known = {"only", "fields", "variant", "select", "samples", *PROBE_BOUNDS, *VARIANT_FIELDS}
    unknown = set(probe) - known
    if unknown:
        fail(f"unknown [probe] field(s) {', '.join(sorted(unknown))}; known: {', '.join(sorted(known))}")
    for b in PROBE_BOUNDS:
        v = probe.get(b)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int | float) or v < 0):
            fail(f"[probe] {b} = {v!r}: give a number ≥ 0")
        if v is not None and option_problem(v, PROBE_RULES[b]):
            fail(f"[probe] {b} = {v!r}: {option_problem(v, PROBE_RULES[b])}")
    if probe.get("samples") is not None and option_problem(probe["samples"], "count0"):
        fail(f"[probe] samples = {probe['samples']!r}: {option_problem(probe['samples'], 'count0')}")
    sel = probe.get("select")
    if sel is not None and not (
        isinstance(sel, str) or (isinstance(sel, list) and sel and all(isinstance(s, str) for s in sel))
    ):
        fail(
            f'[probe] select = {sel!r}: give a key name or a list of key names (e.g. ["newText", "new_string"])'
        )
    fields = probe.get("fields", [])
    if not isinstance(fields, list) or not all(isinstance(f, str) for f in fields):
        fail(f"[probe] fields = {fields!r}: give a list of variant field names")
    if not isinstance(probe.get("variant", {}), dict):
        fail(f"[probe] variant = {probe['variant']!r}: give a table of variant fields")
    for f in fields:
        if f not in VARIANT_FIELDS:
            fail(f"[probe] fields: {f!r} is not a variant field ({', '.join(VARIANT_FIELDS)})")
        if f not in probe:
            fail(f"[probe] fields names {f!r} but gives no values for it")


# the fields of a [decision] table besides the bounds (tooldecode.distortion.decision.DecisionConfig's)
DECISION_BOUNDS = ("depth", "key_depth", "tail_depth", "min_mass", "max_branches", "tail")
DECISION_RULES = {**PROBE_RULES, "tail_depth": "count0"}


def _check_decision(decision: dict[str, Any], fail: Callable[[str], None]) -> None:
    """The [decision] table: known fields, bounds by the probe's rules, engines a list of names,
    goes_on_valid in [0, 1], variant a table of transcript fields."""
    known = {"only", "engines", "variant", "goes_on_valid", *DECISION_BOUNDS}
    unknown = set(decision) - known
    if unknown:
        fail(f"unknown [decision] field(s) {', '.join(sorted(unknown))}; known: {', '.join(sorted(known))}")
    for b in DECISION_BOUNDS:
        v = decision.get(b)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int | float)):
            fail(f"[decision] {b} = {v!r}: give a number ≥ 0")
        if v is not None and option_problem(v, DECISION_RULES[b]):
            fail(f"[decision] {b} = {v!r}: {option_problem(v, DECISION_RULES[b])}")
    engines = decision.get("engines", ["xgrammar"])
    if not (isinstance(engines, list) and engines and all(isinstance(e, str) for e in engines)):
        fail(
            f'[decision] engines = {engines!r}: give a list of mask engines (e.g. ["xgrammar", "llguidance"])'
        )
    if len(set(engines)) < len(engines):
        fail(f"[decision] engines lists {_duplicate(engines)!r} twice; each value once")
    g = decision.get("goes_on_valid", 1.0)
    if option_problem(g, "share"):
        fail(f"[decision] goes_on_valid = {g!r}: {option_problem(g, 'share')}")
    variant = decision.get("variant", {})
    if not isinstance(variant, dict) or set(variant) - set(VARIANT_FIELDS):
        fail(
            f"[decision] variant = {variant!r}: give a table of variant fields ({', '.join(VARIANT_FIELDS)})"
        )
