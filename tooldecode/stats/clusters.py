"""Cluster-aware rates, paired comparisons over scenarios, and claimed effects judged against a run."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tooldecode.stats.bootstrap import cluster_sums
from tooldecode.stats.intervals import normal_quantile, t_cdf, t_ppf, wilson

FEW_CLUSTERS = 10  # below this many clusters every figure says so
EXACT_SIGN_FLIP_MAX = 20  # the sign-flip p is exact up to this many nonzero differences (2^20 patterns)
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
    sums = cluster_sums(values, clusters)
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
    normal_quantile(conf)
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
        half = t_ppf(0.5 + conf / 2.0, g - 1) * math.sqrt(var)
        lo, hi = max(0.0, p - half), min(1.0, p + half)
    k_out = int(k) if k == int(k) else k
    return ClusterRate(k_out, int(total), g, p, lo, hi)


def sign_flip_p(d: Sequence[float], *, n_mc: int = 20000, seed: int = 0) -> float:
    """Two-sided sign-flip permutation p for the mean of paired differences ``d`` (one per cluster).

    Under the null that the two arms are exchangeable within a cluster, each difference is as likely
    to have either sign. Exact (all ``2^G'`` sign patterns of the ``G'`` nonzero differences) up to
    ``G' = EXACT_SIGN_FLIP_MAX`` (20), else ``n_mc`` random patterns (p = (1 + hits) / (1 + n_mc)).
    Differences of exactly 0 contribute nothing. Returns 1.0 when every difference is 0.
    """
    x = np.asarray(d, dtype=np.float64)
    x = x[x != 0]
    g = x.size
    if g == 0:
        return 1.0
    obs = abs(x.sum()) - 1e-12 * max(1.0, float(np.abs(x).sum()))
    if g <= EXACT_SIGN_FLIP_MAX:
        hits = 0
        low = min(g, 12)  # patterns of the first ``low`` signs, enumerated per pattern of the rest
        base = (((np.arange(2**low)[:, None] >> np.arange(low)) & 1) * 2.0 - 1.0) @ x[:low]
        for hi_bits in range(2 ** (g - low)):
            signs = ((hi_bits >> np.arange(g - low)) & 1) * 2.0 - 1.0
            hits += int(np.sum(np.abs(base + float(signs @ x[low:])) >= obs))
        return hits / 2**g
    rng = np.random.default_rng(seed)
    signs = rng.integers(0, 2, size=(n_mc, g), dtype=np.int8).astype(np.float64) * 2.0 - 1.0
    hits = int(np.sum(np.abs(signs @ x) >= obs))
    return (1 + hits) / (1 + n_mc)


def _t_p(t: float, df: float) -> float:
    if math.isnan(t):
        return math.nan
    return 2.0 * (1.0 - t_cdf(abs(t), df))


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

    def direction(self, alpha: float = 0.05) -> int:
        """+1 (a above b) or -1 (a below b) when the t interval excludes 0 and the sign-flip p is at
        most ``alpha``; 0 otherwise (no interval included)."""
        if self.p_sign_flip > alpha:
            return 0
        return 1 if self.lo > 0 else -1 if self.hi < 0 else 0

    def __str__(self) -> str:
        r = ""
        if not math.isnan(self.ratio):
            r = f", ratio ×{self.ratio:.2f} {interval_text(self.ratio_lo, self.ratio_hi, '.2f')}"
        return (
            f"{self.mean_a:.3f} vs {self.mean_b:.3f}: difference {self.diff:+.3f} "
            f"{interval_text(self.lo, self.hi, '+.3f')}{r}, sign-flip p = {self.p_sign_flip:.3g} ({self.g} scenarios"
            f"{few_clusters_note(self.g)})"
        )


def paired_clusters(
    a: dict[str, float], b: dict[str, float], conf: float = 0.95, power: float = 0.8
) -> PairedClusters:
    """Compare per-cluster values ``a`` and ``b`` (cluster -> mean of the arm in that cluster).

    Only clusters present in both are used. See ``PairedClusters`` for what is returned.
    """
    normal_quantile(conf)
    names = sorted(set(a) & set(b))
    g = len(names)
    nan = math.nan
    if g == 0:
        return PairedClusters(0, nan, nan, nan, nan, nan, 1.0, nan, nan, nan, nan, nan, nan, nan)
    xa = np.array([a[c] for c in names], dtype=np.float64)
    xb = np.array([b[c] for c in names], dtype=np.float64)
    d = xa - xb
    ma, mb, md = float(xa.mean()), float(xb.mean()), float(d.mean())
    p_flip = sign_flip_p(d.tolist())
    if g < 2:
        return PairedClusters(g, ma, mb, md, nan, nan, p_flip, nan, nan, nan, nan, nan, nan, nan)
    sd = float(d.std(ddof=1))
    if sd == 0.0:  # every cluster differs by the same amount: no variance to build a t interval from
        ratio = ma / mb if mb > 0 else nan
        return PairedClusters(g, ma, mb, md, nan, nan, p_flip, nan, ratio, nan, nan, nan, nan, nan)
    tq = t_ppf(0.5 + conf / 2.0, g - 1)
    se = sd / math.sqrt(g)
    lo, hi = md - tq * se, md + tq * se
    p_t = _t_p(md / se, g - 1) if se > 0 else (1.0 if md == 0 else 0.0)
    mde = (tq + t_ppf(power, g - 1)) * se
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


def interval_text(lo: float, hi: float, spec: str) -> str:
    """``[lo, hi]`` formatted with ``spec``, or ``[no interval]`` when either end is undefined."""
    if math.isnan(lo) or math.isnan(hi):
        return "[no interval]"
    return f"[{lo:{spec}}, {hi:{spec}}]"


@dataclass(frozen=True)
class EffectClaim:
    """A claimed effect of arm ``a`` against arm ``b``: on ``scale`` "ratio" (a/b = ``size``) or
    "difference" (a - b = ``size``). ``size`` None is a claim of direction only (``direction`` +1 / -1).
    ``bound`` "at least" / "at most" makes the size a bound (a prediction such as "at least ×3"): the
    size is then contradicted only by an interval wholly on the wrong side of it."""

    scale: str
    size: float | None
    sign: int = 0
    bound: str = "exact"  # "exact" | "at least" | "at most"

    def __post_init__(self) -> None:
        if self.scale not in ("ratio", "difference"):
            raise ValueError(f"claim scale must be 'ratio' or 'difference', got {self.scale!r}")
        if self.size is None and self.sign not in (1, -1):
            raise ValueError("a claim without a size needs a direction (sign +1 or -1)")
        if self.bound not in ("exact", "at least", "at most"):
            raise ValueError(f"claim bound must be 'exact', 'at least' or 'at most', got {self.bound!r}")
        if self.bound != "exact" and self.size is None:
            raise ValueError(f"a claim '{self.bound}' needs a size")

    def excludes(self, lo: float, hi: float) -> bool:
        """Whether the interval ``[lo, hi]`` contradicts the claimed size (or bound)."""
        if self.size is None:
            return False
        if self.bound == "at least":
            return hi < self.size
        if self.bound == "at most":
            return lo > self.size
        return self.size < lo or self.size > hi

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
        size = f"×{self.size:g}" if self.scale == "ratio" else f"{self.size:+g}"
        return size if self.bound == "exact" else f"{self.bound} {size}"


REPRODUCES = "reproduces"
DIRECTION_ONLY = "direction only — size contradicted"
CONTRADICTS = "contradicts"
INCONCLUSIVE = "inconclusive"
BY_CONSTRUCTION = "by construction"
PREMISE_ABSENT = "premise absent"
INTERIM = "interim"
VERDICTS = (REPRODUCES, DIRECTION_ONLY, CONTRADICTS, INCONCLUSIVE, BY_CONSTRUCTION, PREMISE_ABSENT, INTERIM)


@dataclass(frozen=True)
class EffectVerdict:
    """The verdict of ``judge_effect`` with the figures it rests on (``p``: the sign-flip p;
    ``p_adjusted``: after the multiplicity correction across the family of effect rows, nan when the
    row was judged on its own)."""

    verdict: str  # one of VERDICTS
    estimate: float
    lo: float
    hi: float
    claim: EffectClaim
    events: float
    event_clusters: int
    g: int
    mde: float
    reason: str
    p: float = math.nan
    p_adjusted: float = math.nan

    def __str__(self) -> str:
        return f"{self.verdict} ({self.reason})" if self.reason else self.verdict


MIN_EVENTS = 5
MIN_EVENT_CLUSTERS = 3


def holm(ps: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p values (family-wise error), in the order of ``ps``; nan stays nan
    and is not counted in the family."""
    idx = [i for i, p in enumerate(ps) if not math.isnan(p)]
    m = len(idx)
    out = [math.nan] * len(ps)
    running = 0.0
    for rank, i in enumerate(sorted(idx, key=lambda i: ps[i])):
        running = max(running, min(1.0, (m - rank) * ps[i]))
        out[i] = running
    return out


def interim(v: EffectVerdict, progress: str) -> EffectVerdict:
    """``v`` withheld: an arm it reads is not yet drawn in full (``progress`` says how far it got), and a
    verdict read before the planned n is reached would let the stopping point choose the answer. The
    estimate and interval stay for reading; the row is judged when the run is complete."""
    return dataclasses.replace(
        v, verdict=INTERIM, reason=f"no verdict until the run is complete: {progress}", p_adjusted=math.nan
    )


def by_construction(v: EffectVerdict, check: str) -> EffectVerdict:
    """``v`` relabelled as an instrument check: the arms differ because the instrument makes them
    (``check`` names how, e.g. a closed grammar cannot write a key), so it is never a reproduction."""
    return dataclasses.replace(
        v, verdict=BY_CONSTRUCTION, reason=f"instrument check: {check}", p_adjusted=math.nan
    )


def judge_effect(
    cmp: PairedClusters,
    claim: EffectClaim,
    *,
    events: float,
    event_clusters: int,
    alpha: float = 0.05,
    p_adjusted: float | None = None,
) -> EffectVerdict:
    """Judge a paired comparison against a claimed effect; the rule, in order:

    - *premise absent*: the reference arm ``b`` has no event (mean 0) where the claim needs some (a
      decrease, or any claim on the ratio scale);
    - the claimed direction is *established* when the interval (on the claim's scale) excludes the
      null (ratio 1, difference 0) in the claimed direction, the sign-flip p is at most ``alpha``, the
      multiplicity-adjusted p (``p_adjusted``, when given) is at most ``alpha``, and there are at least
      ``MIN_EVENTS`` events in at least ``MIN_EVENT_CLUSTERS`` clusters. Then *reproduces* when the
      claimed size lies inside the interval (or no size is claimed), else *direction only — size
      contradicted*;
    - *contradicts*: otherwise, when the interval excludes the claimed size or lies wholly on the
      other side of the null;
    - *inconclusive*: otherwise, with the minimum detectable effect at 80% power on the claim's scale.

    ``by_construction`` relabels an instrument check. No verdict says *reproduces* when its interval
    excludes the claimed size.
    """
    if claim.scale == "ratio":
        est, lo, hi = cmp.ratio, cmp.ratio_lo, cmp.ratio_hi
        mde = cmp.mde_ratio_up if claim.direction >= 0 else cmp.mde_ratio_down
    else:
        est, lo, hi = cmp.diff, cmp.lo, cmp.hi
        mde = cmp.mde_diff * (1 if claim.direction >= 0 else -1)
    padj = math.nan if p_adjusted is None else p_adjusted

    def out(verdict: str, reason: str) -> EffectVerdict:
        return EffectVerdict(
            verdict, est, lo, hi, claim, events, event_clusters, cmp.g, mde, reason, cmp.p_sign_flip, padj
        )

    if cmp.g >= 2 and cmp.mean_b == 0 and (claim.direction < 0 or claim.scale == "ratio"):
        return out(
            PREMISE_ABSENT,
            "the reference arm has no event, so there is nothing to remove"
            if claim.direction < 0
            else "the reference arm has no event, so no ratio",
        )
    if math.isnan(lo) or math.isnan(hi):
        if cmp.g >= 2 and math.isnan(cmp.lo) and not math.isnan(cmp.diff) and cmp.mean_b != 0:
            return out(
                INCONCLUSIVE,
                f"every scenario's difference is {cmp.diff:+.3f}: no variance across scenarios, so no t "
                "interval (arms drawn with shared random streams can agree draw for draw)",
            )
        return out(INCONCLUSIVE, "no interval (fewer than 2 scenarios or a zero reference)")
    interval_excl = (lo > claim.null) if claim.direction > 0 else (hi < claim.null)
    adj_ok = p_adjusted is None or p_adjusted <= alpha
    established = interval_excl and cmp.p_sign_flip <= alpha and adj_ok
    wrong_way = (hi < claim.null) if claim.direction > 0 else (lo > claim.null)
    excl_size = claim.excludes(lo, hi)
    enough = events >= MIN_EVENTS and event_clusters >= MIN_EVENT_CLUSTERS
    if established and enough:
        if excl_size:
            return out(DIRECTION_ONLY, f"claimed {claim} outside the interval")
        return out(REPRODUCES, "")
    if excl_size or wrong_way:
        why = "the opposite direction" if wrong_way else f"claimed {claim} outside the interval"
        return out(CONTRADICTS, why)
    if interval_excl and cmp.p_sign_flip <= alpha and not adj_ok:
        return out(
            INCONCLUSIVE,
            f"direction as claimed at sign-flip p = {cmp.p_sign_flip:.3g}, but the adjusted p = "
            f"{padj:.3g} > {alpha:g}",
        )
    if interval_excl and cmp.p_sign_flip <= alpha:
        return out(
            INCONCLUSIVE,
            f"direction as claimed but only {events:g} events in {event_clusters} scenarios "
            f"(needs {MIN_EVENTS} in {MIN_EVENT_CLUSTERS})",
        )
    if interval_excl:
        return out(
            INCONCLUSIVE,
            f"the t interval excludes no-effect but the sign-flip p = {cmp.p_sign_flip:.3g} > {alpha:g} "
            f"({event_clusters} scenarios with events)",
        )
    if claim.scale == "ratio" and claim.direction < 0 and mde <= 0:
        return out(INCONCLUSIVE, "at 80% power not even ×0 (a complete removal) is detectable at this n")
    m = f"×{mde:.2f}" if claim.scale == "ratio" else f"{mde:+.3f}"
    return out(INCONCLUSIVE, f"minimum detectable effect at 80% power {m}")
