"""The decision table at L2 from the exact rows (``tooldecode.distortion.decision``), and the exact
probabilities set against the rates sampled in E17/E18 runs.

``decision_table`` averages each policy's probabilities over scenarios (one value per scenario, so the
cluster-robust interval of ``stats.cluster_rate`` is a t interval over scenarios), per model, and pairs
each policy's P(correct) with loose's over the same scenarios (``stats.paired_clusters``);
``format_decision_table`` writes it as Markdown.

``compare_sampled`` puts, per model and policy, the exact mean next to the sampled rate of the matching
remedy in a run (the L2 draws): ``correct`` against the sampled ``works`` (valid and the file edited as
expected: ``tooldecode.distortion.remedies``), ``close``, ``goes on`` and ``invented`` against the
sampled draw's first decision, classified by the same rules (``decision.bucket_of``). Only scenarios
that both have are used. ``plot_comparison`` draws it (exact on x, sampled on y) when matplotlib is
installed; ``format_comparison`` is the table.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from tooldecode.distortion.decision import (
    BUCKETS,
    POLICIES,
    DecisionRow,
    aligned_row,
    bucket_fields,
    bucket_of,
)
from tooldecode.stats import cluster_rate, paired_clusters

__all__ = [
    "COMPARED",
    "MEASURES",
    "SAMPLED_REMEDY",
    "STAND_IN_EXCESS",
    "compare_sampled",
    "decision_table",
    "exact_inside",
    "format_comparison",
    "format_decision_table",
    "plot_comparison",
    "rows_by",
    "sampled_decisions",
    "validity_by_bucket",
    "why_outside",
    "with_draw_validity",
    "with_goes_on_validity",
    "aligned_from_draws",
]

# the row's probabilities a table column shows, in order
MEASURES = ("p_correct", "p_close", "p_goes_on", "p_invented", "p_other", "p_undetermined")
_LABELS = {
    "p_correct": "correct",
    "p_close": "close",
    "p_goes_on": "goes on",
    "p_invented": "invented key",
    "p_other": "other",
    "p_undetermined": "undetermined",
}
# the remedy of a sampled run (tooldecode.distortion.remedies) a policy is compared with: dropping
# unknown keys is one of the lenient repairs (loose+repair also maps aliases, coerces types and repairs
# JSON), so that pair compares a bound with a broader remedy
SAMPLED_REMEDY = {"loose+drop-unknown-keys": "loose+repair"}
# measure of the exact rows -> measure of the sampled draws
COMPARED = {"p_correct": "works", "p_close": "close", "p_goes_on": "goes_on", "p_invented": "invented"}


def with_goes_on_validity(row: DecisionRow, goes_on_valid: float) -> DecisionRow:
    """A strict-aligned row recomputed for another g (its live masses are kept in ``kinds``)."""
    live = {k: row.kinds.get(f"live_{k}", 0.0) for k in BUCKETS}
    common = {
        k: getattr(row, k)
        for k in (
            "model",
            "model_sha256",
            "scenario",
            "boundary",
            "pending",
            "prefix_as_sampled",
            "variant_label",
            "prompt_sha256",
            "seconds",
        )
    }
    return aligned_row(live, row.engine, common, goes_on_valid=goes_on_valid)


def rows_by(rows: Iterable[DecisionRow]) -> dict[tuple[str, str], dict[str, DecisionRow]]:
    """(model, policy name) → scenario → row."""
    out: dict[tuple[str, str], dict[str, DecisionRow]] = defaultdict(dict)
    for r in rows:
        out[(r.model, r.name)][r.scenario] = r
    return out


def _order(name: str) -> tuple[int, str]:
    base = name.split("[")[0]
    return (POLICIES.index(base) if base in POLICIES else len(POLICIES), name)


def decision_table(rows: Iterable[DecisionRow]) -> list[dict[str, Any]]:
    """Per (model, policy): the scenarios, each measure's mean with its interval over scenarios
    (``ClusterRate``), the mean of ``p_correct_lo`` / ``p_correct_hi``, and P(correct) paired with
    loose's over the same scenarios (``PairedClusters``; None for loose itself)."""
    groups = rows_by(rows)
    out = []
    for model, name in sorted(groups, key=lambda k: (k[0], _order(k[1]))):
        by_sc = groups[(model, name)]
        scen = sorted(by_sc)
        loose = groups.get((model, "loose"), {})
        paired = None
        if name != "loose" and loose:
            paired = paired_clusters(
                {s: by_sc[s].p_correct for s in scen},
                {s: r.p_correct for s, r in loose.items()},
            )
        out.append(
            {
                "model": model,
                "policy": name,
                "method": by_sc[scen[0]].method,
                "n": len(scen),
                **{m: cluster_rate([getattr(by_sc[s], m) for s in scen], scen) for m in MEASURES},
                "correct_lo": sum(by_sc[s].p_correct_lo for s in scen) / len(scen),
                "correct_hi": sum(by_sc[s].p_correct_hi for s in scen) / len(scen),
                "vs_loose": paired,
            }
        )
    return out


def _pct(c: Any) -> str:
    if c is None or not c.n or math.isnan(c.rate):
        return "n/a"
    return f"{100 * c.rate:.1f} [{100 * c.lo:.1f}, {100 * c.hi:.1f}]"


def _diff(d: Any) -> str:
    if d is None or math.isnan(d.diff):
        return "—"
    if math.isnan(d.lo):
        return f"{100 * d.diff:+.1f}"
    return f"{100 * d.diff:+.1f} [{100 * d.lo:+.1f}, {100 * d.hi:+.1f}]"


def format_decision_table(table: Sequence[dict[str, Any]]) -> str:
    """The table as Markdown, one block per model: rows the policies, columns the outcome probabilities
    (percent, mean over scenarios [95% t interval over scenarios]), P(correct)'s range over the open
    mass, and its difference from loose (paired over scenarios)."""
    out: list[str] = []
    for model in sorted({t["model"] for t in table}):
        mine = [t for t in table if t["model"] == model]
        out.append(f"**{model}** ({mine[0]['n']} scenarios, L2 after the gold newText; % over scenarios)\n")
        head = ["policy", *(_LABELS[m] for m in MEASURES), "correct range", "correct − loose", "method"]
        out.append("| " + " | ".join(head) + " |")
        out.append("|" + "---|" * len(head))
        for t in mine:
            cells = [t["policy"], *(_pct(t[m]) for m in MEASURES)]
            cells += [
                f"{100 * t['correct_lo']:.1f}–{100 * t['correct_hi']:.1f}",
                _diff(t["vs_loose"]),
                t["method"],
            ]
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------
# exact against sampled


def sampled_decisions(run: Any) -> list[dict[str, Any]]:
    """One row per L2 draw of a run's loose and masked arms: ``{model, scenario, remedy, close, goes_on,
    invented, other, valid, correct}`` (the draw's first decision after the prefill, classified as the
    exact rows are, and whether the whole call ended valid and correct; ``run`` a loaded
    ``tooldecode.runs.Run`` or its folder)."""
    from tooldecode.classify import CLOSE, classify_continuation, key_context
    from tooldecode.distortion.remedies import draw_outcome, remedy_name
    from tooldecode.runs import Run, load_run

    if not isinstance(run, Run):
        run = load_run(run)
    out = []
    for r in run.samples:
        arm = r.arm
        if arm.level != "L2" or (r.error and not r.text) or not r.prefill:
            continue
        remedy = "loose" if arm.mode == "loose" else remedy_name(arm)
        if remedy is None:
            continue
        ctx = key_context(r.prefill, list(r.tools or ()), expected_tool=arm.expected_tool)
        c = classify_continuation(r.text, context=ctx, pending='"', final=True)
        bucket = "close" if c.group == CLOSE else bucket_of(c, ctx)[0]
        outcome, _ = draw_outcome(run, r)
        out.append(
            {
                "model": str(arm.model),
                "scenario": r.scenario,
                "remedy": remedy,
                **{b: bucket == b for b in ("close", "goes_on", "invented", "other")},
                "valid": bool(outcome.get("valid")),
                "correct": bool(outcome.get("correct")),
            }
        )
    return out


# ---------------------------------------------------------------------------------------------
# strict-aligned from the loose draws' validity

#: the buckets whose validity the loose draws estimate (close_complete ends valid: V = 1; an invented key
#: is outside the closed schema: V = 0)
_V_BUCKETS = ("close_diverges", "goes_on", "other")


def validity_by_bucket(decisions: Iterable[dict[str, Any]]) -> dict[str, dict[str, tuple[int, int]]]:
    """Per model, per bucket of the decision: (draws that ended as a valid call, draws) over the loose L2
    draws of ``decisions`` (``sampled_decisions``' rows). A draw that closes the string and ends valid and
    correct is ``close_complete``; any other close is ``close_diverges``; ``all`` pools the buckets other
    than ``close_complete``."""
    out: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    for d in decisions:
        if d["remedy"] != "loose":
            continue
        if d["close"]:
            bucket = "close_complete" if d["valid"] and d["correct"] else "close_diverges"
        else:
            bucket = next(b for b in ("goes_on", "invented", "other") if d[b])
        for b in (bucket, "all") if bucket != "close_complete" else (bucket,):
            out[d["model"]][b][0] += int(d["valid"])
            out[d["model"]][b][1] += 1
    return {m: {b: (k, n) for b, (k, n) in v.items()} for m, v in out.items()}


def aligned_from_draws(
    loose: DecisionRow, validity: dict[str, tuple[int, int]], live_bound: float | None = None
) -> DecisionRow:
    """strict-aligned at the decision of one scenario, estimated from loose's exact masses and the loose
    draws' validity.

    The model conditioned on a valid complete call gives each bucket P_A(b) = P(b and valid) / P(valid),
    and P(b and valid) = P(b)·V(b), with P(b) loose's exact mass and V(b) the probability that a loose
    continuation in b ends as a valid call within the cap. V(close_complete) = 1 (the call closes as the
    gold's), V(invented) = 0 (a key the closed schema does not declare); every other V is the share of
    the model's loose L2 draws in that bucket that ended valid (``validity``, pooled over scenarios:
    ``validity_by_bucket``; the point is Jeffreys' (k + ½)/(n + 1), so a bucket with no valid draw in n
    keeps a small share instead of none), the unresolved close taking
    close_diverges' share and the undetermined mass the pooled share. The range of P_A(correct): the
    buckets' 95% Wilson bounds, with the open mass (unresolved close, undetermined) counted wrong at the
    low end and correct at the high end; the low end is at least ``live_bound`` (the live-path bound
    ``aligned_row`` computes with every V = 1), a bound that needs no estimate."""
    from tooldecode.stats import wilson

    def share(b: str) -> tuple[float, float, float]:
        k, n = validity.get(b, (0, 0))
        if n == 0:
            k, n = validity.get("all", (0, 0))
        if n == 0:
            return 1.0, 0.0, 1.0
        w = wilson(k, n)
        return (k + 0.5) / (n + 1), w.lo, w.hi  # Jeffreys' point: 0 of n is not taken as a share of 0

    v = {b: share(b) for b in (*_V_BUCKETS, "all")}
    mass = {b: float(getattr(loose, f"p_{b}")) for b in BUCKETS}
    pick = {**{b: b for b in _V_BUCKETS}, "close_unresolved": "close_diverges", "undetermined": "all"}

    def weights(at: int) -> dict[str, float]:
        fixed = {"close_complete": 1.0, "invented": 0.0}
        return {b: mass[b] * (fixed[b] if b in fixed else v[pick[b]][at]) for b in BUCKETS}

    w = weights(0)
    z = sum(w.values())
    p = {b: (x / z if z > 0 else 0.0) for b, x in w.items()}
    wl, wh = weights(2), weights(1)  # the low end of P(correct) at the high shares, and the reverse
    zl = sum(wl.values())
    lo = wl["close_complete"] / zl if zl > 0 else 0.0
    open_mass = mass["close_unresolved"] + mass["undetermined"]
    wh = {**wh, "close_unresolved": 0.0, "undetermined": 0.0}
    zh = sum(wh.values()) + open_mass
    hi = (wh["close_complete"] + open_mass) / zh if zh > 0 else 1.0
    if live_bound is not None:
        lo = max(lo, live_bound)
    counts = ", ".join(
        f"{b.replace('_', ' ')} {validity[b][0]}/{validity[b][1]}" for b in _V_BUCKETS if b in validity
    )
    return DecisionRow(
        model=loose.model,
        model_sha256=loose.model_sha256,
        scenario=loose.scenario,
        policy="strict-aligned",
        engine=None,
        method="estimate: loose's exact masses × the share of the model's loose L2 draws in each bucket "
        f"that ended valid ({counts or 'no draws'}; range: their 95% Wilson bounds)",
        **bucket_fields(p),
        p_correct=p["close_complete"],
        p_correct_lo=min(lo, p["close_complete"]),
        p_correct_hi=max(min(1.0, hi), p["close_complete"]),
        kinds={f"valid_{b}": v[b][0] for b in (*_V_BUCKETS, "all")},
        mask_removed=None,
        boundary=loose.boundary,
        pending=loose.pending,
        prefix_as_sampled=loose.prefix_as_sampled,
        variant_label=loose.variant_label,
        prompt_sha256=loose.prompt_sha256,
        seconds=0.0,
    )


def with_draw_validity(rows: Iterable[DecisionRow], runs: Sequence[Any]) -> list[DecisionRow]:
    """``rows`` with each model's strict-aligned rows replaced by ``aligned_from_draws`` where the sampled
    ``runs`` hold loose L2 draws of that model (the run with the most of them, since E17 and E18 draw
    loose on the same streams); the other rows, and the models without draws, as they are. The
    live-path row's ``p_correct_lo`` stays as the floor of the estimate's range."""
    from tooldecode.runs import Run, load_run

    validity: dict[str, dict[str, tuple[int, int]]] = {}
    for given in runs:
        run = given if isinstance(given, Run) else load_run(given)
        for model, v in validity_by_bucket(sampled_decisions(run)).items():
            if sum(n for b, (_, n) in v.items() if b != "all") > sum(
                n for b, (_, n) in validity.get(model, {}).items() if b != "all"
            ):
                validity[model] = v
    rows = list(rows)
    loose = {(r.model, r.scenario): r for r in rows if r.policy == "loose"}
    out = []
    for r in rows:
        lo = loose.get((r.model, r.scenario))
        if r.policy == "strict-aligned" and r.model in validity and lo is not None:
            est = aligned_from_draws(lo, validity[r.model], live_bound=r.p_correct_lo)
            r = DecisionRow(**{**est.to_json(), "engine": r.engine, "seconds": r.seconds})
        out.append(r)
    return out


def compare_sampled(rows: Iterable[DecisionRow], runs: Sequence[Any]) -> list[dict[str, Any]]:
    """Per (model, policy, measure of ``COMPARED``): the exact mean over the scenarios the runs sampled
    (``exact``: a ``ClusterRate`` of the per-scenario probabilities) and the sampled rate of the matching
    remedy over the same scenarios (``sampled``: a ``ClusterRate`` of the draws). A remedy several runs
    draw on the same streams (E17's and E18's loose) is read from the run with the most draws of it."""
    from tooldecode.distortion.remedies import remedy_rows
    from tooldecode.runs import Run, load_run

    draws: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for given in runs:
        run = given if isinstance(given, Run) else load_run(given)
        mine: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
        for d in sampled_decisions(run):
            mine[(d["model"], d["remedy"])].append(d)
        for w in remedy_rows(run):
            # a strict-aligned call abandoned at the sampler's budget is no draw of its target
            if str(w["level"]) == "L2" and w.get("accepted", True):
                mine[(str(w["model"]), w["remedy"])].append(
                    {"scenario": w["scenario"], "works": bool(w["works"])}
                )
        for key, found in mine.items():  # a remedy in several runs: from the one with the most draws of it
            if len(found) > len(draws.get(key, [])):
                draws[key] = found
    out = []
    for (model, name), by_sc in sorted(rows_by(rows).items(), key=lambda kv: (kv[0][0], _order(kv[0][1]))):
        remedy = SAMPLED_REMEDY.get(name, name)
        drawn = draws.get((model, remedy), [])
        for measure, sampled in COMPARED.items():
            got = [d for d in drawn if sampled in d and d["scenario"] in by_sc]
            if not got:
                continue
            scen = sorted({d["scenario"] for d in got})
            out.append(
                {
                    "model": model,
                    "policy": name,
                    "remedy": remedy,
                    "measure": measure,
                    "exact": cluster_rate([getattr(by_sc[s], measure) for s in scen], scen),
                    "sampled": cluster_rate([d[sampled] for d in got], [d["scenario"] for d in got]),
                    "undetermined": cluster_rate([by_sc[s].p_undetermined for s in scen], scen),
                    **_estimate_range(by_sc, scen),
                }
            )
    return out


def _estimate_range(by_sc: dict[str, DecisionRow], scen: Sequence[str]) -> dict[str, Any]:
    """For a policy whose rows are estimates (strict-aligned's ``aligned_from_draws``): ``estimate`` (the
    method) and ``correct_range``, the mean over ``scen`` of each row's P(correct) range; nothing for
    exact rows."""
    rows = [by_sc[s] for s in scen]
    if not rows or not all(r.method.startswith("estimate") for r in rows):
        return {}
    lo = sum(r.p_correct_lo for r in rows) / len(rows)
    return {"estimate": rows[0].method, "correct_range": (lo, sum(r.p_correct_hi for r in rows) / len(rows))}


def exact_inside(c: dict[str, Any]) -> bool:
    """Whether a comparison's exact mean lies inside the sampled rate's 95% interval."""
    e, s = c["exact"], c["sampled"]
    return bool(s.lo - 1e-12 <= e.rate <= s.hi + 1e-12)


#: why a sampled remedy that stands in for an exact policy can read higher than the policy
STAND_IN_EXCESS = {
    "loose+drop-unknown-keys": "it also repairs the JSON of calls that do not parse (json-repair), which "
    "dropping unknown keys does not, so it can only rescue more calls than the policy"
}


def why_outside(c: dict[str, Any]) -> str | None:
    """Why a comparison's exact mean lies outside the sampled interval, from the comparison itself; None
    when it lies inside.

    In order: the sampled remedy is a stand-in that does more than the policy (``STAND_IN_EXCESS``) and
    reads higher; the exact row leaves mass undetermined (beyond the probe's bounds) and the exact value
    plus that mass reaches the sampled interval; the exact column is an estimate (strict-aligned's) whose
    P(correct) range reaches the sampled interval; otherwise no structural reason, which the 95% level
    itself produces about once in twenty comparisons.
    """
    if exact_inside(c):
        return None
    e, smp = c["exact"], c["sampled"]
    reason = STAND_IN_EXCESS.get(c["policy"]) if c["remedy"] != c["policy"] else None
    if reason and smp.lo > e.rate:
        return f"{c['remedy']} stands in for {c['policy']} and reads higher: {reason}"
    u = c.get("undetermined")
    if u is not None and u.rate > 0 and e.rate < smp.lo <= e.rate + u.rate:
        return (
            f"the exact rows leave {100 * u.rate:.1f}% of the mass undetermined (beyond the probe's bounds); "
            f"the exact value lies between {100 * e.rate:.1f}% and {100 * (e.rate + u.rate):.1f}%, which "
            "reaches the sampled interval"
        )
    rng = c.get("correct_range")
    if c.get("estimate") and rng is not None and rng[0] <= smp.hi and smp.lo <= rng[1]:
        same = "" if c["measure"] == "p_correct" else f" ({_LABELS[c['measure']]} rests on the same shares)"
        return (
            f"the exact column is an estimate, not an exact probability ({c['estimate']}); its P(correct) "
            f"range over these scenarios, {100 * rng[0]:.1f}%-{100 * rng[1]:.1f}%, reaches the sampled "
            f"interval: the validity shares it rests on are too few to place it{same}, and the sampled "
            "draws are the exact reference"
        )
    return "no structural reason found: a miss at the 95% level (about 1 comparison in 20 misses by chance)"


def format_comparison(comparison: Sequence[dict[str, Any]]) -> str:
    """The comparison as Markdown: exact and sampled side by side (percent [95% interval over scenarios]),
    and whether the exact mean lies inside the sampled interval; then, for each that does not, why
    (``why_outside``)."""
    lines = [
        "| model | policy | sampled remedy | measure | exact | sampled | draws | exact inside the sampled interval |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in comparison:
        lines.append(
            f"| {c['model']} | {c['policy']} | {c['remedy']} | {_LABELS[c['measure']]} | "
            f"{_pct(c['exact'])} | {_pct(c['sampled'])} | {c['sampled'].n} | "
            f"{'yes' if exact_inside(c) else '**no**'} |"
        )
    misses = [(c, why_outside(c)) for c in comparison if not exact_inside(c)]
    if misses:
        lines.append("")
        lines.extend(
            f"- outside: {c['model']}, {c['policy']}, {_LABELS[c['measure']]}: {why}" for c, why in misses
        )
    return "\n".join(lines) + "\n"


def plot_comparison(comparison: Sequence[dict[str, Any]], path: str | Path) -> Path | None:
    """Exact (x) against sampled (y), one point per (model, policy, measure) with both intervals, and the
    diagonal; saved to ``path``. None when matplotlib is not installed (use ``format_comparison``)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    measures = list(COMPARED)
    fig, axes = plt.subplots(1, len(measures), figsize=(4 * len(measures), 4), squeeze=False)
    # one colour per policy and one marker per model, the same in every panel
    policies = sorted({c["policy"] for c in comparison}, key=_order)
    models = sorted({c["model"] for c in comparison})
    palette = plt.get_cmap("tab10")
    colour = {p: palette(i % 10) for i, p in enumerate(policies)}
    marker = {m: "osD^v"[i % 5] for i, m in enumerate(models)}
    seen: set[str] = set()
    for ax, measure in zip(axes[0], measures, strict=True):
        pts = [c for c in comparison if c["measure"] == measure]
        for c in pts:
            e, s = c["exact"], c["sampled"]
            label = f"{c['policy']} ({c['model'][:18]})"
            ax.errorbar(
                e.rate,
                s.rate,
                xerr=[[max(0.0, e.rate - e.lo)], [max(0.0, e.hi - e.rate)]],
                yerr=[[max(0.0, s.rate - s.lo)], [max(0.0, s.hi - s.rate)]],
                fmt=marker[c["model"]],
                color=colour[c["policy"]],
                capsize=2,
                label=label if label not in seen else None,
            )
            seen.add(label)
        ax.plot([0, 1], [0, 1], color="grey", lw=0.8, ls="--")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_xlabel("exact (mean over scenarios)")
        ax.set_ylabel("sampled (L2 draws)")
        ax.set_title(_LABELS[measure])
    handles, labels = [], []
    for ax in axes[0]:
        h, lab = ax.get_legend_handles_labels()
        handles += h
        labels += lab
    if handles:
        fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=7)
        fig.subplots_adjust(bottom=0.3)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
