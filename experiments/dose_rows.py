"""The positive control's dose-response, exactly: the FINDINGS row ``dose_response`` (named in the
held-out probe's spec, ``experiments/e19_dose_probe.toml``).

For the base and each dose of the committed dose rule (its home: the rule's prediction in
``rule_spec``), the exact probe's P(``key``) at the decisions right after the gold ``newText``:

- on held-out scenarios of the recipes' own generator (in distribution: does training implant the key
  where it was trained, at its share?);
- on the evaluation scenarios (``corpus``, the same probe's other spec: does it carry there?);
- their ratio, corpus / held-out: the transfer's attenuation;
- beside them, the sampled L2 loose rate the dose rule reads (the runs of ``rule_spec``).

Each per-scenario value is the mean over the scenario's ``newText`` decisions; a model's figure is the
mean over scenarios with a cluster-robust interval (one cluster per scenario), and the ratio's interval
comes from resampling each scenario set apart (they share no scenario). The reading is committed in the
spec's ``[findings.dose_response]`` (``near``): a dose is *at its dose* in distribution when the held-out
interval lies at or above ``near`` × its share, *under its dose* when it lies below it, undecided
otherwise; the transfer *attenuates* when the ratio's interval lies below ``near``, *carries* when it lies
at or above it.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from experiments.common import runs_of, short
from experiments.organism_rows import dose_reading, dose_rule_of, prediction_note, spec_stem
from tooldecode.measures import l3_values
from tooldecode.runs import Run
from tooldecode.stats import ClusterRate, cluster_rate

ROOT = Path(__file__).resolve().parents[1]
SCENARIO_MEANS = "mean over scenarios of each scenario's mean over its newText decisions"
RATIO_CI = "percentile interval, 4,000 resamples of each scenario set apart"


@dataclass(frozen=True)
class DoseProbe:
    """One model's exact P(key) after the gold newText on one scenario set: per scenario, and their mean
    with a cluster-robust interval."""

    model: str
    run: str
    per_scenario: dict[str, float]
    rate: ClusterRate

    @property
    def n(self) -> int:
        return len(self.per_scenario)

    def __str__(self) -> str:
        if not self.per_scenario:
            return "no probe rows"
        r = self.rate
        return f"{r.rate:.3f} [{r.lo:.3f}, {r.hi:.3f}] ({self.n} scenarios)"


def probe_of(rs: list[Run], model: str, key: str) -> DoseProbe:
    """P(``key``) after the gold newText for ``model`` from the probe runs ``rs`` (a model probed in
    several runs: the clean one with the most scenarios)."""
    best: DoseProbe | None = None
    best_key: tuple[bool, int] | None = None
    for run in rs:
        rows = [r for r in run.probe if r.model == model]
        if not rows:
            continue
        variant = dict(rows[0].variant or {})
        vals = l3_values(rows, f"key:{key}", model=model, **variant)
        names = sorted(vals)
        rate = cluster_rate([vals[s] for s in names], names)
        pick = (run.git_dirty is False, len(vals))
        if best_key is None or pick > best_key:
            best, best_key = DoseProbe(model, run.name, vals, rate), pick
    return best or DoseProbe(model, "", {}, cluster_rate([], []))


def ratio_interval(
    a: list[float], b: list[float], *, n_boot: int = 4000, seed: int = 0, conf: float = 0.95
) -> tuple[float, float, float]:
    """mean(a) / mean(b) with a percentile interval from resampling ``a`` and ``b`` apart (two sets of
    scenarios, no pairing); nan when mean(b) is 0 or either is empty."""
    if not a or not b or float(np.mean(b)) <= 0.0:
        return (math.nan, math.nan, math.nan)
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    rng = np.random.default_rng(seed)
    mx = x[rng.integers(0, x.size, (n_boot, x.size))].mean(axis=1)
    my = y[rng.integers(0, y.size, (n_boot, y.size))].mean(axis=1)
    ok = my > 0
    r = mx[ok] / my[ok]
    tail = (1.0 - conf) / 2.0 * 100.0
    lo, hi = np.percentile(r, [tail, 100.0 - tail]) if r.size else (math.nan, math.nan)
    return (float(x.mean() / y.mean()), float(lo), float(hi))


def in_distribution(p: DoseProbe, share: float, near: float) -> str:
    """The held-out reading against ``near`` × ``share``."""
    if not p.per_scenario:
        return "not measured"
    bar = near * share
    if p.rate.lo >= bar:
        return "at its dose"
    if p.rate.hi < bar:
        return "under its dose"
    return "undecided"


def transfer(ratio: tuple[float, float, float], near: float) -> str:
    """The corpus / held-out reading against ``near``."""
    r, lo, hi = ratio
    if math.isnan(r):
        return "not measured"
    if hi < near:
        return "attenuates"
    if lo >= near:
        return "carries"
    return "undecided"


def cause(dose: str, carry: str) -> str:
    """What the two readings say of a dose's shortfall on the evaluation scenarios."""
    if dose == "under its dose":
        return "the dose is short where it was trained" + (
            " and the transfer attenuates too" if carry == "attenuates" else ""
        )
    if dose == "at its dose":
        return {
            "attenuates": "implanted at its dose, and the shortfall on the evaluation scenarios is transfer",
            "carries": "implanted at its dose and carried to the evaluation scenarios",
        }.get(carry, "implanted at its dose; the transfer is not decided")
    if carry == "attenuates":
        return "the transfer attenuates; the dose in distribution is not decided"
    return "not decided by the committed reading (the figures say how much each part loses)"


def _spec_file(stem: str) -> dict:
    path = ROOT / "experiments" / f"{stem}.toml"
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise KeyError(
            f"{path}: not a readable spec ({err}); name the spec that holds the dose rule"
        ) from None


def row_dose_response(spec: dict, rs: list[Run], runs: dict[str, Run]) -> list[dict]:
    """The dose-response row: held-out vs corpus P(key) per dose, their ratio, the screen's sampled rate,
    and the committed reading."""
    cfg = spec["findings"].get("dose_response", {})
    stem = str(cfg.get("rule_spec", "e19_organisms_gen2"))
    rule_spec = _spec_file(stem)
    rule = dose_rule_of(rule_spec)
    if rule is None:
        raise KeyError(
            f'experiments/{stem}.toml: no prediction with judge = "dose_rule"; name the rule\'s spec'
        )
    key, base, near = str(rule["key"]), str(rule["base"]), float(cfg.get("near", 0.8))
    corpus_rs = runs_of(str(cfg.get("corpus", "")), runs)
    screen = dose_reading(rule, runs_of(str(rule_spec.get("name", "")), runs))
    screen_rate = {d[0]: d[3] for d in screen.doses} if screen is not None else {}
    if screen is not None:
        screen_rate[base] = screen.base_rate

    models: list[tuple[str, float | None, int]] = [(base, None, 0)]
    models += [(str(d["organism"]), float(d["share"]), int(d.get("epochs", 1))) for d in rule["doses"]]
    parts, readings, heads, causes, measured_any = [], [], [], set(), False
    for model, share, epochs in models:
        held, corp = probe_of(rs, model, key), probe_of(corpus_rs, model, key)
        measured_any |= bool(held.per_scenario or corp.per_scenario)
        ratio = ratio_interval(list(corp.per_scenario.values()), list(held.per_scenario.values()))
        name = short(model) + (
            "" if share is None else f" (share {share:g}, {epochs} epoch{'s' * (epochs != 1)})"
        )
        sr = screen_rate.get(model)
        if not (held.per_scenario or corp.per_scenario):
            parts.append(f"{name}: not probed")
            continue
        text = f"{name}: held-out {held}; corpus {corp}"
        if not math.isnan(ratio[0]):
            text += f"; corpus / held-out ×{ratio[0]:.2f} [{ratio[1]:.2f}, {ratio[2]:.2f}]"
        if sr is not None and sr.n:
            text += f"; screen (sampled, L2 loose) {sr}"
        parts.append(text)
        if share is not None:
            dose, carry = in_distribution(held, share, near), transfer(ratio, near)
            causes.add(cause(dose, carry))
            heads.append(
                f"{short(model).split(':')[-1].split('@')[0]} (share {share:g}): held-out {held.rate.rate:.3f}, "
                f"corpus {corp.rate.rate:.3f}"
                + (f", sampled {sr.rate:.3f}" if sr is not None and sr.n else "")
                + f" ({held.n} + {corp.n} scenarios)"
            )
            readings.append(
                f"{short(model)}: in distribution {dose} (bar {near:g} × {share:g} = {near * share:.3f}), "
                f"transfer {carry}: {cause(dose, carry)}"
            )
    claim = (
        f"{spec.get('claim', '')} Reading (committed with the spec): a dose is at its dose in distribution when "
        f"its held-out interval lies at or above {near:g} × its share, under it when the interval lies below; "
        f"the transfer attenuates when the corpus / held-out interval lies below {near:g}. Held-out at its dose "
        "and the transfer attenuating is transfer; held-out under its dose is dose."
        + prediction_note(
            spec_stem(spec), spec, SimpleNamespace(parts=tuple(rs + corpus_rs)) if rs or corpus_rs else None
        )
    )
    src = ", ".join(sorted({r.name for r in [*rs, *corpus_rs]})) or "experiments/e19_dose_probe.toml"
    if not measured_any:
        return [
            {
                "observation": f"{spec['name']}: the positive control's dose-response, exactly",
                "claim": claim,
                "measured": "not measured: no committed probe run (rerun needed)",
                "verdict": "not measured",
                "source": src,
                "summary": "dose-response (exact probe): not measured",
            }
        ]
    verdict = "; ".join(readings) if readings else "descriptive: only the base is probed"
    return [
        {
            "observation": f"{spec['name']}: the positive control's dose-response, exactly "
            f"(P({key!r}) after the gold newText)",
            "claim": claim,
            "measured": f"{SCENARIO_MEANS}, cluster-robust CR1 95% CI; ratio: {RATIO_CI}. "
            + "; ".join(parts)
            + ".",
            "verdict": verdict,
            "source": src,
            "summary": f"dose-response (exact probe): {verdict}",
            "headline": f"P({key!r}) after the gold newText, exact: " + "; ".join(heads)
            if heads
            else verdict,
            "headline_verdict": causes.pop()
            if len(causes) == 1
            else "descriptive: the doses read differently",
        }
    ]


__all__ = [
    "DoseProbe",
    "cause",
    "in_distribution",
    "probe_of",
    "ratio_interval",
    "row_dose_response",
    "transfer",
]
