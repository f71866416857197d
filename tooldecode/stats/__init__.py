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
  direction only — size contradicted / contradicts / inconclusive / premise absent;
  ``by_construction`` relabels an instrument check, ``interim`` withholds the verdict of an arm not yet
  drawn in full; ``holm`` adjusts p values across a family.
- ``chao1``: how many distinct names a sampler writes, observed and estimated (bias-corrected Chao1
  with its log-normal interval), e.g. the invented keys of a model.

The percentile cluster bootstrap is kept for comparison; at the cluster counts of a small study it
is anti-conservative (a true null is rejected ~11% of the time at 6 clusters), so findings use the
t / sign-flip procedures, whose size ``tests/test_stats.py`` measures by simulation.
"""

from __future__ import annotations

from tooldecode.stats.bootstrap import cluster_bootstrap_diff, cluster_bootstrap_rate
from tooldecode.stats.clusters import (
    BY_CONSTRUCTION,
    CLUSTER_RATE_KIND,
    CONTRADICTS,
    DIRECTION_ONLY,
    EXACT_SIGN_FLIP_MAX,
    FEW_CLUSTERS,
    INCONCLUSIVE,
    INTERIM,
    MIN_EVENT_CLUSTERS,
    MIN_EVENTS,
    PAIRED_KIND,
    PREMISE_ABSENT,
    REPRODUCES,
    VERDICTS,
    ClusterRate,
    EffectClaim,
    EffectVerdict,
    PairedClusters,
    by_construction,
    cluster_rate,
    few_clusters_note,
    holm,
    interim,
    interval_text,
    judge_effect,
    paired_clusters,
    sign_flip_p,
)
from tooldecode.stats.intervals import Diff, Rate, fisher_exact, mean_ci, newcombe_diff, noise_floor, wilson
from tooldecode.stats.richness import Richness, chao1

__all__ = [
    "BY_CONSTRUCTION",
    "CLUSTER_RATE_KIND",
    "CONTRADICTS",
    "DIRECTION_ONLY",
    "EXACT_SIGN_FLIP_MAX",
    "INCONCLUSIVE",
    "INTERIM",
    "PREMISE_ABSENT",
    "REPRODUCES",
    "VERDICTS",
    "by_construction",
    "holm",
    "interim",
    "ClusterRate",
    "Diff",
    "EffectClaim",
    "EffectVerdict",
    "FEW_CLUSTERS",
    "MIN_EVENTS",
    "MIN_EVENT_CLUSTERS",
    "PAIRED_KIND",
    "PairedClusters",
    "Rate",
    "Richness",
    "chao1",
    "cluster_bootstrap_diff",
    "cluster_bootstrap_rate",
    "cluster_rate",
    "few_clusters_note",
    "fisher_exact",
    "interval_text",
    "judge_effect",
    "mean_ci",
    "newcombe_diff",
    "noise_floor",
    "paired_clusters",
    "sign_flip_p",
    "wilson",
]
