"""One run: each masked arm's importance weights, estimates and instrument checks (``analyse_run``)."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np

from tooldecode.distortion.weights import (
    CENSOR_Z,
    MASKED_MODES,
    TARGETS,
    ArmDistortion,
    Check,
    DistortionError,
    Estimate,
    WeightStats,
    boot_counts,
    default_outcomes,
    estimate,
    grammar_mode,
    per_sample,
    plain_rate,
    sample_log_weight,
)
from tooldecode.runs import Run, load_run

# ---------------------------------------------------------------------------------------------
# a run


def _arm_label(arm: dict) -> str:
    keep = [k for k in sorted(arm) if k not in ("wire", "expected_tool", "backend")]
    return ",".join(f"{k}={arm[k]}" for k in keep)


def _partner(arm: dict) -> dict:
    return {k: v for k, v in arm.items() if k not in ("mode", "engine")}


def is_adaptive(good: list[dict], weights: list[float]) -> bool:
    """Whether an aligned arm's samples came from the adaptive sampler (exact, no particle weights)."""
    return not weights and any((s.get("particles") or {}).get("method") == "adaptive" for s in good)


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
    run: Run | str | Path,
    *,
    validity: dict[str, dict[str, str]] | None = None,
    n_boot: int = 2000,
    seed: int = 0,
    target: str = "prefix",
) -> list[ArmDistortion]:
    """Distortion figures for every masked arm of a run (a loaded run, or its folder to load).

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
    if target not in TARGETS:
        raise DistortionError(f"unknown target {target!r}; choose one of: {', '.join(TARGETS)}")
    if not isinstance(run, Run):
        run = load_run(run)
    path = run.path
    # the weights read the stored per-token arrays: the samples and verdicts in their stored form
    outcomes = default_outcomes({k: v.to_json() for k, v in run.verdicts.items()})
    arms: dict[str, tuple[dict, list[dict]]] = {}
    for s in (r.to_json() for r in run.samples):
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
    # every scenario of the arm, errored samples included: a strict-aligned scenario whose samples all
    # ended as errors (no particle accepted) still contributes its particles' weights
    names, counts = boot_counts([s["scenario"] for s in samples], n_boot, seed)
    n_drop = 0
    if aligned:
        # every particle is a masked draw of Q: the weights of all of them (stored unrounded)
        lw_list, w_clusters = [], []
        unknown = 0
        # samples that are errors because no particle was accepted still drew Q: their particles count
        for s in samples:
            info = s.get("particles") or {}
            done = info.get("complete")
            if done is None:
                unknown += 1
            all_w = info.get("log_w") or []
            # rejection stops at the round that accepts: the weights of later rounds depend on earlier ones
            # (an adaptive stopping rule biases their mean upward), so only the first round counts
            first = int(info.get("n") or len(all_w)) if info.get("method") == "rejection" else len(all_w)
            for j, x in enumerate(all_w[:first]):
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
        adaptive = is_adaptive(good, lw_list)
        if adaptive:
            # the adaptive sampler's draws are exact and carry no weights: equal weights stand in, so the
            # P_L rates weight scenarios by their sample counts, not by their P(valid)
            log_w, w_clusters = np.zeros(len(good)), clusters
            notes.append(
                "strict-aligned (adaptive): exact draws without importance weights: no p_valid, KL or ESS; "
                "the P_L rates weight scenarios by their sample counts, not by P(valid)"
            )
    else:
        mixed = adaptive = False
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
    if adaptive:  # no weights: nothing to estimate P(valid) or the KLs from
        pv, pv_r = math.nan, nan_r
        kq = kp = ksm = math.nan
        kq_r = kp_r = ksm_r = nan_r
    res = ArmDistortion(
        arm=label,
        mode=arm["mode"],
        model=str(arm.get("model")),
        n=len(good),
        n_scenarios=len(names),
        n_errors=len(samples) - len(good),
        n_censored=n_cens,
        n_truncated=sum(1 for s in good if s.get("finish_reason") == "length"),
        p_valid=estimate(pv, pv_r),
        kl_q_pl=estimate(kq, kq_r, bound),
        kl_pl_q=estimate(kp, kp_r),
        kl_q_pl_scenario_mean=estimate(ksm, ksm_r, bound),
        ess=ws.ess(),
        n_weights=int(log_w.size),
        target=target,
    )
    res.notes.extend(notes)
    m = per_sample(counts, names, clusters)
    fvals = {name: np.array([f(s) for s in good], dtype=np.float64) for name, f in outcomes.items()}
    # strict: the arm's samples reweighted by w. strict-aligned: each sample is a draw of its own prompt's
    # P_L; the run's P_L is the mixture over scenarios, which weights scenario s by its P(valid), so each
    # aligned sample counts p̂_s / n_s (p̂_s: the mean first-round particle weight of scenario s)
    pl_stats = mixture_weights(log_w, w_clusters, clusters, names, counts) if aligned else ws
    for name, f in fvals.items():
        res.rates_q[name] = estimate(*plain_rate(f, m))
        res.rates_pl[name] = estimate(*pl_stats.self_normalised(f))
    if aligned:
        parts = [s.get("particles") or {} for s in good]
        res.particles = float(np.mean([p.get("drawn", 0) for p in parts]))
        res.tokens_per_sample = float(np.mean([p.get("tokens", 0) for p in parts]))
        res.notes.append(
            f"strict-aligned: p_valid, KL and ESS from the {log_w.size} particles of each sample's first round "
            "(masked draws of Q"
            + (f"; {n_drop} errored particles left out" if n_drop else "")
            + "); the P_L rates weight each scenario's aligned samples by its estimated P(valid) (the run's "
            "P_L is the mixture over scenarios)"
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
        res.n_reference_valid = None
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
    m_ref = per_sample(counts, names, [s["scenario"] for s in ref])
    ref_pv, ref_pv_r = plain_rate(valid, m_ref)
    if not mixed:  # weights of another target would not estimate this target's P(valid)
        res.checks.append(_p_valid_check(log_w, w_clusters, valid, [s["scenario"] for s in ref]))
    for name, f in outcomes.items():
        fv = np.array([f(s) for s in ref], dtype=np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            point = float((fv * valid).sum() / valid.sum()) if valid.sum() else math.nan
            reps = (m_ref @ (fv * valid)) / (m_ref @ valid)
        sn, sn_r = pl_stats.self_normalised(fvals[name])
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
    d = estimate(a - b, a_r - b_r)
    agree = bool(d.lo <= 1e-12 and d.hi >= -1e-12) if math.isfinite(d.lo) else None
    return Check(name, estimate(a, a_r), estimate(b, b_r), d, agree, n_ref)


def mixture_weights(
    log_w: np.ndarray, w_clusters: list[str], clusters: list[str], names: list[str], counts: np.ndarray
) -> WeightStats:
    """Per-sample weights p̂_s / n_s for samples that are exact draws of their own scenario's P_L, so that
    self-normalised rates estimate the run's mixture P_L (scenario s weighted by P_s(valid))."""
    by: dict[str, list[float]] = {}
    for x, c in zip(np.exp(log_w), w_clusters, strict=True):
        by.setdefault(c, []).append(float(x))
    n_s: dict[str, int] = {}
    for c in clusters:
        n_s[c] = n_s.get(c, 0) + 1
    with np.errstate(divide="ignore"):
        lw = np.array(
            [
                math.log(max(float(np.mean(by.get(c, [0.0]))), 0.0) or 1e-300) - math.log(n_s[c])
                for c in clusters
            ]
        )
    return WeightStats(lw, clusters, names, counts)
