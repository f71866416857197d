"""Chao1 richness (tooldecode.stats.richness): hand-computed values, its interval's bounds, bad input."""

from __future__ import annotations

import math
import random

import pytest

from tooldecode.stats import chao1


def test_hand_computed_estimate_and_interval():
    # counts a:2 b:1 c:2 d:1 → f1=2, f2=2, n=6; T = (5/6)·2·1/(2·3) = 5/18
    r = chao1(["a", "a", "b", "c", "c", "d"])
    assert (r.observed, r.occurrences, r.singletons, r.doubletons) == (4, 6, 2, 2)
    t = 5 / 18
    assert r.estimate == pytest.approx(4 + t)
    a = 5 / 6
    var = a * 2 * 1 / 6 + a**2 * 2 * 9 / (4 * 9) + a**2 * 4 * 2 * 1 / (4 * 81)
    k = math.exp(1.959963984540054 * math.sqrt(math.log(1 + var / t**2)))
    assert r.lo == pytest.approx(4 + t / k)
    assert r.hi == pytest.approx(4 + t * k)


def test_counts_mapping_equals_occurrences():
    assert chao1({"x": 3, "y": 1, "z": 1}) == chao1(["x", "y", "x", "z", "x"])


def test_no_singletons_estimates_no_unseen_names():
    r = chao1({"a": 5, "b": 3})
    assert r.estimate == 2 and r.lo == 2 and r.hi >= 2


def test_interval_never_below_observed_and_contains_estimate():
    rng = random.Random(0)
    for _ in range(200):
        names = [f"k{int(rng.paretovariate(1.2))}" for _ in range(rng.randint(1, 60))]
        r = chao1(names)
        assert r.observed <= r.lo <= r.estimate <= r.hi
        assert math.isfinite(r.hi)


def test_more_singletons_more_unseen():
    few = chao1({"a": 1, "b": 1, "c": 5, "d": 2})
    many = chao1({"a": 1, "b": 1, "c": 1, "d": 1, "e": 1, "f": 2})
    assert many.estimate - many.observed > few.estimate - few.observed


def test_recovers_a_known_pool_roughly():
    # 40 equally likely names, 60 draws: the observed count falls short, Chao1 comes closer on average
    rng = random.Random(1)
    obs, est = [], []
    for _ in range(300):
        r = chao1([f"n{rng.randrange(40)}" for _ in range(60)])
        obs.append(r.observed)
        est.append(r.estimate)
    assert sum(obs) / len(obs) < 32
    assert abs(sum(est) / len(est) - 40) < abs(sum(obs) / len(obs) - 40)


@pytest.mark.parametrize("bad", [{"a": 0}, {"a": 1.5}, {"a": True}, {"a": -2}])
def test_bad_counts_are_one_line_errors(bad):
    with pytest.raises(ValueError, match="positive integer"):
        chao1(bad)


def test_empty_and_bad_conf():
    assert chao1([]).observed == 0
    with pytest.raises(ValueError, match="conf"):
        chao1(["a"], conf=1.0)
