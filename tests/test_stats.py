"""tooldecode.stats against published worked examples and independent computations."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from tooldecode.stats import (
    Rate,
    cluster_bootstrap_diff,
    cluster_bootstrap_rate,
    fisher_exact,
    mean_ci,
    newcombe_diff,
    noise_floor,
    wilson,
)

# --- Wilson ----------------------------------------------------------------------------------------


def test_wilson_matches_newcombe_1998_single_proportion_example() -> None:
    # Newcombe (1998), "Two-sided confidence intervals for the single proportion", 81/263: 0.2553 to 0.3662.
    r = wilson(81, 263)
    assert (r.k, r.n) == (81, 263)
    assert r.rate == pytest.approx(81 / 263)
    assert round(r.lo, 4) == 0.2553 and round(r.hi, 4) == 0.3662


def test_wilson_matches_the_closed_form_and_formats() -> None:
    r = wilson(12, 40)
    z = 1.959963984540054
    center = (12 + z * z / 2) / (40 + z * z)
    half = z / (40 + z * z) * math.sqrt(12 * 28 / 40 + z * z / 4)
    assert r.lo == pytest.approx(center - half, abs=1e-12)
    assert r.hi == pytest.approx(center + half, abs=1e-12)
    assert str(r) == "12/40 = 30.0% [18.1, 45.4]"


def test_wilson_edges() -> None:
    zero = wilson(0, 0)
    assert math.isnan(zero.rate) and (zero.lo, zero.hi) == (0.0, 1.0)
    assert "n/a" in str(zero)
    none = wilson(0, 10)
    assert none.lo == 0.0 and 0.25 < none.hi < 0.35  # 0/10: [0, 0.2775]
    assert round(none.hi, 4) == 0.2775
    allk = wilson(10, 10)
    assert allk.hi == 1.0 and round(allk.lo, 4) == 0.7225
    assert wilson(5, 10, conf=0.99).lo < wilson(5, 10).lo < wilson(5, 10, conf=0.8).lo
    for bad in [(-1, 5), (6, 5), (1.5, 5)]:
        with pytest.raises(ValueError):
            wilson(*bad)
    with pytest.raises(ValueError):
        wilson(1, 5, conf=1.0)


def test_wilson_coverage_is_near_nominal() -> None:
    # Exact coverage: sum the binomial probabilities of the k whose interval holds the true p.
    for n, p in [(40, 0.3), (100, 0.1), (200, 0.5)]:
        cover = sum(
            math.comb(n, k) * p**k * (1 - p) ** (n - k)
            for k in range(n + 1)
            if wilson(k, n).lo <= p <= wilson(k, n).hi
        )
        assert 0.92 < cover < 0.98, (n, p, cover)


# --- Newcombe + Fisher -----------------------------------------------------------------------------

# Newcombe (1998), "Interval estimation for the difference between independent proportions",
# table II, method 10 (hybrid score, no continuity correction).
NEWCOMBE_TABLE_II = [
    ((56, 70, 48, 80), 0.0524, 0.3339),
    ((9, 10, 3, 10), 0.1705, 0.8090),
    ((6, 7, 2, 7), 0.0582, 0.8062),
    ((5, 56, 0, 29), -0.0381, 0.1926),
    ((0, 10, 0, 20), -0.1611, 0.2775),
    ((0, 10, 0, 10), -0.2775, 0.2775),
    ((10, 10, 0, 20), 0.6791, 1.0000),
    ((10, 10, 0, 10), 0.6075, 1.0000),
]


@pytest.mark.parametrize(("counts", "lo", "hi"), NEWCOMBE_TABLE_II)
def test_newcombe_matches_the_published_table(
    counts: tuple[int, int, int, int], lo: float, hi: float
) -> None:
    d = newcombe_diff(*counts)
    k1, n1, k2, n2 = counts
    assert d.diff == pytest.approx(k1 / n1 - k2 / n2)
    assert round(d.lo, 4) == lo and round(d.hi, 4) == hi
    assert d.a == wilson(k1, n1) and d.b == wilson(k2, n2)
    assert d.p_fisher == pytest.approx(fisher_exact(*counts))


def test_newcombe_is_antisymmetric_and_handles_empty_arms() -> None:
    ab, ba = newcombe_diff(30, 50, 20, 60), newcombe_diff(20, 60, 30, 50)
    assert ab.diff == pytest.approx(-ba.diff)
    assert ab.lo == pytest.approx(-ba.hi) and ab.hi == pytest.approx(-ba.lo)
    empty = newcombe_diff(0, 0, 3, 10)
    assert math.isnan(empty.diff) and (empty.lo, empty.hi) == (-1.0, 1.0)
    assert "pts" in str(ab) and "30/50 vs 20/60" in str(ab)


def _fisher_bruteforce(k1: int, n1: int, k2: int, n2: int) -> Fraction:
    """Exact two-sided Fisher p with rational arithmetic: enumerate all tables with the same margins."""
    m, total = k1 + k2, math.comb(n1 + n2, k1 + k2)
    probs = {x: Fraction(math.comb(n1, x) * math.comb(n2, m - x), total) for x in range(0, min(n1, m) + 1)
             if 0 <= m - x <= n2}  # fmt: skip
    return sum((p for p in probs.values() if p <= probs[k1]), Fraction(0))


def test_fisher_known_values() -> None:
    # Fisher's tea-tasting table: 3 of 4 cups right vs 1 of 4: p = 34/70 = 0.4857.
    assert fisher_exact(3, 4, 1, 4) == pytest.approx(34 / 70, rel=1e-12)
    # The textbook 2x2 of 12 men (1 studying) and 12 women (9 studying): two-sided p = 0.002759.
    assert round(fisher_exact(1, 12, 9, 12), 6) == 0.002759
    assert fisher_exact(5, 10, 5, 10) == pytest.approx(1.0)
    assert fisher_exact(0, 0, 3, 7) == 1.0
    assert fisher_exact(0, 20, 20, 20) < 1e-10


def test_fisher_agrees_with_exact_enumeration() -> None:
    rng = np.random.default_rng(7)
    for _ in range(60):
        n1, n2 = (int(v) for v in rng.integers(1, 40, size=2))
        k1, k2 = int(rng.integers(0, n1 + 1)), int(rng.integers(0, n2 + 1))
        exact = float(_fisher_bruteforce(k1, n1, k2, n2))
        assert fisher_exact(k1, n1, k2, n2) == pytest.approx(exact, rel=1e-9, abs=1e-15), (k1, n1, k2, n2)
        assert fisher_exact(k1, n1, k2, n2) == pytest.approx(fisher_exact(k2, n2, k1, n1), rel=1e-9)


# --- cluster bootstrap -----------------------------------------------------------------------------


def _clustered(rng: np.random.Generator, n_clusters: int, per: int, spread: float, shift: float = 0.0):
    """Outcomes whose rate varies by cluster (a scenario effect): returns (values, clusters, rates)."""
    rates = np.clip(rng.beta(2, 5, size=n_clusters) * spread + (1 - spread) * 0.3 + shift, 0, 1)
    values = [bool(rng.random() < rates[c]) for c in range(n_clusters) for _ in range(per)]
    clusters = [f"s{c}" for c in range(n_clusters) for _ in range(per)]
    return values, clusters, rates


def test_cluster_bootstrap_is_deterministic_with_a_seed() -> None:
    values, clusters, _ = _clustered(np.random.default_rng(1), 15, 8, 1.0)
    a = cluster_bootstrap_rate(values, clusters, n_boot=500, seed=3)
    assert a == cluster_bootstrap_rate(values, clusters, n_boot=500, seed=3)
    assert a[1:] != cluster_bootstrap_rate(values, clusters, n_boot=500, seed=4)[1:]
    assert a[0] == pytest.approx(np.mean(values))
    assert a[1] < a[0] < a[2]


def test_cluster_bootstrap_widens_with_correlated_clusters() -> None:
    # 10 clusters of 20 identical outcomes: effectively 10 observations, not 200.
    values = [c % 3 == 0 for c in range(10) for _ in range(20)]
    clusters = [f"s{c}" for c in range(10) for _ in range(20)]
    point, lo, hi = cluster_bootstrap_rate(values, clusters, n_boot=2000, seed=0)
    w = wilson(sum(values), len(values))
    assert point == pytest.approx(0.4)
    assert (hi - lo) > 1.8 * (w.hi - w.lo)
    # One sample per cluster: close to the ordinary binomial interval.
    point1, lo1, hi1 = cluster_bootstrap_rate(values, [str(i) for i in range(200)], seed=0)
    assert (hi1 - lo1) == pytest.approx(w.hi - w.lo, rel=0.2)


def test_cluster_bootstrap_coverage_sanity() -> None:
    rng = np.random.default_rng(11)
    true_rate, hits, reps = 0.3, 0, 200
    for _ in range(reps):
        cluster_rates = rng.beta(3, 7, size=20)  # mean 0.3, strong scenario effect
        values = [bool(rng.random() < r) for r in cluster_rates for _ in range(6)]
        clusters = [f"s{c}" for c in range(20) for _ in range(6)]
        _, lo, hi = cluster_bootstrap_rate(values, clusters, n_boot=400, seed=int(rng.integers(1 << 30)))
        hits += lo <= true_rate <= hi
    # Percentile cluster bootstrap with 20 clusters under-covers a little; nominal is 0.95.
    assert 0.85 <= hits / reps <= 0.99, hits / reps


def test_paired_bootstrap_cancels_scenario_effects() -> None:
    rng = np.random.default_rng(5)
    rates = rng.uniform(0.05, 0.95, size=12)  # scenarios differ a lot
    clusters = [f"s{c}" for c in range(12) for _ in range(30)]
    a = [bool(rng.random() < min(1.0, rates[c] + 0.1)) for c in range(12) for _ in range(30)]
    b = [bool(rng.random() < rates[c]) for c in range(12) for _ in range(30)]
    paired = cluster_bootstrap_diff(a, clusters, b, clusters, paired=True, seed=1)
    unpaired = cluster_bootstrap_diff(a, clusters, b, clusters, paired=False, seed=1)
    assert paired[0] == pytest.approx(np.mean(a) - np.mean(b)) == pytest.approx(unpaired[0])
    assert paired[1] < paired[0] < paired[2]
    assert (paired[2] - paired[1]) < 0.6 * (unpaired[2] - unpaired[1])
    assert paired == cluster_bootstrap_diff(a, clusters, b, clusters, seed=1)
    with pytest.raises(ValueError, match="same clusters"):
        cluster_bootstrap_diff(a, clusters, b[:-30], clusters[:-30], paired=True)
    # Unpaired arms may have different scenarios.
    assert not math.isnan(cluster_bootstrap_diff(a, clusters, b[:-30], clusters[:-30], paired=False)[0])


def test_cluster_bootstrap_accepts_floats_and_rejects_bad_input() -> None:
    point, lo, hi = cluster_bootstrap_rate([0.2, 0.4, 0.9, 0.7], ["a", "a", "b", "b"], seed=0)
    assert point == pytest.approx(0.55)
    assert lo == pytest.approx(0.3) and hi == pytest.approx(0.8)  # only two clusters: means 0.3 and 0.8
    with pytest.raises(ValueError):
        cluster_bootstrap_rate([1, 0], ["a"])
    assert all(math.isnan(v) for v in cluster_bootstrap_rate([], []))


# --- noise floor, mean_ci --------------------------------------------------------------------------


def test_noise_floor() -> None:
    nf = noise_floor([0.20, 0.25, 0.22, 0.19])
    assert nf["n_runs"] == 4
    assert nf["mean"] == pytest.approx(0.215)
    assert nf["sd"] == pytest.approx(np.std([0.20, 0.25, 0.22, 0.19], ddof=1))
    assert nf["max_abs_diff"] == pytest.approx(0.06)
    assert math.isnan(noise_floor([0.3])["sd"])
    with pytest.raises(ValueError):
        noise_floor([])


@pytest.mark.parametrize(
    ("df", "t975"),
    [(1, 12.706204736), (2, 4.302652730), (5, 2.570581836), (10, 2.228138852), (30, 2.042272456)],
)
def test_mean_ci_uses_student_t(df: int, t975: float) -> None:
    values = np.linspace(0.0, 1.0, df + 1)
    mean, lo, hi = mean_ci(values)
    half = t975 * np.std(values, ddof=1) / math.sqrt(df + 1)
    assert mean == pytest.approx(0.5)
    assert lo == pytest.approx(0.5 - half, rel=1e-8) and hi == pytest.approx(0.5 + half, rel=1e-8)


def test_mean_ci_small_inputs() -> None:
    assert mean_ci([1.0, 2.0, 3.0, 4.0]) == pytest.approx((2.5, 0.445739743, 4.554260257))
    m, lo, hi = mean_ci([0.4])
    assert m == 0.4 and math.isnan(lo) and math.isnan(hi)
    assert all(math.isnan(v) for v in mean_ci([]))


def test_rate_is_a_plain_frozen_dataclass() -> None:
    r = Rate(1, 2, 0.5, 0.1, 0.9)
    with pytest.raises(AttributeError):
        r.k = 3  # type: ignore[misc]


# --- cluster-aware rates, paired comparisons over scenarios, verdicts against a claimed size ---------


def _null_pairs(rng: np.random.Generator, g: int, n: int = 8) -> tuple[dict, dict]:
    """Two arms with the same per-scenario rate (scenario rates vary widely): a true null."""
    p = rng.beta(0.7, 1.5, size=g)
    ya, yb = rng.binomial(n, p) / n, rng.binomial(n, p) / n
    return {f"s{i}": float(ya[i]) for i in range(g)}, {f"s{i}": float(yb[i]) for i in range(g)}


@pytest.mark.parametrize("g,sims", [(12, 2000), (36, 1500)])
def test_paired_tests_hold_their_size_by_simulation(g: int, sims: int) -> None:
    from tooldecode.stats import paired_clusters, sign_flip_p

    rng = np.random.default_rng(20261130 + g)
    rej_t = rej_flip = 0
    for _ in range(sims):
        a, b = _null_pairs(rng, g)
        c = paired_clusters(a, b)
        rej_t += c.lo > 0 or c.hi < 0
        d = [a[k] - b[k] for k in sorted(a)]
        rej_flip += sign_flip_p(d, n_mc=1000, seed=int(rng.integers(1 << 30))) <= 0.05
    size_t, size_flip = rej_t / sims, rej_flip / sims
    # type-I error at alpha = 0.05, measured: at most 6% (and the t test is not trivially silent)
    assert size_t <= 0.06 and size_flip <= 0.06, (size_t, size_flip)
    assert size_t >= 0.02, size_t


def test_paired_tests_have_power_against_a_real_effect() -> None:
    from tooldecode.stats import paired_clusters

    rng = np.random.default_rng(7)
    hits = 0
    for _ in range(300):
        p = rng.beta(2, 3, size=12)
        ya, yb = rng.binomial(8, np.minimum(1, p * 1.8)) / 8, rng.binomial(8, p) / 8
        c = paired_clusters({str(i): ya[i] for i in range(12)}, {str(i): yb[i] for i in range(12)})
        hits += c.lo > 0 and c.p_sign_flip <= 0.05
    assert hits / 300 > 0.8


def test_sign_flip_exact_small_cases() -> None:
    from tooldecode.stats import sign_flip_p

    # 4 positive differences: only the all-plus and all-minus patterns reach |sum|: p = 2/16
    assert sign_flip_p([1, 1, 1, 1]) == pytest.approx(2 / 16)
    assert sign_flip_p([0, 0, 0]) == 1.0
    assert sign_flip_p([1.0, -1.0]) == 1.0
    # Monte Carlo branch agrees with the exact one where both apply in distribution
    x = [0.3, 0.1, -0.05, 0.2, 0.25, 0.15, -0.1, 0.4, 0.05, 0.3, 0.2, 0.1, 0.12, -0.02, 0.3, 0.22, 0.1]
    assert sign_flip_p(x[:16]) == pytest.approx(sign_flip_p(x[:16] + [0.0] * 0), abs=1e-12)
    assert 0 < sign_flip_p(x) < 0.01


def test_cluster_rate_covers_at_twelve_clusters_and_names_its_kind() -> None:
    from tooldecode.stats import cluster_rate

    rng = np.random.default_rng(3)
    cover = 0
    sims = 1000
    true = 0.7 / 2.2  # mean of Beta(0.7, 1.5): equal cluster sizes make it the pooled rate's target
    for _ in range(sims):
        p = rng.beta(0.7, 1.5, size=12)
        k = rng.binomial(8, p)
        vals = [v for kk in k for v in [1] * int(kk) + [0] * (8 - int(kk))]
        cl = [f"s{i}" for i in range(12) for _ in range(8)]
        r = cluster_rate(vals, cl)
        cover += r.lo <= true <= r.hi
    assert cover / sims >= 0.90
    few = cluster_rate([1, 0, 0, 1, 0, 0], ["a", "a", "b", "b", "c", "c"])
    assert few.g == 3 and "fewer than 10 clusters" in str(few) and "CR1" in few.kind
    # a cluster-robust interval is wider than Wilson's when the clusters differ
    vals = [1] * 8 + [0] * 8 + [1] * 8 + [0] * 8
    cl = [c for c in "abcd" for _ in range(8)]
    assert cluster_rate(vals, cl).hi - cluster_rate(vals, cl).lo > wilson(16, 32).hi - wilson(16, 32).lo
    zero = cluster_rate([0] * 24, [c for c in "abc" for _ in range(8)])
    assert zero.rate == 0 and zero.lo == 0 and zero.hi > 0.3  # 3 clusters: at most Wilson on 3 trials


def test_judge_effect_verdicts() -> None:
    from tooldecode.stats import EffectClaim, judge_effect, paired_clusters

    half = EffectClaim("ratio", 0.5)
    base = {f"s{i}": 0.4 + 0.02 * i for i in range(12)}
    same = paired_clusters({k: v + (0.01 if i % 2 else -0.01) for i, (k, v) in enumerate(base.items())}, base)
    v = judge_effect(same, half, events=40, event_clusters=12)
    assert v.verdict == "contradicts"  # the interval sits around x1 and excludes x0.5
    halved = paired_clusters(
        {k: v / 2 + (0.01 if i % 3 else -0.02) for i, (k, v) in enumerate(base.items())}, base
    )
    assert judge_effect(halved, half, events=40, event_clusters=12).verdict == "reproduces"
    assert judge_effect(halved, half, events=4, event_clusters=12).verdict == "inconclusive"
    assert judge_effect(halved, half, events=40, event_clusters=2).verdict == "inconclusive"
    noisy = paired_clusters({"a": 0.9, "b": 0.1, "c": 0.5}, {"a": 0.2, "b": 0.6, "c": 0.5})
    nv = judge_effect(noisy, half, events=10, event_clusters=3)
    assert nv.verdict == "inconclusive" and "detectable" in nv.reason  # the minimum detectable effect
    gone = paired_clusters({f"s{i}": 0.0 for i in range(6)}, {f"s{i}": 0.1 * (i + 1) for i in range(6)})
    assert judge_effect(gone, EffectClaim("ratio", 0.0), events=20, event_clusters=6).verdict == "reproduces"


def test_identical_scenario_differences_give_no_interval_not_a_zero_width_one() -> None:
    """Arms drawn with shared random streams can agree in every scenario; a t interval of width 0
    would claim a certainty the data do not carry: no interval, and the verdict says why."""
    from tooldecode.stats import EffectClaim, judge_effect, paired_clusters

    a = {f"s{i}": v for i, v in enumerate([0.25, 0.5, 0.125, 0.0, 0.375, 0.25])}
    cmp = paired_clusters(a, dict(a))
    assert cmp.diff == 0.0 and cmp.ratio == 1.0
    assert math.isnan(cmp.lo) and math.isnan(cmp.ratio_lo) and math.isnan(cmp.mde_diff)
    assert "[no interval]" in str(cmp)
    v = judge_effect(cmp, EffectClaim("ratio", None, -1), events=20, event_clusters=5)
    assert v.verdict == "inconclusive" and "no variance across scenarios" in v.reason
    # one scenario that differs restores an ordinary interval
    b = {**a, "s0": 0.125}
    assert not math.isnan(paired_clusters(a, b).lo)


def test_verdict_labels_separate_direction_size_premise_and_instrument_checks() -> None:
    from tooldecode.stats import EffectClaim, by_construction, judge_effect, paired_clusters

    zero = EffectClaim("ratio", 0.0)
    base = {f"s{i}": 0.25 + 0.01 * i for i in range(36)}
    # a weak effect in the claimed direction (×0.88 or so) against a claimed ×0: the size is contradicted
    weak = paired_clusters(
        {k: 0.88 * v + (0.004 if i % 2 else -0.004) for i, (k, v) in enumerate(base.items())}, base
    )
    assert weak.ratio_lo > 0 and weak.ratio_hi < 1
    v = judge_effect(weak, zero, events=35, event_clusters=35)
    assert v.verdict == "direction only — size contradicted" and "×0 outside" in v.reason
    # the reference arm has no event: nothing to remove
    empty = paired_clusters({f"s{i}": 0.0 for i in range(18)}, {f"s{i}": 0.0 for i in range(18)})
    assert judge_effect(empty, zero, events=0, event_clusters=0).verdict == "premise absent"
    # a direction that only a single test establishes is inconclusive after the correction
    gone = paired_clusters({f"s{i}": 0.0 for i in range(12)}, {f"s{i}": 0.1 * (i + 1) for i in range(12)})
    assert judge_effect(gone, zero, events=20, event_clusters=12).verdict == "reproduces"
    adj = judge_effect(gone, zero, events=20, event_clusters=12, p_adjusted=0.2)
    assert adj.verdict == "inconclusive" and "adjusted p = 0.2" in adj.reason and adj.p_adjusted == 0.2
    bc = by_construction(
        judge_effect(gone, zero, events=20, event_clusters=12), "a closed grammar writes no key"
    )
    assert bc.verdict == "by construction" and "instrument check: a closed grammar" in bc.reason


def test_no_verdict_reproduces_when_the_interval_excludes_the_claimed_size() -> None:
    from tooldecode.stats import EffectClaim, judge_effect, paired_clusters

    rng = np.random.default_rng(3)
    for _ in range(200):
        g = int(rng.integers(6, 37))
        b = {f"s{i}": float(rng.uniform(0.05, 0.5)) for i in range(g)}
        a = {k: max(0.0, v * float(rng.uniform(0.0, 1.6)) + float(rng.normal(0, 0.02))) for k, v in b.items()}
        claim = EffectClaim("ratio", float(rng.choice([0.0, 0.4, 0.5, 1.5])))
        v = judge_effect(paired_clusters(a, b), claim, events=50, event_clusters=g)
        if v.verdict == "reproduces":
            assert v.lo <= claim.size <= v.hi


def test_holm_and_the_exact_sign_flip() -> None:
    from tooldecode.stats import holm, sign_flip_p

    assert holm([0.01, 0.04, math.nan, 0.03]) == [0.03, 0.06, pytest.approx(math.nan, nan_ok=True), 0.06]
    # exact up to 20 nonzero differences: all 2^g patterns; zeros contribute nothing
    d = [0.1 * (i + 1) for i in range(18)] + [0.0] * 10
    assert sign_flip_p(d) == pytest.approx(2 / 2**18)
    assert sign_flip_p([1.0] * 20) == pytest.approx(2 / 2**20)


def test_a_bounded_claim_is_contradicted_only_by_an_interval_on_the_wrong_side_of_its_bound():
    from tooldecode.stats import EffectClaim

    at_least = EffectClaim("ratio", 3.0, 0, "at least")
    assert not at_least.excludes(4.0, 12.0) and not at_least.excludes(1.5, 3.5)
    assert at_least.excludes(1.2, 2.9)
    at_most = EffectClaim("ratio", 0.5, 0, "at most")
    assert not at_most.excludes(0.1, 0.4) and at_most.excludes(0.6, 0.9)
    exact = EffectClaim("ratio", 3.0)
    assert exact.excludes(4.0, 12.0)
    assert str(at_least) == "at least ×3"
    with pytest.raises(ValueError):
        EffectClaim("ratio", None, 1, "at least")
