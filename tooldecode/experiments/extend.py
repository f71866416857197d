"""Cut draws continued past their run's cap: would a longer cap have let them end?

A run checks that at least 95% of each arm's draws ended on their own (``tooldecode.distortion.caps``).
Where an arm falls short, the question is whether the cap decided those draws or the model did. A draw
cut at the cap is a prefix of a draw at any larger cap, so continuing it from its own tokens (the same
prompt, channel and mask, the mask advanced over what it wrote) up to a larger cap is a draw at that cap
with the first part already made. ``extend_cut`` does that for the cut draws of the arms asked for and
writes one record per continued draw to ``extended.jsonl`` in a folder of its own (the run is only read):

- ``key`` (the run's sample key), ``scenario``, ``arm`` (its label), ``seed``, ``stream`` (the
  continuation's own: ``scenario_stream("<scenario>/extend-<cap>")``), ``index``;
- ``tokens_before`` (the draw's tokens at the run's cap), ``cap`` (the total cap now), ``token_ids`` and
  ``text`` of the continuation, ``finish_reason`` (``stop``: ended, by an end-of-generation token or a
  stop string; ``length``: cut again; ``error``), ``error``;
- ``outcome``: the verdict's did-the-edit-work outcome of the whole call at the larger cap.

``ended_at_cap`` reads a run and its extension together: per arm, how many draws ended within the run's
cap, how many of the cut ones ended within the larger one, and whether the arm meets ``MIN_ENDED`` at
each. ``extend.json`` beside the records holds the provenance (commit, run, cap, command).
"""

from __future__ import annotations

import datetime as _dt
import json
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tooldecode.distortion.caps import MIN_ENDED
from tooldecode.errors import RunError
from tooldecode.records import label as arm_label

__all__ = ["EXTENDED", "EXTEND_MANIFEST", "ended_at_cap", "extend_cut", "read_extended"]

EXTENDED = "extended.jsonl"
EXTEND_MANIFEST = "extend.json"
_ENDED = ("stop",)  # the sampler's finish reason for an end-of-generation token or a stop string


def _spec_path(run: Any) -> tuple[str, bool]:
    """The spec file the run was made from and whether it ran ``--quick``, read from its manifest's command."""
    words = shlex.split(run.command())
    for i, w in enumerate(words[:-1]):
        if w == "run" and words[i + 1].endswith(".toml"):
            return words[i + 1], "--quick" in words
    raise RunError(
        f"{run.path}: its manifest names no spec file in its command ({run.command()!r}); "
        "pass the spec with --spec"
    )


def read_extended(out: str | Path) -> list[dict[str, Any]]:
    """The records of an extension folder's ``extended.jsonl`` (none when it has no such file)."""
    path = Path(out) / EXTENDED
    if not path.is_file():
        return []
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as e:
            raise RunError(f"{path}:{n}: not a JSON line ({e}); remove the line to draw it again") from None
        if not (
            isinstance(row, dict)
            and isinstance(row.get("key"), str)
            and isinstance(row.get("cap"), int)
            and isinstance(row.get("finish_reason"), str)
        ):
            raise RunError(
                f"{path}:{n}: not a continued draw (it needs a string key, an integer cap and a string "
                "finish_reason); remove the line to draw it again"
            )
        rows.append(row)
    return rows


def _cut(run: Any, modes: Sequence[str] | None, levels: Sequence[str] | None) -> list[Any]:
    return [
        s
        for s in run.samples
        if s.finish_reason == "length"
        and not s.error
        and (not modes or s.arm.mode in modes)
        and (not levels or s.arm.level in levels)
    ]


def extend_cut(
    run_dir: str | Path,
    cap: int,
    out: str | Path,
    *,
    modes: Sequence[str] | None = None,
    levels: Sequence[str] | None = None,
    spec_path: str | None = None,
    slots: int | None = None,
) -> Path:
    """Continue every cut draw of ``run_dir`` (of ``modes`` and ``levels``; all when None) to ``cap``
    tokens in all, into ``out/extended.jsonl`` (resumable: a key already there is not drawn again).

    Raises
    ------
    RunError
        One line: the cap is not above the run's, the spec or a scenario is gone, a prompt is not the one
        the draw saw, or the channel draws with its own sampler (no continuation from given tokens).
    """
    from tooldecode.runs import RunLock, load_run

    run = load_run(run_dir)
    config = run.manifest.get("config", {})
    run_cap = int(config.get("max_new_tokens") or 0)
    if cap <= run_cap:
        raise RunError(
            f"{run.path}: --cap {cap} is not above the run's cap of {run_cap} tokens; give a larger cap"
        )
    cut = _cut(run, modes, levels)
    out = Path(out)
    if out.resolve() == run.path.resolve():
        raise RunError(f"{out}: the extension is written beside the run, never into it; give another folder")
    out.mkdir(parents=True, exist_ok=True)
    lock = RunLock(out)  # one writer; `jobqueue collect` leaves a folder being written for later
    try:
        return _extend(run, cap, out, cut, modes, levels, spec_path, slots)
    finally:
        lock.release()


def _extend(
    run: Any,
    cap: int,
    out: Path,
    cut: list[Any],
    modes: Sequence[str] | None,
    levels: Sequence[str] | None,
    spec_path: str | None,
    slots: int | None,
) -> Path:
    from tooldecode.experiments.arms import select_scenarios
    from tooldecode.experiments.spec import load_spec
    from tooldecode.runs.manifest import build_manifest
    from tooldecode.sampling import sample_queue
    from tooldecode.trial import ModelCache
    from tooldecode.trial.session import DRAW_SLOTS

    run_cap = int(run.manifest.get("config", {}).get("max_new_tokens") or 0)
    meta = out / EXTEND_MANIFEST
    if meta.exists():
        prev = json.loads(meta.read_text(encoding="utf-8"))
        if prev.get("cap") != cap or prev.get("run") != str(run.path):
            raise RunError(
                f"{meta}: this folder extends {prev.get('run')} to {prev.get('cap')} tokens, not "
                f"{run.path} to {cap}; give another folder"
            )
    have = {r["key"] for r in read_extended(out)}
    todo = [s for s in cut if s.key not in have]
    if not todo:
        return out
    aligned = next((s for s in todo if s.arm.mode == "strict-aligned"), None)
    if aligned is not None:
        raise RunError(
            f"{run.path}: {aligned.key}: a strict-aligned draw is a walk conditioned on the whole call and "
            "cannot be continued from its tokens; leave strict-aligned out of --modes"
        )

    path, quick = (spec_path, False) if spec_path else _spec_path(run)
    spec = load_spec(path, quick=quick)
    scenarios = {sc.id: sc for sc in select_scenarios(spec)}
    gone = sorted({s.scenario for s in todo} - set(scenarios))
    if gone:
        raise RunError(
            f"{run.path}: scenario {gone[0]} of its cut draws is not among the spec's ({spec.path}); "
            "run from the commit the run was made from"
        )
    manifest = build_manifest({"run": str(run.path), "cap": cap, "run_cap": run_cap})
    manifest.update(
        run=str(run.path),
        cap=cap,
        modes=list(modes) if modes else None,
        levels=list(levels) if levels else None,
        command=shlex.join(
            ["tooldecode", "runs", "extend", str(run.path), "--cap", str(cap), "--out", str(out)]
            + (["--modes", *modes] if modes else [])
            + (["--levels", *levels] if levels else [])
        ),
    )
    if not meta.exists():
        meta.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")

    n_slots = slots or min(len(todo), DRAW_SLOTS)
    models = ModelCache(batch_size=n_slots, fill_slots=True)
    try:
        by_model: dict[tuple[str, str], list[Any]] = {}
        for s in todo:
            by_model.setdefault((s.arm.backend, s.arm.model), []).append(s)
        for (backend, model), samples in by_model.items():
            be = models.get(backend, model)
            requests = [_request(run, s, scenarios[s.scenario], be, cap, out) for s in samples]
            sample_queue(be, requests, n_slots)  # one after another on a backend without slots
    finally:
        models.close()
    return out


def _request(run: Any, s: Any, scenario: Any, be: Any, cap: int, out: Path) -> Any:
    """The ``DrawRequest`` that continues cut draw ``s`` of ``run`` to ``cap`` tokens on backend ``be``."""
    from tooldecode.experiments.runner import scenario_stream
    from tooldecode.sampling import DrawRequest
    from tooldecode.trial import Trial
    from tooldecode.trial.session import FILL_STREAM_TOKENS

    config = run.manifest.get("config", {})
    trial = Trial(s.arm, scenario, ws=config.get("ws", "bounded"), aligned=config.get("aligned"))
    if trial.prompt_sha256 != s.prompt_sha256:
        raise RunError(
            f"{run.path}: {s.key}: the prompt renders differently now than when it was drawn; "
            "run from the commit the run was made from"
        )
    if trial.request(be, 1, trial.params(max_new_tokens=1)) is None:
        raise RunError(
            f"{run.path}: {s.key}: its channel draws with its own sampler, which cannot continue from given "
            "tokens; extend only the arms tooldecode's sampler draws (--modes)"
        )
    ids = list(s.token_ids or [])
    prompt = be.tokenize(trial.text) + ids
    if len(prompt) - len(ids) + cap > FILL_STREAM_TOKENS:
        raise RunError(
            f"{run.path}: {s.key}: its prompt ({len(prompt) - len(ids)} tokens) and {cap} more do not fit a "
            f"sequence's {FILL_STREAM_TOKENS} tokens; give a cap of at most "
            f"{FILL_STREAM_TOKENS - len(prompt) + len(ids)}"
        )
    params = trial.params(
        top_p=config.get("top_p", 1.0),
        max_new_tokens=cap - len(ids),
        seed=s.seed,
        stream=scenario_stream(f"{s.scenario}/extend-{cap}"),
    )
    return DrawRequest(
        prompt,
        1,
        params,
        mask=trial.constraint(be),
        prefill=trial.prompt.prefill + s.text,
        start_index=s.index,
        on_batch=_writer(out, s, trial, cap, len(ids), params.stream),
    )


def _stopped(first: str, more: str, finish: str, stops: tuple[str, ...]) -> tuple[str, str]:
    """The whole text of a continued draw and its finish reason: a stop string that began in the draw's
    first part (which ended at the cap, so held none) and ends in the continuation stops it there, the
    stop string kept (as the sampler keeps it)."""
    text = first + more
    if finish == "error":
        return text, finish
    ends = [i + len(t) for t in stops if t and (i := text.find(t, max(0, len(first) - len(t) + 1))) >= 0]
    if ends and min(ends) < len(text):
        return text[: min(ends)], "stop"
    return text, finish


def _writer(out: Path, s: Any, trial: Any, cap: int, before: int, stream: int) -> Any:
    """The ``on_batch`` of one continued draw: its record appended to ``extended.jsonl``."""

    def write(batch: list[Any]) -> None:
        for d in batch:
            text, finish = _stopped(s.text, d.text, d.finish_reason, tuple(trial.prompt.stop))
            verdict = trial.score(text, finish)
            row = {
                "key": s.key,
                "scenario": s.scenario,
                "arm": arm_label(s.arm),
                "seed": s.seed,
                "stream": stream,
                "index": s.index,
                "tokens_before": before,
                "cap": cap,
                "token_ids": list(d.token_ids or []),
                "text": text[len(s.text) :],
                "finish_reason": finish,
                "error": d.error,
                "outcome": verdict.outcome,
                "at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
            }
            with open(out / EXTENDED, "a", encoding="utf-8") as f:
                f.write(json.dumps(row) + "\n")

    return write


def ended_at_cap(run: Any, extended: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per arm label of ``run``: ``n`` (draws without error), ``ended`` within the run's cap, ``cut``,
    ``continued`` (cut draws with an extension record), ``ended_later`` (of those, ended within the larger
    cap), ``works_later`` (of those, calls whose edit works at the larger cap), the shares ``ended_share`` and ``ended_share_at_cap`` (the cut draws not continued counted as
    not ended), whether each meets ``MIN_ENDED``, and ``cap`` (the larger cap; None without records)."""
    ext = {r["key"]: r for r in extended}
    out: dict[str, dict[str, Any]] = {}
    for s in run.samples:
        if s.error:
            continue
        row = out.setdefault(
            arm_label(s.arm),
            {"n": 0, "ended": 0, "cut": 0, "continued": 0, "ended_later": 0, "works_later": 0, "cap": None},
        )
        row["n"] += 1
        if s.finish_reason != "length":
            row["ended"] += 1
            continue
        row["cut"] += 1
        e = ext.get(s.key)
        if e is not None:
            row["continued"] += 1
            row["cap"] = e["cap"]
            row["ended_later"] += e["finish_reason"] in _ENDED
            row["works_later"] += bool((e.get("outcome") or {}).get("works"))
    for row in out.values():
        row["ended_share"] = row["ended"] / row["n"]
        row["ended_share_at_cap"] = (row["ended"] + row["ended_later"]) / row["n"]
        row["meets"] = row["ended_share"] >= MIN_ENDED
        row["meets_at_cap"] = row["ended_share_at_cap"] >= MIN_ENDED
    return out
