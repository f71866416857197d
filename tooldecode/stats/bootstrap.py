"""Cluster bootstrap: rates and differences resampled by scenario."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from tooldecode.stats.intervals import normal_quantile


def cluster_sums(values: Sequence[bool | float], clusters: Sequence[str]) -> dict[str, tuple[float, int]]:
    """Per cluster: (sum of ``values``, count)."""
    if len(values) != len(clusters):
        raise ValueError(f"values and clusters differ in length ({len(values)} vs {len(clusters)})")
    sums: dict[str, list[float]] = {}
    for v, c in zip(values, clusters, strict=True):
        fv = float(v)
        if math.isnan(fv):
            raise ValueError(f"value in cluster {c!r} is nan; drop it before bootstrapping")
        acc = sums.setdefault(c, [0.0, 0.0])
        acc[0] += fv
        acc[1] += 1
    return {c: (s, int(n)) for c, (s, n) in sums.items()}


def _percentile_interval(stats: np.ndarray, conf: float) -> tuple[float, float]:
    normal_quantile(conf)  # validates conf
    alpha = 1.0 - conf
    lo, hi = np.quantile(stats, [alpha / 2.0, 1.0 - alpha / 2.0])
    return float(lo), float(hi)


def _resample_weights(rng: np.random.Generator, n_clusters: int, n_boot: int) -> np.ndarray:
    """How often each cluster is drawn in each replicate: shape (n_boot, n_clusters)."""
    return rng.multinomial(n_clusters, np.full(n_clusters, 1.0 / n_clusters), size=n_boot).astype(np.float64)


def cluster_bootstrap_rate(
    values: Sequence[bool | float],
    clusters: Sequence[str],
    n_boot: int = 2000,
    seed: int = 0,
    conf: float = 0.95,
) -> tuple[float, float, float]:
    """Mean of ``values`` with a percentile interval from resampling whole clusters with replacement.

    ``values`` are per-sample outcomes (bools for a rate, or floats such as P(continue)); ``clusters``
    names each sample's cluster (the scenario). Each replicate draws as many clusters as there are,
    with replacement, and pools their samples. Returns ``(point, lo, hi)``; the point is the plain
    mean over all samples. With few clusters (under ~10) the interval is too narrow: report it as such.
    """
    sums = cluster_sums(values, clusters)
    if not sums:
        return (math.nan, math.nan, math.nan)
    s = np.array([v[0] for v in sums.values()])
    n = np.array([v[1] for v in sums.values()], dtype=np.float64)
    point = float(s.sum() / n.sum())
    w = _resample_weights(np.random.default_rng(seed), len(s), n_boot)
    lo, hi = _percentile_interval((w @ s) / (w @ n), conf)
    return (point, lo, hi)


def cluster_bootstrap_diff(
    values_a: Sequence[bool | float],
    clusters_a: Sequence[str],
    values_b: Sequence[bool | float],
    clusters_b: Sequence[str],
    *,
    paired: bool = True,
    n_boot: int = 2000,
    seed: int = 0,
    conf: float = 0.95,
) -> tuple[float, float, float]:
    """Difference of means ``a - b`` with a cluster-bootstrap percentile interval.

    ``paired=True`` (both arms ran the same scenarios): each replicate draws one set of clusters and
    uses it for both arms, so scenario difficulty cancels out; the cluster sets must be equal.
    ``paired=False``: the arms' clusters are resampled independently. Returns ``(diff, lo, hi)``.
    """
    sa, sb = cluster_sums(values_a, clusters_a), cluster_sums(values_b, clusters_b)
    if not sa or not sb:
        return (math.nan, math.nan, math.nan)
    rng = np.random.default_rng(seed)
    if paired:
        if set(sa) != set(sb):
            only_a = sorted(set(sa) - set(sb))[:3]
            only_b = sorted(set(sb) - set(sa))[:3]
            raise ValueError(
                f"paired bootstrap needs the same clusters in both arms (only in a: {only_a}, only in b: "
                f"{only_b}); drop the unmatched clusters or pass paired=False"
            )
        names = sorted(sa)
        s_a = np.array([sa[c][0] for c in names])
        n_a = np.array([sa[c][1] for c in names], dtype=np.float64)
        s_b = np.array([sb[c][0] for c in names])
        n_b = np.array([sb[c][1] for c in names], dtype=np.float64)
        w = _resample_weights(rng, len(names), n_boot)
        reps = (w @ s_a) / (w @ n_a) - (w @ s_b) / (w @ n_b)
    else:
        s_a = np.array([v[0] for v in sa.values()])
        n_a = np.array([v[1] for v in sa.values()], dtype=np.float64)
        s_b = np.array([v[0] for v in sb.values()])
        n_b = np.array([v[1] for v in sb.values()], dtype=np.float64)
        w_a = _resample_weights(rng, len(s_a), n_boot)
        w_b = _resample_weights(rng, len(s_b), n_boot)
        reps = (w_a @ s_a) / (w_a @ n_a) - (w_b @ s_b) / (w_b @ n_b)
    point = float(s_a.sum() / n_a.sum() - s_b.sum() / n_b.sum())
    lo, hi = _percentile_interval(reps, conf)
    return (point, lo, hi)
