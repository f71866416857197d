"""The report's figures (matplotlib, Agg backend)."""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Sequence

from tooldecode.report.data import COMPARED, metric_title
from tooldecode.report.summary import Summary


def new_figure(figsize: tuple[float, float]):
    """A matplotlib Figure on the Agg canvas (no pyplot: the caller's backend and state are left alone)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize)
    FigureCanvasAgg(fig)
    return fig


def plot_rates(s: Summary, metrics: Sequence[str] = COMPARED):
    """Rates with their Wilson 95% intervals, one panel per metric, one row per arm (None without samples)."""
    arms = [a for a in s.arms if a.n]
    if not arms:
        return None
    height = 1.2 + 0.32 * max(1, len(arms))
    longest = max(len(a.label) for a in arms)
    fig = new_figure((4.2 * len(metrics) + max(2.5, 0.075 * longest), height))
    axes = fig.subplots(1, len(metrics), sharey=True, squeeze=False)
    ys = list(range(len(arms)))[::-1]
    for ax, metric in zip(axes[0], metrics, strict=True):
        rates = [a.rates[metric] for a in arms]
        x = [100 * r.rate for r in rates]
        err = [[100 * (r.rate - r.lo) for r in rates], [100 * (r.hi - r.rate) for r in rates]]
        ax.errorbar(x, ys, xerr=err, fmt="o", capsize=3, color="#1f5fa8")
        ax.set_xlim(-2, 102)
        ax.set_title(metric_title(metric))
        ax.set_xlabel("% of samples (Wilson 95%)")
        ax.grid(axis="x", alpha=0.3)
    axes[0][0].set_yticks(ys, [a.label for a in arms])
    axes[0][0].set_ylim(-0.6, len(arms) - 0.4)
    fig.tight_layout()
    return fig


def plot_zoo(s: Summary, top: int = 40):
    """The invented-key zoo: samples per invented key name (None when there are none)."""
    if not s.zoo:
        return None
    zoo = s.zoo[:top]
    fig = new_figure((7.5, 1.0 + 0.28 * len(zoo)))
    ax = fig.subplots()
    ax.barh(range(len(zoo))[::-1], [z.samples for z in zoo], color="#c2452d")
    ax.set_yticks(range(len(zoo))[::-1], [z.key for z in zoo])
    ax.set_xlabel("samples with the key")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_title("Invented keys" + (f" (top {top} of {len(s.zoo)})" if len(s.zoo) > top else ""))
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig


def plot_probe(s: Summary):
    """P(continue) at each decision point against the length of the preceding newText (None without rows)."""
    if not s.probe:
        return None
    fig = new_figure((11, 4.2))
    axes = fig.subplots(1, 2, sharey=True)
    for p in s.probe:
        y = [max(float(r["p_continue"]), 1e-9) for r in p.rows]
        for ax, fld in zip(axes, ("newtext_lines", "newtext_chars"), strict=True):
            x = [_num(r, fld) for r in p.rows]
            ax.scatter(x, y, s=14, alpha=0.7, label=p.label)
    for ax, title in zip(axes, ("newText lines", "newText characters"), strict=True):
        ax.set_yscale("log")
        ax.set_xlabel(title)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("P(continue) at the close of the item")
    axes[1].legend(fontsize=8, loc="best")
    fig.tight_layout()
    return fig


def _num(row: dict, fld: str) -> float:
    v = row.get(fld, row.get(fld.replace("newtext_", "value_")))
    return float(v) if isinstance(v, int | float) else math.nan


def png_data(fig) -> str:
    """A figure as base64 PNG (for a data URI)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    return base64.b64encode(buf.getvalue()).decode("ascii")
