"""The study's findings: rows of FINDINGS.md built from the specs in experiments/ and their runs.

Driven by the specs: every ``experiments/*.toml`` with a ``[findings]`` table contributes one verdict
row per ``[[findings.effects]]`` (judged by ``tooldecode.findings.evaluate_effect`` against the run
that pairs the most scenarios) and the descriptive rows named in ``findings.rows`` (builders below,
fed with the runs whose manifest names that spec). Corpus rows (what the key after newText is, which
arms are copies) read every run. No run directory name appears here.
"""

from __future__ import annotations

import dataclasses
import math
import re
import sys
import tomllib
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from organism_rows import prediction_note, row_implant

from tooldecode.classify import CONTINUE_KINDS, EXTRA_OUTCOMES
from tooldecode.experiments.spec import as_list
from tooldecode.findings import (
    FindingsError,
    Run,
    arm_filter,
    crate,
    distinct_draws,
    evaluate_effect,
    full_variant,
    identical_arms,
    l3_values,
    row_measure,
    sample_continuation,
    sample_outcome,
)
from tooldecode.probe import decision_entropy
from tooldecode.stats import cluster_rate, interval_text, mean_ci, paired_clusters

ROOT = Path(__file__).resolve().parent
DEFAULT_MODEL = "qwen2.5-coder-0.5b-instruct"
KIND_ORDER = ("close", *CONTINUE_KINDS, "string_goes_on", "wrong_closer", "stray")
CR = "cluster-robust CR1 95% CI over scenarios"
PT = "paired over scenarios: t CI of the mean difference, sign-flip permutation p"


def per_scenario(samples: list[dict], pred: Callable[[dict], bool]) -> dict[str, float]:
    """Per scenario: the share of ``samples`` for which ``pred`` holds (the values a paired row compares)."""
    by: dict[str, list[bool]] = defaultdict(list)
    for s in samples:
        by[s["scenario"]].append(bool(pred(s)))
    return {k: float(np.mean(v)) for k, v in by.items()}


def few(g: int) -> str:
    return f"{g} scenarios" + (", fewer than 10 clusters" if g < 10 else "")


def run_model(run: Run) -> str:
    """The model a one-model run (a probe suite's) was made with."""
    return str(run.manifest.get("config", {}).get("model", "?"))


def runs_of(spec: str, runs: dict[str, Run]) -> list[Run]:
    return [r for r in runs.values() if r.spec == spec]


def source(rs: list[Run]) -> str:
    return "; ".join(f"{r.name}{' (git_dirty)' if r.git_dirty else ''}" for r in rs) or "-"


def _short(model: str) -> str:
    return model.replace("qwen2.5-coder-", "qwen-").replace("-instruct", "")


def l2(run: Run, **want: Any) -> list[dict]:
    return [s for s in arm_filter(run.samples, **want) if s["arm"].get("level") == "L2"]


def rerun_command(run: Run) -> str:
    """The run's command with a new folder: a rerun draws with per-scenario streams (the spec default)."""
    cmd = re.sub(rf"\s--out\s+\S*{re.escape(run.name)}\b/?", "", run.command())
    return cmd + f" --out runs/{run.name}-streams"


def redone_by(run: Run, runs: dict[str, Run]) -> list[str]:
    """Runs of the same spec and models drawn with per-scenario streams (reruns of a shared-stream run)."""
    models = {s["arm"].get("model") for s in run.samples}
    return sorted(
        o.name
        for o in runs.values()
        if o.spec == run.spec and o.samples and not o.shared_streams
        and models <= {s["arm"].get("model") for s in o.samples}
    )  # fmt: skip


def shared_streams_line(runs: dict[str, Run]) -> str:
    """The runs drawn with shared streams, each with the run that redid it or its rerun command."""
    parts = []
    for r in sorted((r for r in runs.values() if r.shared_streams), key=lambda r: r.name):
        redone = redone_by(r, runs)
        parts.append(
            f"{r.name} (rerun as {', '.join(redone)})" if redone else f"{r.name} (`{rerun_command(r)}`)"
        )
    if not parts:
        return ""
    return (
        "- Drawn with one random stream shared by every scenario (no cluster interval; their rows show counts "
        "only and pooled rows leave them out), to be rerun with per-scenario streams: "
        + "; ".join(parts)
        + "."
    )


def shared_note(run: Run, runs: dict[str, Run] | None = None) -> str:
    """Why a run's figures carry no interval, and the run that redid it with per-scenario streams or the
    command that would."""
    redone = redone_by(run, runs or {})
    again = (
        f"rerun with per-scenario streams as {', '.join(redone)}"
        if redone
        else f"rerun with per-scenario streams: `{rerun_command(run)}`"
    )
    return (
        f"No interval: {run.name} was drawn before per-scenario random streams (its manifest has no "
        '"streams": "scenario"), so every scenario shares one stream and scenarios are not independent '
        f"clusters; {again}."
    )


def kinds_text(samples: list[dict], kinds: tuple[str, ...] = KIND_ORDER) -> str:
    ss = distinct_draws(samples)
    if not ss:
        return "no samples"
    if any(s.get("_run_streams") for s in ss):
        cs = Counter(sample_continuation(s).kind for s in ss)
        g = len({s["scenario"] for s in ss})
        body = ", ".join(f"{k} {cs[k]}/{len(ss)}" for k in kinds if cs[k])
        return f"{len(ss)} distinct draws, {few(g)}: {body} (counts only)"
    cs = [sample_continuation(s) for s in ss]
    parts = []
    for k in kinds:
        if any(c.kind == k for c in cs):
            r = cluster_rate([c.kind == k for c in cs], [s["scenario"] for s in ss])
            parts.append(f"{k} {int(r.k)}/{r.n} = {100 * r.rate:.1f}% [{100 * r.lo:.1f}, {100 * r.hi:.1f}]")
    g = len({s["scenario"] for s in ss})
    return f"{len(ss)} distinct draws, {few(g)}: " + ", ".join(parts)


OUTCOME_WORDS = {
    "source_shaped": "source-shaped failure",
    "duplicate": "duplicate key",
    "derailment": "derailment",
    "extra_other": "other failure",
}


def outcomes_text(extra: list[dict]) -> str:
    """The outcomes of extra-key draws (``tooldecode.classify.EXTRA_OUTCOMES``) with cluster intervals."""
    if not extra:
        return "no extra key"
    outs = [sample_outcome(s) for s in extra]
    parts = []
    for o in EXTRA_OUTCOMES:
        if o in outs:
            r = crate(extra, lambda s, o=o: sample_outcome(s) == o)
            parts.append(f"{OUTCOME_WORDS[o]} {r}")
    return ", ".join(parts)


def keys_of(samples: list[dict], kinds: tuple[str, ...]) -> Counter:
    return Counter(
        c.key for c in (sample_continuation(s) for s in distinct_draws(samples)) if c.kind in kinds and c.key
    )


# ---------------------------------------------------------------------------------------------
# descriptive rows (named in a spec's findings.rows)


def row_l0_free(spec: dict, rs: list[Run], runs: dict[str, Run]) -> list[dict]:
    parts, dups = [], []
    for run in rs:
        dups += [" = ".join(g) for g in identical_arms([s for s in run.samples if not s.get("error")])]
        groups: dict[tuple, list[dict]] = defaultdict(list)
        for s in distinct_draws([s for s in run.samples if not s.get("error")]):
            a = s["arm"]
            groups[(a["model"], a["temperature"])].append(s)
        for (model, temp), ss in sorted(groups.items()):
            vs = [run.verdicts.get(s["key"], {}) for s in ss]
            ok = [
                v.get("tool") == "edit" and v.get("verdict") not in ("no_call", "json_syntax", "truncated")
                for v in vs
            ]
            r = cluster_rate(ok, [s["scenario"] for s in ss])
            wraps = Counter(v.get("wrapping") or "none" for v in vs)
            parts.append(
                f"{_short(model)} T={temp:g}: parseable edit call {int(r.k)}/{r.n} distinct draws "
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


def _mask_at_decision(s: dict) -> float | None:
    m = s.get("mask_removed")
    return float(m[0]) if m else None


def row_strict_cost(spec: dict, rs: list[Run], runs: dict[str, Run]) -> list[dict]:
    """Strict's cost: with the ',' branch masked the string goes on (the payload is corrupted)."""
    out = []
    pool = [
        r
        for r in runs.values()
        if l2(r, mode="strict", model=DEFAULT_MODEL)
        and l2(r, mode="loose", model=DEFAULT_MODEL)
        # one strict channel per row: a run with several engine settings (open grammars among them,
        # E15) has its own table (docs/engines.md)
        and len({s["arm"].get("engine") for s in l2(r, mode="strict", model=DEFAULT_MODEL)}) == 1
    ]
    for run in sorted(pool, key=lambda r: r.name):
        st = distinct_draws(l2(run, mode="strict", model=DEFAULT_MODEL))
        lo = distinct_draws(l2(run, mode="loose", model=DEFAULT_MODEL))

        def goes_on(s: dict) -> bool:
            return sample_continuation(s).kind == "string_goes_on"

        if run.shared_streams:
            k_s, k_l = sum(map(goes_on, st)), sum(map(goes_on, lo))
            out.append(
                {
                    "observation": "Strict's cost: with the ',' branch masked, the newText string goes on (payload corrupted)",
                    "claim": "Grammar masking removes the ',' branch when the object is closed; the mass that wanted "
                    "to continue must go somewhere (docs/background.md).",
                    "measured": f"{_short(DEFAULT_MODEL)} L2 after the gold newText, string goes on: strict "
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
                "measured": f"{_short(DEFAULT_MODEL)} L2 after the gold newText, string goes on: strict {rs_} vs "
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
    probe_runs = [r for r in runs.values() if r.spec == "e5-close-brace"]
    if not rs or not probe_runs:
        return []
    e1, e5 = rs[0], probe_runs[0]
    ss = distinct_draws(l2(e1, mode="loose", model=DEFAULT_MODEL))
    sampled = per_scenario(ss, lambda s: sample_continuation(s).group == "continue")
    exact = {}
    for r in e5.probe:
        if r.get("after") == "newText" and r.get("scenario") in sampled:
            # the L2 cut is after the last item's newText
            if r.get("item_index") in (None, r.get("n_items", 1) - 1):
                exact[r["scenario"]] = float(r["p_continue"])
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


def _calls(rows: list[dict]) -> dict[tuple, list[dict]]:
    calls: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        calls[(r.get("model"), r.get("variant_label"), r["scenario"])].append(r)
    return calls


def row_entropy(spec: dict, rs: list[Run], runs: dict[str, Run]) -> list[dict]:
    if not rs or not rs[0].probe:
        return []
    run = rs[0]
    tok: dict[str, list[float]] = defaultdict(list)
    dec: dict[str, list[float]] = defaultdict(list)
    arg_tok = arg_dec = 0
    calls = _calls(run.probe)
    for pts in calls.values():
        for p in pts:
            tok[p["after"]].append(float(p["entropy"]))
            dec[p["after"]].append(decision_entropy(p["p_close"], p["p_continue"], p["p_other"]))
        arg_tok += max(pts, key=lambda p: p["entropy"])["after"] == "newText"
        arg_dec += (
            max(pts, key=lambda p: decision_entropy(p["p_close"], p["p_continue"], p["p_other"]))["after"]
            == "newText"
        )
    n = len(calls)

    def table(d: dict[str, list[float]]) -> str:
        items = sorted(d.items(), key=lambda kv: -np.mean(kv[1]))[:5]
        return ", ".join(f"{k} {np.mean(v):.3f} (n={len(v)})" for k, v in items)

    rt = cluster_rate([1] * arg_tok + [0] * (n - arg_tok), list(range(n))) if n else None
    rd = cluster_rate([1] * arg_dec + [0] * (n - arg_dec), list(range(n))) if n else None
    return [
        {
            "observation": "E5: is the decision after newText the highest-entropy point of the call?",
            "claim": spec.get("claim", "") + " (docs/background.md: the highest-entropy point of the call)",
            "measured": f"{n} calls (one per scenario). Token entropy (nats), mean by decision: {table(tok)}; "
            f"argmax at a newText decision in {arg_tok}/{n} calls [{100 * rt.lo:.0f}, {100 * rt.hi:.0f}]%. "
            f"Decision-level entropy (close / continue / other): {table(dec)}; argmax at a newText decision in "
            f"{arg_dec}/{n} calls [{100 * rd.lo:.0f}, {100 * rd.hi:.0f}]% (Wilson, one call per scenario).",
            "verdict": "descriptive: by the decision itself newText is "
            + (
                "the highest on average"
                if max(dec, key=lambda k: np.mean(dec[k])) == "newText"
                else "not the highest"
            )
            + "; token entropy mixes positions shared by several decision points",
            "source": source(rs),
        }
    ]


def row_items(spec: dict, rs: list[Run], runs: dict[str, Run]) -> list[dict]:
    if not rs or not rs[0].probe:
        return []
    first, last = {}, {}
    single = []
    for pts in _calls(rs[0].probe).values():
        nt = [p for p in pts if p["after"] == "newText"]
        if len(nt) >= 2:
            first[nt[0]["scenario"]] = float(nt[0]["p_continue"])
            last[nt[-1]["scenario"]] = float(nt[-1]["p_continue"])
        elif nt:
            single.append(float(nt[0]["p_continue"]))
    cmp = paired_clusters(first, last)
    m, lo, hi = mean_ci(single) if len(single) > 1 else (math.nan, math.nan, math.nan)
    return [
        {
            "observation": "E5: P(continue) after the first vs the last item's newText, within multi-item calls",
            "claim": "The stray key is the last key of edits[0] (docs/background.md); the first probe found "
            "P(continue) higher after the first item of a two-edit call than after the last.",
            "measured": f"first vs last item: {cmp} ({PT}); single-item calls apart: mean {m:.3f} "
            f"[{lo:.3f}, {hi:.3f}] (t, n={len(single)})",
            "verdict": "reproduces (direction)" if cmp.lo > 0 else "inconclusive",
            "source": source(rs),
        }
    ]


def row_open_grammar(spec: dict, rs: list[Run], runs: dict[str, Run]) -> list[dict]:
    out = []
    for run in rs:
        parts, mangled = [], {}
        arms: list[tuple[str, list[dict]]] = [("loose", l2(run, mode="loose"))]
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


def _duplicates(s: dict) -> str:
    return str(s["arm"].get("duplicates", "forbid"))


def _mangled_repeat(s: dict) -> bool:
    from tooldecode.findings import sample_context

    c = sample_continuation(s)
    return c.kind == "repeat" and c.key not in sample_context(s).present


def row_panel(spec: dict, rs: list[Run], runs: dict[str, Run]) -> list[dict]:
    out = []
    for run in rs:
        for model in sorted({s["arm"]["model"] for s in run.samples}):
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
    for seed in sorted({s.get("seed") for s in run.samples}):
        ss = distinct_draws([s for s in l2(run, mode="loose") if s.get("seed") == seed])
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


def probe_runs_by_model(rs: list[Run]) -> list[tuple[str, Run]]:
    """Per model, the run of ``rs`` whose probe rows cover the most scenarios for it (a clean run first)."""
    best: dict[str, tuple[tuple, Run]] = {}
    for run in rs:
        for m in sorted({r.get("model", "") for r in run.probe}):
            key = (run.git_dirty is False, len({r["scenario"] for r in run.probe if r.get("model") == m}))
            if m not in best or key > best[m][0]:
                best[m] = (key, run)
    return [(m, best[m][1]) for m in sorted(best)]


def _copies(rows: list[dict], field: str) -> dict[str, str]:
    """Values of ``field`` whose probe rows are copies (same prompt bytes) of another value's, in every
    scenario where both were probed: value -> the value it copies."""
    seen: dict[str, set[str]] = defaultdict(set)
    for r in rows:
        v = full_variant(r.get("variant")).get(field)
        src = r.get("same_prompt_as")
        seen[str(v)].add(src.split(f"{field}=")[1].split(",")[0] if src and f"{field}=" in src else "")
    return {v: next(iter(s)) for v, s in seen.items() if len(s) == 1 and "" not in s}


def row_wire(spec: dict, rs: list[Run], runs: dict[str, Run]) -> list[dict]:
    out = []
    for model, run in probe_runs_by_model(rs):
        rows = [r for r in run.probe if r.get("model") == model]
        copies = _copies(rows, "call_format")
        parts, differs = [], []
        for measure in ("extra_key", "p_continue"):
            base = l3_values(rows, measure, call_format="native")
            for fmt in ("hermes", "antml", "harmony", "json"):
                if fmt in copies:
                    if measure == "p_continue":
                        parts.append(f"{fmt}: the same prompt and call bytes as {copies[fmt]}, probed once")
                    continue
                v = l3_values(rows, measure, call_format=fmt)
                if v and base:
                    cmp = paired_clusters(v, base)
                    name = "P(extra key)" if measure == "extra_key" else "P(continue)"
                    parts.append(f"{name} {fmt} − native: {cmp}")
                    if cmp.direction():
                        differs.append(f"{fmt} ({name})")
        if not parts:
            continue
        out.append(
            {
                "observation": f"E6: wire format as a variable, {_short(model)} (L3 after newText)",
                "claim": spec.get("claim", ""),
                "measured": "; ".join(parts) + f" ({PT})",
                "verdict": "descriptive: "
                + (
                    f"{', '.join(differs)} differ from native"
                    if differs
                    else "no format differs from native at this n"
                ),
                "source": source([run]),
            }
        )
    return out


def row_shape(spec: dict, rs: list[Run], runs: dict[str, Run]) -> list[dict]:
    out = []
    for model, run in probe_runs_by_model(rs):
        rows = [r for r in run.probe if r.get("model") == model]
        parts = []
        for ts, after in (("nested", "newText"), ("flat-edit", "new_string"), ("multiedit", "new_string")):
            for measure, name in (("extra_key", "P(extra key"), ("p_continue", "P(continue")):
                vals = l3_values(rows, measure, after=after, toolset=ts)
                if vals:
                    m, lo, hi = mean_ci(list(vals.values()))
                    parts.append(
                        f"{ts}: {name} after {after}) mean {m:.3f} [{lo:.3f}, {hi:.3f}] (t, {few(len(vals))})"
                    )
        # the shapes side by side: P(extra key) of each flat shape against the nested one, paired over scenarios
        nested = l3_values(rows, "extra_key", after="newText", toolset="nested")
        differs, paired = [], False
        for ts in ("flat-edit", "multiedit"):
            v = l3_values(rows, "extra_key", after="new_string", toolset=ts)
            if v and nested and len(set(v) & set(nested)) >= 2:
                cmp = paired_clusters(v, nested)
                parts.append(f"P(extra key) {ts} − nested: {cmp}")
                paired = True
                if d := cmp.direction():
                    differs.append(f"{ts} {'fewer' if d < 0 else 'more'}")
        if not parts:
            continue
        out.append(
            {
                "observation": f"E4: tool shape (nested edits[] vs flat Edit vs MultiEdit), {_short(model)}",
                "claim": spec.get("claim", ""),
                "measured": "; ".join(parts)
                + " (extra key: a key the object must not get; flat Edit's replace_all is declared, so it is not one"
                + (f"; {PT})" if paired else ")"),
                "verdict": "descriptive (flat Edit legitimately allows replace_all after new_string): "
                + (
                    f"extra keys differ from the nested shape: {', '.join(differs)}"
                    if differs
                    else "no shape's extra keys differ from the nested one at this n"
                ),
                "source": source([run]),
            }
        )
    return out


def row_e11(spec: dict, rs: list[Run], runs: dict[str, Run]) -> list[dict]:
    if not rs:
        return []
    run = rs[0]
    measures: dict[str, Callable[[dict], bool]] = {
        "valid": lambda s: run.verdicts.get(s["key"], {}).get("verdict") == "valid",
        "an invented key": lambda s: bool(run.verdicts.get(s["key"], {}).get("invented_keys")),
    }
    arms: dict[str, list[dict]] = {}
    parts = []
    for label, pred in (
        ("with keywords", lambda a: bool(a.get("schema_extra"))),
        ("without", lambda a: not a.get("schema_extra")),
    ):
        arms[label] = distinct_draws([s for s in run.samples if not s.get("error") and pred(s["arm"])])
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


def row_echo(spec: dict, rs: list[Run], runs: dict[str, Run]) -> list[dict]:
    out = []
    for run in rs:
        parts = []
        for var in spec.get("variants", []):
            view = var.get("tool_view", "as-written")
            vals = {
                m: l3_values(run.probe, m, tool_view=view)
                for m in ("key:required", "kind:schema_word", "extra_key", "p_continue")
            }
            if not vals["p_continue"]:
                continue
            g = len(vals["p_continue"])
            parts.append(
                f'{view} ({few(g)}): P("required") {np.mean(list(vals["key:required"].values())):.3f}, '
                f"P(schema word) {np.mean(list(vals['kind:schema_word'].values())):.3f}, "
                f"P(extra key) {np.mean(list(vals['extra_key'].values())):.3f}, "
                f"P(continue) {np.mean(list(vals['p_continue'].values())):.3f}"
            )
        total = len(run.manifest.get("config", {}).get("scenarios", []))
        out.append(
            {
                "observation": "Where the echo comes from: P(key after newText) by how the tool block is shown, "
                + _short(run_model(run)),
                "claim": spec.get("claim", ""),
                "measured": "means over scenarios of the exact probe after the last item's newText: "
                + "; ".join(parts)
                + f" (of {total} scenarios in the run's order; P(\"required\") is read from the probe's 12 most "
                "probable key strings, a lower bound; the verdicts are the effect rows)",
                "verdict": "descriptive",
                "source": source([run]),
            }
        )
    return out


def row_transcripts(spec: dict, rs: list[Run], runs: dict[str, Run]) -> list[dict]:
    """Per model: the exact probe after newText under each transcript variant (every scenario paired),
    and the first vs the last item of multi-item calls in the baseline."""
    out = []
    for run in sorted(rs, key=run_model):
        model = run_model(run)
        parts = []
        for var in spec.get("variants", []):
            want = {k: v for k, v in var.items() if k not in ("name", "tool_view")}
            vals = {m: l3_values(run.probe, m, **want) for m in ("extra_key", "p_continue", "p_close")}
            if not vals["p_continue"]:
                continue
            g = len(vals["p_continue"])
            ek = list(vals["extra_key"].values())
            parts.append(
                f"{var['name']} ({few(g)}): P(extra key) {np.mean(ek) if ek else math.nan:.3f}, "
                f"P(continue) {np.mean(list(vals['p_continue'].values())):.3f}, "
                f"P(close) {np.mean(list(vals['p_close'].values())):.3f}"
            )
        if not parts:
            continue
        base = [r for r in run.probe if r.get("after") == "newText" and not r.get("variant")]
        first = {
            r["scenario"]: float(r["p_continue"])
            for r in base
            if r.get("n_items", 1) > 1 and r.get("item_index") == 0
        }
        last = {
            r["scenario"]: float(r["p_continue"])
            for r in base
            if r.get("n_items", 1) > 1 and r.get("item_index") == r.get("n_items", 1) - 1
        }
        items = ""
        if len(set(first) & set(last)) >= 2:
            cmp = paired_clusters(
                {s: first[s] for s in set(first) & set(last)}, {s: last[s] for s in set(first) & set(last)}
            )
            items = f"; as written, P(continue) after the first vs the last item of multi-item calls: {cmp} ({PT})"
        total = len(run.manifest.get("config", {}).get("scenarios", []))
        out.append(
            {
                "observation": f"Transcript variants, {_short(model)}: the exact probe after newText (first and last item)",
                "claim": spec.get("claim", ""),
                "measured": "means over scenarios of the per-scenario mean over the first and the last item: "
                + "; ".join(parts)
                + items
                + f" (of {total} scenarios in the run's order; the verdicts are the E2, E3, E8 and E9 effect rows)",
                "verdict": "descriptive",
                "source": source([run]),
            }
        )
    return out


ROWS: dict[str, Callable[[dict, list[Run], dict[str, Run]], list[dict]]] = {
    "l0_free": row_l0_free,
    "strict_cost": row_strict_cost,
    "implant": row_implant,
    "agreement": row_agreement,
    "entropy": row_entropy,
    "items": row_items,
    "open_grammar": row_open_grammar,
    "panel": row_panel,
    "noise": row_noise,
    "wire": row_wire,
    "shape": row_shape,
    "e11": row_e11,
    "echo": row_echo,
    "transcripts": row_transcripts,
}


# ---------------------------------------------------------------------------------------------
# corpus rows


def row_zoo(runs: dict[str, Run]) -> dict | None:
    pool: list[dict] = []
    used = []
    left_out = []
    for run in sorted(runs.values(), key=lambda r: r.name):
        ss = l2(run, mode="loose", model=DEFAULT_MODEL)
        if ss and run.shared_streams:
            left_out.append(run.name)
        elif ss:
            pool += ss
            used.append(run)
    pool = distinct_draws(pool)
    if not pool:
        return None
    cont = [s for s in pool if sample_continuation(s).group == "continue"]
    keys = keys_of(cont, ("repeat", "wrong_level", "schema_word", "invented"))
    extra = [
        s for s in cont if sample_continuation(s).kind in ("repeat", "wrong_level", "schema_word", "invented")
    ]
    inv = crate(extra, lambda s: sample_continuation(s).kind == "invented") if extra else None
    src = crate(extra, lambda s: sample_outcome(s) == "source_shaped") if extra else None
    dup = crate(extra, lambda s: sample_outcome(s) == "duplicate") if extra else None
    if inv is None:
        verdict = "not measured: no extra key in the pooled draws"
    elif inv.hi < 0.5:
        verdict = (
            f"contradicts: invented names are {inv} of the extra keys; the rest repeat a present key "
            "or copy a word of the tool schema"
        )
    elif inv.lo > 0.5:
        verdict = f"reproduces: invented names are {inv} of the extra keys"
    else:
        verdict = f"inconclusive: invented names are {inv} of the extra keys"
    return {
        "observation": "What follows newText when the model continues: a zoo of invented names, a repeat, or the schema's words?",
        "claim": "The source's calls carried ~40 distinct invented keys, always trailing after newText "
        "(docs/background.md): the model has no name for the extra field and samples one each time.",
        "measured": f"{_short(DEFAULT_MODEL)}, every L2 loose draw of the committed runs, copies removed "
        f"({len(pool)} distinct draws; arms differ in history, thinking, prior, schema view and seed): "
        f"{kinds_text(pool)}. Keys (repeat / wrong level / schema word / invented): {dict(keys.most_common(12))}. "
        f"What the call does after an extra key: {outcomes_text(extra)}. Interval: {CR}."
        + (
            f" Left out (shared random streams, no cluster interval): {', '.join(left_out)}."
            if left_out
            else ""
        ),
        "verdict": verdict,
        "source": source(used),
        "headline": f"invented names: {inv} of {len(extra)} extra keys" if inv else "no extra key",
        "headline_source": f"source-shaped: {src} of the extra keys; duplicates {dup}"
        if extra
        else "no extra key",
        "headline_source_verdict": "descriptive",
        "summary": f"what follows newText when {_short(DEFAULT_MODEL)} continues ({len(pool)} distinct loose "
        f"draws): **{verdict}**",
    }


def row_duplicates(runs: dict[str, Run]) -> dict:
    parts = []
    used = []
    pooled: list[dict] = []
    for run in sorted(runs.values(), key=lambda r: r.name):
        ss = [s for s in run.samples if not s.get("error")]
        if not ss:
            continue
        pooled += [dict(s, arm={**s["arm"], "run": run.name}) for s in ss]
        groups = identical_arms(ss)
        d = len(distinct_draws(ss))
        if groups or d < len(ss):
            used.append(run)
            g = "; ".join(" = ".join(x) for x in groups)
            parts.append(
                f"{run.name}: {d} distinct of {len(ss)} samples" + (f" (identical arms: {g})" if g else "")
            )
    across = [g for g in identical_arms(pooled) if len({x.split("run=")[1].split(",")[0] for x in g}) > 1]
    cross = "; ".join(
        " = ".join(sorted({x.split("run=")[1].split(",")[0] + ":" + _arm_short(x) for x in g}))
        for g in across
    )
    total = len(distinct_draws(pooled))
    return {
        "observation": "Copies: arms whose prompts render byte-identically, and repeated T=0 draws",
        "claim": "Pooled figures count distinct draws (docs/report.md).",
        "measured": "; ".join(parts)
        + (
            f". Across runs, the same arm under different names (run once, reported once): {cross}"
            if cross
            else ""
        )
        + f". All runs: {total} distinct draws of {len(pooled)} samples.",
        "verdict": "descriptive (every figure above counts distinct draws)",
        "source": source(used),
    }


_STRICT_MODES = ("strict", "strict-spec", "strict-aligned")


def row_repair(runs: dict[str, Run]) -> dict | None:
    """Lenient side as tolerant clients get it: loose calls failing strict validation, repaired by the
    project's own repairs and by json-repair; rescued (valid, payload byte-correct) vs silent corruption
    (valid-looking, payload cut or wrong), per model, over the distinct draws of every committed run."""
    from tooldecode.repair import json_repair_row, json_repair_version, repair_record

    per: dict[str, list[dict]] = defaultdict(list)
    used: list[Run] = []
    left_out: list[str] = []
    for run in sorted(runs.values(), key=lambda r: r.name):
        loose = [s for s in run.samples if s["arm"].get("mode") == "loose" and not s.get("error")]
        loose = [s for s in loose if s["arm"].get("backend", "llamacpp") != "openai"]
        if not loose:
            continue
        if run.shared_streams:
            left_out.append(run.name)
            continue
        used.append(run)
        for s in loose:
            own = repair_record(s, run.manifest)
            if "skipped" in own or own["strict_verdict"] == "valid":
                continue
            jr = json_repair_row(s, run.manifest)
            per[str(s["arm"].get("model"))].append(
                dict(s, own_ok=own["valid"] and own["payload_ok"], own_bad=own["valid"] and not own["payload_ok"],
                     jr_ok=jr["valid"] and jr["payload_ok"], jr_bad=jr["valid"] and not jr["payload_ok"])
            )  # fmt: skip
    if not per:
        return None
    parts = []
    head = ""
    for model, rows in sorted(per.items()):
        n = len(distinct_draws(rows))
        if model == DEFAULT_MODEL:
            head = (
                f"{_short(model)}: json-repair rescues {crate(rows, lambda r: r['jr_ok'])} of {n} failing loose "
                f"calls and silently corrupts {crate(rows, lambda r: r['jr_bad'])}"
            )
        parts.append(
            f"{_short(model)} ({n} failing loose calls): json-repair rescues {crate(rows, lambda r: r['jr_ok'])}, "
            f"silently corrupts {crate(rows, lambda r: r['jr_bad'])}; own repairs rescue "
            f"{crate(rows, lambda r: r['own_ok'])}, corrupt {crate(rows, lambda r: r['own_bad'])}"
        )
    return {
        "observation": "Loose + repair as tolerant clients run it: does json-repair rescue the loose calls that fail?",
        "claim": "A lenient harness can rescue what the model gets wrong (JSON syntax: brackets in the wrong "
        "number or order) instead of constraining decoding; a repair that produces a valid-looking call "
        "with a cut or wrong payload is a silent corruption, not a rescue.",
        "measured": "; ".join(parts)
        + f" (json-repair {json_repair_version()}; every committed run's loose draws, "
        f"copies removed). Interval: {CR}. `python experiments/e15_repair.py` prints the same per model with "
        "strict decoding's valid + payload-correct rate beside it."
        + (
            f" Left out (shared random streams, no cluster interval): {', '.join(left_out)}."
            if left_out
            else ""
        ),
        "verdict": "descriptive (rescues and silent corruptions counted separately above)",
        "headline": head,
        "source": source(used),
    }


def _arm_short(label: str) -> str:
    keep = [
        p
        for p in label.split(",")
        if p.split("=")[0] in ("history", "thinking", "prior", "schema_view", "mode", "seed")
    ]
    return ",".join(p for p in keep if not p.startswith("run="))


# ---------------------------------------------------------------------------------------------
# assembly


def load_specs(root: Path = ROOT) -> list[tuple[str, dict]]:
    """(file stem, spec) of every spec with a ``[findings]`` table, in suite order."""
    out = []
    for p in sorted(
        root.glob("*.toml"),
        key=lambda p: (p.stem[0], int("".join(c for c in p.stem.split("_")[0][1:] if c.isdigit()) or 0)),
    ):
        spec = tomllib.loads(p.read_text(encoding="utf-8"))
        if "findings" in spec:
            out.append((p.stem, spec))
    return out


def spec_effects(spec: dict) -> list[dict]:
    """The spec's claimed effects, one per model: an effect with ``models = [...]`` is judged on each
    model apart (its label names the model); ``model = "..."`` names one."""
    out = []
    for eff in spec["findings"].get("effects", []):
        models = eff.get("models")
        if not models:
            out.append(eff)
            continue
        for m in models:
            one = {k: v for k, v in eff.items() if k != "models"}
            out.append(dict(one, model=m, label=f"{_short(m)}: {eff.get('label', '')}"))
    return out


def effect_rows(stem: str, spec: dict, runs: dict[str, Run]) -> list[dict]:
    out = []
    for eff in spec_effects(spec):
        try:
            res = evaluate_effect(eff, runs, where=f"experiments/{stem}.toml")
        except FindingsError as err:
            if any(r.spec == spec["name"] for r in runs.values()):
                raise
            res = None  # a spec not yet run whose claim this version cannot read: listed as not measured
            print(f"findings: {err} (no run yet; listed as not measured)", file=sys.stderr)
        claim = (
            f"{spec.get('claim', '')} Claimed effect: {eff.get('label')}: "
            + (
                f"{eff.get('bound', '') + ' ' if eff.get('bound') else ''}"
                f"{'×' if eff.get('scale', 'ratio') == 'ratio' else ''}{eff['size']}"
                if "size" in eff
                else eff.get("direction", "")
            )
            + f" (a / b on the {eff.get('scale', 'ratio')} scale). Source: {eff.get('source', '')} Translation: {eff.get('translation', '')}"
            + prediction_note(stem, spec, res.run if res is not None else None)
        )
        if res is None:
            out.append(
                {
                    "observation": f"{spec['name']}: {eff.get('label')}",
                    "claim": claim,
                    "measured": "not measured: no committed run has both arms of this comparison (rerun needed)",
                    "verdict": "not measured",
                    "source": f"experiments/{stem}.toml",
                    "summary": f"{eff.get('label')}: not measured",
                }
            )
            continue
        out.append(
            {
                "observation": f"{spec['name']}: {eff.get('label')}",
                "claim": claim,
                "source": source([res.run]),
                "_result": res,
                "_check": instrument_check(eff, res),
            }
        )
    return out


KEY_MEASURES = (
    "extra_key",
    "kind:invented+schema_word",
    "kind:invented",
    "kind:schema_word",
    "source_shaped",
)


def instrument_check(eff: dict, res: Any) -> str | None:
    """The instrument check an effect row is, if any: arm ``a`` decodes with the closed grammar (mode
    ``strict``, no open engine named) and the measure counts keys after newText, which that grammar
    cannot write. None for every other row."""
    a = {**eff.get("where", {}), **eff["a"]}
    if eff.get("level") != "L2" or a.get("mode") != "strict" or a.get("engine"):
        return None
    if eff.get("measure") not in KEY_MEASURES:
        return None
    written = (
        "no key" if res.cmp.mean_a == 0 else f"keys in {res.cmp.mean_a:.3f} of the draws (the check fails)"
    )
    return f"a closed grammar cannot write a key after newText; its arm wrote {written}"


def finish_effect_rows(rows: list[dict]) -> int:
    """Judge every effect row against its claim with Holm's correction across the family of effect
    rows that test a claim (instrument checks and rows without an interval or a premise excluded);
    fill their measured, verdict and summary cells. Returns the family's size."""
    from tooldecode.stats import BY_CONSTRUCTION, PREMISE_ABSENT, by_construction, holm

    eff = [r for r in rows if "_result" in r]
    tested = [
        r
        for r in eff
        if r["_check"] is None
        and r["_result"].verdict.verdict != PREMISE_ABSENT
        and not math.isnan(r["_result"].verdict.lo)
    ]
    adjusted = holm([r["_result"].cmp.p_sign_flip for r in tested])
    for r, padj in zip(tested, adjusted, strict=True):
        r["_result"] = r["_result"].rejudged(padj)
    for r in eff:
        res = r.pop("_result")
        check = r.pop("_check")
        if check is not None and res.verdict.verdict != PREMISE_ABSENT:
            res = dataclasses.replace(res, verdict=by_construction(res.verdict, check))
        r["measured"] = res.measured() + f". Interval: {res.cmp.kind}; ratio: cluster-robust delta method."
        r["verdict"] = str(res.verdict)
        r["summary"] = f"{res.label}: {res.short()}"
        r["result"] = res
        assert (
            res.verdict.verdict != "reproduces"
            or res.claim.size is None
            or (res.verdict.lo <= res.claim.size <= res.verdict.hi)
        ), r["observation"]
        assert res.verdict.verdict != BY_CONSTRUCTION or "instrument check:" in r["verdict"]
    return len(tested)


def build_rows(runs: dict[str, Run], root: Path = ROOT) -> list[dict]:
    """Every row of FINDINGS.md, in suite order, then the corpus rows."""
    rows: list[dict] = []
    for stem, spec in load_specs(root):
        rs = runs_of(spec["name"], runs)
        rows += effect_rows(stem, spec, runs)
        for name in spec["findings"].get("rows", []):
            if name not in ROWS:
                raise KeyError(
                    f"experiments/{stem}.toml: findings row {name!r} unknown; known: {', '.join(ROWS)}"
                )
            rows += ROWS[name](spec, rs, runs)
    zoo = row_zoo(runs)
    if zoo:
        rows.append(zoo)
    repair = row_repair(runs)
    if repair:
        rows.append(repair)
    rows.append(row_duplicates(runs))
    FAMILY[0] = finish_effect_rows(rows)
    return rows


FAMILY = [0]  # the size of the last build's Holm family (for the preamble)


def provenance(runs: dict[str, Run]) -> str:
    """Which runs the table reads, their commit and whether the tree was dirty."""
    lines = []
    for r in sorted(runs.values(), key=lambda r: r.name):
        t = r.manifest.get("tooldecode", {})
        n = len(r.samples)
        lines.append(
            f"- `{r.name}` (spec {r.spec}): {n} samples, {len(r.probe)} probe rows; commit "
            f"{str(t.get('git_sha', '?'))[:10]}, git_dirty: {str(t.get('git_dirty')).lower()}"
        )
    return "\n".join(lines)


__all__ = ["ROWS", "build_rows", "load_specs", "provenance", "row_measure", "spec_effects", "summary"]


def reruns(rows: list[dict], runs: dict[str, Run], root: Path = ROOT) -> str:
    """What the table still needs, computed from the rows and the runs' manifests."""
    out = []
    dirty = sorted(r.name for r in runs.values() if r.git_dirty)
    if dirty:
        out.append(
            f"- Made from a tree with uncommitted changes (`git_dirty: true`), to be rerun from a clean commit: "
            f"{', '.join(dirty)}."
        )
    out.append(shared_streams_line(runs))  # empty when none (dropped below)
    missing = [r["observation"] for r in rows if r["verdict"] == "not measured"]
    if missing:
        out.append(f"- Claimed effects with no run that pairs both arms: {'; '.join(missing)}.")
    small = [
        str(i)
        for i, r in enumerate(rows, 1)
        if "fewer than 10 clusters" in r["measured"] and r["verdict"] != "not measured"
    ]
    if small:
        out.append(
            f"- Figures from fewer than 10 scenarios ({len(small)} rows: {', '.join(small)}): "
            "rerun over ≥ 18 scenarios."
        )
    for r in sorted(runs.values(), key=lambda r: r.name):
        want = r.expected_samples
        if 0 < len(r.samples) < want:
            begun = len({s["scenario"] for s in r.samples})
            total = len(r.manifest.get("config", {}).get("scenarios", []))
            out.append(
                f"- {r.name}: {len(r.samples)} of {want} samples ({begun} of {total} scenarios begun); its figures "
                f"cover only those. Resume from its commit: `git worktree add DIR {r.git_sha[:10]}`, then in DIR "
                f"`{r.command()}` with this run folder at `runs/{r.name}`."
            )
    for stem, spec in load_specs(root):
        if "variants" in spec or spec.get("name", "").startswith("e15"):
            continue  # the probe suites: below; E15's runs go one per model, see docs/engines.md
        want = spec.get("max_scenarios") or 36
        probe = spec.get("probe", {})
        # a probe-only spec's scenario is done when every variant (the product of its fields) has rows
        n_variants = math.prod(len(as_list(probe[f])) for f in probe.get("fields", []))
        for m in spec.get("models", []):
            got = max(
                (
                    _probed_in_full(run.probe, m, n_variants)
                    if probe.get("only")
                    else len({s["scenario"] for s in run.samples if s["arm"].get("model") == m})
                    for run in runs_of(spec["name"], runs)
                    if run.git_dirty is False
                ),
                default=0,
            )
            if got < want:
                out.append(
                    f"- {spec['name']} on {m}: {got} of {want} scenarios in a run from a clean commit "
                    f"(`tooldecode run experiments/{stem}.toml --out runs/{spec['name']}-{want}`)."
                )
    for stem, spec in load_specs(root):
        if "variants" not in spec:
            continue
        rs = runs_of(spec["name"], runs)
        for m in spec.get("models", []):
            mine = [r for r in rs if r.manifest.get("config", {}).get("model") == m]
            n = len({r["scenario"] for run in mine for r in run.probe})
            total = len(mine[0].manifest.get("config", {}).get("scenarios", [])) if mine else 36
            if mine and n < total:
                out.append(
                    f"- {spec['name']} on {m}: {n} of {total} scenarios probed (resume: `{mine[0].command()}`)."
                )
            elif not mine:
                out.append(
                    f"- {spec['name']} on {m}: not run (`python scripts/probe_suite.py experiments/{stem}.toml "
                    f"--out runs/{spec['name']}-{m} --model {m}`)."
                )
    return "\n".join(line for line in out if line)


def _probed_in_full(rows: list[dict], model: str, n_variants: int) -> int:
    """Scenarios whose probe rows for ``model`` cover ``n_variants`` variants (copies count: they are rows)."""
    labels: dict[str, set[str]] = defaultdict(set)
    for r in rows:
        if r.get("model") == model:
            labels[r["scenario"]].add(r.get("variant_label", ""))
    return sum(len(v) >= n_variants for v in labels.values())


def summary(rows: list[dict]) -> str:
    """The README's short account, generated from the rows: every claimed effect measured (with its
    verdict) and the descriptive rows that carry a summary; effects not yet measured are counted."""
    lines, rest = [], Counter()
    for i, r in enumerate(rows, 1):
        if "summary" not in r:
            continue
        verdict = str(r["verdict"])
        if verdict.startswith("not measured"):
            rest["not measured (no committed run pairs both arms)"] += 1
            continue
        lines.append(f"- {r['summary']} (FINDINGS row {i})")
    tail = ", ".join(f"{n} {k}" for k, n in sorted(rest.items()))
    if tail:
        lines.append(f"- Other claimed effects: {tail}; FINDINGS lists what remains to rerun.")
    return "\n".join(lines)
