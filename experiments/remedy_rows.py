"""FINDINGS rows of strict's cost sampled (E17, E18, E18-engines; docs/strict-cost.md): did the edit work.

The three specs draw on the same scenarios, cap and per-scenario streams, each what the others lack
(``tooldecode.distortion.remedies``): strict and strict-aligned come from E17, loose (with the retry and
repair remedies read from it) from the run with the most loose draws of the model (E18 draws 12 where
E17 draws 8, the first 8 on the same streams), strict-prefix from E18, the engines' own defaults from
E18-engines. Every call is one row of ``remedy_rows``; ``remedy_effects`` turns them into FINDINGS rows:

- the claim rows, per model and level, each a paired comparison over scenarios (``stats.paired_clusters``
  of the per-scenario rates, judged by ``stats.judge_effect`` on the difference scale, direction only,
  Holm across all of them):
  - E17: strict's P(wrong but valid) above loose's, on all draws and on the draws that ended before the
    cap (the completed ones), and strict-aligned's above loose's on all draws;
  - E18: strict-prefix's P(correct) above strict's;
- one descriptive row per model and level: P(correct) and P(cut) of every remedy, with intervals.

An event is a call that shows the measure, in either arm.
"""

from __future__ import annotations

import math
import tomllib
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from experiments.common import short, source
from tooldecode.runs import Run
from tooldecode.stats import EffectClaim, cluster_rate, holm, judge_effect, paired_clusters

ROOT = Path(__file__).resolve().parent
SPECS = {"e17": "e17-strict-cost", "e18": "e18-remedies", "engines": "e18-remedies-engines"}
# (spec key, label, remedy a, remedy b, measure, completed only, claimed direction)
COMPARISONS: tuple[tuple[str, str, str, str, str, bool, int], ...] = (
    (
        "e17",
        "strict's P(wrong but valid) vs loose's, all draws",
        "strict",
        "loose",
        "wrong_but_valid",
        False,
        +1,
    ),
    (
        "e17",
        "strict's P(wrong but valid) vs loose's, draws that ended before the cap",
        "strict",
        "loose",
        "wrong_but_valid",
        True,
        +1,
    ),
    (
        "e17",
        "strict-aligned's P(wrong but valid) vs loose's, all draws",
        "strict-aligned",
        "loose",
        "wrong_but_valid",
        False,
        +1,
    ),
    (
        "e18",
        "strict-prefix's P(correct) vs strict's, all draws",
        "strict-prefix",
        "strict",
        "correct",
        False,
        +1,
    ),
)
ORDER = ("loose", "loose+retry", "loose+repair", "strict", "strict-prefix", "strict-aligned")
METHOD = "per-scenario rates of the sampled calls, paired over scenarios: the mean difference with its t interval and the sign-flip p"


def _per_scenario(calls: Iterable[dict], measure: str) -> dict[str, float]:
    by: dict[str, list[bool]] = defaultdict(list)
    for c in calls:
        by[c["scenario"]].append(bool(c[measure]))
    return {s: sum(v) / len(v) for s, v in by.items()}


def _pct(c: Any) -> str:
    return f"{100 * c.rate:.1f}% [{100 * c.lo:.1f}, {100 * c.hi:.1f}] (n={c.n})" if c.n else "n/a"


#: said of a wrong-but-valid row where no call of either arm is correct: the measure is then validity
BY_CONSTRUCTION = (
    "; by construction here: no call of either arm is correct, so 'wrong but valid' is 'valid', and a "
    "masked arm's calls are valid by construction (strict-aligned's always, strict's unless cut): the row "
    "says the mask turns invalid calls into valid wrong ones, not that it costs correct edits"
)


def remedy_effects(
    calls: Sequence[dict], claims: dict[str, str], sources: dict[str, str]
) -> list[dict[str, Any]]:
    """FINDINGS rows from the per-call rows of ``tooldecode.distortion.remedies.remedy_rows`` (``model``,
    ``level``, ``remedy``, ``scenario``, the measures): the claim rows of ``COMPARISONS`` (Holm across all
    of them; ``claims`` gives each spec key's claim text) and one descriptive row per model and level.
    ``sources`` gives the source line per model."""
    groups: dict[tuple[str, str, str], list[dict]] = defaultdict(list)
    for c in calls:
        groups[(str(c["model"]), str(c["level"]), c["remedy"])].append(c)
    cells = sorted({(m, lv) for m, lv, _ in groups})
    tested: list[dict] = []
    described: list[dict] = []
    for model, level in cells:
        for key, label, a, b, measure, completed, sign in COMPARISONS:
            ca, cb = groups.get((model, level, a), []), groups.get((model, level, b), [])
            if completed:
                ca, cb = [c for c in ca if not c["cut"]], [c for c in cb if not c["cut"]]
            if not ca or not cb:
                continue
            va, vb = _per_scenario(ca, measure), _per_scenario(cb, measure)
            shared = set(va) & set(vb)
            events = sum(1 for c in (*ca, *cb) if c["scenario"] in shared and c[measure])
            clusters = len({c["scenario"] for c in (*ca, *cb) if c["scenario"] in shared and c[measure]})
            tested.append(
                {
                    "observation": f"{SPECS[key]}: {short(model)}: {label} ({level}, sampled)",
                    "claim": f"{claims.get(key, '')} Tested here: a {'rise' if sign > 0 else 'fall'} "
                    "(difference, size not stated).",
                    "source": sources.get(model, ""),
                    "_cmp": paired_clusters(va, vb),
                    "_claim": EffectClaim("difference", None, sign=sign),
                    "_events": (events, clusters),
                    "_extra": f" {a}: {len(ca)} calls, {b}: {len(cb)} calls"
                    + (" (the draws that ended before the cap: a selection)" if completed else "")
                    + ".",
                    "_by_construction": measure == "wrong_but_valid"
                    and not any(c["correct"] for c in (*ca, *cb) if c["scenario"] in shared),
                }
            )
        parts = []
        for remedy in sorted(
            {r for m, lv, r in groups if (m, lv) == (model, level)},
            key=lambda r: (ORDER.index(r) if r in ORDER else len(ORDER), r),
        ):
            cs = groups[(model, level, remedy)]
            clusters_ = [c["scenario"] for c in cs]
            correct = cluster_rate([c["correct"] for c in cs], clusters_)
            cut = cluster_rate([c["cut"] for c in cs], clusters_)
            parts.append(f"{remedy} {_pct(correct)}, cut {100 * cut.rate:.1f}%")
        described.append(
            {
                "observation": f"strict's cost sampled: {short(model)}: P(correct) per remedy ({level})",
                "claim": "descriptive: the decision table's correct edits, with the share each remedy's calls "
                "ran to the cap beside them",
                "measured": "; ".join(parts) + ". Intervals: cluster-robust CR1 95% over scenarios.",
                "verdict": "descriptive",
                "source": sources.get(model, ""),
                "summary": f"{short(model)} {level}: P(correct) "
                + "; ".join(p.split(" [")[0] for p in parts),
            }
        )
    adjusted = holm([r["_cmp"].p_sign_flip for r in tested])
    for r, padj in zip(tested, adjusted, strict=True):
        cmp = r.pop("_cmp")
        events, clusters = r.pop("_events")
        verdict = judge_effect(cmp, r.pop("_claim"), events=events, event_clusters=clusters, p_adjusted=padj)
        adj = (
            "" if math.isnan(padj) else f", Holm-adjusted p = {padj:.3g} over the {len(tested)} sampled rows"
        )
        r["measured"] = f"{cmp}{adj} ({METHOD}).{r.pop('_extra')}"
        r["verdict"] = str(verdict)
        if r.pop("_by_construction"):
            r["verdict"] += BY_CONSTRUCTION
        r["summary"] = f"{r['observation'].split(': ', 1)[1]}: {100 * cmp.diff:+.1f} pts, {verdict.verdict}"
    return tested + described


def _claim(stem: str) -> str:
    path = ROOT / f"{stem}.toml"
    return str(tomllib.loads(path.read_text(encoding="utf-8")).get("claim", "")) if path.is_file() else ""


def remedy_calls(rs: Sequence[Run], runs: dict[str, Run]) -> tuple[list[dict], dict[str, list[Run]]]:
    """Every call of ``remedy_rows`` from the committed runs of E17 (``rs``; all E17 runs in ``runs`` where
    empty) and of E18 and E18-engines (found in ``runs`` by their spec names), model by model: strict and
    strict-aligned from E17, the loose remedies from E18 where the model has it (else E17), and the runs
    each model's calls came from."""
    from tooldecode.distortion.remedies import remedy_rows

    by_spec = {k: [r for r in runs.values() if r.spec == name] for k, name in SPECS.items()}
    by_spec["e17"] = list(rs) or by_spec["e17"]
    calls: list[dict] = []
    used: dict[str, list[Run]] = defaultdict(list)
    scored: dict[tuple[str, bool], list[dict]] = {}  # each run is scored once, whatever models it holds

    def scored_rows(run: Run, masked_only: bool) -> list[dict]:
        key = (run.name, masked_only)
        if key not in scored:
            scored[key] = remedy_rows(run, remedies=("strict", "strict-aligned") if masked_only else None)
        return scored[key]

    def holds(run: Run, model: str) -> bool:
        return any(str(s.arm.model) == model for s in run.samples)

    models = sorted({str(s.arm.model) for r in by_spec["e17"] for s in r.samples})
    for model in models:
        e17, e18, eng = ([r for r in by_spec[k] if holds(r, model)] for k in ("e17", "e18", "engines"))
        mine = [c for run in e17 for c in scored_rows(run, bool(e18))]
        mine += [c for run in (*e18, *eng) for c in scored_rows(run, False)]
        calls += [c for c in mine if str(c["model"]) == model]
        used[model] = [*e17, *e18, *eng]
    return calls, used


def row_remedies(spec: dict, rs: list[Run], runs: dict[str, Run]) -> list[dict]:
    """The rows of ``remedy_effects`` from the committed runs of E17 (``rs``) and of E18 and E18-engines
    (found in ``runs`` by their spec names), model by model."""
    del spec
    calls, used = remedy_calls(rs, runs)
    claims = {"e17": _claim("e17_strict_cost"), "e18": _claim("e18_remedies")}
    return remedy_effects(calls, claims, {m: source(rs_) for m, rs_ in used.items()})


def remedy_reading(table: Sequence[dict[str, Any]]) -> str:
    """The plain-words reading of one (model, level): which remedy's calls work most often (with its
    interval and number of calls; none where no call works), and strict against loose on works and on
    valid but wrong. Only the remedies drawn on every scenario of the cell compete; one drawn on fewer
    (a run not yet complete) that works more often is named apart, with its scenarios."""
    by = {t["remedy"]: t for t in table}
    t0 = table[0]
    head = f"**{short(t0['model'])}, {t0['level']}**: "
    full = max(t["all"]["works"].g for t in table)
    whole = [t for t in table if t["all"]["works"].g == full]
    best = max(whole, key=lambda t: (t["all"]["works"].rate, t["n"]))
    w = best["all"]["works"]
    if w.rate == 0:
        parts = [head + f"no remedy's call works (0 of {sum(t['n'] for t in whole)} calls)"]
    else:
        parts = [
            head + f"the calls that work most often are {best['remedy']}'s "
            f"({100 * w.rate:.1f}% [{100 * w.lo:.1f}, {100 * w.hi:.1f}], {best['n']} calls)"
        ]
    for t in table:
        p = t["all"]["works"]
        if p.g < full and p.rate > w.rate:
            parts.append(
                f"{t['remedy']}'s {t['n']} calls so far ({p.g} of {full} scenarios, its run not complete) "
                f"work {100 * p.rate:.1f}% [{100 * p.lo:.1f}, {100 * p.hi:.1f}]"
            )
    for t in table:
        if t.get("abandoned"):
            parts.append(
                f"{t['remedy']}'s sampler abandoned {t['abandoned']} of its {t['n']} calls at its walk budget "
                "(counted as cut: no call)"
            )
    if "strict" in by and "loose" in by:
        s, lo = by["strict"]["all"], by["loose"]["all"]
        parts.append(
            f"strict's calls work {100 * s['works'].rate:.1f}% against loose's {100 * lo['works'].rate:.1f}%, "
            f"and are valid but wrong {100 * s['wrong_but_valid'].rate:.1f}% against "
            f"{100 * lo['wrong_but_valid'].rate:.1f}%"
        )
    return "; ".join(parts) + "."


def extensions_of(run: Run) -> list[dict]:
    """The continued draws of ``run`` (``tooldecode runs extend``): every folder beside it whose
    ``extend.json`` names it, read together (one record per key, the largest cap's)."""
    import json

    from tooldecode.experiments.extend import EXTEND_MANIFEST, read_extended

    rows: dict[str, dict] = {}
    for meta in sorted(run.path.parent.glob(f"{run.path.name}-*/{EXTEND_MANIFEST}")):
        if Path(json.loads(meta.read_text(encoding="utf-8")).get("run", "")).name != run.path.name:
            continue
        for r in read_extended(meta.parent):
            if r["key"] not in rows or r["cap"] > rows[r["key"]]["cap"]:
                rows[r["key"]] = r
    return list(rows.values())


def ended_line(used: Iterable[Run], level: str = "L1") -> str:
    """Whether every ``level`` arm of the runs ``used`` meets the cap rule's share of draws that ended on
    their own (``tooldecode.distortion.caps.MIN_ENDED``), naming each arm that does not, with what its
    cut draws did when continued to a larger cap (``tooldecode.experiments.extend``)."""
    from tooldecode.distortion.caps import MIN_ENDED
    from tooldecode.distortion.remedies import remedy_name
    from tooldecode.experiments.extend import ended_at_cap

    n_arms, short_of = 0, []
    for run in sorted({r.name: r for r in used}.values(), key=lambda r: r.name):
        cap = run.manifest.get("config", {}).get("max_new_tokens")
        arms = {str(s.arm.label()): s.arm for s in run.samples if s.arm.level == level}
        for label, t in sorted(ended_at_cap(run, extensions_of(run)).items()):
            if label not in arms:
                continue
            n_arms += 1
            if t["meets"]:
                continue
            arm = arms[label]
            name = f"{short(str(arm.model))} {remedy_name(arm) or arm.mode}"
            text = (
                f"{name} in {run.name}: {t['ended']}/{t['n']} = {100 * t['ended_share']:.1f}% at {cap} tokens"
            )
            if t["continued"]:
                text += (
                    f"; its {t['cut']} cut draws continued to {t['cap']} tokens (same prompt and mask, from "
                    f"their own tokens): {t['ended_later']} ended ({t['works_later']} of them a call that "
                    f"works), so {100 * t['ended_share_at_cap']:.1f}% at {t['cap']}"
                    + ("" if t["meets_at_cap"] else f", still below {100 * MIN_ENDED:.0f}%")
                )
            else:
                text += "; its cut draws are not continued yet (`tooldecode runs extend`)"
            short_of.append(text)
    head = (
        f"{level} draws that ended on their own before the cap (the cap rule asks {100 * MIN_ENDED:.0f}% in "
        f"every arm; `tooldecode runs ended RUN`): "
    )
    if not short_of:
        return head + f"all {n_arms} arms meet it."
    return head + f"{n_arms - len(short_of)} of {n_arms} arms meet it; " + "; ".join(short_of) + "."


def sampled_block(runs: dict[str, Run]) -> str:
    """The README's sampled decision table: per model and level, every remedy's calls (``remedy_table``:
    invented keys, valid, applies, correct, works, wrong but valid, cut, tokens per call, calls per
    second), with a plain-words line per model and level; a line saying so when no E17 run is committed."""
    from tooldecode.distortion.remedies import format_remedies, remedy_table

    calls, used = remedy_calls([], runs)
    if not calls:
        return "Sampled, L1 and L2: no E17 run is committed yet (`python -m scripts.jobqueue status` lists the jobs)."
    table = remedy_table(calls)
    cells = sorted({(t["model"], t["level"]) for t in table})
    order = {r: k for k, r in enumerate(ORDER)}
    table = sorted(
        table, key=lambda t: (t["model"], t["level"], order.get(t["remedy"], len(ORDER)), t["remedy"])
    )
    reading = [remedy_reading([t for t in table if (t["model"], t["level"]) == c]) for c in cells]
    runs_used = sorted({r.name for rs_ in used.values() for r in rs_})
    return (
        "**Sampled, L1 and L2: did the edit work** (every remedy's calls; % [95% interval over scenarios]; "
        "works = valid and the file edited as expected; L1 writes the whole call, L2 is forced through the "
        "gold newText; calls/s: calls over the sum of the draws' own wall times on the 2 CPU cores the runs used, so a draw that shared its batch with others or was in flight while its run was paused counts that time)\n\n"
        + format_remedies(table)
        + "\n"
        + "\n".join(f"- {line}" for line in reading)
        + "\n\n"
        + ended_line(r for rs_ in used.values() for r in rs_)
        + f"\n\nSource: {', '.join(runs_used)}. Runs not yet complete are listed in FINDINGS under what remains."
    )


__all__ = [
    "COMPARISONS",
    "ended_line",
    "extensions_of",
    "remedy_calls",
    "remedy_effects",
    "remedy_reading",
    "row_remedies",
    "sampled_block",
]
