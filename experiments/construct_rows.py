"""FINDINGS rows of the construct, extended (docs/organisms.md): whether a model writes the nested call
at all, and what each undeclared key of an ``edits[]`` item looks like, for every run of a spec whose
models include an organism (``construct_rows``); the competence note every other row of such a spec
carries beside its figure (``competence_note``); and the judge of the second generation's competence
precondition (``pred_competence``).

Competence is read per model from its distinct loose draws: the L2 and L1 calls that parse
(``tooldecode.measures.call_parses``) and the L2 draws that close the forced newText with the flat
call's ``"}}`` (``flat_closer``), each with its cluster-robust interval over scenarios. The keys and
their kinds come from ``tooldecode.construct``.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from experiments.common import short
from tooldecode.construct import (
    NAME_KINDS,
    NEVER_SEEN,
    PROMPT_WORD,
    STRAY_POOL,
    TRAINING_TEXT,
    NameSources,
    UndeclaredKey,
    chains,
    kind_counts,
    name_richness,
    prompt_words,
    scan_items,
    sources_for,
    undeclared_keys,
)
from tooldecode.measures import array_closed_by_brace, call_parses, distinct_draws, flat_closer
from tooldecode.models import ORGANISM_PREFIX
from tooldecode.records import SampleRecord
from tooldecode.runs import Run
from tooldecode.stats import ClusterRate, cluster_rate, paired_clusters

CR = "cluster-robust CR1 95% CI over scenarios"
CHAO = (
    "bias-corrected Chao1 with its 95% log-normal interval (tooldecode.stats.chao1), each occurrence "
    "taken as an independent draw"
)


def organism_spec(spec: dict) -> bool:
    """Whether a spec's models include an organism (its runs get the construct rows)."""
    return any(str(m).startswith(ORGANISM_PREFIX) for m in spec.get("models", []))


def draws(run: Run, model: str, level: str | None = None, mode: str = "loose") -> list[SampleRecord]:
    """Distinct draws of ``model`` in ``run`` without an error (one level, or every level)."""
    return distinct_draws(
        [
            s
            for s in run.samples
            if not s.error
            and s.arm.model == model
            and s.arm.mode == mode
            and (level is None or s.arm.level == level)
        ]
    )


def _rate(run: Run, ss: Sequence[SampleRecord], pred: Callable[[SampleRecord], bool]) -> ClusterRate | str:
    """The cluster-robust rate of ``pred`` over ``ss``; counts only (a string) for a run drawn with one
    random stream shared by every scenario."""
    values = [bool(pred(s)) for s in ss]
    if run.shared_streams:
        return f"{sum(values)}/{len(values)} (counts only: shared random streams)"
    return cluster_rate(values, [s.scenario for s in ss])


def competence(run: Run, model: str) -> dict[str, Any]:
    """``L2 parse``, ``L2 flat closer``, ``L2 edits closed by brace`` and ``L1 parse`` of ``model``'s loose
    draws (levels it has), and per level the draws that do not parse and, of them, those the token budget
    cut (``L2 cut``: a pair)."""
    out: dict[str, Any] = {}
    for level in ("L2", "L1"):
        ss = draws(run, model, level)
        if not ss:
            continue
        parses = {s.key: call_parses(s) for s in ss}
        out[f"{level} parse"] = _rate(run, ss, lambda s, ok=parses: ok[s.key])
        if level == "L2":
            out["L2 flat closer"] = _rate(run, ss, lambda s: flat_closer(s.text))
            out["L2 edits closed by brace"] = _rate(run, ss, lambda s: array_closed_by_brace(s.call_text))
        failed = [s for s in ss if not parses[s.key]]
        out[f"{level} cut"] = (sum(s.finish_reason == "length" for s in failed), len(failed))
    return out


def _budget(run: Run) -> str:
    tokens = run.manifest.get("config", {}).get("max_new_tokens")
    return f"the {tokens}-token budget" if tokens else "the token budget"


def _competence_text(run: Run, model: str) -> str:
    c = competence(run, model)
    parts = []
    for level in ("L2", "L1"):
        if f"{level} parse" not in c:
            continue
        cut, failed = c[f"{level} cut"]
        text = f"{level} calls parse {c[f'{level} parse']}" + (
            f" ({cut} of the {failed} that do not were cut by {_budget(run)})" if failed else ""
        )
        if level == "L2":
            text += (
                f", flat-closer bleed {c['L2 flat closer']}, edits[] closed by a brace anywhere "
                f"{c['L2 edits closed by brace']}"
            )
        parts.append(text)
    return f"{short(model)}: " + "; ".join(parts) if parts else ""


def competence_note(run: Any, models: Iterable[str]) -> str:
    """The competence of each of ``models`` (loose) in ``run``, as one sentence to set beside a row's
    figure: a rate of keys read without it hides whether the model could write the call at all."""
    if run is None:
        return ""
    seen, parts = set(), []
    for m in models:
        if m in seen:
            continue
        seen.add(m)
        text = _competence_text(run, m)
        if text:
            parts.append(text)
    if not parts:
        return ""
    return (
        " Competence beside it (loose; calls that parse, L2 draws that close the forced newText with the "
        'flat call\'s "}}", and L2 draws whose call closes edits[] with a "}" where its "]" belongs, '
        f"{CR}): " + "; ".join(parts) + "."
    )


# --------------------------------------------------------------------------------------------- keys


def model_keys(run: Run, model: str) -> tuple[list[UndeclaredKey], list[Any], NameSources, Any, Any]:
    """(undeclared item keys of ``model``'s loose draws in ``run``, every scanned item as (draw, item),
    the model's name sources, its recipe, its training words)."""
    base, recipe, tw = sources_for(model)
    keys: list[UndeclaredKey] = []
    items: list[Any] = []
    rendered = True
    for s in draws(run, model):
        prompt = prompt_words(s, run.manifest)
        rendered = rendered and prompt is not None
        keys += undeclared_keys(s, NameSources(base.declared, prompt, base.stray_pool, base.training))
        items += [(s.key, it) for it in scan_items(s.call_text)]
    # the model's sources as the row states them: prompt words known for every draw, or not
    shown = NameSources(base.declared, frozenset() if rendered else None, base.stray_pool, base.training)
    return keys, items, shown, recipe, tw


def _shown(counts: list[tuple[str, int]]) -> str:
    """Names and counts as a row prints them (a name longer than 40 characters cut, with its length)."""
    return "{" + ", ".join(f"{_cut(name)}: {n}" for name, n in counts) + "}"


def _cut(name: str) -> str:
    return repr(name) if len(name) <= 40 else repr(name[:32]) + f"… ({len(name)} characters)"


def _median(values: list[int]) -> str:
    return f"{statistics.median(values):g}" if values else "n/a"


def _counts(c: Counter, order: Sequence[Any] | None = None) -> str:
    keys = list(order) if order is not None else [k for k, _ in c.most_common()]
    return ", ".join(f"{k} {c[k]}" for k in keys if c[k])


def _keys_text(keys: list[UndeclaredKey], items: list[Any], n_draws: dict[str, int]) -> str:
    per_level = Counter(k.level for k in keys)
    lengths = chains(keys)
    with_keys = {(k.sample, k.item) for k in keys}
    long_with = [
        len(it.new_text) for key, it in items if (key, it.index) in with_keys and it.new_text is not None
    ]
    long_without = [
        len(it.new_text) for key, it in items if (key, it.index) not in with_keys and it.new_text is not None
    ]
    chained = sum(n for length, n in lengths.items() if length >= 2)
    return (
        "Undeclared item keys (every key of every edits[] item of the first call that the item schema does "
        "not declare, the call read leniently: calls that do not parse included; "
        + ", ".join(f"{lv} {n_draws[lv]} draws" for lv in sorted(n_draws))
        + f"): {len(keys)} ("
        + ", ".join(f"{lv} {per_level[lv]}" for lv in sorted(per_level))
        + f"), {sum(k.parses for k in keys)} of them in calls that parse, in {len(with_keys)} items; "
        f"items by chain length (undeclared keys per item) {_counts(lengths, sorted(lengths))}: "
        f"{chained} of {len(with_keys)} items carry 2 or more; keys by place: {sum(k.last for k in keys)} the "
        f"item's last key, {sum(k.after == 'newText' for k in keys)} right after newText, "
        f"{sum(k.item == 0 for k in keys)} in the call's first item, "
        f"{sum(k.items > 1 for k in keys)} in calls of 2 or more items; value types {_counts(Counter(k.value_type for k in keys))}; "
        f"newText of their items median {_median(long_with)} characters (items without: {_median(long_without)})."
    )


def _kinds_text(keys: list[UndeclaredKey], sources: NameSources, recipe: Any, tw: Any) -> str:
    first, every = kind_counts(keys)
    absent = sources.absent
    kinds = ", ".join(
        f"{kind} {first[kind]}" + (f" (applies to {every[kind]})" if every[kind] != first[kind] else "")
        for kind in NAME_KINDS
        if kind not in absent
    )
    pool_names = Counter(k.name for k in keys if k.kind == STRAY_POOL)
    trained = Counter(k.name for k in keys if k.kind == TRAINING_TEXT).most_common(6)
    text = (
        f" Name kinds (the first that applies, in the order {', '.join(NAME_KINDS)}): {kinds}"
        + (f"; pool names written: {_shown(pool_names.most_common())}" if pool_names else "")
        + (f"; most written {TRAINING_TEXT}: {_shown(trained)}" if trained else "")
        + "."
    )
    if recipe is None:
        text += (
            f" No recipe: the {STRAY_POOL} and {TRAINING_TEXT} kinds are absent (a name they would take "
            f"is {NEVER_SEEN})."
        )
    else:
        if STRAY_POOL in absent:
            text += f" The recipe lets no stray key through (stray_share 0): no {STRAY_POOL} kind."
        text += (
            f" Training text: recipe {recipe.name}, {tw.sessions} sessions regenerated ({tw.stray_sessions} with "
            f"a stray key, {tw.flagged_sessions} with replace_all; the standard library of Python {tw.python})."
        )
    if PROMPT_WORD in absent:
        text += f" A draw's prompt could not be rendered: no {PROMPT_WORD} kind for it."
    return text


def _richness_text(keys: list[UndeclaredKey]) -> str:
    scenarios = len({k.scenario for k in keys})
    out = []
    for label, kind in (("all", None), (NEVER_SEEN, NEVER_SEEN)):
        r = name_richness(keys, kind)
        if r.occurrences == 0:
            out.append(f"{label}: none")
            continue
        out.append(
            f"{label}: {r.observed} distinct in {r.occurrences}, Chao1 {r.estimate:.1f} [{r.lo:.1f}, {r.hi:.1f}] "
            f"({r.singletons} seen once, {r.doubletons} twice)"
        )
    top = Counter(k.name for k in keys if k.kind == NEVER_SEEN).most_common(8)
    return (
        f" Distinct names ({CHAO}; from {scenarios} scenarios): "
        + "; ".join(out)
        + (f"; most written {NEVER_SEEN}: {_shown(top)}" if top else "")
        + "."
    )


def row_construct(spec: dict, run: Run, model: str) -> dict[str, str]:
    """One row: ``model``'s competence and undeclared item keys in ``run`` (loose draws)."""
    keys, items, sources, recipe, tw = model_keys(run, model)
    n_draws = {lv: len(draws(run, model, lv)) for lv in ("L1", "L2")}
    n_draws = {lv: n for lv, n in n_draws.items() if n}
    comp = _competence_text(run, model)
    measured = f"Competence (loose, {CR}): {comp.split(': ', 1)[1]}. " + _keys_text(keys, items, n_draws)
    if keys:
        measured += _kinds_text(keys, sources, recipe, tw) + _richness_text(keys)
    reading = ""
    if keys:
        reading = f": {sum(k.parses for k in keys)} of the {len(keys)} keys are in calls that parse"
    comp = competence(run, model)
    parse = comp.get("L2 parse")
    if isinstance(parse, ClusterRate) and parse.n and parse.rate < 0.5:
        cut, failed = comp["L2 cut"]
        reading += f"{'; ' if reading else ': '}fewer than half of its L2 loose calls parse ({100 * parse.rate:.1f}%)"
        if 2 * cut >= failed:
            reading += (
                f", and {_budget(run)} cut most of the others ({cut} of {failed}): this run cannot say whether "
                "it writes the nested call"
            )
        else:
            reading += (
                f" and the token budget cut few of the others ({cut} of {failed}): its keys come mostly from calls "
                "it could not finish, and its contrasts read as of a model that cannot write the nested call"
            )
    head = "; ".join(
        x
        for x in (
            f"L2 loose calls parse {parse}" if isinstance(parse, ClusterRate) else "",
            f"flat-closer bleed {comp['L2 flat closer']}" if "L2 flat closer" in comp else "",
            (
                f"{len(keys)} undeclared item keys, {name_richness(keys, None).observed} distinct names "
                f"({sum(k.parses for k in keys)} in calls that parse)"
                if keys
                else "no undeclared item key"
            ),
        )
        if x
    )
    return {
        "observation": f"{spec['name']}: the construct, extended: {short(model)} (loose)",
        "headline": head,
        "claim": (
            "Descriptive, no prediction: whether the model writes the nested call at all, and what each "
            "undeclared key of an edits[] item looks like (its item, its chain, its value) and where its name "
            "could come from. Definitions: docs/organisms.md, 'The construct, extended' (tooldecode/construct/)."
        ),
        "measured": measured,
        "verdict": "descriptive" + reading,
        "source": run.name,
    }


def construct_rows(specs: Iterable[tuple[str, dict]], runs: dict[str, Run]) -> list[dict[str, str]]:
    """One row per model with loose draws in every run of every spec whose models include an organism."""
    out = []
    for _, spec in specs:
        if not organism_spec(spec):
            continue
        for run in sorted((r for r in runs.values() if r.spec == spec["name"]), key=lambda r: r.name):
            models = sorted({s.arm.model for s in run.samples if s.arm.mode == "loose" and not s.error})
            for model in models:
                out.append(row_construct(spec, run, model))
    return out


# --------------------------------------------------------------------------------------------- judge


def _per_scenario(ss: Sequence[SampleRecord]) -> dict[str, float]:
    by: dict[str, list[bool]] = {}
    for s in ss:
        by.setdefault(s.scenario, []).append(call_parses(s))
    return {k: sum(v) / len(v) for k, v in by.items()}


def pred_competence(p: dict, run: Run) -> tuple[str, str]:
    """The competence precondition: each of ``models`` parses at ``level`` (loose) at least as often as
    ``base`` (the paired difference's interval reaches 0 or above); the goal, organism / ``goal`` at
    least ``min_ratio_to_goal`` (the point ratio); the flat-closer bleed beside each."""
    level, base, goal = str(p.get("level", "L2")), str(p["base"]), str(p.get("goal", ""))
    floor = float(p.get("min_ratio_to_goal", 0.8))
    vb = _per_scenario(draws(run, base, level))
    vg = _per_scenario(draws(run, goal, level)) if goal else {}
    parts, failed, short_of_goal = [], [], []
    for m in p.get("models", []):
        vm = _per_scenario(draws(run, m, level))
        shared = sorted(set(vm) & set(vb))
        if len(shared) < 2:
            parts.append(f"{short(m)}: fewer than 2 scenarios paired with the base")
            failed.append(short(m))
            continue
        cmp = paired_clusters({s: vm[s] for s in shared}, {s: vb[s] for s in shared})
        hi = cmp.hi if math.isfinite(cmp.hi) else cmp.diff
        text = f"{short(m)} {_competence_text(run, m).split(': ', 1)[1]}; minus the base {cmp.diff:+.3f} [{cmp.lo:+.3f}, {cmp.hi:+.3f}]"
        if hi < 0:
            failed.append(short(m))
        gshared = sorted(set(vm) & set(vg))
        if len(gshared) >= 2:
            g = paired_clusters({s: vm[s] for s in gshared}, {s: vg[s] for s in gshared})
            text += f", / {short(goal)} ×{g.ratio:.2f} [{g.ratio_lo:.2f}, {g.ratio_hi:.2f}]"
            if not (g.ratio >= floor):
                short_of_goal.append(short(m))
        parts.append(text)
    measured = (
        f"{level} loose, paired over scenarios (t intervals): "
        + "; ".join(parts)
        + f". Base: {_competence_text(run, base)}"
        + (f"; goal: {_competence_text(run, goal)}" if goal else "")
        + "."
    )
    goal_text = (
        f"; goal (×{floor:g} of {short(goal)}) missed by {', '.join(short_of_goal)}"
        if short_of_goal
        else (f"; every one within ×{floor:g} of {short(goal)}" if goal else "")
    )
    if failed:
        return measured, (
            f"does not hold: {', '.join(failed)} parse(s) less often than the base (their contrasts read as of an "
            f"organism that cannot write the nested call){goal_text}"
        )
    return (
        measured,
        f"holds: every organism parses at least as often as the base (within the interval){goal_text}",
    )


__all__ = [
    "competence",
    "competence_note",
    "construct_rows",
    "draws",
    "model_keys",
    "organism_spec",
    "pred_competence",
    "row_construct",
]
