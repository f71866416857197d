"""How far masked (strict) sampling is from the model conditioned on validity.

A token mask samples y from Q(y) = Π_t P(y_t | y_<t) / Z_t, where Z_t is the probability the mask
kept at step t (``1 − mask_removed[t]``). The distribution of the model conditioned on producing a
string of the grammar is P_L(y) = P(y)·1[y valid] / P(valid). With the importance weight
w(y) = Π_t Z_t = P(y) / Q(y) ≤ 1:

- P(valid) = E_Q[w];
- KL(Q ‖ P_L) = log E_Q[w] − E_Q[log w]  (nats; 0 iff masking is exact);
- KL(P_L ‖ Q) = E_Q[w log w] / E_Q[w] − log E_Q[w];
- any rate under P_L = E_Q[w f] / E_Q[w] (self-normalised);
- effective sample size (Σ w)² / Σ w².

The exact reference: loose samples whose tokens the strict grammar accepts to the end (or to the
token cap, where the strict arm is cut too) are exact draws of P_L (rejection sampling), so the
loose grammar-valid rate estimates P(valid) and their verdict rates estimate the P_L rates. The
instrument checks compare both routes on the same scenarios.

Runs pool scenarios: every figure is for the mixture over the run's scenarios (P_L conditions the
mixture on validity), with intervals from a bootstrap over scenarios (``n_boot`` replicates, paired
between arms: the same scenarios are drawn for both).

The weights need the plain distribution at temperature 1: runs with another temperature, top-k,
top-p or min-p are refused. Stored ``mask_removed`` values are rounded to 5 decimals; a step whose
kept mass rounds to 0 is *censored* (Z_t < 5e-6): its weight is taken at the rounding bound, which
makes the stored-run KL(Q ‖ P_L) a lower bound (reported as such) and changes E_Q[w] by < 5e-6.
"""

from __future__ import annotations

from tooldecode.distortion import weights
from tooldecode.distortion.analysis import (
    analyse_run,
    check_sampling,
    mixture_weights,
)
from tooldecode.distortion.exact import (
    ExactDistribution,
    ExactSequence,
    exact_masked_distribution,
)
from tooldecode.distortion.reference import (
    cached_validity,
    has_masked_arm,
    reference_validity,
)
from tooldecode.distortion.weights import *  # noqa: F403 (its __all__, re-exported below)

__all__ = [
    "ExactDistribution",
    "ExactSequence",
    "analyse_run",
    "cached_validity",
    "check_sampling",
    "exact_masked_distribution",
    "mixture_weights",
    "has_masked_arm",
    "reference_validity",
]
__all__ += weights.__all__
