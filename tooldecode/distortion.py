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

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tooldecode.errors import ToolDecodeError
from tooldecode.sampling import log_weight

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
    n_reference_valid: int = 0
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
    """What an L2 sample does right after the forced ``newText`` content: close the item (``close``),
    continue it after closing the string (``continue``: another key or item), or keep writing the
    string (``string goes on``)."""
    if not text.startswith('"'):
        return "string goes on"
    rest = text[1:].lstrip(" \t\r\n")
    if rest.startswith(","):
        return "continue"
    if rest.startswith("}"):
        return "close"
    return "other"


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


def _boot_counts(clusters: Sequence[str], n_boot: int, seed: int) -> tuple[list[str], np.ndarray]:
    """Scenario names and a (n_boot, n_scenarios) matrix of how often each is drawn per replicate."""
    names = sorted(set(clusters))
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(len(names), np.full(len(names), 1.0 / len(names)), size=n_boot)
    return names, counts.astype(np.float64)


def _per_sample(counts: np.ndarray, names: list[str], clusters: Sequence[str]) -> np.ndarray:
    pos = {c: i for i, c in enumerate(names)}
    idx = np.array([pos[c] for c in clusters], dtype=np.int64)
    return counts[:, idx] if idx.size else np.zeros((counts.shape[0], 0))


def _interval(reps: np.ndarray) -> tuple[float, float]:
    reps = reps[np.isfinite(reps)]
    if reps.size == 0:
        return math.nan, math.nan
    lo, hi = np.quantile(reps, [0.025, 0.975])
    return float(lo), float(hi)


def _est(point: float, reps: np.ndarray, bound: str = "") -> Estimate:
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
        return _per_sample(self.counts, self.names, self.clusters)

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


def _plain(f: np.ndarray, m: np.ndarray) -> tuple[float, np.ndarray]:
    with np.errstate(invalid="ignore", divide="ignore"):
        return (float(f.mean()) if f.size else math.nan), (m @ f) / m.sum(axis=1)


# ---------------------------------------------------------------------------------------------
# a run


def _arm_label(arm: dict) -> str:
    keep = [k for k in sorted(arm) if k not in ("wire", "expected_tool", "backend")]
    return ",".join(f"{k}={arm[k]}" for k in keep)


def _partner(arm: dict) -> dict:
    return {k: v for k, v in arm.items() if k not in ("mode", "engine")}


def grammar_mode(mode: str) -> str:
    """The grammar a masked mode samples under: ``spec`` for strict-spec, else ``strict``."""
    return "spec" if mode == "strict-spec" else "strict"


def check_sampling(manifest: dict, arm: dict) -> str | None:
    """Why an arm's weights cannot be derived from its stored mask data (None when they can)."""
    cfg = manifest.get("config", {})
    t = arm.get("temperature", 1.0)
    if float(t) != 1.0:
        return f"temperature {t}: mask_removed is the mass at temperature 1, not at the sampling temperature"
    if float(cfg.get("top_p", 1.0)) < 1.0 or cfg.get("top_k") or cfg.get("min_p"):
        return "top-k/top-p/min-p was on: the masked proposal is not the plain distribution"
    return None


def analyse_run(
    run_dir: str | Path,
    *,
    validity: dict[str, dict[str, str]] | None = None,
    n_boot: int = 2000,
    seed: int = 0,
    target: str = "prefix",
) -> list[ArmDistortion]:
    """Distortion figures for every masked arm of a run.

    ``target`` says what counts as valid under the token cap: ``prefix`` (a sample cut at
    ``max_new_tokens`` counts with the weight of its prefix when the grammar still accepts it: P_L over
    viable capped strings; KL is defined) or ``complete`` (only calls completed within the cap: cut
    samples get weight 0 and loose samples count only when complete; KL(Q‖P_L) is then infinite and
    left out). The two bracket the uncapped conditional for outcomes decided early, such as what
    follows newText: the prefix target counts strings that go on past the cap as valid, the
    complete target drops valid calls longer than the cap.

    ``validity`` maps a grammar mode (``strict``, ``spec``) to the loose samples' replay status under
    that grammar (``reference_validity``); without it no reference comparison is made. Verdicts come from the
    run's stored scorer output (rescored when missing).
    """
    from tooldecode.findings import load_run

    if target not in TARGETS:
        raise DistortionError(f"unknown target {target!r}; choose one of: {', '.join(TARGETS)}")
    path = Path(run_dir)
    run = load_run(path)
    if run is None:
        raise DistortionError(f"{path} is not a run directory (no manifest.json); pass runs/<name>")
    outcomes = default_outcomes(run.verdicts)
    arms: dict[str, tuple[dict, list[dict]]] = {}
    for s in run.samples:
        label = _arm_label(s["arm"])
        arms.setdefault(label, (s["arm"], []))[1].append(s)
    out = []
    for label, (arm, samples) in arms.items():
        if arm.get("mode") not in MASKED_MODES:
            continue
        why = check_sampling(run.manifest, arm)
        if why:
            raise DistortionError(
                f"{path}: arm {label}: cannot reweight ({why}); distortion needs plain T=1 sampling"
            )
        good = [s for s in samples if not s.get("error")]
        if not good:
            continue
        partner = None
        for other_label, (other, others) in arms.items():
            if other.get("mode") == "loose" and _partner(other) == _partner(arm):
                partner = (other_label, others)
        status = None if validity is None else validity.get(grammar_mode(arm["mode"]), {})
        out.append(_analyse_arm(label, arm, samples, good, partner, outcomes, status, n_boot, seed, target))
    if not out:
        raise DistortionError(f"{path}: no masked (strict) arm with samples; distortion needs a strict arm")
    return out


def _analyse_arm(
    label: str,
    arm: dict,
    samples: list[dict],
    good: list[dict],
    partner: tuple[str, list[dict]] | None,
    outcomes: dict[str, Callable[[dict], float]],
    validity: dict[str, str] | None,
    n_boot: int,
    seed: int,
    target: str = "prefix",
) -> ArmDistortion:
    aligned = arm["mode"] == "strict-aligned"
    complete_only = target == "complete"
    notes: list[str] = []
    clusters = [s["scenario"] for s in good]
    names, counts = _boot_counts(clusters, n_boot, seed)
    n_drop = 0
    if aligned:
        # every particle is a masked draw of Q: the weights of all of them (stored unrounded)
        lw_list, w_clusters = [], []
        unknown = 0
        for s in good:
            info = s.get("particles") or {}
            done = info.get("complete")
            if done is None:
                unknown += 1
            for j, x in enumerate(info.get("log_w") or []):
                if x is None:  # an errored particle: no weight
                    n_drop += 1
                    continue
                cut = complete_only and done is not None and not done[j]
                lw_list.append(-math.inf if cut else float(x))
                w_clusters.append(s["scenario"])
        mixed = complete_only and unknown > 0
        if mixed:
            notes.append(
                f"{unknown} strict-aligned samples do not store which particles completed (drawn before "
                "completion was recorded): their particles count with prefix weights"
            )
        if info.get("target") != "complete":
            notes.append("this arm's sampler kept particles by prefix weight (cut particles included)")
        log_w = np.array(lw_list)
        n_cens = 0
    else:
        mixed = False
        lw_c = [sample_log_weight(s) for s in good]
        log_w = np.array(
            [
                -math.inf if complete_only and s.get("finish_reason") == "length" else x[0]
                for x, s in zip(lw_c, good, strict=True)
            ]
        )
        n_cens = sum(1 for x in lw_c if x[1])
        w_clusters = clusters
    if log_w.size == 0:
        raise DistortionError(f"arm {label}: no importance weights (no particles stored); rerun the arm")
    ws = WeightStats(log_w, w_clusters, names, counts)
    bound = "lower bound" if n_cens and np.isfinite(log_w).all() else ""
    pv, pv_r = ws.p_valid()
    nan_r = np.full(counts.shape[0], math.nan)
    if np.isfinite(log_w).all():
        kq, kq_r = ws.kl_q_pl()
        kp, kp_r = ws.kl_pl_q()
        ksm, ksm_r = ws.kl_scenario_mean()
    else:  # Q has mass outside the target's support (cut samples): KL(Q‖P_L) is infinite
        kq, kq_r, ksm, ksm_r = math.inf, nan_r, math.inf, nan_r
        keep = np.isfinite(log_w)
        sub = WeightStats(log_w[keep], [c for c, k in zip(w_clusters, keep, strict=True) if k], names, counts)
        kp, kp_r = sub.kl_pl_q() if keep.any() else (math.nan, nan_r)
        notes.append(
            "KL(Q‖P_L) is infinite under the complete target (Q samples cut calls); KL(P_L‖Q) is finite"
        )
    res = ArmDistortion(
        arm=label,
        mode=arm["mode"],
        model=str(arm.get("model")),
        n=len(good),
        n_scenarios=len(names),
        n_errors=len(samples) - len(good),
        n_censored=n_cens,
        n_truncated=sum(1 for s in good if s.get("finish_reason") == "length"),
        p_valid=_est(pv, pv_r),
        kl_q_pl=_est(kq, kq_r, bound),
        kl_pl_q=_est(kp, kp_r),
        kl_q_pl_scenario_mean=_est(ksm, ksm_r, bound),
        ess=ws.ess(),
        n_weights=int(log_w.size),
        target=target,
    )
    res.notes.extend(notes)
    m = _per_sample(counts, names, clusters)
    fvals = {name: np.array([f(s) for s in good], dtype=np.float64) for name, f in outcomes.items()}
    for name, f in fvals.items():
        res.rates_q[name] = _est(*_plain(f, m))
        # strict: the arm's samples reweighted; strict-aligned: its samples are already P_L draws
        res.rates_pl[name] = res.rates_q[name] if aligned else _est(*ws.self_normalised(f))
    if aligned:
        parts = [s.get("particles") or {} for s in good]
        res.particles = float(np.mean([p.get("drawn", 0) for p in parts]))
        res.tokens_per_sample = float(np.mean([p.get("tokens", 0) for p in parts]))
        res.notes.append(
            f"strict-aligned: p_valid, KL and ESS from all {log_w.size} particles (masked draws of Q"
            + (f"; {n_drop} errored particles left out" if n_drop else "")
            + "); the rates are the aligned samples' own (draws of P_L up to the resampling bias)"
        )
    if n_cens:
        res.notes.append(
            f"{n_cens} samples have a step whose kept mass rounds to 0 in the stored data (Z < {CENSOR_Z:g}): "
            "their weight is an upper bound, KL(Q‖P_L) a lower bound"
        )
    if partner is None:
        res.notes.append("no loose arm with the same conditions: no rejection reference")
        return res
    ref_label, ref_samples = partner
    res.reference_arm = ref_label
    ref = [s for s in ref_samples if not s.get("error") and s["scenario"] in set(names)]
    res.n_reference = len(ref)
    if validity is None:
        res.notes.append("reference not replayed (validity unknown): run without --no-reference")
        return res
    missing = [s["key"] for s in ref if s["key"] not in validity]
    if missing:
        raise DistortionError(
            f"no {grammar_mode(arm['mode'])}-grammar replay for loose sample {missing[0]}; replay the reference first"
        )
    ok = ("valid",) if complete_only else ("valid", "valid-prefix")
    valid = np.array([validity[s["key"]] in ok for s in ref], dtype=np.float64)
    res.n_reference_valid = int(valid.sum())
    m_ref = _per_sample(counts, names, [s["scenario"] for s in ref])
    ref_pv, ref_pv_r = _plain(valid, m_ref)
    if not mixed:  # weights of another target would not estimate this target's P(valid)
        res.checks.append(_p_valid_check(log_w, w_clusters, valid, [s["scenario"] for s in ref]))
    for name, f in outcomes.items():
        fv = np.array([f(s) for s in ref], dtype=np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            point = float((fv * valid).sum() / valid.sum()) if valid.sum() else math.nan
            reps = (m_ref @ (fv * valid)) / (m_ref @ valid)
        sn, sn_r = _plain(fvals[name], m) if aligned else ws.self_normalised(fvals[name])
        res.checks.append(_check(name, sn, sn_r, point, reps, int(valid.sum())))
    return res


def _p_valid_check(
    log_w: np.ndarray, w_clusters: list[str], valid: np.ndarray, ref_clusters: list[str]
) -> Check:
    """E_Q[w] against the loose grammar-valid rate, paired over scenarios (per-scenario means; the mean
    difference with a t interval on G − 1 df, ``tooldecode.stats.paired_clusters``)."""
    from tooldecode.stats import paired_clusters

    def per(values: np.ndarray, clusters: list[str]) -> dict[str, float]:
        out: dict[str, list[float]] = {}
        for v, c in zip(values, clusters, strict=True):
            out.setdefault(c, []).append(float(v))
        return {c: float(np.mean(v)) for c, v in out.items()}

    a, b = per(np.exp(log_w), w_clusters), per(valid, ref_clusters)
    pc = paired_clusters(a, b)
    kind = f"paired t over {pc.g} scenarios, 95%"
    ra = Estimate(pc.mean_a, math.nan, math.nan, kind="per-scenario mean")
    rb = Estimate(pc.mean_b, math.nan, math.nan, kind="per-scenario mean")
    d = Estimate(pc.diff, pc.lo, pc.hi, kind=kind)
    agree = bool(d.lo <= 0.0 <= d.hi) if math.isfinite(d.lo) else None
    return Check("p_valid", ra, rb, d, agree, len(valid))


def _check(name: str, a: float, a_r: np.ndarray, b: float, b_r: np.ndarray, n_ref: int) -> Check:
    d = _est(a - b, a_r - b_r)
    agree = bool(d.lo <= 1e-12 and d.hi >= -1e-12) if math.isfinite(d.lo) else None
    return Check(name, _est(a, a_r), _est(b, b_r), d, agree, n_ref)


# ---------------------------------------------------------------------------------------------
# the rejection reference: loose samples replayed through the strict grammar


def replay_status(matcher: Any, token_ids: Sequence[int], eog: frozenset[int], finish_reason: str) -> str:
    """Replay one loose sample's tokens through a fresh strict-grammar matcher.

    Returns ``valid`` (every token allowed, ending with a stop token where the grammar may end),
    ``valid-prefix`` (every token allowed and the sample was cut at the token cap: the masked
    sampler would have been cut at the same point), ``invalid@<t>`` (token t is not allowed: the
    strict arm never produces this sample) or ``stop-string`` (ended on a stop string, not a stop
    token; counted invalid: the masked sampler stops on stop tokens)."""
    for t, tok in enumerate(token_ids):
        allowed = matcher.allowed()
        if matcher.done():
            allowed = np.zeros_like(allowed)
            allowed[list(eog)] = True
        if not allowed[int(tok)]:
            return f"invalid@{t}"
        if int(tok) in eog:
            return "valid"
        matcher.accept(int(tok))
    return "valid-prefix" if finish_reason == "length" else "stop-string"


def reference_validity(run_dir: str | Path, *, backend: Any | None = None) -> dict[str, dict[str, str]]:
    """Replay status (``replay_status``) of every loose sample of a run under the grammar of each
    masked mode the run has: ``{grammar mode: {sample key: status}}``.

    Cached in the run directory as ``reference-validity.json`` (derived, keyed by the grammar's hash).
    Loads the run's model (vocabulary and tokenizer) unless ``backend`` is given.
    """
    import dataclasses
    import hashlib

    from tooldecode.grammar import render_toolset
    from tooldecode.masking import compile_mask
    from tooldecode.models import resolve
    from tooldecode.prompts import TranscriptOptions, render_prompt
    from tooldecode.runstore import RunStore
    from tooldecode.scenarios import get_scenario

    path = Path(run_dir)
    option_fields = {f.name for f in dataclasses.fields(TranscriptOptions)}
    store = RunStore.open(path)
    manifest = store.manifest
    samples = [s for s in store.sample_records() if s["arm"].get("mode") == "loose" and not s.get("error")]
    store.close()
    cache_path = path / "reference-validity.json"
    cache: dict[str, Any] = {}
    if cache_path.exists():
        try:
            cache = json.loads(cache_path.read_text())
        except ValueError:
            cache = {}
    ws = manifest.get("config", {}).get("ws", "bounded")
    modes = sorted(
        {
            grammar_mode(a["mode"])
            for a in manifest.get("config", {}).get("arms", [])
            if a.get("mode") in MASKED_MODES
        }
    )
    backends: dict[tuple[str, str], Any] = {}
    out: dict[str, dict[str, str]] = {m: {} for m in modes}
    grammars: dict[tuple, tuple[str, Any]] = {}
    changed = False
    try:
        for gmode, s in ((m, s) for m in modes for s in samples):
            arm = s["arm"]
            opts = TranscriptOptions(**{k: arm[k] for k in option_fields if k in arm})
            gkey = (
                gmode,
                arm["model"],
                s["scenario"],
                json.dumps(opts.__dict__, sort_keys=True, default=str),
            )
            if gkey not in grammars:
                ref = resolve(arm["model"])
                prompt = render_prompt(get_scenario(s["scenario"]), ref, opts)
                g = render_toolset(list(prompt.tools), format="gbnf", wire=prompt.wire, mode=gmode, ws=ws)
                grammars[gkey] = (
                    hashlib.sha256((g + "\0" + prompt.prefill).encode()).hexdigest()[:16],
                    (g, prompt),
                )
            ghash, (g, prompt) = grammars[gkey]
            ckey = f"{gmode}:{s['key']}"
            hit = cache.get(ckey)
            if hit and hit.get("grammar") == ghash:
                out[gmode][s["key"]] = hit["status"]
                continue
            bkey = (arm.get("backend", "llamacpp"), arm["model"])
            be = backend
            if be is None:
                if bkey not in backends:
                    from tooldecode.backends import load_backend

                    kw = {"n_ctx": 512} if bkey[0] == "llamacpp" else {}
                    backends[bkey] = load_backend(bkey[0], resolve(arm["model"], fetch=True), **kw)
                be = backends[bkey]
            mask = compile_mask("xgrammar", g, be)  # acceptance is the grammar's, whichever engine sampled
            status = replay_status(
                mask.matcher(prompt.prefill), s["token_ids"], be.eog_ids, s["finish_reason"]
            )
            out[gmode][s["key"]] = status
            cache[ckey] = {"grammar": ghash, "status": status}
            changed = True
    finally:
        for be in backends.values():
            be.close()
    if changed:
        tmp = cache_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(cache, sort_keys=True) + "\n")
        tmp.replace(cache_path)
    return out


# ---------------------------------------------------------------------------------------------
# exact enumeration (small grammars)


@dataclass(frozen=True)
class ExactSequence:
    """One complete token sequence of a small grammar with its exact probabilities."""

    token_ids: tuple[int, ...]  # ending with a stop token
    text: str
    log_p: float  # under the model (unmasked, temperature 1)
    log_q: float  # under the masked sampler
    log_w: float  # log_p − log_q = Σ_t log Z_t


@dataclass(frozen=True)
class ExactDistribution:
    """Every complete masked token sequence of a grammar from one prompt (``exact_masked_distribution``)."""

    sequences: list[ExactSequence]

    @property
    def p_valid(self) -> float:
        return float(sum(math.exp(s.log_p) for s in self.sequences))

    def q(self) -> np.ndarray:
        return np.exp([s.log_q for s in self.sequences])

    def p_l(self) -> np.ndarray:
        p = np.exp([s.log_p for s in self.sequences])
        return p / p.sum()

    @property
    def kl_q_pl(self) -> float:
        """Σ_y Q(y) log(Q(y) / P_L(y)), computed from the distributions themselves."""
        q, pl = self.q(), self.p_l()
        keep = q > 0
        return float(np.sum(q[keep] * (np.log(q[keep]) - np.log(pl[keep]))))

    @property
    def kl_pl_q(self) -> float:
        q, pl = self.q(), self.p_l()
        keep = pl > 0
        return float(np.sum(pl[keep] * (np.log(pl[keep]) - np.log(q[keep]))))

    def by_text(self, probs: np.ndarray) -> dict[str, float]:
        """Sum ``probs`` (aligned with ``sequences``) over tokenizations of the same text."""
        out: dict[str, float] = {}
        for s, p in zip(self.sequences, probs, strict=True):
            out[s.text] = out.get(s.text, 0.0) + float(p)
        return out


def exact_masked_distribution(
    backend: Any, prompt_ids: Sequence[int], mask: Any, *, max_tokens: int = 12, max_nodes: int = 4000
) -> ExactDistribution:
    """Enumerate every token sequence a masked sampler can produce from ``prompt_ids`` (breadth first,
    one batched forward pass per depth), with log P, log Q and log w of each. For grammars whose
    language is finite and short; a prefix still open after ``max_tokens`` tokens or more than
    ``max_nodes`` prefixes raise ``DistortionError``. Probabilities in float64 from the backend's logits."""
    eog = backend.eog_ids
    prompt_ids = list(prompt_ids)
    frontier: list[tuple[tuple[int, ...], float, float]] = [((), 0.0, 0.0)]  # (prefix, log_p, log_q)
    done: list[ExactSequence] = []
    seen = 0
    for _depth in range(max_tokens + 1):
        if not frontier:
            break
        seen += len(frontier)
        if seen > max_nodes:
            raise DistortionError(f"more than {max_nodes} prefixes: the grammar is too large to enumerate")
        conts = [list(prompt_ids[-1:]) + list(p) for p, _, _ in frontier]
        logits = backend.branch_logits(prompt_ids[:-1], conts).astype(np.float64)
        nxt: list[tuple[tuple[int, ...], float, float]] = []
        for (prefix, lp, lq), row in zip(frontier, logits, strict=True):
            m = mask.matcher()
            for t in prefix:
                m.accept(t)
            allowed = m.allowed()
            if m.done():
                allowed = np.zeros_like(allowed)
                allowed[list(eog)] = True
            top = row.max()
            logp = row - (top + math.log(np.exp(row - top).sum()))
            log_z = float(np.logaddexp.reduce(logp[allowed]))
            for tok in np.flatnonzero(allowed):
                tok = int(tok)
                lp2, lq2 = lp + float(logp[tok]), lq + float(logp[tok]) - log_z
                if tok in eog:
                    text = backend.detokenize(prefix)
                    done.append(ExactSequence(prefix + (tok,), text, lp2, lq2, lp2 - lq2))
                else:
                    nxt.append((prefix + (tok,), lp2, lq2))
        frontier = nxt
    if frontier:
        raise DistortionError(
            f"prefixes still open after {max_tokens} tokens: the grammar is too long to enumerate"
        )
    return ExactDistribution(done)


def cached_validity(run_dir: str | Path) -> dict[str, dict[str, str]] | None:
    """The replay statuses stored by an earlier ``reference_validity`` (no model load), or None."""
    path = Path(run_dir) / "reference-validity.json"
    if not path.exists():
        return None
    try:
        cache = json.loads(path.read_text())
    except ValueError:
        return None
    out: dict[str, dict[str, str]] = {}
    for ckey, hit in cache.items():
        mode, _, key = ckey.partition(":")
        out.setdefault(mode, {})[key] = hit["status"]
    return out


def has_masked_arm(manifest: dict) -> bool:
    """Whether a run's config has a masked (strict) arm."""
    config = manifest.get("config") if isinstance(manifest.get("config"), dict) else {}
    arms = config.get("arms") if isinstance(config.get("arms"), list) else []
    return any(isinstance(a, dict) and a.get("mode") in MASKED_MODES for a in arms)
