"""FINDINGS rows of the decision after the gold ``newText`` at L2, exactly (E20, docs/strict-cost.md).

A run of a spec with a ``[decision]`` table holds one ``DecisionRow`` per model, scenario and policy
(``decision.jsonl``): exact probabilities, so the only uncertainty is over scenarios. Per model, the
spec's claim is tested as three paired comparisons over the scenarios both policies have
(``stats.paired_clusters``, judged by ``stats.judge_effect`` on the difference scale, direction only):

- strict's P(correct) below loose's;
- strict's P(the string goes on) above loose's;
- strict-prefix's P(correct) above strict's.

The comparisons of every model form one family for Holm's correction, apart from the sampled effect rows
(those are judged against their own family). A comparison over fewer scenarios than its runs planned (a
run stopped mid-way) is shown with the verdict withheld (``stats.interim``) and stays out of the family. An event is a scenario where either policy's probability is
above 0 (the probe's rule). A descriptive row per model gives strict-prefix against loose +
drop-unknown-keys and how many scenarios the mask touches.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from experiments.common import short, source
from tooldecode.distortion.decision import DECISION_FILE, DecisionRow, read_decision_rows
from tooldecode.distortion.decision_table import rows_by
from tooldecode.runs import Run
from tooldecode.stats import EffectClaim, holm, interim, judge_effect, paired_clusters

# (label, policy a, policy b, measure, claimed direction)
COMPARISONS: tuple[tuple[str, str, str, str, int], ...] = (
    ("strict's P(correct) vs loose's", "strict", "loose", "p_correct", -1),
    ("strict's P(the string goes on) vs loose's", "strict", "loose", "p_goes_on", +1),
    ("strict-prefix's P(correct) vs strict's", "strict-prefix", "strict", "p_correct", +1),
)
METHOD = (
    "exact probabilities at the decision (no draws); the mean over scenarios with a paired t interval over "
    "scenarios and the sign-flip p"
)


def decision_runs(runs: Sequence[Run]) -> list[tuple[Run, list[DecisionRow]]]:
    """The runs among ``runs`` that hold a ``decision.jsonl``, with its rows."""
    out = []
    for r in runs:
        path = Path(r.path) / DECISION_FILE
        if path.is_file():
            out.append((r, read_decision_rows(path)))
    return out


def by_model(
    found: Sequence[tuple[Run, list[DecisionRow]]],
) -> dict[str, tuple[list[Run], list[DecisionRow]]]:
    """Per model, the runs that hold its rows and one row per (policy, scenario): where two runs of the
    spec computed the same scenario (a run resumed under another folder), the run with more of that model's
    scenarios gives it (the rows are exact, so they agree up to floating-point order)."""
    out: dict[str, tuple[list[Run], list[DecisionRow]]] = {}
    for model in sorted({row.model for _, rows in found for row in rows}):
        mine = [(run, [row for row in rows if row.model == model]) for run, rows in found]
        mine = sorted((m for m in mine if m[1]), key=lambda m: len({row.scenario for row in m[1]}))
        keep: dict[tuple[str, str], DecisionRow] = {}
        for _, rows in mine:
            keep.update({(row.name, row.scenario): row for row in rows})
        out[model] = ([run for run, _ in mine], list(keep.values()))
    return out


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def row_decision_l2(spec: dict, rs: list[Run], runs: dict) -> list[dict]:
    """Per model of every decision run of ``spec``: the three claim rows (Holm across all of them) and one
    descriptive row."""
    del runs
    tested: list[dict] = []
    described: list[dict] = []
    for model, (sources, rows) in by_model(decision_runs(rs)).items():
        groups = rows_by(rows)
        planned = max(len(r.planned_scenarios) for r in sources)
        for label, a, b, measure, sign in COMPARISONS:
            ra, rb = groups.get((model, a), {}), groups.get((model, b), {})
            if not ra or not rb:
                continue
            va = {s: getattr(r, measure) for s, r in ra.items()}
            vb = {s: getattr(r, measure) for s, r in rb.items()}
            cmp = paired_clusters(va, vb)
            shared = sorted(set(va) & set(vb))
            events = sum(1 for s in shared if va[s] > 0 or vb[s] > 0)
            masked = sum(1 for s in shared if (ra[s].mask_removed or 0.0) > 0.0)  # arm a is always masked
            moved = sum(1 for s in shared if (va[s] - vb[s]) * sign > 0)
            tested.append(
                {
                    "observation": f"{spec['name']}: {short(model)}: {label} (L2, exact)",
                    "claim": f"{spec.get('claim', '')} Tested here: a {'rise' if sign > 0 else 'fall'} "
                    f"(difference, size not stated).",
                    "source": source(sources),
                    "_cmp": cmp,
                    "_claim": EffectClaim("difference", None, sign=sign),
                    "_events": events,
                    # a run stopped before every planned scenario was decided: no verdict yet
                    "_unfinished": f"{len(shared)} of {planned} planned scenarios decided"
                    if len(shared) < planned
                    else "",
                    "_extra": f" In the claimed direction on {moved}/{len(shared)} scenarios; the mask removes "
                    f"mass at the decision's first step on {masked}/{len(shared)}.",
                }
            )
        sp, dk = (
            groups.get((model, "strict-prefix"), {}),
            groups.get((model, "loose+drop-unknown-keys"), {}),
        )
        lo = groups.get((model, "loose"), {})
        if sp and dk and lo:
            cmp = paired_clusters(
                {s: r.p_correct for s, r in sp.items()}, {s: r.p_correct for s, r in dk.items()}
            )
            und = max(r.p_undetermined for r in lo.values())
            described.append(
                {
                    "observation": f"{spec['name']}: {short(model)}: strict-prefix vs loose + drop-unknown-keys, "
                    "P(correct) (L2, exact)",
                    "claim": "descriptive: how close the prefix-keeping mask comes to dropping unknown keys",
                    "measured": f"{cmp} ({METHOD}). Largest undetermined mass of a loose row: {_pct(und)}.",
                    "verdict": "descriptive",
                    "source": source(sources),
                    "summary": f"{short(model)}: strict-prefix − drop-unknown-keys, P(correct) "
                    f"{100 * cmp.diff:+.1f} pts",
                }
            )
    # the family: the rows whose scenarios are all decided (an unfinished row is judged when it is)
    family = [r for r in tested if not r["_unfinished"]]
    adjusted = dict(zip(map(id, family), holm([r["_cmp"].p_sign_flip for r in family]), strict=True))
    for r in tested:
        padj = adjusted.get(id(r), math.nan)
        cmp = r.pop("_cmp")
        events = r.pop("_events")  # exact rows: an event is a scenario, so events and their clusters agree
        verdict = judge_effect(cmp, r.pop("_claim"), events=events, event_clusters=events, p_adjusted=padj)
        unfinished = r.pop("_unfinished")
        if unfinished:
            verdict = interim(verdict, unfinished)
        adj = "" if math.isnan(padj) else f", Holm-adjusted p = {padj:.3g} over the {len(family)} exact rows"
        r["measured"] = f"{cmp}{adj} ({METHOD}).{r.pop('_extra')}"
        r["verdict"] = str(verdict)
        r["summary"] = f"{r['observation'].split(': ', 1)[1]}: {100 * cmp.diff:+.1f} pts, {verdict.verdict}"
    return tested + described


# ---------------------------------------------------------------------------------------------
# the README's decision table


def _recommend(table: list[dict]) -> str:
    """The plain-words reading of one model's table: which policy has the highest P(correct), and where
    strict stands against loose and loose + drop-unknown-keys (paired over scenarios)."""
    by = {t["policy"]: t for t in table}
    model = short(table[0]["model"])
    exact = [t for t in table if not str(t["method"]).startswith("estimate")] or table
    best = max(exact, key=lambda t: t["p_correct"].rate)
    parts = [
        f"**{model}**: the highest exact P(correct) is {best['policy']}'s ({_pct(best['p_correct'].rate)})"
    ]
    strict = by.get("strict")
    if strict is not None and strict["vs_loose"] is not None:
        d = strict["vs_loose"]
        if d.direction() < 0:
            word = "below"
        elif d.direction() > 0:
            word = "above"
        else:
            word = "not distinguishable from"
        parts.append(
            f"strict's is {word} loose's ({100 * d.diff:+.1f} pts [{100 * d.lo:+.1f}, {100 * d.hi:+.1f}])"
            if not math.isnan(d.lo)
            else f"strict's differs from loose's by {100 * d.diff:+.1f} pts"
        )
    for other in ("strict-prefix", "loose+drop-unknown-keys"):
        if other in by:
            parts.append(f"{other}: {_pct(by[other]['p_correct'].rate)}")
    aligned = by.get("strict-aligned")
    if aligned is not None and str(aligned["method"]).startswith("estimate"):
        parts.append(
            f"strict-aligned (an estimate, not exact): {_pct(aligned['p_correct'].rate)}, range "
            f"{_pct(aligned['correct_lo'])}–{_pct(aligned['correct_hi'])}"
        )
    return "; ".join(parts) + "."


def decision_block(runs: dict[str, Run], spec_name: str = "e20-decision-l2") -> str:
    """The README's decision table (Markdown) from the committed runs of ``spec_name`` with a
    ``decision.jsonl``, with the plain-words reading per model; a line saying so when there is none."""
    from tooldecode.distortion.decision_table import decision_table, format_decision_table, with_draw_validity

    found = decision_runs([r for r in runs.values() if r.spec == spec_name])
    if not found:
        return (
            f"No run of `{spec_name}` with exact decision rows is committed yet "
            "(`python -m scripts.jobqueue run --worktree DIR --only e20-decision-l2-organism e20-decision-l2-base`)."
        )
    merged = by_model(found)
    sampled = [r for r in runs.values() if r.spec in SAMPLED_SPECS]
    rows = with_draw_validity([row for _, rs in merged.values() for row in rs], sampled)
    table = decision_table(rows)
    reading = [_recommend([t for t in table if t["model"] == m]) for m in sorted({t["model"] for t in table})]
    return (
        format_decision_table(table)
        + "\nRead per model (the policy with the highest exact P(correct) is the one to run; strict is worth turning on "
        "only where its P(correct) is not below loose's):\n\n"
        + "\n".join(f"- {line}" for line in reading)
        + "\n\nstrict-aligned's row is an estimate (its method column says which): where the model's loose L2 "
        "draws are committed, loose's exact masses weighed by the share of those draws in each bucket that ended "
        "as a valid call; otherwise the live paths of the strict grammar with every V = 1, a lower bound of its "
        "P(correct) (docs/strict-cost.md)."
        + f"\n\nSource: {source([r for r, _ in found] + sampled)}; "
        + f"`tooldecode decision {' '.join(f'runs/{r.name}' for r, _ in found)}"
        + "".join(f" --valid-from runs/{r.name}" for r in sampled)
        + "` prints it."
    )


#: the sampled specs whose L2 draws check the exact rows (E17, E18 and the engines' defaults)
SAMPLED_SPECS = ("e17-strict-cost", "e18-remedies", "e18-remedies-engines")
COMPARISON_FIGURE = Path("docs/figures/exact-vs-sampled.png")


def comparison_block(
    runs: dict[str, Run], spec_name: str = "e20-decision-l2", figure_root: Path | None = None
) -> str:
    """Exact against sampled at L2: per model, policy and measure, the exact mean over the scenarios the
    sampled runs drew and the sampled rate over the same scenarios, each with its 95% interval over
    scenarios, and whether the exact mean lies inside the sampled interval. With ``figure_root``, the
    figure (exact on x, sampled on y) is written to ``COMPARISON_FIGURE`` under it (the text names it
    either way). A line saying what is missing when there is nothing to compare."""
    from tooldecode.distortion.decision_table import (
        compare_sampled,
        exact_inside,
        format_comparison,
        plot_comparison,
        with_draw_validity,
    )

    found = decision_runs([r for r in runs.values() if r.spec == spec_name])
    sampled = [r for r in runs.values() if r.spec in SAMPLED_SPECS]
    if not found or not sampled:
        return (
            "Exact against sampled: no committed run of "
            + ("E17/E18" if found else f"`{spec_name}`")
            + " to compare yet (`python -m scripts.jobqueue status` lists the jobs)."
        )
    rows = with_draw_validity([row for _, rs in by_model(found).values() for row in rs], sampled)
    comparison = compare_sampled(rows, sampled)
    if not comparison:
        return "Exact against sampled: the sampled runs share no model, policy and scenario with the exact rows yet."
    inside = sum(exact_inside(c) for c in comparison)
    lines = [
        "**Exact against sampled at L2** (the exact mean over the scenarios the draws cover, and the rate of "
        "those draws; % [95% interval over scenarios])",
        "",
        format_comparison(comparison),
        f"{inside} of {len(comparison)} exact means lie inside the sampled interval. strict-aligned's exact "
        "column is the decision table's estimate (its method there), not an exact probability; its draws (the "
        "adaptive exact sampler) are the reference it is checked against. Source: "
        f"{source([r for r, _ in found] + sampled)}.",
    ]
    if figure_root is not None:
        plot_comparison(comparison, figure_root / COMPARISON_FIGURE)
    lines.append(f"\n![Exact against sampled at L2]({COMPARISON_FIGURE}) (`make findings` draws it)")
    return "\n".join(lines)


__all__ = [
    "COMPARISONS",
    "COMPARISON_FIGURE",
    "SAMPLED_SPECS",
    "by_model",
    "comparison_block",
    "decision_block",
    "decision_runs",
    "row_decision_l2",
]
