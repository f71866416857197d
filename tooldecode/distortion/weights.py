"""Records, per-sample quantities and weighted estimators of the distortion of masked sampling."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from tooldecode.errors import ToolDecodeError
from tooldecode.sampling import log_weight

# what ``tooldecode.distortion`` re-exports from here
__all__ = [
    "CENSOR_Z",
    "MASKED_MODES",
    "STORED_DECIMALS",
    "TARGETS",
    "ArmDistortion",
    "Check",
    "DistortionError",
    "Estimate",
    "WeightStats",
    "boot_counts",
    "closing_quote",
    "continuation",
    "default_outcomes",
    "estimate",
    "grammar_mode",
    "per_sample",
    "plain_rate",
    "sample_log_weight",
]

#: stored mask_removed values are rounded to this many decimals (tooldecode.experiments)
STORED_DECIMALS = 5
#: a kept mass below the rounding resolution is censored at this bound
CENSOR_Z = 0.5 * 10.0**-STORED_DECIMALS
MASKED_MODES = ("strict", "strict-spec", "strict-aligned")
TARGETS = ("prefix", "complete")


class DistortionError(ToolDecodeError):
    """A run whose strict samples cannot be reweighted (no mask data, truncated sampling, ...)."""


@dataclass(frozen=True)
class Estimate:
    """A point estimate with its interval (``kind`` names the interval)."""

    point: float
    lo: float
    hi: float
    kind: str = "scenario bootstrap 95%"
    bound: str = ""  # "" or "lower bound" (censored weights)

    def fmt(self, digits: int = 3, pct: bool = False) -> str:
        f = (lambda x: f"{100 * x:.{max(digits - 2, 1)}f}%") if pct else (lambda x: f"{x:.{digits}f}")
        s = f"{f(self.point)} [{f(self.lo)}, {f(self.hi)}]" if math.isfinite(self.lo) else f(self.point)
        return f"≥ {s}" if self.bound == "lower bound" else s


@dataclass(frozen=True)
class Check:
    """One instrument check: the P_L estimate from strict weights vs the rejection reference."""

    name: str
    strict_sn: Estimate  # self-normalised from the strict arm (for p_valid: E_Q[w])
    reference: Estimate  # loose samples valid under the strict grammar
    diff: Estimate  # strict_sn − reference, paired scenario bootstrap
    agree: bool | None  # the diff interval covers 0 (None: no reference sample to compare with)
    n_reference: int


@dataclass
class ArmDistortion:
    """Distortion figures of one masked arm (with its loose partner arm as the reference)."""

    arm: str
    mode: str
    model: str
    n: int  # masked samples used (errors excluded)
    n_scenarios: int
    n_errors: int
    n_censored: int  # samples with at least one censored step
    n_truncated: int  # samples cut at the token cap (their weight is the prefix's)
    p_valid: Estimate
    kl_q_pl: Estimate
    kl_pl_q: Estimate
    kl_q_pl_scenario_mean: Estimate  # mean over scenarios of each prompt's own KL(Q ‖ P_L)
    ess: float
    target: str = "prefix"
    n_weights: int = 0  # weights behind p_valid/KL/ESS (strict: the samples; strict-aligned: all particles)
    particles: float | None = None  # strict-aligned: masked draws per sample (its cost)
    tokens_per_sample: float | None = None  # strict-aligned: tokens drawn per sample, all particles
    rates_q: dict[str, Estimate] = field(default_factory=dict)  # plain rates under Q (the strict arm)
    rates_pl: dict[str, Estimate] = field(default_factory=dict)  # self-normalised under P_L
    reference_arm: str | None = None
    n_reference: int = 0
    n_reference_valid: int | None = 0  # None: the reference was not replayed (validity unknown)
    checks: list[Check] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ---------------------------------------------------------------------------------------------
# per-sample quantities


def sample_log_weight(record: dict) -> tuple[float, int]:
    """(log w, censored steps) of a stored masked sample record, from its ``mask_removed``."""
    mr = record.get("mask_removed")
    if mr is None:
        raise DistortionError(
            f"sample {record.get('key', '?')} has no mask_removed; only masked (strict) samples have weights"
        )
    censored = sum(1 for r in mr if 1.0 - float(r) < CENSOR_Z)
    return log_weight(mr, floor=CENSOR_Z), censored


def closing_quote(text: str) -> int | None:
    """Index of the first unescaped ``"`` in ``text`` (the end of the forced string), or None."""
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == '"':
            return i
        i += 1
    return None


def continuation(text: str) -> str:
    """What an L2 sample does right after the forced ``newText`` content, as the distortion outcomes name
    it: close the item (``close``), continue it after closing the string (``continue``: another key or
    item), keep writing the string (``string goes on``), or ``other``. The classifier is
    ``tooldecode.classify.classify_continuation`` (the one home of continuation kinds); this is its group."""
    from tooldecode.classify import CLOSE, CONTINUE, STRING_GOES_ON, classify_continuation

    c = classify_continuation(text, pending='"', final=True)
    if c.kind == STRING_GOES_ON:
        return "string goes on"
    return c.group if c.group in (CLOSE, CONTINUE) else "other"


def default_outcomes(verdicts: dict[str, dict]) -> dict[str, Callable[[dict], float]]:
    """The per-sample outcomes compared under P_L: what follows the forced string, payload
    correctness (the edit yields the expected file), invented keys, and how many characters the
    sample appends to the forced string."""

    def payload_ok(s: dict) -> float:
        p = (verdicts.get(s["key"]) or {}).get("payload") or {}
        return float(bool(p.get("file_correct")))

    def invented(s: dict) -> float:
        return float(bool((verdicts.get(s["key"]) or {}).get("invented_keys")))

    def extra(s: dict) -> float:
        q = closing_quote(s["text"])
        return float(len(s["text"]) if q is None else q)

    return {
        "close": lambda s: float(continuation(s["text"]) == "close"),
        "string goes on": lambda s: float(continuation(s["text"]) == "string goes on"),
        "payload correct": payload_ok,
        "invented key": invented,
        "extra chars": extra,
    }


# ---------------------------------------------------------------------------------------------
# estimators


def boot_counts(clusters: Sequence[str], n_boot: int, seed: int) -> tuple[list[str], np.ndarray]:
    """Scenario names and a (n_boot, n_scenarios) matrix of how often each is drawn per replicate."""
    names = sorted(set(clusters))
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(len(names), np.full(len(names), 1.0 / len(names)), size=n_boot)
    return names, counts.astype(np.float64)


def per_sample(counts: np.ndarray, names: list[str], clusters: Sequence[str]) -> np.ndarray:
    pos = {c: i for i, c in enumerate(names)}
    idx = np.array([pos[c] for c in clusters], dtype=np.int64)
    return counts[:, idx] if idx.size else np.zeros((counts.shape[0], 0))


def _interval(reps: np.ndarray) -> tuple[float, float]:
    reps = reps[np.isfinite(reps)]
    if reps.size == 0:
        return math.nan, math.nan
    lo, hi = np.quantile(reps, [0.025, 0.975])
    return float(lo), float(hi)


def estimate(point: float, reps: np.ndarray, bound: str = "") -> Estimate:
    lo, hi = _interval(reps)
    return Estimate(float(point), lo, hi, bound=bound)


@dataclass
class WeightStats:
    """Estimators from one arm's log weights with scenario-bootstrap replicates."""

    log_w: np.ndarray
    clusters: list[str]
    names: list[str]
    counts: np.ndarray  # (n_boot, n_scenarios)

    @property
    def m(self) -> np.ndarray:
        return per_sample(self.counts, self.names, self.clusters)

    def _shift(self) -> float:
        return float(self.log_w.max()) if self.log_w.size else 0.0

    def p_valid(self) -> tuple[float, np.ndarray]:
        w = np.exp(self.log_w)
        m = self.m
        return float(w.mean()), (m @ w) / m.sum(axis=1)

    def kl_q_pl(self) -> tuple[float, np.ndarray]:
        c = self._shift()
        w = np.exp(self.log_w - c)
        m = self.m
        point = c + math.log(w.mean()) - float(self.log_w.mean())
        tot = m.sum(axis=1)
        reps = c + np.log((m @ w) / tot) - (m @ self.log_w) / tot
        return point, reps

    def kl_pl_q(self) -> tuple[float, np.ndarray]:
        c = self._shift()
        w = np.exp(self.log_w - c)
        m = self.m
        point = float((w * self.log_w).sum() / w.sum()) - (c + math.log(w.mean()))
        tot = m.sum(axis=1)
        mw = m @ w
        reps = (m @ (w * self.log_w)) / mw - (c + np.log(mw / tot))
        return point, reps

    def kl_scenario_mean(self) -> tuple[float, np.ndarray]:
        per = []
        for name in self.names:
            lw = self.log_w[[c == name for c in self.clusters]]
            c = float(lw.max())
            per.append(c + math.log(float(np.exp(lw - c).mean())) - float(lw.mean()))
        per_a = np.array(per)
        reps = (self.counts @ per_a) / self.counts.sum(axis=1)
        return float(per_a.mean()), reps

    def ess(self) -> float:
        w = np.exp(self.log_w - self._shift())
        return float(w.sum() ** 2 / (w**2).sum())

    def self_normalised(self, f: np.ndarray) -> tuple[float, np.ndarray]:
        w = np.exp(self.log_w - self._shift())
        m = self.m
        with np.errstate(invalid="ignore", divide="ignore"):
            return float((w * f).sum() / w.sum()), (m @ (w * f)) / (m @ w)


def plain_rate(f: np.ndarray, m: np.ndarray) -> tuple[float, np.ndarray]:
    with np.errstate(invalid="ignore", divide="ignore"):
        return (float(f.mean()) if f.size else math.nan), (m @ f) / m.sum(axis=1)


def grammar_mode(mode: str) -> str:
    """The grammar a masked mode samples under: ``spec`` for strict-spec, else ``strict``."""
    return "spec" if mode == "strict-spec" else "strict"
