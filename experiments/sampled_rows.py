"""The study's descriptive rows over sampled draws (named in a spec's ``findings.rows``): L0 calls, strict's
cost, the sampled-vs-exact agreement, the open grammar, the model panel, the noise floor, schema keywords."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Callable

import numpy as np

from experiments.common import (
    CLOSE_BRACE_SPEC,
    CR,
    PT,
    STUDY_MODEL,
    crate,
    distinct_draws,
    few,
    identical_arms,
    keys_of,
    kinds_text,
    l2,
    per_scenario,
    sample_continuation,
    shared_note,
    short,
    source,
)
from tooldecode.measures import full_variant, l3_values, sample_context
from tooldecode.records import SampleRecord
from tooldecode.runs import Run
from tooldecode.stats import cluster_rate, interval_text, paired_clusters


def row_l0_free(spec: dict, rs: list[Run], runs: dict[str, Run]) -> list[dict]:
    parts, dups = [], []
    for run in rs:
        dups += [" = ".join(g) for g in identical_arms([s for s in run.samples if not s.error])]
        groups: dict[tuple, list[SampleRecord]] = defaultdict(list)
        for s in distinct_draws([s for s in run.samples if not s.error]):
            a = s.arm
            groups[(a.model, a.temperature)].append(s)
        for (model, temp), ss in sorted(groups.items()):
            vs = [run.verdicts[s.key] for s in ss]
            ok = [v.tool == "edit" and v.verdict not in ("no_call", "json_syntax", "truncated") for v in vs]
            r = cluster_rate(ok, [s.scenario for s in ss])
            wraps = Counter(v.wrapping or "none" for v in vs)
            parts.append(
                f"{short(model)} T={temp:g}: parseable edit call {int(r.k)}/{r.n} distinct draws "
                f"[{100 * r.lo:.1f}, {100 * r.hi:.1f}]% ({few(r.g)}); wrappings {dict(wraps.most_common(3))}"
            )
    note = (
        f" Identical arms (same prompt bytes in every scenario), counted once: {'; '.join(dups)}."
        if dups
        else ""
    )
    return [
        {
            "observation": "L0: do small models call the edit tool on their own?",
            "claim": spec.get("claim", ""),
            "measured": "; ".join(parts) + "." + note + f" Interval: {CR}; T=0 copies collapsed.",
            "verdict": "descriptive",
            "source": source(rs),
        }
    ]


def _mask_at_decision(s: SampleRecord) -> float | None:
    m = s.mask_removed
    return float(m[0]) if m else None


def row_strict_cost(spec: dict, rs: list[Run], runs: dict[str, Run]) -> list[dict]:
    """Strict's cost: with the ',' branch masked the string goes on (the payload is corrupted)."""
    out = []
    pool = [
        r
        for r in runs.values()
        if l2(r, mode="strict", model=STUDY_MODEL)
        and l2(r, mode="loose", model=STUDY_MODEL)
        # one strict channel per row: a run with several engine settings (open grammars among them,
        # E15) has its own table (docs/engines.md)
        and len({s.arm.engine for s in l2(r, mode="strict", model=STUDY_MODEL)}) == 1
    ]
    for run in sorted(pool, key=lambda r: r.name):
        st = distinct_draws(l2(run, mode="strict", model=STUDY_MODEL))
        lo = distinct_draws(l2(run, mode="loose", model=STUDY_MODEL))

        def goes_on(s: dict) -> bool:
            return sample_continuation(s).kind == "string_goes_on"

        if run.shared_streams:
            k_s, k_l = sum(map(goes_on, st)), sum(map(goes_on, lo))
            out.append(
                {
                    "observation": "Strict's cost: with the ',' branch masked, the newText string goes on (payload corrupted)",
                    "claim": "Grammar masking removes the ',' branch when the object is closed; the mass that wanted "
                    "to continue must go somewhere (docs/background.md).",
                    "measured": f"{short(STUDY_MODEL)} L2 after the gold newText, string goes on: strict "
                    f"{k_s}/{len(st)} vs loose {k_l}/{len(lo)} distinct draws (counts only). {shared_note(run, runs)}",
                    "verdict": "descriptive (counts only: shared random streams)",
                    "source": source([run]),
                }
            )
            continue
        rs_, rl_ = crate(st, goes_on), crate(lo, goes_on)
        cmp = paired_clusters(per_scenario(st, goes_on), per_scenario(lo, goes_on))
        masks = [m for m in (_mask_at_decision(s) for s in st) if m is not None]
        heavy = [s for s in st if (_mask_at_decision(s) or 0) > 0.2]
        hv = crate(heavy, goes_on) if heavy else None
        mtxt = (
            f"; mask-removed mass at the decision: mean {np.mean(masks):.3f}, median {np.median(masks):.3f} "
            f"(n={len(masks)})"
            if masks
            else ""
        )
        htxt = f"; where the mask removed > 0.2 the string went on in {hv}" if hv else ""
        out.append(
            {
                "observation": "Strict's cost: with the ',' branch masked, the newText string goes on (payload corrupted)",
                "claim": "Grammar masking removes the ',' branch when the object is closed; the mass that wanted to "
                "continue must go somewhere (docs/background.md).",
                "measured": f"{short(STUDY_MODEL)} L2 after the gold newText, string goes on: strict {rs_} vs "
                f"loose {rl_}; {PT}: {cmp}{mtxt}{htxt}. Interval: {CR}.",
                "verdict": "descriptive (strict removes extra keys at the price of more corrupted payloads)"
                if cmp.lo > 0
                else "descriptive",
                "source": source([run]),
                "headline": f"strict {rs_.k:g}/{rs_.n} vs loose {rl_.k:g}/{rl_.n} draws run on: ×{cmp.ratio:.2f} "
                f"{interval_text(cmp.ratio_lo, cmp.ratio_hi, '.2f')} ({cmp.g} scenarios)",
                "command": run.command(),
                "summary": f"strict's cost: the newText string goes on instead of closing in {rs_.k:g}/{rs_.n} strict vs "
                f"{rl_.k:g}/{rl_.n} loose draws, ×{cmp.ratio:.2f} {interval_text(cmp.ratio_lo, cmp.ratio_hi, '.2f')} paired over "
                f"{cmp.g} scenarios (run {run.name})",
            }
        )
    return out


def row_agreement(spec: dict, rs: list[Run], runs: dict[str, Run]) -> list[dict]:
    probe_runs = [r for r in runs.values() if r.spec == CLOSE_BRACE_SPEC]
    if not rs or not probe_runs:
        return []
    e1, e5 = rs[0], probe_runs[0]
    ss = distinct_draws(l2(e1, mode="loose", model=STUDY_MODEL))
    sampled = per_scenario(ss, lambda s: sample_continuation(s).group == "continue")
    exact = {}
    for r in e5.probe:
        if r.after == "newText" and r.scenario in sampled:
            # the L2 cut is after the last item's newText
            if r.item_index in (None, r.n_items - 1):
                exact[r.scenario] = float(r.p_continue)
    cmp = paired_clusters(sampled, exact)
    return [
        {
            "observation": "Instrument check: L2 sampled continue rate vs L3 exact P(continue), same decision",
            "claim": "They measure the same event (T=1, no truncation), so they must agree.",
            "measured": f"sampled vs exact: {cmp} ({PT}; {len(ss)} distinct draws)",
            "verdict": "agree"
            if cmp.lo <= 0 <= cmp.hi or (math.isnan(cmp.lo) and cmp.diff == 0)
            else "disagree",
            "source": source([e1, e5]),
        }
    ]


def row_open_grammar(spec: dict, rs: list[Run], runs: dict[str, Run]) -> list[dict]:
    out = []
    for run in rs:
        parts, mangled = [], {}
        arms: list[tuple[str, list[SampleRecord]]] = [("loose", l2(run, mode="loose"))]
        spec_ss = l2(run, mode="strict-spec")
        for dup in ("forbid", "admit"):
            arms.append((f"strict-spec (duplicates {dup})", [s for s in spec_ss if _duplicates(s) == dup]))
        arms.append(("strict", l2(run, mode="strict")))
        for label, ss in arms:
            if ss:
                keys = keys_of(ss, ("invented", "schema_word", "repeat"))
                parts.append(f"{label}: {kinds_text(ss)} (keys: {dict(keys.most_common(6))})")
                mangled[label] = (
                    f"{sum(map(_mangled_repeat, distinct_draws(ss)))}/{len(distinct_draws(ss))}"
                    if run.shared_streams
                    else crate(ss, lambda s: _mangled_repeat(s))
                )
        ran = {_duplicates(s) for s in spec_ss}
        both = (
            "The open grammar ran both ways: 'forbid' admits each declared key once, 'admit' lets a key the "
            "object has come again, as JSON allows."
            if ran == {"forbid", "admit"}
            else "This run's strict-spec grammar forbids repeating a key the object has (duplicates: forbid)."
        )
        out.append(
            {
                "observation": "E13: what an open grammar lets through after newText: new names and repeats apart",
                "claim": spec.get("claim", ""),
                "measured": "; ".join(parts)
                + (f". {shared_note(run, runs)} " if run.shared_streams else f". Interval: {CR}. ")
                + both,
                "verdict": "descriptive: repeats with a mangled spelling (a present key plus junk in the key "
                "string): " + ", ".join(f"{m} {r}" for m, r in mangled.items()),
                "source": source([run]),
            }
        )
    return out


def _duplicates(s: SampleRecord) -> str:
    return str(s.arm.duplicates or "forbid")


def _mangled_repeat(s: SampleRecord) -> bool:
    c = sample_continuation(s)
    return c.kind == "repeat" and c.key not in sample_context(s).present


def row_panel(spec: dict, rs: list[Run], runs: dict[str, Run]) -> list[dict]:
    out = []
    for run in rs:
        for model in sorted({s.arm.model for s in run.samples}):
            lo_ = l2(run, model=model, mode="loose")
            st = l2(run, model=model, mode="strict")
            keys = keys_of(lo_, ("invented", "schema_word", "repeat", "wrong_level"))
            vals = l3_values(run.probe, "p_continue", model=model, **full_variant({}))
            l3 = (
                f"; L3 P(continue after newText) mean {np.mean(list(vals.values())):.3f} over {few(len(vals))}"
                if vals
                else ""
            )
            out.append(
                {
                    "observation": f"E12 panel, {model}: what follows the gold newText",
                    "claim": spec.get("claim", ""),
                    "measured": f"loose: {kinds_text(lo_)}; strict: {kinds_text(st)}; keys (loose): "
                    f"{dict(keys.most_common(6))}{l3}. Interval: {CR}. A key counts only when ':' follows it.",
                    "verdict": "descriptive (verdict: the effect row of this model)",
                    "source": source([run]),
                }
            )
    return out


def row_noise(spec: dict, rs: list[Run], runs: dict[str, Run]) -> list[dict]:
    if not rs:
        return []
    run = rs[0]
    parts, rates = [], []
    for seed in sorted({s.seed for s in run.samples}):
        ss = distinct_draws([s for s in l2(run, mode="loose") if s.seed == seed])
        r = crate(ss, lambda s: sample_continuation(s).group == "continue")
        rates.append(r.rate)
        parts.append(f"seed {seed}: continue {r}")
    return [
        {
            "observation": "E10: noise floor (L2 loose continue rate, three seeds)",
            "claim": spec.get("claim", ""),
            "measured": "; ".join(parts) + f"; spread max-min {max(rates) - min(rates):.3f}. Interval: {CR}.",
            "verdict": "descriptive",
            "source": source(rs),
        }
    ]


def row_e11(spec: dict, rs: list[Run], runs: dict[str, Run]) -> list[dict]:
    if not rs:
        return []
    run = rs[0]
    measures: dict[str, Callable[[SampleRecord], bool]] = {
        "valid": lambda s: run.verdicts[s.key].verdict == "valid",
        "an invented key": lambda s: bool(run.verdicts[s.key].invented_keys),
    }
    arms: dict[str, list[SampleRecord]] = {}
    parts = []
    for label, pred in (
        ("with keywords", lambda a: bool(a.schema_extra)),
        ("without", lambda a: not a.schema_extra),
    ):
        arms[label] = distinct_draws([s for s in run.samples if not s.error and pred(s.arm)])
        rates = ", ".join(f"{name} {crate(arms[label], m)}" for name, m in measures.items())
        parts.append(f"{label}: {rates}")

    cmps = {
        name: paired_clusters(per_scenario(arms["with keywords"], m), per_scenario(arms["without"], m))
        for name, m in measures.items()
    }
    paired = "; ".join(f"{name}, with − without: {c}" for name, c in cmps.items())
    g = min(c.g for c in cmps.values())
    moved = [name for name, c in cmps.items() if c.direction()]
    verdict = (
        "descriptive (too few scenarios for a verdict)"
        if g < 10
        else "descriptive (unsourced claims with no comparison or size stated): "
        + (
            f"{', '.join(moved)} differ with the keywords shown"
            if moved
            else "the keywords move neither rate at this n"
        )
    )
    return [
        {
            "observation": "E11: minLength/maxLength shown in the schema (unsourced claims)",
            "claim": spec.get("claim", ""),
            "measured": "; ".join(parts) + f"; {PT}: {paired}. Interval: {CR}.",
            "verdict": verdict,
            "source": source(rs),
        }
    ]
