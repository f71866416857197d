"""The distortion-of-masked-sampling section: ``tooldecode.distortion``'s figures per run with a masked arm."""

from __future__ import annotations

import math
from typing import Any

from tooldecode.report.plots import new_figure
from tooldecode.report.summary import Summary
from tooldecode.report.tables import Table

DISTORTION_RATES = ("close", "string goes on", "payload correct")


def distortion_results(s: Summary) -> list[tuple[str, list[Any] | str]]:
    """Per run with a masked arm: ``tooldecode.distortion.analyse_run``'s figures (the reference from
    the replay cache that ``tooldecode distortion`` writes; none without it), or why there are none."""
    from tooldecode.distortion import DistortionError, analyse_run, cached_validity, has_masked_arm

    out: list[tuple[str, list[Any] | str]] = []
    for run in s.runs:
        if not has_masked_arm(run.manifest):
            continue
        try:
            loaded = (
                run.run if run.run is not None else run.path
            )  # the run the report loaded, not a second read
            out.append((run.name, analyse_run(loaded, validity=cached_validity(run.path))))
        except DistortionError as err:
            out.append((run.name, str(err)))
    return out


def distortion_table(results: list[tuple[str, list[Any] | str]]) -> Table:
    """One row per masked arm: its distortion figures, or why there are none."""
    rows = []
    for name, res in results:
        if isinstance(res, str):
            rows.append([name, res] + [""] * 7)
            continue
        for r in res:
            checks = [c for c in r.checks if c.agree is not None]
            agree = f"{sum(1 for c in checks if c.agree)}/{len(checks)}" if checks else "no reference"
            sgo = r.rates_q.get("string goes on")
            sgo_pl = r.rates_pl.get("string goes on")
            ref = next((c.reference for c in r.checks if c.name == "string goes on"), None)
            rows.append(
                [
                    name,
                    f"{r.model} {r.mode}",
                    f"{r.n} ({r.n_scenarios} scen.)",
                    r.p_valid.fmt(3, pct=True),
                    r.kl_q_pl.fmt(2),
                    f"{r.ess:.1f}/{r.n_weights}",
                    f"{sgo.fmt(3, pct=True)} → {sgo_pl.fmt(3, pct=True)}" if sgo and sgo_pl else "",
                    ref.fmt(3, pct=True) if ref is not None and math.isfinite(ref.point) else "n/a",
                    agree,
                ]
            )
    return Table(
        [
            "run",
            "arm",
            "n",
            "P(valid) = E_Q[w]",
            "KL(Q‖P_L) nats",
            "ESS",
            "string goes on: arm → under P_L",
            "reference (loose, grammar-valid)",
            "checks agree",
        ],
        rows,
        note="Intervals: bootstrap over scenarios (95%). 'under P_L': strict samples reweighted by w (strict), the "
        "samples themselves (strict-aligned). KL with ≥: some stored weights are censored (lower bound). "
        "`tooldecode distortion RUN` prints every check.",
    )


def plot_distortion(results: list[tuple[str, list[Any] | str]]):
    """Per masked arm and rate: the arm's own rate, the rate under P_L it implies, and the rejection
    reference, with 95% scenario-bootstrap intervals (None without a masked arm)."""
    arms = [(name, r) for name, res in results if not isinstance(res, str) for r in res]
    if not arms:
        return None
    fig = new_figure((4.2 * len(DISTORTION_RATES) + 3.0, 1.4 + 0.55 * len(arms)))
    axes = fig.subplots(1, len(DISTORTION_RATES), sharey=True, squeeze=False)
    ys = [float(len(arms) - 1 - i) for i in range(len(arms))]
    series = (("arm (Q)", "#999999", -0.2), ("under P_L", "#1f5fa8", 0.0), ("reference", "#c0392b", 0.2))
    for ax, rate in zip(axes[0], DISTORTION_RATES, strict=True):
        for label, color, dy in series:
            pts = []
            for y, (_, r) in zip(ys, arms, strict=True):
                if label == "arm (Q)":
                    e = r.rates_q.get(rate)
                elif label == "under P_L":
                    e = r.rates_pl.get(rate)
                else:
                    e = next((c.reference for c in r.checks if c.name == rate), None)
                if e is not None and math.isfinite(e.point):
                    pts.append((y + dy, e))
            if pts:
                ax.errorbar(
                    [100 * e.point for _, e in pts],
                    [y for y, _ in pts],
                    xerr=[
                        [100 * max(e.point - e.lo, 0) for _, e in pts],
                        [100 * max(e.hi - e.point, 0) for _, e in pts],
                    ],
                    fmt="o",
                    capsize=3,
                    color=color,
                    label=label,
                )
        ax.set_xlim(-2, 102)
        ax.set_title(rate)
        ax.set_xlabel("% (scenario bootstrap 95%)")
        ax.grid(axis="x", alpha=0.3)
    axes[0][0].set_yticks(ys, [f"{name}: {r.model.split('-instruct')[0]} {r.mode}" for name, r in arms])
    axes[0][-1].legend(loc="lower right", fontsize="small")
    fig.tight_layout()
    return fig
