"""Measures of stored samples and probe rows: what an L2 sample wrote after the forced newText content,
what its call did, and one value per scenario for the paired statistics of ``tooldecode.stats``.

- ``sample_continuation``: the key-resolved kind (``tooldecode.classify``) of what an L2 sample wrote
  after the forced newText content; the key context comes from the sample's prefill and the tools of
  its arm. ``continuation_class``: the same without key context.
- ``sample_verdict`` / ``sample_outcome``: the scorer's verdict of a sample's call against the tools its
  prompt showed (the run's, where the caller passes it) and what the call does after an extra key.
- ``item_keys``: the keys an L1 call wrote inside its ``edits[]`` items that the item schema does not
  declare, each with its kind and its place in the item (``ItemKey``).
- ``call_parses`` / ``flat_closer`` / ``array_closed_by_brace``: the competence an extra key's outcome
  presupposes: whether the call a sample's prefill opens parses, whether an L2 sample closes the forced
  newText with the flat call's ``"}}``, and whether its call closes ``edits[]`` with a ``}`` anywhere
  (measures ``parses`` at L1 and L2, ``flat_closer`` and ``array_closed_by_brace`` at L2).
- ``distinct_draws``: samples with copies removed (one draw per ``tooldecode.records.draw_key``).
- ``sample_event`` / ``crate`` / ``l2_values``: a measure of a sample, its cluster-robust rate, its
  per-scenario values; ``row_measure`` / ``l3_values``: the same for probe rows.

Measures are one table, ``MEASURES``: each is one function registered with ``@measure(name, levels)``
(``known_measures(level)`` lists them; an unknown one is a ``MeasureError`` that names them). Measure
strings: ``p_continue``, ``p_close`` (probe rows) or ``continue``, ``close`` (samples); ``extra_key``
(repeat + wrong_level + schema_word + invented: a key the object must not get); ``kind:K[+K...]``
(continue kinds, or ``string_goes_on`` etc.); ``outcome:O[+O...]`` (L2 only:
``tooldecode.classify.OUTCOMES``, e.g. ``outcome:source_shaped``); ``key:NAME`` (that key string);
``source_shaped`` at L1 (the call's verdict).

Samples drawn without a per-scenario random stream (a run whose manifest lacks ``"streams":
"scenario"``; such a sample has no ``stream``) are refused by every function that builds a cluster
interval from samples (``require_scenario_streams``): their scenarios share one stream.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
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
from tooldecode.jsontext import brackets
from tooldecode.records import Condition, ProbeRow, SampleRecord, VerdictRecord
from tooldecode.stats import ClusterRate, cluster_rate

__all__ = [
    "MEASURES",
    "MEASURE_ALIASES",
    "VARIANT_DEFAULTS",
    "ItemKey",
    "Measure",
    "MeasureError",
    "SharedStreamsError",
    "FLAT_CLOSER",
    "arm_tools",
    "call_parses",
    "continuation_class",
    "crate",
    "distinct_draws",
    "full_variant",
    "item_keys",
    "kinds_of",
    "l2_values",
    "l3_values",
    "expected_tool",
    "flat_closer",
    "array_closed_by_brace",
    "known_measures",
    "measure",
    "measure_of",
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


def distinct_draws(samples: Sequence[SampleRecord]) -> list[SampleRecord]:
    """``samples`` with copies removed, first occurrence kept.

    Two samples are one draw when the same model saw the same prompt bytes and prefill under the same
    mode, engine (and open grammar's ``duplicates``) and temperature with the same seed, random stream
    and index (sampling is deterministic given these), or, at temperature 0, produced the same tokens.
    """
    seen: set[tuple] = set()
    out = []
    for s in samples:
        k = s.draw_key()
        if k in seen:
            continue
        seen.add(k)
        out.append(s)
    return out


def arm_tools(arm: Condition) -> tuple[list[Any], str | None, frozenset[str]]:
    """The catalog tools an arm's conversation shows (an earlier turn's tools included: the prior
    episode's flat Edit set), the tool it is expected to call, and schema keywords the arm's view adds
    (what classifies a key: ``sample_context``)."""
    from tooldecode.grammar import load_tool
    from tooldecode.prompts import EDIT_TOOL, TOOLSETS

    toolset = arm.toolset or "nested"
    names = list(TOOLSETS.get(toolset, TOOLSETS["nested"]))
    if arm.prior and toolset != "flat-edit":
        names += [n for n in TOOLSETS["flat-edit"] if n not in names]
    tools = [load_tool(n) for n in names]
    extra: set[str] = set()
    if arm.schema_view in ("closed", "strictified"):
        extra.add("additionalProperties")
    if isinstance(arm.schema_extra, dict):
        for kw in arm.schema_extra.values():
            if isinstance(kw, dict):
                extra.update(kw)
    return tools, EDIT_TOOL.get(toolset), frozenset(extra)


_CTX_CACHE: dict[tuple, KeyContext] = {}


def sample_context(s: SampleRecord) -> KeyContext:
    """The ``KeyContext`` at the end of a sample's prefill, with the tools its arm showed."""
    arm = s.arm
    key = (
        s.prefill,
        arm.toolset,
        bool(arm.prior),
        arm.schema_view,
        json.dumps(arm.schema_extra, sort_keys=True),
    )
    if key not in _CTX_CACHE:
        tools, edit, extra = arm_tools(arm)
        ctx = key_context(s.prefill, tools, expected_tool=edit)
        if extra:
            known = ctx.present | ctx.declared | ctx.elsewhere
            ctx = dataclasses.replace(ctx, schema_words=ctx.schema_words | (extra - known))
        _CTX_CACHE[key] = ctx
    return _CTX_CACHE[key]


def sample_continuation(s: SampleRecord) -> Continuation:
    """Kind of what an L2 sample wrote after the forced content of the gold value (its closing quote
    is pending); the text is taken as complete."""
    return classify_continuation(s.text, context=sample_context(s), pending='"', final=True)


_VERDICTS: dict[tuple, VerdictRecord] = {}


def sample_verdict(s: SampleRecord, verdict: VerdictRecord | None = None) -> VerdictRecord:
    """The scorer's verdict of a sample's call (prefill + text) against the tools its prompt showed:
    ``verdict`` where the caller has it (a loaded run's), else scored here without a scenario (what the
    measures read of it, the class, tool, flags and invented keys, needs none)."""
    if verdict is not None:
        return verdict
    from tooldecode.scoring import score_record

    key = (s.key, s.call_text, s.finish_reason, s.arm.label())
    if key not in _VERDICTS:
        _VERDICTS[key] = score_record(s, None)
    return _VERDICTS[key]


def expected_tool(s: SampleRecord) -> str | None:
    """The tool a sample's turn is expected to call (its arm's, else its tool set's edit tool)."""
    return s.arm.expected_tool or arm_tools(s.arm)[1]


def sample_outcome(s: SampleRecord, verdict: VerdictRecord | None = None) -> str:
    """The outcome (``tooldecode.classify.OUTCOMES``) of an L2 sample: its kind, or for an extra key what
    the whole call does (source-shaped failure, duplicate key, derailment, other failure)."""
    c = sample_continuation(s)
    if c.kind not in EXTRA_KEY_KINDS:
        return c.kind
    edit = expected_tool(s)
    return call_outcome(
        c,
        sample_verdict(s, verdict).to_json(),
        sample_context(s).present,
        tool=edit,
        parsed_here=_parsed_here(s, edit),
    )


FLAT_CLOSER = re.compile(r'"\s*\}\s*\}')


def flat_closer(after: str) -> bool:
    """Whether ``after`` (what follows a newText value's content, its closing quote first) closes the
    string with ``"}}``, whitespace between allowed: the flat edit call's closer (its arguments, then its
    envelope), where the nested item wants ``"}`` then ``]`` or ``,``."""
    return FLAT_CLOSER.match(after) is not None


def array_closed_by_brace(call_text: str) -> bool:
    """Whether the first bracket of ``call_text`` (a call's JSON, from its opening brace) that does not
    match is a ``}`` where an array's ``]`` belongs: the nested call ended in the flat call's shape
    (``{…"edits": [{…}}}``), at any point of the item, not only right after newText (``flat_closer``).
    Strings (with their escapes) are skipped; False once the call's outer object closes, at any other
    mismatch, or where the text ends first."""
    stack: list[str] = []
    for ch in brackets(call_text):
        if ch in "{[":
            stack.append(ch)
            continue
        if not stack:
            return False
        top = stack.pop()
        if top == "[" and ch == "}":
            return True
        if (top == "{" and ch == "]") or not stack:
            return False
    return False


def call_parses(s: SampleRecord) -> bool:
    """Whether the call a sample's prefill opens parses under its wire format: at L2 the call that holds
    the decision point, at L1 the call the forced opening starts; without a prefill, the first call of
    the text (a later call that parses does not count)."""
    edit = expected_tool(s)
    if s.prefill:
        return _parsed_here(s, edit)
    from tooldecode.scoring import extract_calls, record_tools

    calls = extract_calls(s.call_text, wire=s.arm.wire, tools=record_tools(s), expected_tool=edit)
    return bool(calls) and calls[0].error is None


def _parsed_here(s: SampleRecord, edit: str | None) -> bool:
    """Whether the call that holds an L2 sample's decision point (the end of its prefill) parsed: a
    verdict can describe a later call of the same tool that did (the scorer reads the best call)."""
    from tooldecode.scoring import extract_calls, record_tools

    calls = extract_calls(s.call_text, wire=s.arm.wire, tools=record_tools(s), expected_tool=edit)
    at = len(s.prefill)
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


def item_keys(s: SampleRecord) -> list[ItemKey]:
    """The undeclared keys of each ``edits[]`` item in an L1 sample's call (prefill + text), in order.

    The call is the first JSON object of the text holding the edit tool's array (envelope or bare
    arguments); a text with none gives ``[]``. A key's kind is resolved as at L2
    (``KeyContext.key_kind``), with the item's keys written before it as present (the item's other
    keys when it is the first), so a repeated or mangled item key is a ``repeat``, a tool word a
    ``schema_word``, and any other name ``invented``."""
    from tooldecode.scoring import record_tools
    from tooldecode.scoring.checks import edit_keys

    tools, edit, _ = arm_tools(s.arm)
    tool = next((t for t in record_tools(s) if t.name == edit), None)
    if tool is None:
        return []
    array_key, old_key, _ = edit_keys(tool)
    if array_key is None or old_key is None:
        return []
    items = _ordered_edits(s.call_text, array_key)
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


def require_scenario_streams(samples: Iterable[SampleRecord], what: str = "a cluster interval") -> None:
    """Refuse (``SharedStreamsError``) samples drawn without a per-scenario random stream (their run's
    manifest has no ``"streams": "scenario"``: ``tooldecode.runs.Run.shared_streams``)."""
    for s in samples:
        if s.stream is None:
            raise SharedStreamsError(
                f'{what} over samples of {s.label} (e.g. {s.key}): its run\'s manifest has no "streams": '
                '"scenario", so every scenario drew from the same random stream and scenarios are not '
                "independent clusters; rerun it with per-scenario streams (the spec default) or report "
                "counts only"
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


# --------------------------------------------------------------------------------------------- registry


@dataclasses.dataclass(frozen=True)
class Measure:
    """One measure: its name, the levels it is defined at, and the function that takes it.

    A sample measure (L1, L2) maps ``(sample, argument)`` to a bool: whether the sample shows it; a
    probe-row measure (L3) maps ``(row, argument)`` to a probability (None: the row lacks the fields).
    ``argument`` is what follows ``name:`` in a measure string (``kind:repeat+invented``), None
    without one; ``takes`` names it in the listing (None: the measure takes none)."""

    name: str
    levels: tuple[str, ...]
    fn: Callable[..., Any]
    takes: str | None = None

    @property
    def spelled(self) -> str:
        return f"{self.name}:{self.takes}" if self.takes else self.name


MEASURES: dict[tuple[str, str], Measure] = {}
# short names of a measure string
MEASURE_ALIASES = {"goes_on": "kind:string_goes_on", **{o: f"outcome:{o}" for o in EXTRA_OUTCOMES}}


def measure(
    name: str, levels: tuple[str, ...], takes: str | None = None
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register the decorated function as measure ``name`` at ``levels`` (one entry per level)."""

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        for level in levels:
            if (name, level) in MEASURES:
                raise ValueError(f"measure {name!r} at {level} is registered twice")
            MEASURES[(name, level)] = Measure(name, levels, fn, takes)
        return fn

    return register


def known_measures(level: str) -> list[str]:
    """The measures defined at ``level``, as a measure string spells them."""
    return [m.spelled for (_, lv), m in MEASURES.items() if lv == level]


def measure_of(spelled: str, level: str) -> tuple[Measure, str | None]:
    """The registered measure a measure string names at ``level``, and its argument.

    Raises
    ------
    MeasureError
        No such measure at ``level`` (the message lists the known ones).
    """
    if (spelled, level) not in MEASURES:
        spelled = MEASURE_ALIASES.get(spelled, spelled)
    if spelled == "outcome:source_shaped" and ("source_shaped", level) in MEASURES:
        spelled = "source_shaped"  # at L1 the outcome is the call's verdict
    name, sep, arg = spelled.partition(":")
    m = MEASURES.get((name, level))
    if m is None or bool(sep) != bool(m.takes):
        raise MeasureError(
            f"unknown {level} measure {spelled!r}; known at {level}: {', '.join(known_measures(level))}"
        )
    return m, (arg if sep else None)


def kinds_of(measure: str) -> tuple[str, ...] | None:
    """The continuation kinds a kind measure counts (``extra_key``, ``kind:K[+K...]``); None otherwise."""
    measure = MEASURE_ALIASES.get(measure, measure)
    if measure == "extra_key":
        return EXTRA_KEY_KINDS
    if measure.startswith("kind:"):
        return tuple(measure[5:].split("+"))
    return None


@measure("continue", ("L2",))
def _continues(s: SampleRecord, _: None) -> bool:
    return sample_continuation(s).group == CONTINUE


@measure("close", ("L2",))
def _closes(s: SampleRecord, _: None) -> bool:
    return sample_continuation(s).group == "close"


@measure("extra_key", ("L2",))
def _extra_key(s: SampleRecord, _: None) -> bool:
    return sample_continuation(s).kind in EXTRA_KEY_KINDS


@measure("kind", ("L2",), takes="K[+K...]")
def _kind(s: SampleRecord, kinds: str) -> bool:
    return sample_continuation(s).kind in kinds.split("+")


@measure("key", ("L2",), takes="NAME")
def _key(s: SampleRecord, key: str) -> bool:
    c = sample_continuation(s)
    return c.group == CONTINUE and c.key == key


@measure("outcome", ("L2",), takes="O[+O...]")
def _outcome(s: SampleRecord, outcomes: str) -> bool:
    return sample_outcome(s) in outcomes.split("+")


@measure("parses", ("L1", "L2"))
def _parses(s: SampleRecord, _: None) -> bool:
    """The call parses (``call_parses``): the competence an extra key's outcome presupposes."""
    return call_parses(s)


@measure("array_closed_by_brace", ("L2",))
def _array_closed_by_brace(s: SampleRecord, _: None) -> bool:
    """The call a draw's prefill opens closes its ``edits[]`` with ``}`` (``array_closed_by_brace``)."""
    return array_closed_by_brace(s.call_text)


@measure("flat_closer", ("L2",))
def _flat_closer(s: SampleRecord, _: None) -> bool:
    """The draw closes the forced newText with the flat call's ``"}}`` (``flat_closer``)."""
    return flat_closer(s.text)


@measure("source_shaped", ("L1",))
def _source_shaped_call(s: SampleRecord, _: None) -> bool:
    """At L1 (no forced newText): the scorer's verdict of the call is the source's failure."""
    return source_shaped(sample_verdict(s).to_json())


def sample_event(s: SampleRecord, measure: str) -> bool:
    """Whether sample ``s`` shows ``measure`` at its arm's level (``MEASURES``; ``source_shaped``,
    ``duplicate``, ``derailment``, ``extra_other`` and ``goes_on`` are short for their outcome or kind;
    at L1 ``source_shaped`` is the call's verdict). ``MeasureError`` for a measure not defined there."""
    m, arg = measure_of(measure, "L1" if s.arm.level == "L1" else "L2")
    return bool(m.fn(s, arg))


def crate(samples: Sequence[SampleRecord], pred: Callable[[SampleRecord], bool]) -> ClusterRate:
    """Cluster-robust rate of ``pred`` over the distinct draws of ``samples`` (clusters: scenarios);
    refused (``SharedStreamsError``) for samples drawn with shared random streams."""
    require_scenario_streams(samples)
    ss = distinct_draws(samples)
    return cluster_rate([bool(pred(s)) for s in ss], [s.scenario for s in ss])


def l2_values(samples: Sequence[SampleRecord], measure: str) -> tuple[dict[str, float], int, int, int]:
    """Per scenario: the share of distinct draws showing ``measure``; plus events, event scenarios, draws.
    Refused (``SharedStreamsError``) for samples drawn with shared random streams."""
    require_scenario_streams(samples, "a paired comparison over scenarios")
    ss = distinct_draws(samples)
    by: dict[str, list[bool]] = defaultdict(list)
    for s in ss:
        by[s.scenario].append(sample_event(s, measure))
    vals = {k: float(np.mean(v)) for k, v in by.items()}
    events = sum(sum(v) for v in by.values())
    return vals, events, sum(1 for v in by.values() if any(v)), len(ss)


# --- probe rows (L3)


def _row_value(field: str) -> Callable[[ProbeRow, None], float]:
    def value(row: ProbeRow, _: None) -> float:
        return float(getattr(row, field))

    return value


for _field in (  # a probability of the row as stored
    "p_continue",
    "p_close",
    "p_other",
    "p_undetermined",
    "p_continue_undetermined",
    "decision_entropy",
):
    measure(_field, ("L3",))(_row_value(_field))


def _kind_mass(row: ProbeRow, kinds: tuple[str, ...]) -> float | None:
    by = row.p_continue_by_kind
    if not by:
        return None
    other = row.p_other_by_kind or {}
    return float(sum(by.get(k, 0.0) + other.get(k, 0.0) for k in kinds))


@measure("extra_key", ("L3",))
def _p_extra_key(row: ProbeRow, _: None) -> float | None:
    return _kind_mass(row, EXTRA_KEY_KINDS)


@measure("kind", ("L3",), takes="K[+K...]")
def _p_kind(row: ProbeRow, kinds: str) -> float | None:
    return _kind_mass(row, tuple(kinds.split("+")))


@measure("key", ("L3",), takes="NAME")
def _p_key(row: ProbeRow, key: str) -> float | None:
    if not row.p_continue_by_kind:
        return None
    return float((row.continue_keys or {}).get(key, 0.0))


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


def full_variant(variant: Mapping[str, Any] | None) -> dict[str, Any]:
    """A probe row's variant with every unstated field at its default."""
    return {**VARIANT_DEFAULTS, **(variant or {})}


def row_measure(row: ProbeRow, measure: str) -> float | None:
    """``measure`` of one probe row (``MEASURES`` at L3; None when the row lacks the key-resolved fields
    it needs)."""
    m, arg = measure_of(measure, "L3")
    value = m.fn(row, arg)
    return None if value is None else float(value)


def l3_values(
    rows: Sequence[ProbeRow],
    measure: str,
    *,
    after: str = "newText",
    model: str | None = None,
    **variant: Any,
) -> dict[str, float]:
    """Per scenario: the mean of ``measure`` over the decision points after ``after`` whose variant
    matches ``variant`` (unstated fields at their defaults)."""
    want = full_variant(variant)
    out: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        if r.after != after or (model and r.model != model):
            continue
        if full_variant(r.variant) != want:
            continue
        v = row_measure(r, measure)
        if v is not None:
            out[r.scenario].append(v)
    return {k: float(np.mean(v)) for k, v in out.items()}
