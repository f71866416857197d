"""Findings: each observation of the background brief, measured from stored runs (no model loaded).

``build_findings(runs_dir)`` reads the runs of the experiment suite, computes every figure with its
sample size and 95% interval, and returns rows ``{observation, claim, measured, verdict, command}``;
``write_findings`` renders them as ``FINDINGS.md``. Missing runs give an "not run" row, never a
made-up number.

Events measured from samples:
- L2 continuation (``continuation_class``): the sample starts right after the gold ``newText``'s
  content; ``"`` then ``,`` is *continue* (what follows the comma is classified: a key name, a next
  item), ``"`` then ``}`` is *close*, anything else (the string goes on) is *other*.
- verdicts from ``tooldecode.scoring`` (invented keys with JSON paths, payload checks).
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tooldecode.stats import (
    Rate,
    cluster_bootstrap_diff,
    cluster_bootstrap_rate,
    mean_ci,
    newcombe_diff,
    wilson,
)

_KEY = re.compile(r'^\s*,\s*"((?:[^"\\]|\\.)*)"')


def continuation_class(text: str) -> tuple[str, str | None]:
    """What an L2 sample does right after the forced newText content: (class, detail)."""
    if not text.startswith('"'):
        return "other", None
    rest = text[1:].lstrip(" \t\r\n")
    if rest.startswith(","):
        m = _KEY.match(rest)
        if m:
            return "continue", m.group(1)
        if re.match(r"^\s*,\s*[{\[]", rest):
            return "continue", "<next item>"
        return "continue", "<other>"
    if rest.startswith("}"):
        return "close", None
    return "other", None


@dataclass
class Run:
    name: str
    path: Path
    manifest: dict
    samples: list[dict]
    verdicts: dict[str, dict]
    probe: list[dict]

    def command(self) -> str:
        spec = self.manifest.get("config", {}).get("spec", self.name)
        return self.manifest.get("command") or f"tooldecode run experiments/{spec}.toml"


def load_run(path: Path, *, score: bool = True) -> Run | None:
    from tooldecode.runstore import RunStore

    if not (path / "manifest.json").exists():
        return None
    store = RunStore.open(path)
    samples = list(store.sample_records())
    verdicts: dict[str, dict] = {}
    if score and samples:
        from tooldecode.scoring import SCORER_VERSION, score_record

        vpath = store.derived_path(f"verdicts-{SCORER_VERSION}.jsonl")
        if vpath.exists():
            for line in vpath.read_text().splitlines():
                if line.strip():
                    v = json.loads(line)
                    verdicts[v["key"]] = v
        missing = [s for s in samples if s["key"] not in verdicts]
        if missing:
            from tooldecode.runstore import rescore

            rescore(store, score_record, SCORER_VERSION)
            return load_run(path, score=score)
    probe_path = path / "probe.jsonl"
    probe = (
        [json.loads(x) for x in probe_path.read_text().splitlines() if x.strip()]
        if probe_path.exists()
        else []
    )
    store.close()
    return Run(path.name, path, store.manifest, samples, verdicts, probe)


# ---------------------------------------------------------------------------------------------
# helpers


def _arm_filter(samples: Iterable[dict], **want: Any) -> list[dict]:
    return [s for s in samples if all(s["arm"].get(k) == v for k, v in want.items()) and not s.get("error")]


def invented_in_items(v: dict) -> list[dict]:
    return [k for k in v.get("invented_keys") or [] if re.search(r"edits\[\d+\]\.", k.get("path", ""))]


def rate_of(samples: Sequence[dict], pred: Callable[[dict], bool]) -> Rate:
    return wilson(sum(1 for s in samples if pred(s)), len(samples))


def cluster_rate(samples: Sequence[dict], pred: Callable[[dict], bool]) -> tuple[float, float, float]:
    if not samples:
        return float("nan"), float("nan"), float("nan")
    return cluster_bootstrap_rate([pred(s) for s in samples], [s["scenario"] for s in samples], seed=0)


def fmt_rate(r: Rate) -> str:
    return str(r)


def fmt_ci(point: float, lo: float, hi: float, pct: bool = True, digits: int = 1) -> str:
    if pct:
        return f"{100 * point:.{digits}f}% [{100 * lo:.{digits}f}, {100 * hi:.{digits}f}]"
    return f"{point:.3f} [{lo:.3f}, {hi:.3f}]"


def probe_values(run: Run, after: str, **variant: Any) -> dict[str, float]:
    """Per scenario: P(continue) at the *last* edit item's ``after`` decision (mean over items if asked)."""
    out: dict[str, list[float]] = defaultdict(list)
    for row in run.probe:
        if row.get("after") != after:
            continue
        if any(row.get("variant", {}).get(k) != v for k, v in variant.items()):
            continue
        out[row["scenario"]].append(row["p_continue"])
    return {k: float(np.mean(v)) for k, v in out.items()}


def mean_over_scenarios(values: dict[str, float]) -> str:
    if not values:
        return "no data"
    vals = list(values.values())
    m, lo, hi = mean_ci(vals) if len(vals) > 1 else (vals[0], float("nan"), float("nan"))
    return f"mean {m:.3f} [{lo:.3f}, {hi:.3f}] over {len(vals)} scenarios (median {np.median(vals):.3f})"


def paired_probe_diff(a: dict[str, float], b: dict[str, float]) -> tuple[float, float, float, int]:
    common = sorted(set(a) & set(b))
    if len(common) < 2:
        return float("nan"), float("nan"), float("nan"), len(common)
    d = [a[s] - b[s] for s in common]
    m, lo, hi = mean_ci(d)
    return m, lo, hi, len(common)


GOLD_KEYS = {"oldText", "newText", "path", "edits"}


def continuation_kind(text: str) -> tuple[str, str | None]:
    """What follows the gold newText: close / next item / gold key again / invented key (with the key) / other."""
    cls, detail = continuation_class(text)
    if cls != "continue":
        return cls, None
    if detail == "<next item>":
        return "next item", None
    if detail in GOLD_KEYS:
        return "gold key again", detail
    return "invented key", detail or "?"


def l2_breakdown(samples: Sequence[dict]) -> tuple[dict[str, Rate], Counter]:
    """L2 continuations split finely: close / next item / a gold key again / an invented key / other."""
    kinds: list[str] = []
    zoo: Counter = Counter()
    for s in samples:
        kind, key = continuation_kind(s["text"])
        kinds.append(kind)
        if kind == "invented key":
            zoo[key] += 1
    n = len(kinds)
    return {
        k: wilson(kinds.count(k), n)
        for k in ("close", "invented key", "gold key again", "next item", "other")
    }, zoo


def l2_rates(samples: Sequence[dict]) -> dict[str, Rate]:
    classes = [continuation_class(s["text"])[0] for s in samples]
    n = len(classes)
    return {c: wilson(sum(1 for x in classes if x == c), n) for c in ("continue", "close", "other")}


def verdict_of(run: Run, s: dict) -> dict:
    return run.verdicts.get(s["key"], {})


# ---------------------------------------------------------------------------------------------
# the rows


def _verdict_word(lo: float, hi: float, claimed_positive: bool = True) -> str:
    if np.isnan(lo):
        return "inconclusive"
    if claimed_positive:
        return "reproduces" if lo > 0 else ("does not reproduce" if hi < 0 else "inconclusive")
    return "reproduces" if hi < 0 else ("does not reproduce" if lo > 0 else "inconclusive")


def build_findings(runs_dir: Path) -> list[dict[str, str]]:
    runs = (
        {p.name: load_run(p) for p in sorted(runs_dir.iterdir()) if p.is_dir()} if runs_dir.exists() else {}
    )
    runs = {k: v for k, v in runs.items() if v is not None}
    rows: list[dict[str, str]] = []

    def missing(obs: str, claim: str, spec: str) -> None:
        rows.append(
            {
                "observation": obs,
                "claim": claim,
                "measured": "not run in the committed runs",
                "verdict": "not measured",
                "command": f"tooldecode run experiments/{spec}.toml",
            }
        )

    e0 = runs.get("e0-native-format")
    if e0:
        rows.append(_e0_row(e0))
    e1 = runs.get("e1-strict-vs-loose")
    # 1. invented keys in loose sampling, per level
    if e1:
        parts, cmd = [], e1.command()
        model = e1.manifest.get("model", {}).get("id", "?")
        for level in ("L0", "L1", "L2"):
            loose = _arm_filter(e1.samples, level=level, mode="loose")
            strict = _arm_filter(e1.samples, level=level, mode="strict")
            if not loose:
                continue
            r_l = rate_of(loose, lambda s: bool(invented_in_items(verdict_of(e1, s))))
            r_s = rate_of(strict, lambda s: bool(invented_in_items(verdict_of(e1, s))))
            any_l = rate_of(loose, lambda s: verdict_of(e1, s).get("verdict") == "invented_key")
            part = f"{level}: invented key in an item (scored) loose {r_l} (verdict invented_key {any_l}); strict {r_s}"
            if level == "L2":
                bl, zoo = l2_breakdown(loose)
                bs, _ = l2_breakdown(strict)
                part += (
                    f"; continuation right after the gold newText, loose: close {bl['close']}, invented key "
                    f"{bl['invented key']}, gold key again {bl['gold key again']}, next item {bl['next item']}, "
                    f"string goes on {bl['other']}; strict: close {bs['close']}, invented key {bs['invented key']}, "
                    f"string goes on {bs['other']}; keys seen: {dict(zoo.most_common(8))}"
                )
            parts.append(part)
        rows.append(
            {
                "observation": "Invented keys inside edits[] items (loose sampling); strict decoding removes them",
                "claim": "Newer models sometimes append made-up keys inside edits[] items; strict mode (closed objects) "
                "made the failure disappear.",
                "measured": f"{model}, agentic: " + "; ".join(parts),
                "verdict": _e1_verdict(e1),
                "command": cmd,
            }
        )
        # 2. payload correct in rejected calls
        loose = _arm_filter(e1.samples, mode="loose")
        inv = [s for s in loose if verdict_of(e1, s).get("verdict") == "invented_key"]
        pc = rate_of(inv, lambda s: bool((verdict_of(e1, s).get("payload") or {}).get("file_correct")))
        val = [s for s in loose if verdict_of(e1, s).get("verdict") == "valid"]
        pv = rate_of(val, lambda s: bool((verdict_of(e1, s).get("payload") or {}).get("file_correct")))
        rows.append(
            {
                "observation": "Payloads of rejected calls were byte-correct",
                "claim": "The oldText/newText payloads of calls rejected for invented keys were byte-for-byte correct.",
                "measured": f"{model}: file byte-correct after applying the call in invented-key calls {pc}; "
                f"in valid calls {pv} (loose, all levels)",
                "verdict": "reproduces"
                if pc.n and pc.lo > 0.5
                else ("inconclusive" if pc.n < 5 else "does not reproduce"),
                "command": cmd,
            }
        )
        # 7. where the masked mass goes
        rows.append(_e7_row(e1))
        # lenient harness
        rows.append(_repair_row(e1))
        # L2 vs L3
        e5 = runs.get("e5-close-brace")
        if e5:
            rows.append(_agreement_row(e1, e5))
    else:
        missing("Invented keys inside edits[] items; strict removes them", "brief §1", "e1_strict_vs_loose")

    for spec, field, a, b, obs, claim in [
        (
            "e2-history",
            "history",
            "agentic",
            "fresh",
            "History: agentic vs fresh",
            "A fresh single-turn prompt did not reproduce the failure; an agentic history did (about 20%).",
        ),
        (
            "e3-thinking",
            "thinking",
            True,
            False,
            "Thinking blocks kept vs stripped",
            "Removing thinking blocks from the history roughly halved the failure rate.",
        ),
        (
            "e8-schema-view",
            "schema_view",
            "closed",
            "as-written",
            "Schema presentation: additionalProperties:false shown",
            "The schema text itself may be what the model copies; closing objects in the text could change it.",
        ),
        (
            "e9-prior",
            "prior",
            True,
            False,
            "Prior from a flat edit tool in the history",
            "A prior for a flat edit tool with one optional flag makes the model add a field in the nested shape.",
        ),
    ]:
        run = runs.get(spec)
        if not run:
            missing(obs, claim, spec.replace("-", "_"))
            continue
        rows.append(_variant_row(run, field, a, b, obs, claim))

    single: list[tuple[str, Callable[[Run], list[dict[str, str]]], str, str]] = [
        (
            "e4-tool-shape",
            lambda r: [_shape_row(r)],
            "E4: tool shape (nested edits[] vs flat Edit vs MultiEdit)",
            "A flat edit tool with one optional flag trains a prior for 'one more key'.",
        ),
        (
            "e5-close-brace",
            lambda r: [_entropy_row(r), _length_row(r)],
            "E5: the close-brace position (entropy, P(continue) vs newText length)",
            "Right after closing a long escaped multi-line newText the model chooses between '}' and one more key.",
        ),
        (
            "e6-wire-format",
            lambda r: [_wire_row(r)],
            "E6: wire format as a variable (native, hermes, antml, harmony, json)",
            "The channel (serialization, route) is an independent variable.",
        ),
        (
            "e10-noise-floor",
            lambda r: [_noise_row(r)],
            "E10: noise floor (E1's L2 loose arm, three seeds)",
            "Reruns differ; measure the noise before ranking.",
        ),
        (
            "e12-model-panel",
            _panel_rows,
            "E12: model panel (Qwen2.5-Coder 1.5B, SmolLM2 135M, Gemma 3 270M)",
            "Other small models also continue past a byte-correct newText; strict removes the invented keys.",
        ),
        (
            "e11-schema-keywords",
            lambda r: [_e11_row(r)],
            "E11: minLength/maxLength in the prompt's schema (third article)",
            "'maxLength: 256 keeps 99.99% of tool blocks intact'; 'minLength: 1 means never an empty field'.",
        ),
    ]
    for name, make, obs, claim in single:
        run = runs.get(name)
        if run:
            rows.extend(make(run))
        else:
            missing(obs, claim, name.replace("-", "_"))
    e13 = runs.get("e13-open-grammar")
    if e13:
        rows.append(_open_grammar_row(e13))
    else:
        missing(
            "An open grammar still admits invented keys",
            "additionalProperties defaults to true; a grammar from a schema that does not close its objects "
            "still admits invented keys.",
            "e13_open_grammar",
        )
    zoo = _zoo_row(runs)
    if zoo:
        rows.append(zoo)
    return rows


def _open_grammar_row(e13: Run) -> dict[str, str]:
    model = e13.manifest.get("model", {}).get("id", "?")
    parts, inv = [], {}
    for mode in ("loose", "strict-spec", "strict"):
        ss = _arm_filter(e13.samples, mode=mode)
        if not ss:
            continue
        b, zoo = l2_breakdown(ss)
        inv[mode] = (b["invented key"], ss)
        parts.append(
            f"{mode}: close {b['close']}, invented key {b['invented key']}, gold key again {b['gold key again']}, "
            f"string goes on {b['other']}" + (f" (keys: {dict(zoo.most_common(5))})" if zoo else "")
        )
    verdict = "inconclusive"
    if "strict-spec" in inv and "strict" in inv:
        open_rate, closed_rate = inv["strict-spec"][0], inv["strict"][0]
        if closed_rate.k:
            verdict = "bug: the closed grammar let an invented key through"
        elif open_rate.lo > 0:
            verdict = (
                "reproduces: the open grammar lets invented keys through; closing the objects removes them"
            )
        else:
            verdict = f"does not reproduce at this n (open grammar: invented key {open_rate.k}/{open_rate.n})"
    if "loose" in inv and "strict-spec" in inv:
        (_, la), (_, sa) = inv["loose"], inv["strict-spec"]

        def is_inv(x: dict) -> bool:
            return continuation_kind(x["text"])[0] == "invented key"

        d, lo, hi = cluster_bootstrap_diff(
            [is_inv(x) for x in sa],
            [x["scenario"] for x in sa],
            [is_inv(x) for x in la],
            [x["scenario"] for x in la],
            paired=True,
            seed=0,
        )
        parts.append(f"open grammar − loose, invented key: {fmt_ci(d, lo, hi)} (paired cluster bootstrap)")
        if lo > 0:
            again = {m: l2_breakdown(ss)[0]["gold key again"] for m, (_, ss) in inv.items() if m != "strict"}
            verdict += (
                f"; the open grammar raises them above loose while 'gold key again' falls "
                f"({again['loose'].k}/{again['loose'].n} → {again['strict-spec'].k}/{again['strict-spec'].n}): "
                "a grammar that forbids repeating a declared key moves that mass to new spellings"
            )
    return {
        "observation": "An open grammar still admits invented keys (additionalProperties defaults to true)",
        "claim": "A grammar compiled from a schema that does not close its objects still admits invented keys; "
        "strict modes close them.",
        "measured": f"{model}, L2, what follows the gold newText: " + "; ".join(parts),
        "verdict": verdict,
        "command": e13.command(),
    }


def _zoo_row(runs: dict[str, Run]) -> dict[str, str] | None:
    """The invented keys after the gold newText, pooled over every L2 loose arm of the default model."""
    model = "qwen2.5-coder-0.5b-instruct"
    zoo: Counter = Counter()
    used, n_samples = [], 0
    for name, run in sorted(runs.items()):
        loose = [
            s for s in _arm_filter(run.samples, mode="loose", model=model) if s["arm"].get("level") == "L2"
        ]
        if not loose:
            continue
        _, z = l2_breakdown(loose)
        zoo.update(z)
        used.append(name)
        n_samples += len(loose)
    total = sum(zoo.values())
    if not total:
        return None
    schema = sum(v for k, v in zoo.items() if k in SCHEMA_WORDS)
    share = wilson(schema, total)
    top, top_n = zoo.most_common(1)[0]
    keys = ", ".join(f"{k} {v}" for k, v in zoo.most_common(10))
    return {
        "observation": "What the invented keys are: a zoo of plausible names, or the schema's own words?",
        "claim": "The model has no name for the extra field in the nested shape and samples a plausible one each "
        "time: a zoo of keys (type, id, kind, unique, requireUnique, matchCase, …, even additionalProperties).",
        "measured": f"{model}, L2 loose arms of {', '.join(used)} pooled ({n_samples} samples, arms overlap in "
        f"scenarios and seeds, so the interval is optimistic): {total} continuations with a key that is not in "
        f"the schema; {len(zoo)} distinct keys; words of the tool definition in the prompt (JSON Schema keywords "
        f"such as required, properties, items, additionalProperties, and the tool block's parameters, "
        f"description) {share}; most common '{top}' {top_n}/{total}. Keys: {keys}",
        "verdict": "does not reproduce: locally the invented key is mostly one word copied from the tool "
        f"schema's text ('{top}'), not a zoo of plausible field names"
        if share.lo > 0.5
        else "reproduces: a zoo of plausible names, not the schema's own words",
        "command": "python scripts/findings.py (pools the committed runs)",
    }


def _e0_row(e0: Run) -> dict[str, str]:
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for s in e0.samples:
        if not s.get("error"):
            a = s["arm"]
            groups[(a["model"], a.get("call_format", "native"), a["temperature"])].append(s)
    parts = []
    for (model, fmt, temp), ss in sorted(groups.items()):
        vs = [verdict_of(e0, s) for s in ss]
        edit = [
            v
            for v in vs
            if v.get("tool") == "edit" and v.get("verdict") not in ("no_call", "json_syntax", "truncated")
        ]
        wraps = Counter(v.get("wrapping") or "none" for v in vs)
        tools = Counter(v.get("tool") or "-" for v in vs)
        short = model.replace("qwen2.5-coder-", "").replace("-instruct", "")
        parts.append(
            f"{short} {fmt} T={temp}: parseable edit call {wilson(len(edit), len(vs))}; "
            f"wrappings {dict(wraps.most_common(4))}; tools {dict(tools.most_common(3))}"
        )
    return {
        "observation": "L0: do small models call the edit tool on their own, and in which wrapping?",
        "claim": "Brief §8: no <tool_call> tags; 33-51% of free samples were edit calls; a diagnosis before "
        "the call lowered the rate.",
        "measured": "; ".join(parts),
        "verdict": "descriptive",
        "command": e0.command(),
    }


def _e1_verdict(e1: Run) -> str:
    strict = _arm_filter(e1.samples, mode="strict")
    loose = _arm_filter(e1.samples, mode="loose")
    k_s = sum(1 for s in strict if invented_in_items(verdict_of(e1, s)))
    k_l = sum(1 for s in loose if invented_in_items(verdict_of(e1, s)))
    if k_s:
        return f"BUG: strict produced {k_s} invented keys"
    d = newcombe_diff(k_l, len(loose), k_s, len(strict))
    if d.lo > 0:
        return "reproduces (loose > strict = 0)"
    bl, _ = l2_breakdown(_arm_filter(e1.samples, level="L2", mode="loose"))
    bs, _ = l2_breakdown(_arm_filter(e1.samples, level="L2", mode="strict"))
    if bs["invented key"].k:
        return "BUG: strict L2 sample continued with an invented key"
    if bl["invented key"].lo > 0:
        return "reproduces at L2 (loose invents keys after the gold newText; strict never does)"
    return (
        "strict 0 by construction; loose rate not distinguishable from 0 at this n"
        if k_l == 0
        else "inconclusive"
    )


def _variant_row(run: Run, field: str, a: Any, b: Any, obs: str, claim: str) -> dict[str, str]:
    sa = _arm_filter(run.samples, **{field: a})
    sb = _arm_filter(run.samples, **{field: b})
    ra, rb = l2_rates(sa)["continue"], l2_rates(sb)["continue"]
    cont = lambda s: continuation_class(s["text"])[0] == "continue"  # noqa: E731
    d, lo, hi = (
        cluster_bootstrap_diff(
            [cont(s) for s in sa],
            [s["scenario"] for s in sa],
            [cont(s) for s in sb],
            [s["scenario"] for s in sb],
            paired=True,
            seed=0,
        )
        if sa and sb
        else (float("nan"),) * 3
    )
    pa = probe_values(run, "newText", **{field: a})
    pb = probe_values(run, "newText", **{field: b})
    pd, plo, phi, pn = paired_probe_diff(pa, pb)
    (ba, zoo_a), (bb, zoo_b) = l2_breakdown(sa), l2_breakdown(sb)
    inv_a, inv_b = ba["invented key"], bb["invented key"]
    zoo = dict((zoo_a + zoo_b).most_common(6))
    model = run.manifest.get("model", {}).get("id", "?")
    measured = (
        f"{model}, L2 continue-after-newText: {field}={a} {ra} vs {field}={b} {rb}; difference "
        f"{fmt_ci(d, lo, hi)} (paired cluster bootstrap over scenarios). Continue with an invented key: "
        f"{inv_a} vs {inv_b} (keys: {zoo}). "
        f"L3 P(continue) after newText: {field}={a} {mean_over_scenarios(pa)}; {field}={b} {mean_over_scenarios(pb)}; "
        f"paired difference {pd:.3f} [{plo:.3f}, {phi:.3f}] (n={pn})"
    )
    return {
        "observation": obs,
        "claim": claim,
        "measured": measured,
        "verdict": _verdict_word(lo, hi) + " (L2)" + f"; {_verdict_word(plo, phi)} (L3)",
        "command": run.command(),
    }


def _e7_row(e1: Run) -> dict[str, str]:
    out = []
    for level in ("L1", "L2"):
        strict = _arm_filter(e1.samples, level=level, mode="strict")
        loose = _arm_filter(e1.samples, level=level, mode="loose")
        if not strict:
            continue

        def summary(ss: list[dict]) -> str:
            n = len(ss)
            vs = [verdict_of(e1, s) for s in ss]
            items = Counter()
            for v in vs:
                p = v.get("payload") or {}
                if p:
                    items[
                        "more items than gold"
                        if p.get("n_edits", 0) > p.get("n_gold", 0)
                        else "fewer items than gold"
                        if p.get("n_edits", 0) < p.get("n_gold", 0)
                        else "same items"
                    ] += 1
            fc = sum(1 for v in vs if (v.get("payload") or {}).get("file_correct"))
            removed = [max(s.get("mask_removed") or [0]) for s in ss]
            return (
                f"n={n}, file byte-correct {wilson(fc, n)}, items {dict(items)}, "
                f"median max mask-removed mass {np.median(removed) if removed else float('nan'):.3f}"
            )

        extra = ""
        if level == "L2":
            first = [s for s in strict if s.get("mask_removed")]
            removed0 = [s["mask_removed"][0] for s in first]
            big = [s for s in first if s["mask_removed"][0] > 0.2]
            goes_on = sum(1 for s in big if continuation_class(s["text"])[0] == "other")
            extra = (
                f"; at the decision right after the gold newText the mask removed a mean {np.mean(removed0):.3f} "
                f"of the probability (max {max(removed0):.3f}, n={len(first)}); when it removed > 0.2 "
                f"({len(big)} samples) the string went on instead of closing in {wilson(goes_on, len(big))}"
            )
        out.append(f"{level} strict: {summary(strict)}; {level} loose: {summary(loose)}{extra}")
    return {
        "observation": "E7: where the masked probability mass goes under strict decoding",
        "claim": "Grammar masking removes the ',' branch; the wish to continue must go somewhere.",
        "measured": " | ".join(out) or "no strict samples",
        "verdict": "descriptive",
        "command": e1.command(),
    }


def _repair_row(e1: Run) -> dict[str, str]:
    from tooldecode.repair import rescue_accounting

    acc = rescue_accounting(e1.samples, e1.manifest)

    def r(d: dict) -> str:
        return str(
            Rate(
                d["k"],
                d["n"],
                d["rate"] if d["rate"] is not None else float("nan"),
                d["lo"] if d["lo"] is not None else 0.0,
                d["hi"] if d["hi"] is not None else 1.0,
            )
        )

    table = "; ".join(
        f"{t['method']}: valid {r(t['valid'])}, valid with byte-correct payload {r(t['valid_payload'])}"
        for t in acc.get("table", [])
        if t.get("condition") == "all"
    )
    kinds = ", ".join(f"{k} {v['samples']}" for k, v in acc.get("kinds", {}).items() if v["samples"])
    by = ", ".join(
        f"{k} {v['n']}" for k, v in sorted(acc.get("by_verdict", {}).items(), key=lambda kv: -kv[1]["n"])
    )
    measured = (
        f"loose samples failing strict validation: {acc['n_failing_strict']} of {acc['n_loose']} "
        f"({by}); rescued by repair {r(acc['rescued_share'])}; of those payload byte-correct "
        f"{r(acc['rescued_payload_share'])}; repairs applied: {kinds or 'none'}; retry signals "
        f"{acc['n_retry_signal']}. Same scenarios, all levels: {table}"
    )
    return {
        "observation": "A lenient harness silently repairs sloppy calls: how much would it rescue?",
        "claim": "A tolerant client drops unknown keys, accepts aliases, coerces types, repairs escapes, and "
        "does not use strict mode.",
        "measured": measured,
        "verdict": "descriptive",
        "command": f"tooldecode repair {e1.path}",
    }


def _agreement_row(e1: Run, e5: Run) -> dict[str, str]:
    l2 = _arm_filter(e1.samples, level="L2", mode="loose")
    per: dict[str, list[bool]] = defaultdict(list)
    for s in l2:
        per[s["scenario"]].append(continuation_class(s["text"])[0] == "continue")
    probe = {}
    for row in e5.probe:
        if row.get("after") == "newText":
            probe.setdefault(row["scenario"], []).append(row)
    pairs = []
    for sc, vals in per.items():
        if sc in probe:
            last = max(probe[sc], key=lambda r: r.get("item_index") or 0)
            pairs.append((float(np.mean(vals)), last["p_continue"], len(vals)))
    if not pairs:
        return {
            "observation": "L2 sampled rate vs L3 exact probability",
            "claim": "",
            "measured": "no overlap",
            "verdict": "not measured",
            "command": "",
        }
    sampled = sum(p[0] * p[2] for p in pairs) / sum(p[2] for p in pairs)
    exact = float(np.mean([p[1] for p in pairs]))
    k = sum(round(p[0] * p[2]) for p in pairs)
    n = sum(p[2] for p in pairs)
    r = wilson(k, n)
    inside = r.lo <= exact <= r.hi
    return {
        "observation": "Instrument check: L2 sampled continue-rate vs L3 exact P(continue) at the same point",
        "claim": "They measure the same event (T=1, no truncation), so they must agree.",
        "measured": f"{len(pairs)} scenarios: sampled {r} vs mean exact {exact:.3f} "
        f"(sample-weighted sampled mean {sampled:.3f})",
        "verdict": "agree" if inside else "disagree (check the harness)",
        "command": f"{e1.command()}; {e5.command()}",
    }


def _entropy_row(e5: Run) -> dict[str, str]:
    by: dict[str, list[float]] = defaultdict(list)
    for row in e5.probe:
        by[row["after"]].append(row["entropy"])
    parts = []
    for key in sorted((k for k in by if len(by[k]) >= 5), key=lambda k: -np.mean(by[k])):
        m, lo, hi = mean_ci(by[key]) if len(by[key]) > 1 else (by[key][0], float("nan"), float("nan"))
        parts.append(f"after {key}: {m:.3f} [{lo:.3f}, {hi:.3f}] (n={len(by[key])})")
    calls: dict[str, list[dict]] = defaultdict(list)
    for row in e5.probe:
        calls[row["scenario"]].append(row)
    first = 0
    for rows_ in calls.values():
        best = max(rows_, key=lambda r: r["entropy"])
        first += best["after"] == "newText"
    share = wilson(first, len(calls))
    top = "newText" if share.lo > 0.5 else None
    pc = probe_values(e5, "newText")
    return {
        "observation": "E5: the close-brace decision after newText is the highest-entropy point of the call",
        "claim": "Right after closing a long escaped multi-line newText the model chooses between '}' and one "
        "more key; that is the highest-entropy point.",
        "measured": "Entropy (nats) of the next-token distribution at each decision point, mean [95% t CI]: "
        + "; ".join(parts)
        + f". Calls whose highest-entropy decision is a newText close: {share}. "
        f"P(continue) after newText: {mean_over_scenarios(pc)}",
        "verdict": (
            "reproduces"
            if top == "newText"
            else "does not reproduce: the newText close is one of several high-entropy points, not the highest"
        ),
        "command": e5.command(),
    }


def _length_row(e5: Run) -> dict[str, str]:
    rows = [r for r in e5.probe if r.get("after") == "newText"]
    if len(rows) < 3:
        return {
            "observation": "P(continue) vs newText length",
            "claim": "",
            "measured": "too few points",
            "verdict": "inconclusive",
            "command": e5.command(),
        }
    x = np.array([r["newtext_lines"] for r in rows], dtype=float)
    y = np.array([r["p_continue"] for r in rows], dtype=float)
    rx, ry = _rank(x), _rank(y)
    rho = float(np.corrcoef(rx, ry)[0, 1])
    rng = np.random.default_rng(0)
    boots = []
    for _ in range(2000):
        idx = rng.integers(0, len(x), len(x))
        if np.std(rx[idx]) == 0 or np.std(ry[idx]) == 0:
            continue
        boots.append(np.corrcoef(_rank(x[idx]), _rank(y[idx]))[0, 1])
    lo, hi = np.percentile(boots, [2.5, 97.5])
    short = [r["p_continue"] for r in rows if r["newtext_lines"] <= 2]
    long_ = [r["p_continue"] for r in rows if r["newtext_lines"] >= 15]
    last = [
        r["p_continue"]
        for r in rows
        if r.get("item_index") is not None and r["item_index"] == r["n_items"] - 1
    ]
    notlast = [
        r["p_continue"]
        for r in rows
        if r.get("item_index") is not None and r["item_index"] < r["n_items"] - 1
    ]
    return {
        "observation": "E5: P(continue) after newText against newText length and position in the call",
        "claim": "The failure appeared after long, escaped, multi-line newText values; the brief's first probe "
        "found it higher after the first item of a two-edit call than after the last.",
        "measured": f"{len(rows)} decision points: Spearman rho(lines, P(continue)) = {rho:.3f} "
        f"[{lo:.3f}, {hi:.3f}] (bootstrap); mean P(continue) newText <= 2 lines "
        f"{np.mean(short) if short else float('nan'):.3f} (n={len(short)}), >= 15 lines "
        f"{np.mean(long_) if long_ else float('nan'):.3f} (n={len(long_)}); last item "
        f"{np.mean(last) if last else float('nan'):.3f} (n={len(last)}) vs earlier items "
        f"{np.mean(notlast) if notlast else float('nan'):.3f} (n={len(notlast)})",
        "verdict": _verdict_word(lo, hi) + " (length effect)",
        "command": e5.command(),
    }


def _rank(a: np.ndarray) -> np.ndarray:
    order = a.argsort(kind="stable")
    ranks = np.empty(len(a))
    ranks[order] = np.arange(len(a))
    # average ties
    for v in np.unique(a):
        m = a == v
        ranks[m] = ranks[m].mean()
    return ranks


def _shape_row(e4: Run) -> dict[str, str]:
    parts = []
    keys = {"nested": "newText", "flat-edit": "new_string", "multiedit": "new_string"}
    tally: dict[str, Counter] = {}
    for ts, key in keys.items():
        vals = probe_values(e4, key, toolset=ts)
        parts.append(f"{ts}: P(continue) after {key} {mean_over_scenarios(vals)}")
        c: Counter = Counter()
        for row in e4.probe:
            if (
                row.get("after") == key
                and row.get("variant", {}).get("toolset") == ts
                and row.get("continuations")
            ):
                c.update(row["continuations"])
        tally[ts] = c
    zoo = "; ".join(
        f"{ts}: " + ", ".join(f"{k} {v}" for k, v in c.most_common(6)) for ts, c in tally.items() if c
    )
    return {
        "observation": "E4: tool shape (nested edits[] vs flat Edit vs MultiEdit)",
        "claim": "A flat edit tool with one optional flag (replace_all) trains a prior for 'one more key'.",
        "measured": "; ".join(parts)
        + (f". Sampled continuations from the decision point: {zoo}" if zoo else ""),
        "verdict": "descriptive (flat Edit legitimately allows replace_all after new_string)",
        "command": e4.command(),
    }


def _wire_row(e6: Run) -> dict[str, str]:
    parts, diffs = [], []
    base = probe_values(e6, "newText", call_format="native")
    verdicts = []
    for fmt in ("native", "hermes", "antml", "harmony", "json"):
        vals = probe_values(e6, "newText", call_format=fmt)
        if not vals:
            continue
        parts.append(f"{fmt}: {mean_over_scenarios(vals)}")
        if fmt != "native" and base:
            d, lo, hi, n = paired_probe_diff(vals, base)
            diffs.append(f"{fmt} − native {d:+.3f} [{lo:+.3f}, {hi:+.3f}] (n={n})")
            verdicts.append(not np.isnan(lo) and (lo > 0 or hi < 0))
    model = e6.manifest.get("model", {}).get("id", "?")
    if not verdicts:
        verdict = "inconclusive"
    elif any(verdicts):
        verdict = "reproduces (at least one format differs from native beyond its interval)"
    else:
        verdict = "inconclusive (no format differs from native at this n)"
    return {
        "observation": "E6: wire format as a variable",
        "claim": "The channel (serialization, route) is an independent variable.",
        "measured": f"{model}, L3 P(continue) after newText by call format: "
        + "; ".join(parts)
        + (". Paired differences over scenarios: " + "; ".join(diffs) if diffs else ""),
        "verdict": verdict,
        "command": e6.command(),
    }


def _panel_rows(e12: Run) -> list[dict[str, str]]:
    """One row per model of the panel: L2 loose vs strict and the L3 probe after newText."""
    rows = []
    models = e12.manifest.get("config", {}).get("arms", [])
    order = list(dict.fromkeys(a["model"] for a in models))
    for model in order:
        loose = _arm_filter(e12.samples, model=model, mode="loose")
        strict = _arm_filter(e12.samples, model=model, mode="strict")
        errors = [s for s in e12.samples if s["arm"].get("model") == model and s.get("error")]
        inv = lambda s: bool(invented_in_items(verdict_of(e12, s)))  # noqa: E731
        r_l, r_s = rate_of(loose, inv), rate_of(strict, inv)
        bl, zoo = l2_breakdown(loose)
        bs, _ = l2_breakdown(strict)
        probe: dict[str, list[float]] = defaultdict(list)
        for row in e12.probe:
            if row.get("model") == model and row.get("after") == "newText":
                probe[row["scenario"]].append(row["p_continue"])
        pvals = {k: float(np.mean(v)) for k, v in probe.items()}
        wire = next((s["arm"].get("wire") for s in loose + strict), "?")
        keys = "; ".join(f"{k[:40]!r} {v}" for k, v in zoo.most_common(6))
        truncated = sum(1 for x in loose if verdict_of(e12, x).get("verdict") == "truncated")
        cut = (
            " (most loose calls are cut by the token budget and score as truncated)"
            if 2 * truncated > len(loose)
            else ""
        )

        def verdicts(ss: list[dict]) -> str:
            c = Counter(verdict_of(e12, x).get("verdict", "?") for x in ss)
            return ", ".join(f"{k} {v}/{len(ss)}" for k, v in c.most_common())

        measured = (
            f"{model} (wire {wire}), L2, what follows the gold newText — loose: close {bl['close']}, invented "
            f"key {bl['invented key']}, gold key again {bl['gold key again']}, next item {bl['next item']}, "
            f"string goes on {bl['other']}; strict: close {bs['close']}, invented key {bs['invented key']}, "
            f"string goes on {bs['other']}; keys seen (loose): {keys or 'none'}. Scored calls with an invented "
            f"key in an item: loose {r_l}, strict {r_s}{cut}. Verdicts: loose {verdicts(loose)}; strict "
            f"{verdicts(strict)}. "
            f"L3 P(continue) after newText: {mean_over_scenarios(pvals)}"
            + (f". Sampling errors (not scored): {len(errors)}" if errors else "")
        )
        inv_l, inv_s = bl["invented key"], bs["invented key"]
        if inv_s.k or r_s.k:
            verdict = "bug: strict produced invented keys"
        elif inv_l.n == 0:
            verdict = "not measured"
        elif inv_l.lo > 0:
            ident = sum(v for k, v in zoo.items() if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k))
            verdict = f"reproduces (loose continues with an invented key {100 * inv_l.rate:.0f}%; strict 0)"
            if ident * 2 < sum(zoo.values()):
                verdict += (
                    f"; but only {ident} of {sum(zoo.values())} keys are identifiers, the rest junk text"
                )
        else:
            verdict = f"does not reproduce at this n (loose invented key {inv_l.k}/{inv_l.n}; strict 0)"
            top, k = Counter(verdict_of(e12, x).get("verdict", "?") for x in loose).most_common(1)[0]
            if top == "json_syntax" and 2 * k > len(loose):
                bad = [x for x in loose if verdict_of(e12, x).get("verdict") == "json_syntax"]
                brackets = sum(1 for x in bad if re.fullmatch(r'"\s*[\]}\s]+', x["text"]))
                verdict += (
                    f"; loose calls fail on JSON syntax instead ({k}/{len(loose)}; in {brackets} of them the model "
                    "wrote only closing brackets, in the wrong number or order)"
                )
        rows.append(
            {
                "observation": f"E12: model panel — {model}",
                "claim": "Other small models also continue past a byte-correct newText with invented keys; strict "
                "decoding removes them.",
                "measured": measured,
                "verdict": verdict,
                "command": e12.command(),
            }
        )
    return rows


def _noise_row(e10: Run) -> dict[str, str]:
    from tooldecode.stats import noise_floor

    by_seed: dict[int, list[dict]] = defaultdict(list)
    for s in e10.samples:
        by_seed[s["seed"]].append(s)
    rates = {seed: l2_rates(ss)["continue"] for seed, ss in sorted(by_seed.items())}
    nf = noise_floor([r.rate for r in rates.values()])
    return {
        "observation": "E10: noise floor (E1 L2 loose, three seeds)",
        "claim": "Reruns differ; measure the noise before ranking.",
        "measured": "continue-after-newText per seed: "
        + "; ".join(f"seed {k}: {v}" for k, v in rates.items())
        + f"; spread max-min {nf['max_abs_diff']:.3f}, sd {nf['sd']:.3f}",
        "verdict": "descriptive (every other L2 difference is read against this spread)",
        "command": e10.command(),
    }


# words of the tool definition shown in the prompt: JSON Schema keywords and the tool block's own keys
SCHEMA_WORDS = {
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "minLength",
    "maxLength",
    "parameters",
    "description",
}


def _e11_row(e11: Run) -> dict[str, str]:
    with_kw = [s for s in e11.samples if s["arm"].get("schema_extra")]
    without = [s for s in e11.samples if not s["arm"].get("schema_extra")]

    def empty_field(s: dict) -> bool:
        args = verdict_of(e11, s).get("arguments") or {}
        edits = args.get("edits") if isinstance(args, dict) else None
        return bool(
            isinstance(edits, list)
            and any(isinstance(e, dict) and (e.get("oldText") == "" or e.get("newText") == "") for e in edits)
        )

    def over(s: dict) -> bool:
        args = verdict_of(e11, s).get("arguments") or {}
        edits = args.get("edits") if isinstance(args, dict) else None
        return bool(
            isinstance(edits, list)
            and any(
                isinstance(e, dict)
                and any(isinstance(e.get(k), str) and len(e[k]) > 256 for k in ("oldText", "newText"))
                for e in edits
            )
        )

    valid = lambda s: verdict_of(e11, s).get("verdict") == "valid"  # noqa: E731
    parts = [
        f"valid calls: with keywords {rate_of(with_kw, valid)} vs without {rate_of(without, valid)}",
        f"an empty oldText/newText: {rate_of(with_kw, empty_field)} vs {rate_of(without, empty_field)}",
        f"a field longer than 256 chars: {rate_of(with_kw, over)} vs {rate_of(without, over)}",
    ]
    d = newcombe_diff(sum(map(valid, with_kw)), len(with_kw), sum(map(valid, without)), len(without))
    invented = lambda s: verdict_of(e11, s).get("verdict") == "invented_key"  # noqa: E731
    di = newcombe_diff(sum(map(invented, with_kw)), len(with_kw), sum(map(invented, without)), len(without))
    echo = Counter(
        k["key"]
        for s in with_kw
        if invented(s)
        for k in verdict_of(e11, s).get("invented_keys") or []
        if k.get("key") in SCHEMA_WORDS
    )
    parts.append(
        f"an invented key: {rate_of(with_kw, invented)} vs {rate_of(without, invented)} (difference "
        f"{di.diff:+.3f} [{di.lo:+.3f}, {di.hi:+.3f}], Fisher p={di.p_fisher:.3f}); JSON Schema words among "
        f"the invented keys with keywords shown: {dict(echo) or 'none'}"
    )
    return {
        "observation": "E11: minLength/maxLength in the prompt's schema (claims of the third article)",
        "claim": "'maxLength: 256 keeps 99.99% of tool blocks intact'; 'minLength: 1 means the model never emits "
        "an empty field' (unsourced).",
        "measured": "; ".join(parts)
        + f"; difference in valid rate {d.diff:+.3f} [{d.lo:+.3f}, {d.hi:+.3f}], "
        f"Fisher p={d.p_fisher:.3f}",
        "verdict": "no detectable effect" if d.lo < 0 < d.hi else "effect detected",
        "command": e11.command(),
    }


def write_findings(rows: list[dict[str, str]], out: Path, *, preamble: str = "") -> Path:
    lines = [
        "# Findings",
        "",
        preamble.strip(),
        "",
        "| # | observation (brief) | claim | measured (model, n, rate, 95% interval) | verdict | command |",
        "|---|---|---|---|---|---|",
    ]
    for i, r in enumerate(rows, 1):
        cells = [str(i)] + [
            r[k].replace("|", "\\|").replace("\n", " ")
            for k in ("observation", "claim", "measured", "verdict", "command")
        ]
        lines.append("| " + " | ".join(cells) + " |")
    out.write_text("\n".join(lines) + "\n")
    return out
