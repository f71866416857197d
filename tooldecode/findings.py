"""Findings machinery: stored runs → per-scenario measures → cluster-aware figures and claim verdicts.

Generic parts only (no run names, no study rows): the study's rows live in ``experiments/study.py``
and are assembled by ``scripts/findings.py``.

- ``load_run``: a run directory's manifest, raw samples, verdicts and probe rows.
- ``sample_continuation``: the key-resolved kind (``tooldecode.classify``) of what an L2 sample wrote
  after the forced newText content; the key context comes from the sample's prefill and the tools of
  its arm.
- ``distinct_draws``: samples with copies removed (same prompt bytes, prefill, mode, engine, seed and
  index; at temperature 0 the same tokens); ``identical_arms``: arms whose prompts render
  byte-identically in every scenario (they are one arm, run and reported once).
- ``l2_values`` / ``l3_values``: one value per scenario for a measure, for the paired statistics of
  ``tooldecode.stats``; ``evaluate_effect``: a spec's claimed effect judged against a run.
- ``write_findings``: the table as markdown.

Measures (``measure`` strings): ``p_continue``, ``p_close`` (probe rows) or ``continue``, ``close``
(samples); ``extra_key`` (repeat + wrong_level + schema_word + invented: a key the object must not
get); ``kind:K[+K...]`` (continue kinds, or ``string_goes_on`` etc.); ``outcome:O[+O...]`` (L2 only:
``tooldecode.classify.OUTCOMES``, e.g. ``outcome:source_shaped``); ``key:NAME`` (that key string).

Samples of a run whose manifest lacks per-scenario random streams are refused by every function that
builds a cluster interval from samples (``require_scenario_streams``): their scenarios share one stream.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tooldecode.classify import (
    CONTINUE,
    EXTRA_KEY_KINDS,
    EXTRA_OUTCOMES,
    Continuation,
    KeyContext,
    call_outcome,
    classify_continuation,
    key_context,
    source_shaped,
)
from tooldecode.errors import ToolDecodeError
from tooldecode.runs import Run
from tooldecode.stats import (
    ClusterRate,
    EffectClaim,
    EffectVerdict,
    PairedClusters,
    cluster_rate,
    interval_text,
    judge_effect,
    paired_clusters,
)


class FindingsError(ToolDecodeError):
    """A findings spec (claimed effect) or run that cannot be evaluated as asked."""


class SharedStreamsError(FindingsError):
    """A cluster interval asked of samples drawn with one random stream shared by every scenario."""


# ---------------------------------------------------------------------------------------------
# samples


def arm_filter(samples: Iterable[dict], **want: Any) -> list[dict]:
    """Samples without an error whose arm has every ``field=value`` of ``want``."""
    return [s for s in samples if all(s["arm"].get(k) == v for k, v in want.items()) and not s.get("error")]


def invented_in_items(v: dict) -> list[dict]:
    """The invented keys of a verdict that sit inside an ``edits[i]`` item."""
    return [k for k in v.get("invented_keys") or [] if re.search(r"edits\[\d+\]\.", k.get("path", ""))]


def _draw_key(s: dict) -> tuple:
    a = s["arm"]
    base = (
        a.get("model"),
        s.get("prompt_sha256"),
        s.get("prefill"),
        a.get("mode"),
        a.get("engine"),
        a.get("duplicates", "forbid"),
        a.get("temperature"),
    )
    if not a.get("temperature"):
        return (*base, tuple(s.get("token_ids") or ()), s.get("text"))
    return (*base, s.get("seed"), s.get("stream"), s.get("index"))


def distinct_draws(samples: Sequence[dict]) -> list[dict]:
    """``samples`` with copies removed, first occurrence kept.

    Two samples are one draw when the same model saw the same prompt bytes and prefill under the same
    mode, engine (and open grammar's ``duplicates``) and temperature with the same seed, random stream
    and index (sampling is deterministic given these), or, at temperature 0, produced the same tokens.
    """
    seen: set[tuple] = set()
    out = []
    for s in samples:
        k = _draw_key(s)
        if k in seen:
            continue
        seen.add(k)
        out.append(s)
    return out


def arm_label(arm: dict) -> str:
    skip = {"model", "backend", "level", "wire", "expected_tool"}
    return ",".join(f"{k}={v}" for k, v in sorted(arm.items()) if k not in skip)


def identical_arms(samples: Sequence[dict]) -> list[list[str]]:
    """Groups (2 or more) of arm labels whose prompts and prefills are byte-identical in every scenario
    and whose sampling settings agree: the same arm under different names."""
    sig: dict[str, dict[str, tuple]] = defaultdict(dict)
    settings: dict[str, tuple] = {}
    for s in samples:
        a = s["arm"]
        lab = arm_label(a)
        sig[lab][s["scenario"]] = (s.get("prompt_sha256"), s.get("prefill"))
        settings[lab] = (a.get("model"), a.get("mode"), a.get("engine"), a.get("temperature"))
    groups: dict[tuple, list[str]] = defaultdict(list)
    for lab, per in sig.items():
        groups[(settings[lab], tuple(sorted(per.items())))].append(lab)
    return [sorted(v) for v in groups.values() if len(v) > 1]


def _arm_tools(arm: dict) -> tuple[list[Any], str | None, frozenset[str]]:
    """The tools an arm's prompt shows (an earlier turn's tools included: the prior episode's flat
    Edit set), the tool it is expected to call, and schema keywords the arm adds to the view."""
    from tooldecode.grammar import load_tool
    from tooldecode.prompts import EDIT_TOOL, TOOLSETS

    toolset = arm.get("toolset", "nested")
    names = list(TOOLSETS.get(toolset, TOOLSETS["nested"]))
    if arm.get("prior") and toolset != "flat-edit":
        names += [n for n in TOOLSETS["flat-edit"] if n not in names]
    tools = [load_tool(n) for n in names]
    extra: set[str] = set()
    if arm.get("schema_view") in ("closed", "strictified"):
        extra.add("additionalProperties")
    if isinstance(arm.get("schema_extra"), dict):
        for kw in arm["schema_extra"].values():
            if isinstance(kw, dict):
                extra.update(kw)
    return tools, EDIT_TOOL.get(toolset), frozenset(extra)


_CTX_CACHE: dict[tuple, KeyContext] = {}


def sample_context(s: dict) -> KeyContext:
    """The ``KeyContext`` at the end of a sample's prefill, with the tools its arm showed."""
    arm = s["arm"]
    key = (
        s.get("prefill"),
        arm.get("toolset"),
        bool(arm.get("prior")),
        arm.get("schema_view"),
        json.dumps(arm.get("schema_extra"), sort_keys=True),
    )
    if key not in _CTX_CACHE:
        tools, edit, extra = _arm_tools(arm)
        ctx = key_context(s.get("prefill") or "", tools, expected_tool=edit)
        if extra:
            known = ctx.present | ctx.declared | ctx.elsewhere
            ctx = dataclasses.replace(ctx, schema_words=ctx.schema_words | (extra - known))
        _CTX_CACHE[key] = ctx
    return _CTX_CACHE[key]


def sample_continuation(s: dict) -> Continuation:
    """Kind of what an L2 sample wrote after the forced content of the gold value (its closing quote
    is pending); the text is taken as complete."""
    return classify_continuation(s.get("text") or "", context=sample_context(s), pending='"', final=True)


def sample_verdict(s: dict) -> dict:
    """The scorer's verdict of an L2 sample's call (prefill + text): the stored one when the run was
    loaded with its verdicts, else scored here (without a scenario: no payload check)."""
    v = s.get("_verdict")
    if v is not None:
        return v
    from dataclasses import asdict

    from tooldecode.prompts import EDIT_TOOL
    from tooldecode.scoring import score_text, toolset_tools

    toolset = s["arm"].get("toolset") or "nested"
    tools, edit = toolset_tools(toolset), s["arm"].get("expected_tool") or EDIT_TOOL.get(toolset)
    text = (s.get("prefill") or "") + (s.get("text") or "")
    v = asdict(
        score_text(
            text, tools, wire=s["arm"].get("wire"), expected_tool=edit, finish_reason=s.get("finish_reason")
        )
    )
    s["_verdict"] = v
    return v


def sample_outcome(s: dict) -> str:
    """The outcome (``tooldecode.classify.OUTCOMES``) of an L2 sample: its kind, or for an extra key what
    the whole call does (source-shaped failure, duplicate key, derailment, other failure)."""
    c = sample_continuation(s)
    if c.kind not in EXTRA_KEY_KINDS:
        return c.kind
    edit = _arm_tools(s["arm"])[1] if not s["arm"].get("expected_tool") else s["arm"]["expected_tool"]
    return call_outcome(c, sample_verdict(s), sample_context(s).present, tool=edit)


def require_scenario_streams(samples: Iterable[dict], what: str = "a cluster interval") -> None:
    """Refuse (``SharedStreamsError``) samples of a run whose manifest lacks per-scenario streams."""
    for s in samples:
        tag = s.get("_run_streams")
        if tag:
            name = tag.split(":", 1)[1]
            raise SharedStreamsError(
                f'{what} over run {name}: its manifest has no "streams": "scenario", so every scenario '
                "drew from the same random stream and scenarios are not independent clusters; rerun it "
                f"with per-scenario streams (tooldecode run SPEC --out runs/{name}-streams) or report counts only"
            )


def continuation_class(text: str) -> tuple[str, str | None]:
    """Coarse class of an L2 text without key context: ("continue", key / "<next item>" / "<other>"),
    ("close", None) or ("other", None)."""
    c = classify_continuation(text, pending='"', final=True)
    if c.group != CONTINUE:
        return ("close", None) if c.group == "close" else ("other", None)
    if c.kind == "next_item":
        return "continue", "<next item>"
    if c.key is not None and c.kind != "other":
        return "continue", c.key
    return "continue", "<other>"


MEASURE_ALIASES = {"goes_on": "kind:string_goes_on", **{o: f"outcome:{o}" for o in EXTRA_OUTCOMES}}


def _kinds_of(measure: str) -> tuple[str, ...] | None:
    if measure == "extra_key":
        return EXTRA_KEY_KINDS
    if measure.startswith("kind:"):
        return tuple(measure[5:].split("+"))
    return None


def sample_event(s: dict, measure: str) -> bool:
    """Whether L2 sample ``s`` shows ``measure`` (see the module docstring; ``source_shaped``,
    ``duplicate``, ``derailment``, ``extra_other`` and ``goes_on`` are short for their outcome or kind).
    At L1 (no forced newText) only ``source_shaped`` is defined: the scorer's verdict of the call."""
    measure = MEASURE_ALIASES.get(measure, measure)
    if s["arm"].get("level") == "L1":
        if measure != "outcome:source_shaped":
            raise FindingsError(f"L1 measure {measure!r} unknown; only source_shaped is defined at L1")
        return source_shaped(sample_verdict(s))
    c = sample_continuation(s)
    if measure in ("continue", "close"):
        return c.group == measure
    if measure.startswith("key:"):
        return c.group == CONTINUE and c.key == measure[4:]
    if measure.startswith("outcome:"):
        return sample_outcome(s) in measure[8:].split("+")
    kinds = _kinds_of(measure)
    if kinds is None:
        raise FindingsError(
            f"unknown L2 measure {measure!r}; use continue, close, extra_key, kind:K, outcome:O or key:NAME"
        )
    return c.kind in kinds


def crate(samples: Sequence[dict], pred) -> ClusterRate:
    """Cluster-robust rate of ``pred`` over the distinct draws of ``samples`` (clusters: scenarios);
    refused (``SharedStreamsError``) for samples of a run with shared random streams."""
    require_scenario_streams(samples)
    ss = distinct_draws(samples)
    return cluster_rate([bool(pred(s)) for s in ss], [s["scenario"] for s in ss])


def l2_values(samples: Sequence[dict], measure: str) -> tuple[dict[str, float], int, int, int]:
    """Per scenario: the share of distinct draws showing ``measure``; plus events, event scenarios, draws.
    Refused (``SharedStreamsError``) for samples of a run with shared random streams."""
    require_scenario_streams(samples, "a paired comparison over scenarios")
    ss = distinct_draws(samples)
    by: dict[str, list[bool]] = defaultdict(list)
    for s in ss:
        by[s["scenario"]].append(sample_event(s, measure))
    vals = {k: float(np.mean(v)) for k, v in by.items()}
    events = sum(sum(v) for v in by.values())
    return vals, events, sum(1 for v in by.values() if any(v)), len(ss)


# ---------------------------------------------------------------------------------------------
# probe rows

VARIANT_DEFAULTS = {
    "history": "agentic",
    "thinking": False,
    "prior": False,
    "toolset": "nested",
    "schema_view": "as-written",
    "call_format": "native",
    "call_style": "compact",
    "tool_view": "as-written",
    "duplicates": "forbid",
}


def full_variant(variant: dict | None) -> dict:
    """A probe row's variant with every unstated field at its default."""
    return {**VARIANT_DEFAULTS, **(variant or {})}


def row_measure(row: dict, measure: str) -> float | None:
    """``measure`` of one probe row (None when the row lacks the key-resolved fields it needs)."""
    if measure in ("p_continue", "p_close", "p_other"):
        return float(row[measure])
    if measure == "decision_entropy":
        return float(row["decision_entropy"]) if "decision_entropy" in row else None
    by = row.get("p_continue_by_kind")
    if not by:
        return None
    if measure.startswith("key:"):
        return float((row.get("continue_keys") or {}).get(measure[4:], 0.0))
    kinds = _kinds_of(measure)
    if kinds is None:
        raise FindingsError(
            f"unknown L3 measure {measure!r}; use p_continue, p_close, extra_key, kind:K or key:NAME"
        )
    other = row.get("p_other_by_kind") or {}
    return float(sum(by.get(k, 0.0) + other.get(k, 0.0) for k in kinds))


def l3_values(
    rows: Sequence[dict], measure: str, *, after: str = "newText", model: str | None = None, **variant: Any
) -> dict[str, float]:
    """Per scenario: the mean of ``measure`` over the decision points after ``after`` whose variant
    matches ``variant`` (unstated fields at their defaults)."""
    want = full_variant(variant)
    out: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        if r.get("after") != after or (model and r.get("model") != model):
            continue
        if full_variant(r.get("variant")) != want:
            continue
        v = row_measure(r, measure)
        if v is not None:
            out[r["scenario"]].append(v)
    return {k: float(np.mean(v)) for k, v in out.items()}


# ---------------------------------------------------------------------------------------------
# claimed effects


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
        raise FindingsError(f"{where}: {err}") from None


def _matches(arm: dict, want: dict) -> bool:
    return all(arm.get(k, VARIANT_DEFAULTS.get(k)) == v for k, v in want.items())


def _one_engine(samples: list[dict]) -> bool:
    """Whether ``samples`` come from one strict channel: a run with several engine settings (an open and
    a closed grammar under the same mode word), or open grammars with and without repeated keys, is
    never pooled into one arm of an effect; name the engine (or ``duplicates``) in the effect's
    ``a``/``b``/``where`` to read such a run."""
    return len({(s["arm"].get("engine"), s["arm"].get("duplicates", "forbid")) for s in samples}) <= 1


def evaluate_effect(effect: dict, runs: dict[str, Run], *, where: str = "spec") -> EffectResult | None:
    """Judge one claimed effect (a ``[[findings.effects]]`` table) on the run that pairs the most
    scenarios for it, among the runs made from a clean commit if any has both arms; None when no run
    has both arms.

    ``effect`` fields: ``label``, ``level`` ("L2" samples / "L3" probe rows), ``measure``, ``a`` and
    ``b`` (arm or variant fields), ``where`` (more arm fields, both arms), ``model``, ``scale``,
    ``size`` or ``direction``, ``runs`` (optional list of spec names to search).
    """
    for key in ("level", "measure", "a", "b"):
        if key not in effect:
            raise FindingsError(f"{where}: effect {effect.get('label', '?')!r} has no {key!r}")
    claim = parse_claim(effect, where)
    level, measure = effect["level"], effect["measure"]
    model = effect.get("model")
    common = dict(effect.get("where", {}))
    specs = set(effect.get("runs", []))
    best: tuple | None = None
    for run in runs.values():
        if specs and run.spec not in specs:
            continue
        if level == "L3":
            rows = run.probe
            va = l3_values(rows, measure, model=model, **{**common, **effect["a"]})
            vb = l3_values(rows, measure, model=model, **{**common, **effect["b"]})
            shared = set(va) & set(vb)
            # exact probabilities: a scenario is an L3 event when either arm's probability is above 0
            ev_sc = [s for s in shared if max(va[s], vb[s]) > 0]
            events, ev_clusters = len(ev_sc), len(ev_sc)
            draws = sum(
                1
                for r in rows
                if r.get("scenario") in shared
                and r.get("after") == "newText"
                and (not model or r.get("model") == model)
                and full_variant(r.get("variant"))
                in (full_variant({**common, **effect["a"]}), full_variant({**common, **effect["b"]}))
                and row_measure(r, measure) is not None
            )
        elif level in ("L1", "L2"):
            if run.shared_streams:
                continue  # its scenarios share one random stream: no cluster interval (counts only elsewhere)
            base = [s for s in run.samples if not s.get("error") and s["arm"].get("level") == level]
            if model:
                base = [s for s in base if s["arm"].get("model") == model]
            sa = [s for s in base if _matches(s["arm"], {**common, **effect["a"]})]
            sb = [s for s in base if _matches(s["arm"], {**common, **effect["b"]})]
            if not sa or not sb or not (_one_engine(sa) and _one_engine(sb)):
                continue
            va, ea, ca, na = l2_values(sa, measure)
            vb, eb, cb, nb = l2_values(sb, measure)
            shared = set(va) & set(vb)
            events = ea + eb
            ev_clusters = len({s["scenario"] for s in distinct_draws(sa + sb) if sample_event(s, measure)})
            draws = na + nb
        else:
            raise FindingsError(f"{where}: level must be 'L1', 'L2' or 'L3', got {level!r}")
        if len(shared) < 2:
            continue
        # a run made from a clean commit first, then the most paired scenarios, then the newest
        key = (run.git_dirty is False, len(shared), run.manifest.get("created", ""))
        if best is None or key > best[0]:
            cmp = paired_clusters({s: va[s] for s in shared}, {s: vb[s] for s in shared})
            verdict = judge_effect(cmp, claim, events=events, event_clusters=ev_clusters)
            best = (
                key,
                EffectResult(effect.get("label", measure), run, level, measure, cmp, verdict, draws, claim),
            )
    return None if best is None else best[1]


# ---------------------------------------------------------------------------------------------
# output

COLUMNS = ("observation", "claim", "measured", "verdict", "source")


def write_findings(rows: list[dict[str, str]], out: Path, *, preamble: str = "", header: str = "") -> Path:
    """Write ``rows`` (dicts with the ``COLUMNS``) as a markdown table after ``preamble``."""
    head = header or (
        "| # | observation | claim (claimed effect; how it was translated) | measured (n, scenarios, interval) "
        "| verdict | runs |"
    )
    lines = ["# Findings", "", preamble.strip(), "", head, "|---|---|---|---|---|---|"]
    for i, r in enumerate(rows, 1):
        cells = [str(i)] + [str(r.get(k, "")).replace("|", "\\|").replace("\n", " ") for k in COLUMNS]
        lines.append("| " + " | ".join(cells) + " |")
    out.write_text("\n".join(lines) + "\n")
    return out


def fmt_p(x: float) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3f}"


def counter_text(c: Counter, n: int = 8) -> str:
    return ", ".join(f"{k} {v}" for k, v in c.most_common(n)) or "none"
