"""Measures of stored samples and probe rows: what an L2 sample wrote after the forced newText content,
what its call did, and one value per scenario for the paired statistics of ``tooldecode.stats``.

- ``sample_continuation``: the key-resolved kind (``tooldecode.classify``) of what an L2 sample wrote
  after the forced newText content; the key context comes from the sample's prefill and the tools of
  its arm. ``continuation_class``: the same without key context.
- ``sample_verdict`` / ``sample_outcome``: the scorer's verdict of a sample's call (the one its run was
  loaded with, ``tooldecode.runs.load_run``) and what the call does after an extra key.
- ``item_keys``: the keys an L1 call wrote inside its ``edits[]`` items that the item schema does not
  declare, each with its kind and its place in the item (``ItemKey``).
- ``distinct_draws``: samples with copies removed (one draw per ``tooldecode.records.draw_key``).
- ``sample_event`` / ``crate`` / ``l2_values``: a measure of a sample, its cluster-robust rate, its
  per-scenario values; ``row_measure`` / ``l3_values``: the same for probe rows.

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
from collections import defaultdict
from collections.abc import Iterable, Sequence
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
from tooldecode.records import draw_key
from tooldecode.stats import ClusterRate, cluster_rate

__all__ = [
    "VARIANT_DEFAULTS",
    "ItemKey",
    "MeasureError",
    "SharedStreamsError",
    "arm_tools",
    "continuation_class",
    "crate",
    "distinct_draws",
    "full_variant",
    "item_keys",
    "kinds_of",
    "l2_values",
    "l3_values",
    "require_scenario_streams",
    "row_measure",
    "sample_context",
    "sample_continuation",
    "sample_event",
    "sample_outcome",
    "sample_verdict",
]


class MeasureError(ToolDecodeError):
    """A measure that cannot be taken as asked (an unknown measure, a measure not defined at a level)."""


class SharedStreamsError(MeasureError):
    """A cluster interval asked of samples drawn with one random stream shared by every scenario."""


def distinct_draws(samples: Sequence[dict]) -> list[dict]:
    """``samples`` with copies removed, first occurrence kept.

    Two samples are one draw when the same model saw the same prompt bytes and prefill under the same
    mode, engine (and open grammar's ``duplicates``) and temperature with the same seed, random stream
    and index (sampling is deterministic given these), or, at temperature 0, produced the same tokens.
    """
    seen: set[tuple] = set()
    out = []
    for s in samples:
        k = draw_key(s)
        if k in seen:
            continue
        seen.add(k)
        out.append(s)
    return out


def arm_tools(arm: dict) -> tuple[list[Any], str | None, frozenset[str]]:
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
        tools, edit, extra = arm_tools(arm)
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
    edit = arm_tools(s["arm"])[1] if not s["arm"].get("expected_tool") else s["arm"]["expected_tool"]
    return call_outcome(
        c, sample_verdict(s), sample_context(s).present, tool=edit, parsed_here=_parsed_here(s, edit)
    )


def _parsed_here(s: dict, edit: str) -> bool:
    """Whether the call that holds an L2 sample's decision point (the end of its prefill) parsed: a
    verdict can describe a later call of the same tool that did (the scorer reads the best call)."""
    from tooldecode.scoring import extract_calls, toolset_tools

    toolset = s["arm"].get("toolset") or "nested"
    prefill = s.get("prefill") or ""
    calls = extract_calls(
        prefill + (s.get("text") or ""),
        wire=s["arm"].get("wire"),
        tools=toolset_tools(toolset),
        expected_tool=edit,
    )
    at = len(prefill)
    return any(c.span[0] < at <= c.span[1] and c.error is None for c in calls)


@dataclasses.dataclass(frozen=True)
class ItemKey:
    """A key an ``edits[]`` item has that its schema does not declare (``item_keys``).

    ``item``: the item's index; ``key``: the name as written; ``kind``: its continue kind
    (``tooldecode.classify``: ``repeat``, ``wrong_level``, ``schema_word`` or ``invented``) against the
    keys the item has before it; ``after``: the key written just before it (None: the item's first);
    ``last``: no key follows it in the item."""

    item: int
    key: str
    kind: str
    after: str | None
    last: bool


def _ordered_edits(text: str, array_key: str) -> list[list[tuple[str, Any]]] | None:
    """The items of the first JSON object in ``text`` that holds ``array_key`` (directly or under
    ``arguments``), each as its ``(key, value)`` pairs in written order (repeated keys kept)."""
    dec = json.JSONDecoder(object_pairs_hook=list)
    i = text.find("{")
    while i >= 0:
        try:
            obj, _ = dec.raw_decode(text, i)
        except (ValueError, RecursionError):
            i = text.find("{", i + 1)
            continue
        for pairs in (obj, dict(obj).get("arguments") if isinstance(obj, list) else None):
            if not isinstance(pairs, list) or not all(isinstance(p, tuple) for p in pairs):
                continue
            items = [v for k, v in pairs if k == array_key]
            if items and isinstance(items[-1], list):
                return [
                    it for it in items[-1] if isinstance(it, list) and all(isinstance(p, tuple) for p in it)
                ]
        i = text.find("{", i + 1)
    return None


def item_keys(s: dict) -> list[ItemKey]:
    """The undeclared keys of each ``edits[]`` item in an L1 sample's call (prefill + text), in order.

    The call is the first JSON object of the text holding the edit tool's array (envelope or bare
    arguments); a text with none gives ``[]``. A key's kind is resolved as at L2
    (``KeyContext.key_kind``), with the item's keys written before it as present (the item's other
    keys when it is the first), so a repeated or mangled item key is a ``repeat``, a tool word a
    ``schema_word``, and any other name ``invented``."""
    from tooldecode.scoring import toolset_tools
    from tooldecode.scoring.checks import edit_keys

    tools, edit, _ = arm_tools(s["arm"])
    tool = next((t for t in toolset_tools(s["arm"].get("toolset") or "nested") if t.name == edit), None)
    if tool is None:
        return []
    array_key, old_key, _ = edit_keys(tool)
    if array_key is None or old_key is None:
        return []
    items = _ordered_edits((s.get("prefill") or "") + (s.get("text") or ""), array_key)
    # the item schema's words, resolved once from a key every item declares
    item_ctx = key_context(
        "{" + json.dumps(array_key) + ": [{" + json.dumps(old_key) + ": null", tools, expected_tool=edit
    )
    out: list[ItemKey] = []
    for n, item in enumerate(items or []):
        names = [k for k, _ in item]
        for j, key in enumerate(names):
            if key in item_ctx.declared and key not in names[:j]:
                continue
            ctx = dataclasses.replace(
                item_ctx, present=frozenset(names[:j] or [k for k in names if k != key])
            )
            kind = ctx.key_kind(key)
            if kind not in EXTRA_KEY_KINDS:
                continue
            out.append(ItemKey(n, key, kind, names[j - 1] if j else None, j == len(names) - 1))
    return out


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


def kinds_of(measure: str) -> tuple[str, ...] | None:
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
            raise MeasureError(f"L1 measure {measure!r} unknown; only source_shaped is defined at L1")
        return source_shaped(sample_verdict(s))
    c = sample_continuation(s)
    if measure in ("continue", "close"):
        return c.group == measure
    if measure.startswith("key:"):
        return c.group == CONTINUE and c.key == measure[4:]
    if measure.startswith("outcome:"):
        return sample_outcome(s) in measure[8:].split("+")
    kinds = kinds_of(measure)
    if kinds is None:
        raise MeasureError(
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
    kinds = kinds_of(measure)
    if kinds is None:
        raise MeasureError(
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
