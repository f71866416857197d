"""Strict's cost and the harness policies that avoid it, side by side (``remedy_table``).

From a run whose arms are loose and masked (strict with each engine, strict-aligned, strict-prefix), every
remedy a harness can adopt, scored the way its user sees the edit (``tooldecode.scoring.outcome``):

- ``loose``: the model's call as it wrote it;
- ``loose+retry``: the harness's default: a call that fails validation is sent back and the model writes
  it again, up to ``max_retries`` times (the next loose samples of the same arm and scenario, in index
  order, stand for the retries); ``retries`` counts them;
- ``loose+repair``: a lenient harness: the argument repairs (aliases, coercions, drop unknown keys, …)
  and, for a call that does not parse, ``json-repair`` first;
- ``strict`` (``strict[engine]`` per engine setting), ``strict-aligned``, ``strict-prefix``: the masked
  arms' calls.

Per (model, level, remedy): invented keys, valid, applies, correct, works, wrong but valid and cut, each a
rate with its cluster-robust interval over scenarios (``stats.cluster_rate``), for all draws and for the
draws that ended before the cap (the completed ones: a selection, since what runs to the cap is not
random); tokens per call (a retry's tokens and an aligned sample's particles included) and calls per
second of decoding.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tooldecode.records import Condition, SampleRecord
from tooldecode.runs import Run, load_run
from tooldecode.stats import cluster_rate

MEASURES = ("invented", "valid", "applies", "correct", "works", "wrong_but_valid", "cut")
MAX_RETRIES = 2


def remedy_name(arm: Condition) -> str | None:
    """The remedy a masked arm stands for (None for loose arms: they give three remedies)."""
    mode = arm.mode
    if mode == "strict":
        engine = arm.engine or "xgrammar"
        return "strict" if engine == "xgrammar" else f"strict[{engine}]"
    if mode in ("strict-aligned", "strict-prefix", "strict-spec"):
        return str(mode)
    return None


def _row(outcome: dict, verdict: dict, tokens: int, wall: float) -> dict[str, Any]:
    return {
        "invented": bool(verdict.get("invented_keys")),
        **{k: bool(outcome.get(k)) for k in MEASURES if k != "invented"},
        "tokens": tokens,
        "wall": wall,
    }


def _tokens(record: SampleRecord) -> int:
    parts = record.particles or {}
    if parts.get("tokens"):
        return int(parts["tokens"])
    return len(record.token_ids or [])


def _repaired(record: SampleRecord, manifest: dict, scenario: Any) -> tuple[dict, dict]:
    """(outcome, verdict-like dict) of a loose record after the lenient harness's repairs."""
    from tooldecode.repair import repair_arguments, repair_text
    from tooldecode.repair.jsonrepair import json_repair_call
    from tooldecode.scoring import edit_outcome, record_context

    tools, wire, expected, _ = record_context(record, manifest)
    text = record.call_text
    res = repair_text(text, tools, wire=wire, expected_tool=expected)
    args, valid, name = res.arguments, res.valid, res.tool or expected
    if args is None:  # the call does not parse: json-repair on the text, then the argument repairs
        try:
            jr = json_repair_call(text, tools, wire=wire, expected_tool=expected)
        except ImportError:
            jr = {"arguments": None}
        if jr.get("arguments") is not None and jr.get("tool") == expected:
            tool = next(t for t in tools if t.name == expected)
            again = repair_arguments(jr["arguments"], tool)
            args, valid, name = again.arguments, again.valid, expected
    tool = next((t for t in tools if t.name == name), None)
    out = edit_outcome(args, tool, scenario, valid=bool(valid)).to_dict()
    out["cut"] = record.finish_reason == "length"
    return out, {"invented_keys": []}


def _wall(records: list[SampleRecord]) -> dict[str, float]:
    """Seconds of decoding per sample (copies of another arm's draws cost 0).

    A draw of filled slots (its ``timing`` names ``slots``) held its slot from ``start_s`` to ``end_s``
    after its prompt's ``prefill_s``, sharing every step with the other slots: its share is that time over
    the slots. Any other draw: its sampling call's wall time (the last ``end_s``) shared among the call's
    samples (a call = the records of one arm, scenario and seed)."""
    calls: dict[tuple, list[SampleRecord]] = defaultdict(list)
    out: dict[str, float] = {}
    for r in records:
        if r.copy_of:
            continue
        t = r.timing or {}
        if t.get("slots"):
            held = (
                float(t.get("end_s") or 0.0)
                - float(t.get("start_s") or 0.0)
                + float(t.get("prefill_s") or 0.0)
            )
            out[r.key] = max(0.0, held) / float(t["slots"])
        else:
            calls[(r.arm.backend, r.label, r.scenario, r.seed)].append(r)
    for recs in calls.values():
        end = max(float((r.timing or {}).get("end_s") or 0.0) for r in recs)
        for r in recs:
            out[r.key] = end / len(recs)
    return out


def draw_outcome(run: Run, record: SampleRecord) -> tuple[dict[str, Any], dict[str, Any]]:
    """The outcome of one draw of ``run`` as its user sees the edit (``scoring.stored_outcome``: valid,
    applies, correct, works, wrong but valid, cut) and its stored verdict (``{}`` where it has none)."""
    from tooldecode.scoring import record_context, stored_outcome

    verdict = run.verdict(record)
    v = verdict.to_json() if verdict is not None else {}
    tools, _, _, scenario = record_context(record, run.manifest)
    return stored_outcome(v, scenario, tools, record.finish_reason), v


def remedy_rows(
    run: Run | str | Path, *, max_retries: int = MAX_RETRIES, remedies: Sequence[str] | None = None
) -> list[dict[str, Any]]:
    """One row per call of every remedy of a run (a loaded run or its folder): ``{model, level, remedy,
    scenario, retries, <MEASURES>, tokens, wall}``; only those named in ``remedies`` where given (two
    runs that share arms on the same streams, E17 and E18, each give the remedies the other lacks)."""
    from tooldecode.scoring import record_context

    if not isinstance(run, Run):
        run = load_run(run)
    wall = _wall(run.samples)
    want_loose = remedies is None or bool({"loose", "loose+repair", "loose+retry"} & set(remedies))
    rows: list[dict[str, Any]] = []
    loose: dict[tuple, list[SampleRecord]] = defaultdict(list)

    def outcome_of(r: SampleRecord) -> tuple[dict, dict]:
        return draw_outcome(run, r)

    for r in run.samples:
        if r.error and not r.particles:
            continue
        arm = r.arm
        head = {"model": arm.model, "level": arm.level, "scenario": r.scenario}
        if arm.mode == "loose":
            if want_loose:
                loose[(str(arm.model), str(arm.level), r.scenario, r.seed)].append(r)
            continue
        name = remedy_name(arm)
        if name is None:
            continue
        if r.error:  # strict-aligned's sampler gave up at its budget: no call, cut by the budget
            o, v = dict.fromkeys(MEASURES, False) | {"cut": True}, {}
        else:
            o, v = outcome_of(r)
        walks = (r.particles or {}).get("drawn") if name == "strict-aligned" else None
        rows.append(
            {
                **head,
                "remedy": name,
                "retries": 0,
                **_row(o, v, _tokens(r), wall.get(r.key, 0.0)),
                **({"walks": int(walks), "accepted": not r.error} if walks is not None else {}),
            }
        )
    for recs in loose.values():
        recs.sort(key=lambda r: r.index)
        arm = recs[0].arm
        head = {"model": arm.model, "level": arm.level, "scenario": recs[0].scenario}
        scored = [outcome_of(r) for r in recs]
        _, _, _, scenario = record_context(recs[0], run.manifest)
        for r, (o, v) in zip(recs, scored, strict=True):
            t, w = _tokens(r), wall.get(r.key, 0.0)
            rows.append({**head, "remedy": "loose", "retries": 0, **_row(o, v, t, w)})
            ro, rv = _repaired(r, run.manifest, scenario)
            rows.append({**head, "remedy": "loose+repair", "retries": 0, **_row(ro, rv, t, w)})
        k = 0
        while k < len(recs):  # a call and its retries: the next samples of the same arm and scenario
            used = [k]
            while (
                not scored[used[-1]][0].get("valid") and len(used) <= max_retries and used[-1] + 1 < len(recs)
            ):
                used.append(used[-1] + 1)
            o, v = scored[used[-1]]
            t = sum(_tokens(recs[j]) for j in used)
            w = sum(wall.get(recs[j].key, 0.0) for j in used)
            rows.append({**head, "remedy": "loose+retry", "retries": len(used) - 1, **_row(o, v, t, w)})
            k = used[-1] + 1
    return rows if remedies is None else [r for r in rows if r["remedy"] in remedies]


def _walks(rs: Sequence[dict[str, Any]]) -> dict[str, float | None]:
    walked = [r for r in rs if "walks" in r]
    total = sum(r["walks"] for r in walked)
    if not walked or total == 0:
        return {"walks_per_call": None, "acceptance": None, "abandoned": 0}
    return {
        "walks_per_call": total / len(walked),
        "acceptance": sum(bool(r["accepted"]) for r in walked) / total,
        "abandoned": sum(1 for r in walked if not r["accepted"]),
    }


def remedy_table(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (model, level, remedy): each measure over all calls and over the calls that ended before the cap
    (``ClusterRate``s over scenarios), tokens per call, calls per second, retries per call, and for
    strict-aligned the sampler's walks per call, acceptance rate (accepted samples over walks; None
    for the other remedies) and the calls it abandoned at its budget (``abandoned``: counted as cut, so
    "correct (completed)" leaves them out)."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        groups[(str(r["model"]), str(r["level"]), r["remedy"])].append(r)
    out = []
    for (model, level, remedy), rs in sorted(groups.items()):
        clusters = [r["scenario"] for r in rs]
        done = [r for r in rs if not r["cut"]]
        wall = sum(r["wall"] for r in rs)
        out.append(
            {
                "model": model,
                "level": level,
                "remedy": remedy,
                "n": len(rs),
                "all": {m: cluster_rate([r[m] for r in rs], clusters) for m in MEASURES},
                "completed": {
                    m: cluster_rate([r[m] for r in done], [r["scenario"] for r in done])
                    for m in MEASURES
                    if m != "cut"
                },
                "tokens_per_call": sum(r["tokens"] for r in rs) / len(rs),
                "calls_per_s": len(rs) / wall if wall > 0 else None,
                "retries_per_call": sum(r["retries"] for r in rs) / len(rs),
                **_walks(rs),
            }
        )
    return out


def format_remedies(table: Sequence[dict[str, Any]]) -> str:
    """The decision table as Markdown: one row per (model, level, remedy), the rates with their intervals."""

    def pct(c: Any) -> str:
        return f"{100 * c.rate:.1f} [{100 * c.lo:.1f}, {100 * c.hi:.1f}]" if c.n else "n/a"

    head = "| model | level | remedy | n | invented | valid | applies | correct | works | wrong but valid | cut | correct (completed) | tokens/call | calls/s | retries/call | walks/call (accepted) |"
    lines = [head, "|" + "---|" * 16]
    for t in table:
        a = t["all"]
        cps = f"{t['calls_per_s']:.3g}" if t["calls_per_s"] else "n/a"
        lines.append(
            f"| {t['model']} | {t['level']} | {t['remedy']} | {t['n']} | "
            + " | ".join(pct(a[m]) for m in MEASURES)
            + f" | {pct(t['completed']['correct'])} | {t['tokens_per_call']:.1f} | {cps} | {t['retries_per_call']:.2f} | "
            + (
                f"{t['walks_per_call']:.1f} ({100 * t['acceptance']:.1f}%"
                + (f"; {t['abandoned']} abandoned at the budget" if t.get("abandoned") else "")
                + ")"
                if t.get("walks_per_call") is not None
                else "—"
            )
            + " |"
        )
    return "\n".join(lines) + "\n"
