"""What follows the gold newText, per model and arm: the outcomes as stacked bars with intervals.

One bar per group of L2 samples (a model and an arm); its segments are the shares of the outcome
classes (``tooldecode.classify.OUTCOMES`` grouped as ``FIGURE_CLASSES``), each with its cluster-robust
95% interval over scenarios drawn as a whisker around the segment's end. Samples of a run without
per-scenario random streams get no interval (``tooldecode.measures.require_scenario_streams``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tooldecode.records import SampleRecord
from tooldecode.stats import cluster_rate

# (label, outcomes) in the order the segments are stacked
FIGURE_CLASSES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("close", ("close",)),
    ("source-shaped failure", ("source_shaped",)),
    ("duplicate key", ("duplicate",)),
    ("derailment", ("derailment",)),
    ("other failure after an extra key", ("extra_other",)),
    ("run-on string", ("string_goes_on",)),
    ("other", ("declared", "next_item", "other", "wrong_closer", "stray")),
)
_COLORS = ("#4c8c4a", "#c2452d", "#e59b3a", "#7b3fa0", "#b07aa1", "#1f5fa8", "#9a9a9a")


@dataclass(frozen=True)
class KindBar:
    """One bar: ``label`` (model and arm), ``n`` samples from ``g`` scenarios, and per class of
    ``FIGURE_CLASSES`` its share with the interval ``(share, lo, hi)`` (lo, hi nan: no interval)."""

    label: str
    n: int
    g: int
    shares: dict[str, tuple[float, float, float]]


def kind_bars(
    samples: Sequence[SampleRecord], group: Callable[[SampleRecord], str | None], *, intervals: bool = True
) -> list[KindBar]:
    """Bars of ``samples`` (L2 samples; ``group`` names each one's bar, None leaves it out), in the
    order the groups first appear. A bar with a sample drawn without a per-scenario stream (or with
    ``intervals`` off) has no intervals."""
    from tooldecode.measures import sample_outcome

    by: dict[str, list[tuple[str, str, bool]]] = {}
    for s in samples:
        label = group(s)
        if label is not None:
            by.setdefault(label, []).append((sample_outcome(s), s.scenario, s.stream is None))
    bars = []
    for label, rows in by.items():
        clusters = [sc for _, sc, _ in rows]
        shared = not intervals or any(sh for _, _, sh in rows)
        shares = {}
        for name, outcomes in FIGURE_CLASSES:
            hits = [o in outcomes for o, _, _ in rows]
            r = cluster_rate(hits, clusters)
            shares[name] = (r.rate, math.nan, math.nan) if shared else (r.rate, r.lo, r.hi)
        bars.append(KindBar(label, len(rows), len(set(clusters)), shares))
    return bars


def plot_kinds(bars: Sequence[KindBar], title: str = "What follows the gold newText (L2)"):
    """Horizontal stacked bars, one per ``KindBar``; None without bars."""
    if not bars:
        return None
    from tooldecode.report.plots import new_figure

    fig = new_figure((10.0, 1.8 + 0.4 * len(bars)))
    ax = fig.subplots()
    ys = list(range(len(bars)))[::-1]
    left = [0.0] * len(bars)
    for (name, _), color in zip(FIGURE_CLASSES, _COLORS, strict=True):
        widths = [100 * b.shares[name][0] for b in bars]
        ax.barh(ys, widths, left=left, color=color, label=name, height=0.62)
        for y, b, x0, w in zip(ys, bars, left, widths, strict=True):
            _, lo, hi = b.shares[name]
            if w > 0 and not math.isnan(lo):
                end = x0 + w
                ax.errorbar(
                    [end], [y], xerr=[[100 * b.shares[name][0] - 100 * lo], [100 * hi - 100 * b.shares[name][0]]],
                    fmt="none", ecolor="black", elinewidth=0.8, capsize=2,
                )  # fmt: skip
        left = [x0 + w for x0, w in zip(left, widths, strict=True)]
    ax.set_yticks(ys, [f"{b.label}\nn={b.n}, {b.g} scenarios" for b in bars], fontsize=8)
    ax.set_xlim(0, 100)
    ax.set_xlabel("% of draws (whiskers: cluster-robust 95% interval of each class's share)", fontsize=8)
    ax.set_title(title)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    fig.tight_layout()
    return fig


def write_kinds_png(bars: Sequence[KindBar], path: Path, *, dpi: int = 80) -> Path | None:
    """The figure as a small PNG at ``path`` (no metadata, so a rebuild writes the same bytes)."""
    fig = plot_kinds(bars)
    if fig is None:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", dpi=dpi, metadata={"Software": None}, bbox_inches="tight")
    return path


def summary_kind_bars(runs: Sequence) -> list[KindBar]:
    """Bars of a report's runs (``tooldecode.report.RunData``): one per run, model and mode, L2 only;
    no interval for a run without per-scenario streams."""
    out: list[KindBar] = []
    for run in runs:
        if run.run is None:
            continue
        loaded = run.run
        l2 = [
            s
            for s in loaded.samples
            if s.arm.level == "L2" and not s.error and (v := loaded.verdict(s)) is not None and v.verdict
        ]
        out += kind_bars(
            l2,
            lambda s, r=run.name: f"{r}: {s.arm.model}, {s.arm.mode}",
            intervals=not loaded.shared_streams,
        )
    return out
