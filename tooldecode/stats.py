"""Uncertainty for rates and differences of rates: Wilson, Newcombe, Fisher, cluster bootstrap, noise floor.

Pure numpy + the standard library (no scipy). Which function to use when is described in docs/runs.md.

- ``wilson``: a 95% interval for one rate ``k/n`` of independent trials.
- ``newcombe_diff``: the difference of two independent rates, with Newcombe's hybrid score interval
  (method 10 of Newcombe 1998) and Fisher's exact two-sided p.
- ``cluster_bootstrap_rate`` / ``cluster_bootstrap_diff``: the same questions when samples come in
  clusters (several samples of one scenario are not independent); resamples whole clusters.
- ``noise_floor``: the spread of one arm's rate over repeated runs with different seeds.
- ``mean_ci``: a Student-t interval for a mean of roughly normal values (e.g. per-seed rates).
- ``cluster_rate``: a rate over scenario-clustered samples with a cluster-robust (CR1) interval,
  t with G-1 degrees of freedom; ``ClusterRate`` prints its interval kind and a few-clusters warning.
- ``paired_clusters``: a paired comparison of two arms over the same scenarios: the mean of the
  per-scenario differences with a t interval over scenarios, the exact (or Monte Carlo) sign-flip
  permutation p over scenarios, the ratio of arm means with a cluster-robust delta-method interval,
  and the minimum detectable effect at 80% power.
- ``judge_effect``: a verdict against a claimed effect (direction and size): reproduces /
  contradicts / inconclusive.

The percentile cluster bootstrap is kept for comparison; at the cluster counts of a small study it
is anti-conservative (a true null is rejected ~11% of the time at 6 clusters), so findings use the
t / sign-flip procedures, whose size ``tests/test_stats.py`` measures by simulation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

__all__ = [
    "FEW_CLUSTERS",
    "ClusterRate",
    "Diff",
    "EffectClaim",
    "EffectVerdict",
    "PairedClusters",
    "Rate",
    "cluster_rate",
    "judge_effect",
    "paired_clusters",
    "sign_flip_p",
    "cluster_bootstrap_diff",
    "cluster_bootstrap_rate",
    "fisher_exact",
    "mean_ci",
    "newcombe_diff",
    "noise_floor",
    "wilson",
]


@dataclass(frozen=True)
class Rate:
    """``k`` successes out of ``n`` with a confidence interval ``[lo, hi]`` (proportions, not percent)."""

    k: int
    n: int
    rate: float
    lo: float
    hi: float

    def __str__(self) -> str:
        if self.n == 0:
            return f"0/0 = n/a [{100 * self.lo:.1f}, {100 * self.hi:.1f}]"
        return f"{self.k}/{self.n} = {100 * self.rate:.1f}% [{100 * self.lo:.1f}, {100 * self.hi:.1f}]"


@dataclass(frozen=True)
class Diff:
    """Difference ``a.rate - b.rate`` with a confidence interval and Fisher's exact two-sided p."""

    a: Rate
    b: Rate
    diff: float
    lo: float
    hi: float
    p_fisher: float

    def __str__(self) -> str:
        if math.isnan(self.diff):
            return f"n/a [{100 * self.lo:+.1f}, {100 * self.hi:+.1f}] pts"
        return (
            f"{100 * self.diff:+.1f} pts [{100 * self.lo:+.1f}, {100 * self.hi:+.1f}], "
            f"Fisher p = {self.p_fisher:.3g} ({self.a.k}/{self.a.n} vs {self.b.k}/{self.b.n})"
        )


def _z(conf: float) -> float:
    if not 0.0 < conf < 1.0:
        raise ValueError(f"conf must be in (0, 1), got {conf}")
    return NormalDist().inv_cdf(0.5 + conf / 2.0)


def _check_counts(k: int, n: int) -> None:
    if int(k) != k or int(n) != n or n < 0 or not 0 <= k <= n:
        raise ValueError(f"need integers 0 <= k <= n, got k={k}, n={n}")


def wilson(k: int, n: int, conf: float = 0.95) -> Rate:
    """Wilson score interval for ``k/n`` (no continuity correction). ``n == 0`` gives rate nan, [0, 1]."""
    _check_counts(k, n)
    z = _z(conf)
    k, n = int(k), int(n)
    if n == 0:
        return Rate(0, 0, math.nan, 0.0, 1.0)
    z2 = z * z
    center = (k + z2 / 2.0) / (n + z2)
    half = z * math.sqrt(k * (n - k) / n + z2 / 4.0) / (n + z2)
    lo = 0.0 if k == 0 else max(0.0, center - half)
    hi = 1.0 if k == n else min(1.0, center + half)
    return Rate(k, n, k / n, lo, hi)


def fisher_exact(k1: int, n1: int, k2: int, n2: int) -> float:
    """Fisher's exact test, two-sided, for the table ``[[k1, n1-k1], [k2, n2-k2]]``.

    The p-value sums the hypergeometric probabilities of all tables with the same margins that are no
    more likely than the observed one (relative tolerance 1e-7, as R's ``fisher.test``).
    """
    _check_counts(k1, n1)
    _check_counts(k2, n2)
    k1, n1, k2, n2 = int(k1), int(n1), int(k2), int(n2)
    m = k1 + k2  # successes in total
    big_n = n1 + n2
    lo, hi = max(0, m - n2), min(n1, m)
    if hi <= lo:
        return 1.0
    x = np.arange(lo, hi + 1, dtype=np.float64)
    lgam = np.vectorize(math.lgamma, otypes=[np.float64])
    log_p = (
        lgam(n1 + 1.0) - lgam(x + 1.0) - lgam(n1 - x + 1.0)
        + lgam(n2 + 1.0) - lgam(m - x + 1.0) - lgam(n2 - m + x + 1.0)
        - (math.lgamma(big_n + 1.0) - math.lgamma(m + 1.0) - math.lgamma(big_n - m + 1.0))
    )  # fmt: skip
    log_obs = log_p[k1 - lo]
    keep = log_p <= log_obs + math.log1p(1e-7)
    top = float(log_p.max())
    p = float(np.exp(log_p[keep] - top).sum() / np.exp(log_p - top).sum())
    return min(1.0, p)


def newcombe_diff(k1: int, n1: int, k2: int, n2: int, conf: float = 0.95) -> Diff:
    """Difference of two independent rates ``k1/n1 - k2/n2``: Newcombe's hybrid score interval.

    Method 10 of Newcombe (1998), built from the two Wilson intervals; Fisher's exact two-sided p
    comes along. Either ``n == 0`` gives diff nan and the uninformative interval [-1, 1].
    """
    a, b = wilson(k1, n1, conf), wilson(k2, n2, conf)
    p = fisher_exact(k1, n1, k2, n2)
    if n1 == 0 or n2 == 0:
        return Diff(a, b, math.nan, -1.0, 1.0, p)
    d = a.rate - b.rate
    lo = d - math.hypot(a.rate - a.lo, b.hi - b.rate)
    hi = d + math.hypot(a.hi - a.rate, b.rate - b.lo)
    return Diff(a, b, d, max(-1.0, lo), min(1.0, hi), p)


# --- cluster bootstrap -----------------------------------------------------------------------------


def _cluster_sums(values: Sequence[bool | float], clusters: Sequence[str]) -> dict[str, tuple[float, int]]:
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
    _z(conf)  # validates conf
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
    sums = _cluster_sums(values, clusters)
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
    sa, sb = _cluster_sums(values_a, clusters_a), _cluster_sums(values_b, clusters_b)
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


# --- repeated runs ---------------------------------------------------------------------------------


def noise_floor(rates_by_seed: Sequence[float]) -> dict:
    """Spread of one arm's rate over repeated runs that differ only in the seed.

    Returns ``{"mean", "sd", "max_abs_diff", "n_runs"}``: ``sd`` is the sample standard deviation
    (nan for one run), ``max_abs_diff`` the largest gap between any two runs (max - min). A difference
    between arms smaller than the noise floor is not a finding.
    """
    x = np.asarray(rates_by_seed, dtype=np.float64)
    if x.size == 0:
        raise ValueError("noise_floor needs at least one run")
    return {
        "mean": float(x.mean()),
        "sd": float(x.std(ddof=1)) if x.size > 1 else math.nan,
        "max_abs_diff": float(x.max() - x.min()),
        "n_runs": int(x.size),
    }


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction for the regularized incomplete beta (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 1000):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    ln_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(ln_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(ln_front) * _betacf(b, a, 1.0 - x) / b


def _t_cdf(t: float, df: float) -> float:
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def _t_ppf(q: float, df: float) -> float:
    """Quantile of Student's t (q > 0.5), by bisection on the CDF."""
    lo, hi = 0.0, 1.0
    while _t_cdf(hi, df) < q:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if _t_cdf(mid, df) < q:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return (lo + hi) / 2.0


def mean_ci(values: Sequence[float], conf: float = 0.95) -> tuple[float, float, float]:
    """Mean with a Student-t interval (mean ± t * sd / sqrt(n)); assumes roughly normal, independent values.

    Use it for a handful of per-run numbers (e.g. one arm's rate over seeds). Returns
    ``(mean, lo, hi)``; fewer than two values give nan bounds.
    """
    _z(conf)
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        return (math.nan, math.nan, math.nan)
    mean = float(x.mean())
    if x.size < 2:
        return (mean, math.nan, math.nan)
    half = _t_ppf(0.5 + conf / 2.0, x.size - 1) * float(x.std(ddof=1)) / math.sqrt(x.size)
    return (mean, mean - half, mean + half)


# --- cluster-aware rates and paired comparisons ----------------------------------------------------

FEW_CLUSTERS = 10  # below this many clusters every figure says so
CLUSTER_RATE_KIND = "cluster-robust CR1, t(G-1)"
PAIRED_KIND = "t over scenario differences; sign-flip permutation p"


def few_clusters_note(g: int) -> str:
    """``", fewer than 10 clusters"`` when ``g`` is below ``FEW_CLUSTERS``, else an empty string."""
    return f", fewer than {FEW_CLUSTERS} clusters" if g < FEW_CLUSTERS else ""


@dataclass(frozen=True)
class ClusterRate:
    """A rate over clustered samples: ``k`` events in ``n`` samples from ``g`` clusters, with a
    cluster-robust interval ``[lo, hi]`` of kind ``kind``."""

    k: float
    n: int
    g: int
    rate: float
    lo: float
    hi: float
    kind: str = CLUSTER_RATE_KIND

    def __str__(self) -> str:
        if self.n == 0:
            return "0/0 = n/a"
        k = f"{self.k:g}" if float(self.k) != int(self.k) else str(int(self.k))
        return (
            f"{k}/{self.n} = {100 * self.rate:.1f}% [{100 * self.lo:.1f}, {100 * self.hi:.1f}] "
            f"({self.g} scenarios{few_clusters_note(self.g)})"
        )


def _group(
    values: Sequence[bool | float], clusters: Sequence[str]
) -> tuple[list[str], np.ndarray, np.ndarray]:
    sums = _cluster_sums(values, clusters)
    names = sorted(sums)
    return (
        names,
        np.array([sums[c][0] for c in names], dtype=np.float64),
        np.array([sums[c][1] for c in names], dtype=np.float64),
    )


def cluster_rate(values: Sequence[bool | float], clusters: Sequence[str], conf: float = 0.95) -> ClusterRate:
    """Rate of ``values`` (bools or probabilities) over samples clustered by ``clusters``.

    The point is the pooled rate ``sum(y) / n``. Its interval is cluster-robust: the CR1 sandwich
    variance of a ratio estimator, ``G/(G-1) * sum_g (y_g - p n_g)^2 / n^2``, with Student-t critical
    values on ``G - 1`` degrees of freedom, clipped to [0, 1]. When every cluster has the same rate
    (e.g. no event at all) that variance is 0; the interval is then the Wilson interval of the pooled
    rate on ``G`` trials (one per cluster), which is never narrower than a cluster can justify.
    One cluster gives the uninformative [0, 1].
    """
    _z(conf)
    names, y, n = _group(values, clusters)
    g = len(names)
    total = float(n.sum())
    if g == 0 or total == 0:
        return ClusterRate(0, 0, 0, math.nan, 0.0, 1.0)
    k = float(y.sum())
    p = k / total
    if g < 2:
        return ClusterRate(k, int(total), g, p, 0.0, 1.0)
    resid = y - p * n
    var = g / (g - 1) * float((resid**2).sum()) / total**2
    if var <= 1e-18:
        w = wilson(round(p * g), g, conf)
        lo, hi = min(w.lo, p), max(w.hi, p)
    else:
        half = _t_ppf(0.5 + conf / 2.0, g - 1) * math.sqrt(var)
        lo, hi = max(0.0, p - half), min(1.0, p + half)
    k_out = int(k) if k == int(k) else k
    return ClusterRate(k_out, int(total), g, p, lo, hi)


def sign_flip_p(d: Sequence[float], *, n_mc: int = 20000, seed: int = 0) -> float:
    """Two-sided sign-flip permutation p for the mean of paired differences ``d`` (one per cluster).

    Under the null that the two arms are exchangeable within a cluster, each difference is as likely
    to have either sign. Exact (all ``2^G`` sign patterns) up to ``G = 16``, else ``n_mc`` random
    patterns (p = (1 + hits) / (1 + n_mc)). Differences of exactly 0 contribute nothing. Returns 1.0
    when every difference is 0.
    """
    x = np.asarray(d, dtype=np.float64)
    g = x.size
    if g == 0 or not np.any(x):
        return 1.0
    obs = abs(x.sum()) - 1e-12 * max(1.0, float(np.abs(x).sum()))
    if g <= 16:
        signs = ((np.arange(2**g)[:, None] >> np.arange(g)) & 1) * 2.0 - 1.0
        stats = np.abs(signs @ x)
        return float(np.mean(stats >= obs))
    rng = np.random.default_rng(seed)
    signs = rng.integers(0, 2, size=(n_mc, g), dtype=np.int8).astype(np.float64) * 2.0 - 1.0
    hits = int(np.sum(np.abs(signs @ x) >= obs))
    return (1 + hits) / (1 + n_mc)


def _t_p(t: float, df: float) -> float:
    if math.isnan(t):
        return math.nan
    return 2.0 * (1.0 - _t_cdf(abs(t), df))


@dataclass(frozen=True)
class PairedClusters:
    """Arm ``a`` against arm ``b`` over the ``g`` clusters both have (one value per cluster and arm).

    ``diff`` is the mean of the per-cluster differences ``a - b`` with a Student-t interval over
    clusters; ``p_sign_flip`` the sign-flip permutation p, ``p_t`` the paired t p. ``ratio`` is
    ``mean(a) / mean(b)`` with a cluster-robust delta-method interval on the log scale (t, G-1 df);
    when arm ``a`` is 0 in every cluster, ``1 + [lo, hi] / mean(b)`` (the difference's interval
    relative to the reference, clipped at 0); nan when ``mean(b)`` is 0. ``mde_diff`` is the smallest difference the design detects with 80%
    power at the two-sided 5% level (paired t, the observed sd of the differences); ``mde_ratio_up``
    / ``mde_ratio_down`` the same as ratios to ``mean(b)``.
    """

    g: int
    mean_a: float
    mean_b: float
    diff: float
    lo: float
    hi: float
    p_sign_flip: float
    p_t: float
    ratio: float
    ratio_lo: float
    ratio_hi: float
    mde_diff: float
    mde_ratio_up: float
    mde_ratio_down: float
    kind: str = PAIRED_KIND

    def __str__(self) -> str:
        r = ""
        if not math.isnan(self.ratio):
            r = f", ratio ×{self.ratio:.2f} [{self.ratio_lo:.2f}, {self.ratio_hi:.2f}]"
        return (
            f"{self.mean_a:.3f} vs {self.mean_b:.3f}: difference {self.diff:+.3f} [{self.lo:+.3f}, "
            f"{self.hi:+.3f}]{r}, sign-flip p = {self.p_sign_flip:.3g} ({self.g} scenarios"
            f"{few_clusters_note(self.g)})"
        )


def paired_clusters(
    a: dict[str, float], b: dict[str, float], conf: float = 0.95, power: float = 0.8
) -> PairedClusters:
    """Compare per-cluster values ``a`` and ``b`` (cluster -> mean of the arm in that cluster).

    Only clusters present in both are used. See ``PairedClusters`` for what is returned.
    """
    _z(conf)
    names = sorted(set(a) & set(b))
    g = len(names)
    nan = math.nan
    if g == 0:
        return PairedClusters(0, nan, nan, nan, nan, nan, 1.0, nan, nan, nan, nan, nan, nan, nan)
    xa = np.array([a[c] for c in names], dtype=np.float64)
    xb = np.array([b[c] for c in names], dtype=np.float64)
    d = xa - xb
    ma, mb, md = float(xa.mean()), float(xb.mean()), float(d.mean())
    p_flip = sign_flip_p(d)
    if g < 2:
        return PairedClusters(g, ma, mb, md, nan, nan, p_flip, nan, nan, nan, nan, nan, nan, nan)
    sd = float(d.std(ddof=1))
    tq = _t_ppf(0.5 + conf / 2.0, g - 1)
    se = sd / math.sqrt(g)
    lo, hi = md - tq * se, md + tq * se
    p_t = _t_p(md / se, g - 1) if se > 0 else (1.0 if md == 0 else 0.0)
    mde = (tq + _t_ppf(power, g - 1)) * se
    ratio = ratio_lo = ratio_hi = nan
    up = down = nan
    if mb > 0:
        ratio = ma / mb
        up, down = (mb + mde) / mb, max(0.0, (mb - mde) / mb)
        z = xa - ratio * xb  # linearization of sum(a)/sum(b)
        var_r = g / (g - 1) * float((z**2).sum()) / float(xb.sum()) ** 2
        if ratio > 0:
            se_log = math.sqrt(var_r) / ratio
            ratio_lo, ratio_hi = ratio * math.exp(-tq * se_log), ratio * math.exp(tq * se_log)
        else:  # arm a is 0 everywhere: the ratio's uncertainty is that of the difference, relative to mean(b)
            ratio_lo, ratio_hi = max(0.0, 1.0 + lo / mb), max(0.0, 1.0 + hi / mb)
    return PairedClusters(g, ma, mb, md, lo, hi, p_flip, p_t, ratio, ratio_lo, ratio_hi, mde, up, down)


@dataclass(frozen=True)
class EffectClaim:
    """A claimed effect of arm ``a`` against arm ``b``: on ``scale`` "ratio" (a/b = ``size``) or
    "difference" (a - b = ``size``). ``size`` None is a claim of direction only (``direction`` +1 / -1)."""

    scale: str
    size: float | None
    sign: int = 0

    def __post_init__(self) -> None:
        if self.scale not in ("ratio", "difference"):
            raise ValueError(f"claim scale must be 'ratio' or 'difference', got {self.scale!r}")
        if self.size is None and self.sign not in (1, -1):
            raise ValueError("a claim without a size needs a direction (sign +1 or -1)")

    @property
    def null(self) -> float:
        return 1.0 if self.scale == "ratio" else 0.0

    @property
    def direction(self) -> int:
        if self.size is None:
            return self.sign
        return 1 if self.size > self.null else (-1 if self.size < self.null else 0)

    def __str__(self) -> str:
        if self.size is None:
            word = "increase" if self.sign > 0 else "decrease"
            return f"{word} ({self.scale}, size not stated)"
        return f"×{self.size:g}" if self.scale == "ratio" else f"{self.size:+g}"


@dataclass(frozen=True)
class EffectVerdict:
    """The verdict of ``judge_effect`` with the figures it rests on."""

    verdict: str  # "reproduces" | "contradicts" | "inconclusive"
    estimate: float
    lo: float
    hi: float
    claim: EffectClaim
    events: float
    event_clusters: int
    g: int
    mde: float
    reason: str

    def __str__(self) -> str:
        return f"{self.verdict} ({self.reason})" if self.reason else self.verdict


MIN_EVENTS = 5
MIN_EVENT_CLUSTERS = 3


def judge_effect(
    cmp: PairedClusters, claim: EffectClaim, *, events: float, event_clusters: int, alpha: float = 0.05
) -> EffectVerdict:
    """Judge a paired comparison against a claimed effect.

    - *reproduces*: the interval (on the claim's scale) excludes the null (ratio 1, difference 0) in
      the claimed direction and the sign-flip p is at most ``alpha`` (with fewer than 6 scenarios that
      differ it cannot be), from at least ``MIN_EVENTS`` events in at least ``MIN_EVENT_CLUSTERS``
      clusters; when it also excludes the claimed size, the reason says the size differs;
    - *contradicts*: the interval excludes the claimed size (and does not reproduce the direction);
    - *inconclusive*: otherwise, with the minimum detectable effect at 80% power on the claim's scale.
    """
    if claim.scale == "ratio":
        est, lo, hi = cmp.ratio, cmp.ratio_lo, cmp.ratio_hi
        mde = cmp.mde_ratio_up if claim.direction >= 0 else cmp.mde_ratio_down
    else:
        est, lo, hi = cmp.diff, cmp.lo, cmp.hi
        mde = cmp.mde_diff * (1 if claim.direction >= 0 else -1)

    def out(verdict: str, reason: str) -> EffectVerdict:
        return EffectVerdict(verdict, est, lo, hi, claim, events, event_clusters, cmp.g, mde, reason)

    if math.isnan(lo) or math.isnan(hi):
        if cmp.g >= 2 and cmp.mean_b == 0 and cmp.mean_a == 0:
            return out("inconclusive", "no event in either arm")
        return out("inconclusive", "no interval (fewer than 2 scenarios or a zero reference)")
    interval_excl = (lo > claim.null) if claim.direction > 0 else (hi < claim.null)
    # the interval (t over scenarios) and the sign-flip test must both reject no-effect
    excl_null = interval_excl and cmp.p_sign_flip <= alpha
    wrong_way = (hi < claim.null) if claim.direction > 0 else (lo > claim.null)
    excl_size = claim.size is not None and (claim.size < lo or claim.size > hi)
    enough = events >= MIN_EVENTS and event_clusters >= MIN_EVENT_CLUSTERS
    if excl_null and enough:
        return out(
            "reproduces", f"claimed {claim} outside the interval: the size differs" if excl_size else ""
        )
    if excl_size or wrong_way:
        why = "the opposite direction" if wrong_way else f"claimed {claim} outside the interval"
        return out("contradicts", why)
    if excl_null:
        return out(
            "inconclusive",
            f"direction as claimed but only {events:g} events in {event_clusters} scenarios "
            f"(needs {MIN_EVENTS} in {MIN_EVENT_CLUSTERS})",
        )
    if interval_excl:
        return out(
            "inconclusive",
            f"the t interval excludes no-effect but the sign-flip p = {cmp.p_sign_flip:.3g} > {alpha:g} "
            f"({event_clusters} scenarios with events)",
        )
    if claim.scale == "ratio" and claim.direction < 0 and mde <= 0:
        return out("inconclusive", "at 80% power not even ×0 (a complete removal) is detectable at this n")
    m = f"×{mde:.2f}" if claim.scale == "ratio" else f"{mde:+.3f}"
    return out("inconclusive", f"minimum detectable effect at 80% power {m}")
