"""Token caps without truncation: the length distribution of a run's draws and the cap rule (``cap_rule``).

A draw cut at ``max_new_tokens`` is not a call the model finished: its outcome is the cap's, not the
model's. The rule: cap = the smallest power of two ≥ 1.5 × the 99th percentile of the lengths of the
completed loose calls (``CAP_FACTOR``, ``CAP_QUANTILE``), from a pilot run at a generous cap; a run then
checks that at least 95% of its draws in every arm ended on their own (``MIN_ENDED``), and reports cut
draws apart (``cut`` in the outcome of each verdict, ``finish_reason == "length"`` in the raw record).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

CAP_FACTOR = 1.5
CAP_QUANTILE = 0.99
MIN_ENDED = 0.95


@dataclass(frozen=True)
class LengthProfile:
    """The generated lengths (tokens after the prefill) of one group of draws."""

    n: int
    n_cut: int  # stopped at the token cap
    n_error: int
    ended: float  # share of the non-error draws that ended on their own (stop token or stop string)
    p50: float | None  # quantiles of the completed draws' lengths
    p90: float | None
    p99: float | None
    longest: int | None
    cap: int | None  # the cap the draws ran under, when known

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _tokens(record: dict) -> int:
    ids = record.get("token_ids")
    if ids is not None:
        return len(ids)
    return int((record.get("timing") or {}).get("tokens") or 0)


def length_profile(records: Iterable[dict], cap: int | None = None) -> LengthProfile:
    """The length profile of raw sample records (``samples.jsonl`` lines)."""
    recs = list(records)
    errors = [r for r in recs if r.get("error")]
    good = [r for r in recs if not r.get("error")]
    cut = [r for r in good if r.get("finish_reason") == "length"]
    done = np.array([_tokens(r) for r in good if r.get("finish_reason") != "length"], dtype=np.float64)

    def q(p: float) -> float | None:
        return float(np.quantile(done, p)) if done.size else None

    return LengthProfile(
        n=len(recs),
        n_cut=len(cut),
        n_error=len(errors),
        ended=(len(good) - len(cut)) / len(good) if good else math.nan,
        p50=q(0.5),
        p90=q(0.9),
        p99=q(CAP_QUANTILE),
        longest=int(done.max()) if done.size else None,
        cap=cap,
    )


def cap_rule(
    completed_lengths: Sequence[int], *, factor: float = CAP_FACTOR, quantile: float = CAP_QUANTILE
) -> int:
    """The smallest power of two ≥ ``factor`` × the ``quantile`` of ``completed_lengths`` (completed loose
    calls' token counts). Raises ValueError without any completed call."""
    if not len(completed_lengths):
        raise ValueError("no completed call to set a cap from; run a pilot with a larger cap")
    need = factor * float(np.quantile(np.asarray(completed_lengths, dtype=np.float64), quantile))
    return 1 << max(0, math.ceil(math.log2(max(need, 1.0))))


def run_lengths(run_dir: str, *, by: Sequence[str] = ("mode", "level")) -> dict[str, Any]:
    """Per group of arms (``by``: arm fields) of a run: the length profile, whether it meets ``MIN_ENDED``,
    and the cap the rule gives from the group's completed draws. ``{"cap", "groups": {label: {...}}}``."""
    from pathlib import Path

    from tooldecode.runs import RunStore

    store = RunStore.open(Path(run_dir))
    try:
        cap = (store.manifest.get("config") or {}).get("max_new_tokens")
        groups: dict[str, list[dict]] = {}
        for r in store.sample_records():
            arm = r.get("arm") or {}
            groups.setdefault(",".join(f"{k}={arm.get(k)}" for k in by), []).append(r)
    finally:
        store.close()
    out: dict[str, Any] = {"cap": cap, "min_ended": MIN_ENDED, "groups": {}}
    for label, recs in sorted(groups.items()):
        prof = length_profile(recs, cap)
        done = [_tokens(r) for r in recs if not r.get("error") and r.get("finish_reason") != "length"]
        out["groups"][label] = {
            **prof.to_dict(),
            "meets_min_ended": bool(prof.ended >= MIN_ENDED),
            "rule_cap": cap_rule(done) if done else None,
        }
    return out
