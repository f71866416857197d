"""Claimed effects judged against runs: a spec's ``[[findings.effects]]`` table (``parse_claim``) judged on
the run that pairs the most scenarios for it (``evaluate_effect``), with the verdict and its account
(``EffectResult``)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from tooldecode.measures import (
    VARIANT_DEFAULTS,
    MeasureError,
    distinct_draws,
    full_variant,
    l2_values,
    l3_values,
    row_measure,
    sample_event,
)
from tooldecode.records import Condition, SampleRecord
from tooldecode.runs import Run, model_split_runs
from tooldecode.stats import (
    EffectClaim,
    EffectVerdict,
    PairedClusters,
    interim,
    interval_text,
    judge_effect,
    paired_clusters,
)

__all__ = ["ClaimError", "EffectResult", "evaluate_effect", "parse_claim"]


class ClaimError(MeasureError):
    """A claimed effect (a spec's ``[[findings.effects]]`` table) that cannot be judged as written."""


@dataclass
class EffectResult:
    """One claimed effect evaluated on one run."""

    label: str
    run: Run
    level: str
    measure: str
    cmp: PairedClusters
    verdict: EffectVerdict
    draws: int  # distinct draws (L2) or decision points (L3) used
    claim: EffectClaim

    def estimate_text(self) -> str:
        """The verdict's estimate with its interval, on the claim's scale."""
        v = self.verdict
        if math.isnan(v.estimate):
            return (
                "no estimate (the reference arm has no event)"
                if self.claim.scale == "ratio"
                else "no estimate"
            )
        if self.claim.scale == "ratio":
            return f"×{v.estimate:.2f} {interval_text(v.lo, v.hi, '.2f')}"
        return f"{v.estimate:+.3f} {interval_text(v.lo, v.hi, '+.3f')}"

    def _adjusted(self) -> str:
        padj = self.verdict.p_adjusted
        return "" if math.isnan(padj) else f", Holm-adjusted p = {padj:.3g}"

    def rejudged(self, p_adjusted: float | None) -> EffectResult:
        """This result judged again with the family's adjusted p (``tooldecode.stats.holm``)."""
        v = self.verdict
        verdict = judge_effect(
            self.cmp, self.claim, events=v.events, event_clusters=v.event_clusters, p_adjusted=p_adjusted
        )
        return dataclasses.replace(self, verdict=verdict)

    def short(self) -> str:
        """One line for a summary: the estimate with its interval, the events and clusters, the verdict."""
        c, v = self.cmp, self.verdict
        est = self.estimate_text()
        few = ", fewer than 10 clusters" if c.g < 10 else ""
        return (
            f"{c.mean_a:.3f} vs {c.mean_b:.3f}, {est} ({v.events:g} events in {v.event_clusters} of {c.g} "
            f"scenarios{few}; run {self.run.name}): **{v}**"
        )

    def measured(self) -> str:
        c, v = self.cmp, self.verdict
        unit = f"{self.draws} distinct draws" if self.level != "L3" else f"{self.draws} decision points"
        est = ("ratio " if self.claim.scale == "ratio" else "difference ") + self.estimate_text()
        few = ", fewer than 10 clusters" if c.g < 10 else ""
        ev = f"{v.events:g} events in {v.event_clusters} scenarios"
        return (
            f"{self.label}: {c.mean_a:.3f} vs {c.mean_b:.3f} (per-scenario means), {est}, "
            f"difference {c.diff:+.3f} {interval_text(c.lo, c.hi, '+.3f')}, sign-flip p = {c.p_sign_flip:.3g}{self._adjusted()}; "
            f"{c.g} scenarios{few}, {unit}, {ev} [run {self.run.name}]"
        )


def parse_claim(effect: dict, where: str) -> EffectClaim:
    scale = effect.get("scale", "ratio")
    size = effect.get("size")
    sign = {"increase": 1, "decrease": -1}.get(str(effect.get("direction", "")), 0)
    try:
        bound = str(effect.get("bound", "exact"))
        return EffectClaim(scale, None if size is None else float(size), sign, bound)
    except ValueError as err:
        raise ClaimError(f"{where}: {err}") from None


def _matches(arm: Condition, want: dict) -> bool:
    return all(arm.get(k, VARIANT_DEFAULTS.get(k)) == v for k, v in want.items())


def _one_engine(samples: list[SampleRecord]) -> bool:
    """Whether ``samples`` come from one strict channel: a run with several engine settings (an open and
    a closed grammar under the same mode word), or open grammars with and without repeated keys, is
    never pooled into one arm of an effect; name the engine (or ``duplicates``) in the effect's
    ``a``/``b``/``where`` to read such a run."""
    return len({(s.arm.engine, s.arm.duplicates or "forbid") for s in samples}) <= 1


def evaluate_effect(effect: dict, runs: dict[str, Run], *, where: str = "spec") -> EffectResult | None:
    """Judge one claimed effect (a ``[[findings.effects]]`` table) on the run that pairs the most
    scenarios for it, among the runs made from a clean commit if any has both arms; None when no run
    has both arms. Runs of one spec made model by model count as one run (``model_split_runs``).

    ``effect`` fields: ``label``, ``level`` ("L2" samples / "L3" probe rows), ``measure``, ``a`` and
    ``b`` (arm or variant fields), ``where`` (more arm fields, both arms), ``model``, ``scale``,
    ``size`` or ``direction``, ``runs`` (optional list of spec names to search).
    """
    for key in ("level", "measure", "a", "b"):
        if key not in effect:
            raise ClaimError(f"{where}: effect {effect.get('label', '?')!r} has no {key!r}")
    claim = parse_claim(effect, where)
    level, measure = effect["level"], effect["measure"]
    model = effect.get("model")
    common = dict(effect.get("where", {}))
    specs = set(effect.get("runs", []))
    best: tuple | None = None
    # the folders, then the runs of one spec made model by model read as one (runs.combine)
    for run in [*runs.values(), *model_split_runs(runs.values())]:
        if specs and run.spec not in specs:
            continue
        unfinished = ""  # an arm not drawn in full over its planned scenarios (L1/L2): no verdict yet
        if level == "L3":
            rows = run.probe
            # an arm may name its own model (two models compared); the variant is the rest of the arm
            arms = []
            for side in "ab":
                arm = {**common, **effect[side]}
                arms.append((arm.pop("model", model), arm))
            (ma, arm_a), (mb, arm_b) = arms
            va = l3_values(rows, measure, model=ma, **arm_a)
            vb = l3_values(rows, measure, model=mb, **arm_b)
            shared = set(va) & set(vb)
            # exact probabilities: a scenario is an L3 event when either arm's probability is above 0
            ev_sc = [s for s in shared if max(va[s], vb[s]) > 0]
            events, ev_clusters = len(ev_sc), len(ev_sc)
            draws = sum(
                1
                for r in rows
                if r.scenario in shared
                and r.after == "newText"
                and any(
                    (not m or r.model == m) and full_variant(r.variant) == full_variant(arm)
                    for m, arm in arms
                )
                and row_measure(r, measure) is not None
            )
        elif level in ("L1", "L2"):
            if run.shared_streams:
                continue  # its scenarios share one random stream: no cluster interval (counts only elsewhere)
            base = [s for s in run.samples if not s.error and s.arm.level == level]
            if model:
                base = [s for s in base if s.arm.model == model]
            sa = [s for s in base if _matches(s.arm, {**common, **effect["a"]})]
            sb = [s for s in base if _matches(s.arm, {**common, **effect["b"]})]
            if not sa or not sb or not (_one_engine(sa) and _one_engine(sb)):
                continue
            va, ea, ca, na = l2_values(sa, measure)
            vb, eb, cb, nb = l2_values(sb, measure)
            shared = set(va) & set(vb)
            events = ea + eb
            ev_clusters = len({s.scenario for s in distinct_draws(sa + sb) if sample_event(s, measure)})
            draws = na + nb
            unfinished = run.progress_note(sa + sb)
        else:
            raise ClaimError(f"{where}: level must be 'L1', 'L2' or 'L3', got {level!r}")
        if len(shared) < 2:
            continue
        # a run made from a clean commit first, then one whose arms are drawn in full, then the most
        # paired scenarios, then one folder over runs read as one, then the newest
        key = (
            run.git_dirty is False,
            not unfinished,
            len(shared),
            not run.parts,
            run.manifest.get("created", ""),
        )
        if best is None or key > best[0]:
            cmp = paired_clusters({s: va[s] for s in shared}, {s: vb[s] for s in shared})
            verdict = judge_effect(cmp, claim, events=events, event_clusters=ev_clusters)
            if unfinished:
                verdict = interim(verdict, unfinished)
            best = (
                key,
                EffectResult(effect.get("label", measure), run, level, measure, cmp, verdict, draws, claim),
            )
    return None if best is None else best[1]
