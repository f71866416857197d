"""Running a spec: every arm × scenario × seed sampled into a resumable run (``run_spec``)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shlex
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from tooldecode.errors import ToolDecodeError
from tooldecode.experiments.arms import arm_label, select_scenarios
from tooldecode.experiments.decisions import decision_config, run_decision
from tooldecode.experiments.probes import probe_config, run_probe
from tooldecode.experiments.rundir import (
    RunStoreRefusal,
    check_models_match,
    check_scenarios_match,
    discard_empty_run,
    is_run_dir,
)
from tooldecode.experiments.spec import Spec, SpecError, load_spec, validate_spec
from tooldecode.records import Condition, SampleRecord
from tooldecode.trial import ModelCache, TrialError, channel_of


def check_fresh_target(out: Path) -> None:
    """``--fresh`` on ``out``: refuse a symlink and anything that is not a tooldecode run (before any work)."""
    if out.is_symlink():
        raise RunStoreRefusal(
            f"--fresh refuses {out}: it is a symlink; pass the run folder it points to "
            f"({Path(out).resolve()}) or remove the link yourself"
        )
    if out.exists() and not is_run_dir(out):
        raise RunStoreRefusal(
            f"--fresh refuses to delete {out}: it is not a tooldecode run directory (no manifest written by "
            "tooldecode); choose another --out or remove it yourself"
        )


def check_arms(spec: Spec, arms: list[dict[str, Any]]) -> None:
    """Every mode the spec lists has at least one arm (an empty engine or duplicates list loses one), and
    every arm's mode can be drawn on its backend (``tooldecode.trial.channel_of``; before any model loads)."""
    have = {a["mode"] for a in arms}
    lost = [m for m in spec.modes if m not in have]
    if lost:
        raise SpecError(
            f"{spec.path or spec.name}: mode {lost[0]!r} has no arm (its 'engine' or 'duplicates' list is "
            "empty); name at least one engine setting"
        )
    for arm in arms:
        try:
            channel_of(arm["mode"], arm["backend"], arm.get("engine"), conditioning=arm.get("conditioning"))
        except TrialError as err:
            raise SpecError(f"{spec.path or spec.name}: {err}") from None


def _clear_for_fresh(
    spec: Spec, out: Path, lock: Any, models: ModelCache, arms: list[dict[str, Any]]
) -> list[str]:
    """``--fresh``, holding ``out``'s write lock, after the models resolved: load the first model (a
    model that does not load leaves the old run as it was), then delete the files tooldecode wrote."""
    from tooldecode.runs import clear_run

    first = next((a for a in arms if a["model"] == spec.models[0]), None)
    if first is not None:
        models.get(first["backend"], first["model"])
    kept = clear_run(out, lock)
    if kept:
        print(
            f"--fresh: kept {len(kept)} file(s) in {out} that tooldecode did not write: {', '.join(kept)}",
            file=sys.stderr,
        )
    return kept


def _say_kept(err: ToolDecodeError, out: Path) -> ToolDecodeError:
    """``err`` with the note that ``--fresh`` deleted nothing (same class where it can be rebuilt)."""
    msg = f"{err}; --fresh deleted nothing: the run at {out} is as it was"
    try:
        return type(err)(msg)
    except TypeError:
        return ToolDecodeError(msg)


def run_spec(
    spec: Spec,
    out: Path,
    *,
    fresh: bool = False,
    progress: bool = True,
    server: dict[str, Any] | None = None,
    only_modes: Sequence[str] | None = None,
    only_levels: Sequence[str] | None = None,
) -> Path:
    """Run every arm × scenario × seed of ``spec`` into ``out`` (resuming what is already there).

    ``server``: options of the ``openai`` backend (``base_url``, ``api_key_env``, ``kind``); where the
    server is is not part of the run's config, so a run resumes against a restarted server.
    ``only_modes``: draw only the arms of these modes now (the manifest is the whole spec's, and a later
    call draws the rest); ``only_levels``: the same for the arms' levels (``L1``, ``L2``, ...): both
    given, an arm is drawn when it has one of the modes and one of the levels."""
    from tooldecode.runs import MANIFEST, RunLock, RunStore

    validate_spec(spec)
    if fresh:
        check_fresh_target(out)
    scenarios = select_scenarios(spec)
    if not scenarios:
        raise SpecError(
            f"{spec.path or spec.name}: the scenario filter (scenarios, tags, max_scenarios) selects no "
            "scenario; the run would write 0 samples: widen the filter"
        )
    arms = spec.arms()
    check_arms(spec, arms)
    # the write lock before anything is resolved, loaded or deleted: a second writer learns of it at once
    lock = RunLock(out) if out.is_dir() else None
    branches = max(
        probe_config(spec.probe).max_branches if spec.probe else 0,
        decision_config(spec.decision).max_branches if spec.decision else 0,
    )
    models = ModelCache(
        batch_size=spec.batch_size, branches=branches, server=server, fill_slots=spec.fill_slots
    )
    store = None
    try:
        manifest = _run_manifest(spec, out, arms, scenarios, fresh=fresh)
        kept: list[str] = []
        if fresh and lock is not None and (out / MANIFEST).exists():
            kept = _clear_for_fresh(spec, out, lock, models, arms)
        new_run = not (out / MANIFEST).exists()
        new_dir = not out.exists()
        store = RunStore.create(out, manifest, lock=lock if lock is not None else True, keep=kept)
        store.lock()
        store.check_writable()
    except BaseException as err:
        models.close()
        if store is not None:
            store.close()
        if lock is not None:
            lock.release()
        if fresh and lock is not None and (out / MANIFEST).exists() and isinstance(err, ToolDecodeError):
            raise _say_kept(err, out) from None
        raise
    done = store.completed_keys()
    # model-major (one model loaded at a time), then scenario-major: arms of one scenario share the
    # prompt prefix, which stays in the KV cache
    jobs = [
        (arm, sc, seed)
        for model in spec.models
        for sc in scenarios
        for seed in spec.seeds
        for arm in arms
        if arm["model"] == model
        and (not only_modes or arm["mode"] in only_modes)
        and (not only_levels or arm["level"] in only_levels)
    ]
    total = (
        sum(spec.n_for(arm["mode"], arm["level"]) for arm, _, _ in jobs) if not spec.samples_nothing else 0
    )
    t_start = time.perf_counter()
    try:
        with _progress(progress) as bar, _sigterm_interrupts():
            task = bar.add_task(spec.name, total=total)
            bar.advance(task, sum(1 for k in done if not k.startswith("probe/")))
            if not spec.samples_nothing:
                _sample_jobs(spec, store, models, jobs, done, lambda k: bar.advance(task, k))
            if spec.probe:
                run_probe(spec, store, scenarios, models, done, bar)
            if spec.decision:
                run_decision(spec, store, scenarios, models, bar)
    except BaseException:
        models.close()
        store.close()
        if (
            new_run
            and len(store) == 0
            and not any(store.derived_path(f).exists() for f in ("probe.jsonl", "decision.jsonl"))
        ):
            discard_empty_run(out, remove_dir=new_dir)
        raise
    finally:
        models.close()
        store.close()
    _write_timing(store, time.perf_counter() - t_start)
    return out


@contextlib.contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """SIGTERM (``kill``, a scheduler's stop) ends the run as Ctrl-C does: through the cleanup that keeps
    completed samples and removes a run that never wrote one (in the main thread; elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _run_manifest(
    spec: Spec, out: Path, arms: list[dict[str, Any]], scenarios: list[Any], *, fresh: bool = False
) -> dict[str, Any]:
    """The manifest of a run of ``spec`` into ``out`` (refusing to resume one sampled from other weights;
    ``fresh``: the run there is to be replaced, so its weights do not matter)."""
    from tooldecode.models import loaded_digest, resolve
    from tooldecode.runs import build_manifest

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
    if spec.decision:  # runs made before the [decision] table have no such field
        config["decision"] = spec.decision
    if spec.n_by_mode:
        config["n_by_mode"] = spec.n_by_mode
    if spec.streams != "shared":  # runs made before per-scenario streams have no such field
        config["streams"] = spec.streams
    if spec.aligned:
        config["aligned"] = spec.aligned
    if spec.fill_slots:  # how draws shared their steps (runs without the field: job by job)
        config["fill_slots"] = True
    if spec.scenario_dirs:  # the scorer reads the scenarios from the same folders
        config["scenario_dirs"] = list(spec.scenario_dirs)
    models_info = {}
    for m in spec.models:
        ref = resolve(m, fetch=True)
        # the bytes as they are now, not a memo keyed by size and mtime (a file changed in place)
        models_info[m] = {"id": ref.id, "sha256": loaded_digest(ref), "path": str(ref.path)}
    if not fresh:
        check_models_match(out, models_info)
        check_scenarios_match(out, {s.id: s.sha256() for s in scenarios})
    manifest = build_manifest(
        config,
        model=models_info if len(models_info) > 1 else next(iter(models_info.values())),
        seeds=spec.seeds,
        scenarios={s.id: s.sha256() for s in scenarios},
    )
    manifest["claim"] = spec.claim
    manifest["description"] = spec.description
    manifest["command"] = shlex.join(run_command(spec, out))
    return manifest


def run_command(spec: Spec, out: Path) -> list[str]:
    """The ``tooldecode run`` command line that re-creates a run of ``spec`` into ``out``: the spec file,
    ``--quick``, and the ``--model`` / ``--backend`` given in place of the file's."""
    cmd = ["tooldecode", "run", rel_path(spec.path)] + (["--quick"] if spec.quick else [])
    written = None
    if spec.path is not None:
        try:
            written = load_spec(spec.path, quick=spec.quick)
        except SpecError:  # the file changed or is gone: name everything this run used
            written = None
    if written is None or written.models != spec.models:
        for model in spec.models:
            cmd += ["--model", model]
    if written is None or written.backend != spec.backend:
        cmd += ["--backend", spec.backend]
    return [*cmd, "--out", rel_path(out)]


class LineProgress:
    """``rich.progress.Progress``'s ``add_task``/``advance`` as log lines (logger ``tooldecode.progress``)
    every ``every_s`` seconds and at the end: a run off a terminal (a log file, CI) is not silent for
    minutes. Each line has the count, the rate and the time left."""

    def __init__(self, every_s: float = 30.0) -> None:
        import logging

        self.every_s = every_s
        self.log = logging.getLogger("tooldecode.progress")
        self.tasks: dict[int, list[Any]] = {}  # id -> [name, total, done, t0, last line, done at start]

    def __enter__(self) -> LineProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def add_task(self, name: str, total: int = 0, **_: Any) -> int:
        tid = len(self.tasks)
        now = time.monotonic()
        self.tasks[tid] = [name, total, 0, now, now, None]
        return tid

    def advance(self, task: int, n: float = 1) -> None:
        t = self.tasks[task]
        if t[5] is None:
            t[5] = n  # the first advance counts what a resumed run already had
        t[2] += n
        now = time.monotonic()
        if now - t[4] < self.every_s and t[2] < t[1]:
            return
        t[4] = now
        new, dt = t[2] - t[5], now - t[3]
        rate = new / dt if dt > 0 else 0.0
        left = (t[1] - t[2]) / rate if rate > 0 else float("nan")
        self.log.info(
            "%s: %d/%d done, %.2f a second, %.0f s elapsed, ETA %.0f s", t[0], t[2], t[1], rate, dt, left
        )

    def update(self, task: int, **kw: Any) -> None:
        if "total" in kw:
            self.tasks[task][1] = kw["total"]


def _progress(enabled: bool) -> Any:
    """The run's progress: rich bars on a terminal, log lines every 30 s elsewhere (``LineProgress``);
    nothing when not ``enabled``."""
    import sys

    if enabled and not sys.stderr.isatty():
        return LineProgress()
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    cols = [
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    ]
    return Progress(*cols, disable=not enabled, transient=False)


def _sample_jobs(
    spec: Spec,
    store: Any,
    models: ModelCache,
    jobs: list[tuple[dict[str, Any], Any, int]],
    done: set[str],
    advance: Callable[[int], None],
) -> None:
    """Every job's missing samples: job by job, or (``spec.fill_slots``) one queue per model."""
    drawn: dict[tuple, dict[int, SampleRecord]] = {}  # this scenario's draws, by identity
    queued: QueuePlan | None = QueuePlan() if spec.fill_slots else None
    for n_job, (arm, sc, seed) in enumerate(jobs):
        if n_job and sc is not jobs[n_job - 1][1] and queued is None:
            drawn.clear()
        if queued is not None and n_job and arm["model"] != jobs[n_job - 1][0]["model"]:
            queued.draw(spec, models)  # one model at a time
            drawn.clear()
        _sample_job(spec, store, models, (arm, sc, seed), done, advance, drawn, queued)
    if queued is not None:
        queued.draw(spec, models)


class QueuePlan:
    """The draws of one model's jobs gathered for ``tooldecode.sampling.sample_queue`` (plain and masked
    draws) and ``sample_adaptive_queue`` (strict-aligned's adaptive walks) (spec ``fill_slots``): slots
    are refilled across scenarios and arms instead of job by job.

    ``requests`` are drawn in job order (scenario-major, so the prompts in the cache at one time share
    their history). ``followers`` holds, by draw identity, the arms whose draws copy an earlier arm's
    (written when the original's samples arrive); ``owned`` the indices each identity's request draws.
    """

    def __init__(self) -> None:
        self.requests: list[Any] = []
        self.backend: tuple[str, str] | None = None
        self.owned: dict[tuple, set[int]] = {}
        self.followers: dict[tuple, list[tuple[list[str], Condition, set[int]]]] = {}

    def draw(self, spec: Spec, models: ModelCache) -> None:
        from tooldecode.sampling import AdaptiveRequest, sample_adaptive_queue, sample_queue

        if self.requests and self.backend is not None:
            be = models.get(*self.backend)
            slots = spec.batch_size or be.suggest_batch_size(0, spec.max_new_tokens)
            plain = [r for r in self.requests if not isinstance(r, AdaptiveRequest)]
            sample_queue(be, plain, slots)
            sample_adaptive_queue(be, [r for r in self.requests if isinstance(r, AdaptiveRequest)], slots)
        self.requests, self.backend = [], None
        self.owned.clear()
        self.followers.clear()


def _sample_job(
    spec: Spec,
    store: Any,
    models: ModelCache,
    job: tuple[dict[str, Any], Any, int],
    done: set[str],
    advance: Callable[[int], None],
    drawn: dict[tuple, dict[int, SampleRecord]] | None = None,
    queued: QueuePlan | None = None,
) -> None:
    """The samples of one (arm, scenario, seed) that ``store`` does not have yet, appended as they come.

    An arm whose draw is the same as an earlier arm's in this scenario (same model, prompt bytes, tools,
    prefill, mask, temperature, seed and stream: sampling would repeat it token for token) is not
    sampled again: its records are copies of that arm's, marked ``copy_of`` (``drawn`` holds the
    scenario's records by draw identity; a copy whose original is not in it, on resume, is sampled).
    """
    from tooldecode.trial import Trial

    arm, sc, seed = job
    label = arm_label(arm)
    keys = [f"{label}/{sc.id}/{seed}/{i}" for i in range(spec.n_for(arm["mode"], arm["level"]))]
    todo = [i for i, k in enumerate(keys) if k not in done]
    if not todo:
        return
    be = models.get(arm["backend"], arm["model"])
    trial = Trial(arm, sc, ws=spec.ws, aligned=spec.aligned)
    params = trial.params(
        top_p=spec.top_p,
        max_new_tokens=spec.max_new_tokens,
        seed=seed,
        stream=scenario_stream(sc.id) if spec.streams == "scenario" else None,
        top_logprobs=20,
        keep_top="all",
    )
    ident = _draw_identity(spec, arm, trial, seed, params.stream)
    mine = drawn.setdefault(ident, {}) if drawn is not None else {}
    copies = [
        dataclasses.replace(
            mine[i], key=keys[i], arm=trial.arm, copy_of=mine[i].copy_of or mine[i].key, timing={}
        )
        for i in todo
        if i in mine
    ]
    if copies:
        store.append([c.to_json() for c in copies])
        advance(len(copies))
        todo = [i for i in todo if i not in mine]
        if not todo:
            return

    if queued is not None and ident in queued.owned:  # an earlier arm's queued draws are these draws
        follow = [i for i in todo if i in queued.owned[ident]]
        queued.followers.setdefault(ident, []).append((keys, trial.arm, set(follow)))
        todo = [i for i in todo if i not in queued.owned[ident]]
        if not todo:
            return

    def write(batch: list[SampleRecord]) -> None:
        store.append([r.to_json() for r in batch])
        mine.update((r.index, r) for r in batch)
        advance(len(batch))
        for f_keys, f_arm, f_todo in queued.followers.get(ident, []) if queued is not None else []:
            copies = [
                dataclasses.replace(r, key=f_keys[r.index], arm=f_arm, copy_of=r.key, timing={})
                for r in batch
                if r.index in f_todo
            ]
            if copies:
                store.append([c.to_json() for c in copies])
                advance(len(copies))

    # contiguous runs of missing indices keep per-index seeds identical on resume; the constraint is
    # built at the first draw (an arm copied whole compiles nothing)
    for start, count in index_runs(todo):
        req = None
        if queued is not None and (queued.backend in (None, (arm["backend"], arm["model"]))):
            req = trial.request(be, count, params, start_index=start, on_batch=write)
        if req is None:
            trial.sample(be, count, params, batch_size=spec.batch_size, start_index=start, on_batch=write)
            continue
        queued.requests.append(req)  # type: ignore[union-attr]
        queued.backend = (arm["backend"], arm["model"])  # type: ignore[union-attr]
        queued.owned.setdefault(ident, set()).update(range(start, start + count))  # type: ignore[union-attr]


def _write_timing(store: Any, elapsed: float) -> None:
    """``timing.json``: this invocation's wall time, and the previous one's when the run was resumed."""
    timing = {"wall_s": round(elapsed, 1)}
    prev = store.derived_path("timing.json")
    if prev.exists():
        try:
            timing["previous_wall_s"] = json.loads(prev.read_text()).get("wall_s")
        except ValueError:
            pass
    store.write_derived("timing.json", json.dumps(timing) + "\n")


def rel_path(path: Path | None) -> str:
    """``path`` relative to the working directory where it lies below it (for a run's command line)."""
    if path is None:
        return "?"
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def index_runs(indices: list[int]) -> Iterable[tuple[int, int]]:
    """(start, count) of each run of consecutive indices in ``indices`` (sorted)."""
    if not indices:
        return
    start = prev = indices[0]
    for i in indices[1:]:
        if i == prev + 1:
            prev = i
        else:
            yield start, prev - start + 1
            start = prev = i
    yield start, prev - start + 1


def scenario_stream(scenario_id: str) -> int:
    """The random stream of a scenario (``SamplingParams.stream``): 31 bits of the SHA-256 of its id."""
    import hashlib

    return int.from_bytes(hashlib.sha256(scenario_id.encode("utf-8")).digest()[:4], "big") & 0x7FFFFFFF


def _draw_identity(spec: Spec, arm: dict[str, Any], trial: Any, seed: int, stream: int | None) -> tuple:
    """What decides an arm's draws in one scenario: two arms equal in all of it draw the same samples."""
    prompt = trial.prompt
    tools = json.dumps([(t.name, t.parameters) for t in trial.tools], sort_keys=True, default=str)
    return (
        arm["model"],
        arm["backend"],
        trial.prompt_sha256,
        prompt.prefill,
        tuple(prompt.stop),
        prompt.wire,
        tools,
        arm["mode"],
        arm.get("engine"),
        arm.get("duplicates", "forbid"),
        arm["temperature"],
        seed,
        stream,
        spec.n_for(arm["mode"], arm["level"]),
    )


def run_demo(model: str) -> int:
    """``make demo``: E1 and E5 at small N on ``model``, then the table and the report path."""
    root = Path(__file__).resolve().parents[2]
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
