"""Rates and differences with intervals (Wilson, Newcombe, Fisher), the t distribution, repeated-run noise."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np


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


def normal_quantile(conf: float) -> float:
    """The standard normal quantile of a two-sided ``conf`` interval (1.96 for 0.95)."""
    if not 0.0 < conf < 1.0:
        raise ValueError(f"conf must be in (0, 1), got {conf}")
    return NormalDist().inv_cdf(0.5 + conf / 2.0)


def _check_counts(k: int, n: int) -> None:
    if int(k) != k or int(n) != n or n < 0 or not 0 <= k <= n:
        raise ValueError(f"need integers 0 <= k <= n, got k={k}, n={n}")


def wilson(k: int, n: int, conf: float = 0.95) -> Rate:
    """Wilson score interval for ``k/n`` (no continuity correction). ``n == 0`` gives rate nan, [0, 1]."""
    _check_counts(k, n)
    z = normal_quantile(conf)
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


def t_cdf(t: float, df: float) -> float:
    """CDF of Student's t with ``df`` degrees of freedom."""
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def t_ppf(q: float, df: float) -> float:
    """Quantile of Student's t (q > 0.5), by bisection on the CDF."""
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < q:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_cdf(mid, df) < q:
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
    normal_quantile(conf)
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        return (math.nan, math.nan, math.nan)
    mean = float(x.mean())
    if x.size < 2:
        return (mean, math.nan, math.nan)
    half = t_ppf(0.5 + conf / 2.0, x.size - 1) * float(x.std(ddof=1)) / math.sqrt(x.size)
    return (mean, mean - half, mean + half)
