"""How many distinct names a sampler can write: the bias-corrected Chao1 richness estimate and its interval.

Observed distinct names undercount the names a model would write given more draws: names seen once
(singletons) say that more are unseen. Chao1 estimates the total from the singleton and doubleton counts
(Chao 1984; bias-corrected form of Chao 2005, as in EstimateS), with the log-normal interval of Chao (1987),
whose lower end never falls below the observed count.

The estimate treats each occurrence as an independent draw from one pool of names. Draws of one scenario
are not independent (a scenario may make one name likely), so the interval is a lower bound on the
uncertainty; report the number of scenarios the names come from beside it.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from statistics import NormalDist

__all__ = ["Richness", "chao1"]


@dataclass(frozen=True)
class Richness:
    """Distinct names: observed, estimated (Chao1) and a 95% log-normal interval of the estimate.

    Attributes
    ----------
    observed : int
        Distinct names seen.
    occurrences : int
        Occurrences counted (the sample size of the estimate).
    singletons, doubletons : int
        Names seen exactly once and exactly twice.
    estimate : float
        Bias-corrected Chao1.
    lo, hi : float
        The interval (Chao 1987, log-normal; ``lo >= observed``).
    """

    observed: int
    occurrences: int
    singletons: int
    doubletons: int
    estimate: float
    lo: float
    hi: float

    def __str__(self) -> str:
        return (
            f"{self.observed} distinct in {self.occurrences}; Chao1 {self.estimate:.1f} "
            f"[{self.lo:.1f}, {self.hi:.1f}] (f1={self.singletons}, f2={self.doubletons})"
        )


def chao1(names: Iterable[str] | Mapping[str, int], conf: float = 0.95) -> Richness:
    """Bias-corrected Chao1 richness of ``names`` (one item per occurrence, or a name → count mapping).

    Parameters
    ----------
    names : iterable of str, or mapping of str to int
        Every occurrence of a name, or the count of each name (counts must be positive integers).
    conf : float
        Confidence level of the interval.

    Returns
    -------
    Richness
        ``estimate = S_obs + (n-1)/n · f1(f1-1) / (2(f2+1))``; the interval is
        ``[S_obs + T/K, S_obs + T·K]`` with ``T = estimate - S_obs`` and
        ``K = exp(z · sqrt(log(1 + var/T²)))``. With no unseen names estimated (``T = 0``) the interval is
        ``[S_obs, S_obs + z·sqrt(var)]`` with the variance of the observed count (Chao & Colwell's
        ``f1 = 0`` form).

    Raises
    ------
    ValueError
        A count that is not a positive integer, or ``conf`` outside (0, 1).

    Examples
    --------
    >>> r = chao1(["a", "a", "b", "c", "c", "d"])
    >>> r.observed, r.singletons, r.doubletons, round(r.estimate, 3)
    (4, 2, 2, 4.278)
    """
    if not 0 < conf < 1:
        raise ValueError(f"chao1: conf must be in (0, 1), got {conf!r}")
    counts = dict(names) if isinstance(names, Mapping) else dict(Counter(names))
    for name, c in counts.items():
        if not isinstance(c, int) or isinstance(c, bool) or c < 1:
            raise ValueError(f"chao1: the count of {name!r} must be a positive integer, got {c!r}")
    s_obs = len(counts)
    n = sum(counts.values())
    freq = Counter(counts.values())
    f1, f2 = freq.get(1, 0), freq.get(2, 0)
    if n == 0:
        return Richness(0, 0, 0, 0, 0.0, 0.0, 0.0)
    a = (n - 1) / n
    t = a * f1 * (f1 - 1) / (2 * (f2 + 1))
    est = s_obs + t
    z = NormalDist().inv_cdf(0.5 + conf / 2)
    if t > 0:
        var = (
            a * f1 * (f1 - 1) / (2 * (f2 + 1))
            + a**2 * f1 * (2 * f1 - 1) ** 2 / (4 * (f2 + 1) ** 2)
            + a**2 * f1**2 * f2 * (f1 - 1) ** 2 / (4 * (f2 + 1) ** 4)
        )
        k = math.exp(z * math.sqrt(math.log(1 + var / t**2)))
        return Richness(s_obs, n, f1, f2, est, s_obs + t / k, s_obs + t * k)
    var_obs = sum(f * (math.exp(-k) - math.exp(-2 * k)) for k, f in freq.items())
    var_obs -= sum(k * math.exp(-k) * f for k, f in freq.items()) ** 2 / n
    return Richness(s_obs, n, f1, f2, est, float(s_obs), s_obs + z * math.sqrt(max(var_obs, 0.0)))
