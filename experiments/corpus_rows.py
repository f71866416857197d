"""The study's corpus rows, read over every committed run: what follows newText when the model continues
(the zoo), which arms and draws are copies, and what a lenient repair rescues."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from experiments.common import (
    CR,
    STUDY_MODEL,
    crate,
    distinct_draws,
    identical_arms,
    keys_of,
    kinds_text,
    l2,
    outcomes_text,
    sample_continuation,
    sample_outcome,
    short,
    source,
)
from tooldecode.records import SampleRecord
from tooldecode.runs import Run


def row_zoo(runs: dict[str, Run]) -> dict | None:
    pool: list[dict] = []
    used = []
    left_out = []
    for run in sorted(runs.values(), key=lambda r: r.name):
        ss = l2(run, mode="loose", model=STUDY_MODEL)
        if ss and run.shared_streams:
            left_out.append(run.name)
        elif ss:
            pool += ss
            used.append(run)
    pool = distinct_draws(pool)
    if not pool:
        return None
    cont = [s for s in pool if sample_continuation(s).group == "continue"]
    keys = keys_of(cont, ("repeat", "wrong_level", "schema_word", "invented"))
    extra = [
        s for s in cont if sample_continuation(s).kind in ("repeat", "wrong_level", "schema_word", "invented")
    ]
    inv = crate(extra, lambda s: sample_continuation(s).kind == "invented") if extra else None
    src = crate(extra, lambda s: sample_outcome(s) == "source_shaped") if extra else None
    dup = crate(extra, lambda s: sample_outcome(s) == "duplicate") if extra else None
    if inv is None:
        verdict = "not measured: no extra key in the pooled draws"
    elif inv.hi < 0.5:
        verdict = (
            f"contradicts: invented names are {inv} of the extra keys; the rest repeat a present key "
            "or copy a word of the tool schema"
        )
    elif inv.lo > 0.5:
        verdict = f"reproduces: invented names are {inv} of the extra keys"
    else:
        verdict = f"inconclusive: invented names are {inv} of the extra keys"
    return {
        "observation": "What follows newText when the model continues: a zoo of invented names, a repeat, or the schema's words?",
        "claim": "The source's calls carried ~40 distinct invented keys, always trailing after newText "
        "(docs/background.md): the model has no name for the extra field and samples one each time.",
        "measured": f"{short(STUDY_MODEL)}, every L2 loose draw of the committed runs, copies removed "
        f"({len(pool)} distinct draws; arms differ in history, thinking, prior, schema view and seed): "
        f"{kinds_text(pool)}. Keys (repeat / wrong level / schema word / invented): {dict(keys.most_common(12))}. "
        f"What the call does after an extra key: {outcomes_text(extra)}. Interval: {CR}."
        + (
            f" Left out (shared random streams, no cluster interval): {', '.join(left_out)}."
            if left_out
            else ""
        ),
        "verdict": verdict,
        "source": source(used),
        "headline": f"invented names: {inv} of {len(extra)} extra keys" if inv else "no extra key",
        "headline_source": f"source-shaped: {src} of the extra keys; duplicates {dup}"
        if extra
        else "no extra key",
        "headline_source_verdict": "descriptive",
        "summary": f"what follows newText when {short(STUDY_MODEL)} continues ({len(pool)} distinct loose "
        f"draws): **{verdict}**",
    }


def row_duplicates(runs: dict[str, Run]) -> dict:
    parts = []
    used = []
    pooled: list[SampleRecord] = []
    for run in sorted(runs.values(), key=lambda r: r.name):
        ss = [s for s in run.samples if not s.error]
        if not ss:
            continue
        pooled += [replace(s, arm=replace(s.arm, extra={**s.arm.extra, "run": run.name})) for s in ss]
        groups = identical_arms(ss)
        d = len(distinct_draws(ss))
        if groups or d < len(ss):
            used.append(run)
            g = "; ".join(" = ".join(x) for x in groups)
            parts.append(
                f"{run.name}: {d} distinct of {len(ss)} samples" + (f" (identical arms: {g})" if g else "")
            )
    across = [g for g in identical_arms(pooled) if len({x.split("run=")[1].split(",")[0] for x in g}) > 1]
    cross = "; ".join(
        " = ".join(sorted({x.split("run=")[1].split(",")[0] + ":" + _armshort(x) for x in g})) for g in across
    )
    total = len(distinct_draws(pooled))
    return {
        "observation": "Copies: arms whose prompts render byte-identically, and repeated T=0 draws",
        "claim": "Pooled figures count distinct draws (docs/report.md).",
        "measured": "; ".join(parts)
        + (
            f". Across runs, the same arm under different names (run once, reported once): {cross}"
            if cross
            else ""
        )
        + f". All runs: {total} distinct draws of {len(pooled)} samples.",
        "verdict": "descriptive (every figure above counts distinct draws)",
        "source": source(used),
    }


_STRICT_MODES = ("strict", "strict-spec", "strict-aligned")


def row_repair(runs: dict[str, Run]) -> dict | None:
    """Lenient side as tolerant clients get it: loose calls failing strict validation, repaired by the
    project's own repairs and by json-repair; rescued (valid, payload byte-correct) vs silent corruption
    (valid-looking, payload cut or wrong), per model, over the distinct draws of every committed run."""
    from tooldecode.repair import json_repair_row, json_repair_version, repair_record

    per: dict[str, list[SampleRecord]] = defaultdict(list)
    marks: dict[int, dict[str, bool]] = {}  # id of a failing sample -> what the repairs made of it
    used: list[Run] = []
    left_out: list[str] = []
    for run in sorted(runs.values(), key=lambda r: r.name):
        loose = [s for s in run.samples if s.arm.mode == "loose" and not s.error]
        loose = [s for s in loose if s.arm.backend != "openai"]
        if not loose:
            continue
        if run.shared_streams:
            left_out.append(run.name)
            continue
        used.append(run)
        for s in loose:
            own = repair_record(s, run.manifest, verdict=run.verdict(s))
            if "skipped" in own or own["strict_verdict"] == "valid":
                continue
            jr = json_repair_row(s, run.manifest)
            per[str(s.arm.model)].append(s)
            marks[id(s)] = dict(
                own_ok=own["valid"] and own["payload_ok"], own_bad=own["valid"] and not own["payload_ok"],
                jr_ok=jr["valid"] and jr["payload_ok"], jr_bad=jr["valid"] and not jr["payload_ok"],
            )  # fmt: skip
    if not per:
        return None
    parts = []
    head = ""

    def rate(rows: list[SampleRecord], what: str) -> object:
        return crate(rows, lambda r: marks[id(r)][what])

    for model, rows in sorted(per.items()):
        n = len(distinct_draws(rows))
        if model == STUDY_MODEL:
            head = (
                f"{short(model)}: json-repair rescues {rate(rows, 'jr_ok')} of {n} failing loose "
                f"calls and silently corrupts {rate(rows, 'jr_bad')}"
            )
        parts.append(
            f"{short(model)} ({n} failing loose calls): json-repair rescues {rate(rows, 'jr_ok')}, "
            f"silently corrupts {rate(rows, 'jr_bad')}; own repairs rescue "
            f"{rate(rows, 'own_ok')}, corrupt {rate(rows, 'own_bad')}"
        )
    return {
        "observation": "Loose + repair as tolerant clients run it: does json-repair rescue the loose calls that fail?",
        "claim": "A lenient harness can rescue what the model gets wrong (JSON syntax: brackets in the wrong "
        "number or order) instead of constraining decoding; a repair that produces a valid-looking call "
        "with a cut or wrong payload is a silent corruption, not a rescue.",
        "measured": "; ".join(parts)
        + f" (json-repair {json_repair_version()}; every committed run's loose draws, "
        f"copies removed). Interval: {CR}. `python experiments/e15_repair.py` prints the same per model with "
        "strict decoding's valid + payload-correct rate beside it."
        + (
            f" Left out (shared random streams, no cluster interval): {', '.join(left_out)}."
            if left_out
            else ""
        ),
        "verdict": "descriptive (rescues and silent corruptions counted separately above)",
        "headline": head,
        "source": source(used),
    }


def _armshort(label: str) -> str:
    keep = [
        p
        for p in label.split(",")
        if p.split("=")[0] in ("history", "thinking", "prior", "schema_view", "mode", "seed")
    ]
    return ",".join(p for p in keep if not p.startswith("run="))
