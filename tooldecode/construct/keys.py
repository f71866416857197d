"""Every undeclared key of a draw's items as a typed record (``UndeclaredKey``, ``undeclared_keys``),
and what the rows count of them: chains per item, kinds, distinct names with their Chao1 estimate."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from tooldecode.construct.names import NameSources, name_kinds
from tooldecode.construct.scan import scan_items
from tooldecode.measures import arm_tools, distinct_draws, expected_tool
from tooldecode.records import SampleRecord
from tooldecode.stats import Richness, chao1

__all__ = ["UndeclaredKey", "chains", "draws_of", "kind_counts", "name_richness", "undeclared_keys"]


@dataclass(frozen=True)
class UndeclaredKey:
    """A key an ``edits[]`` item has that the item schema does not declare (``undeclared_keys``).

    Attributes
    ----------
    sample, model, scenario, level, mode
        The draw (its record key) and its arm.
    name : str
        The key as written.
    kind : str
        The kind of the name (the first of ``kinds``).
    kinds : tuple of str
        Every kind of ``NAME_KINDS`` that applies, in precedence order.
    item, items : int
        The item's index (0-based) and how many items the call has.
    new_text_chars : int or None
        Characters of the item's ``newText`` (None: no complete ``newText`` string).
    value_type : str
        The JSON type of the key's value (``ScannedKey.value_type``).
    chain_pos, chain_len : int
        Its place (1-based) among the item's undeclared keys, and how many the item has.
    after : str or None
        The key written just before it in the item (None: the item's first).
    last : bool
        No key follows it in the item.
    parses : bool
        The draw's call parses (``tooldecode.measures.call_parses``).
    """

    sample: str
    model: str
    scenario: str
    level: str
    mode: str
    name: str
    kind: str
    kinds: tuple[str, ...]
    item: int
    items: int
    new_text_chars: int | None
    value_type: str
    chain_pos: int
    chain_len: int
    after: str | None
    last: bool
    parses: bool


def _tool_keys(s: SampleRecord) -> tuple[str, str, str, frozenset[str], frozenset[str]]:
    """(array key, old-text key, new-text key, item keys declared, every property name of the tool)."""
    from tooldecode.scoring import record_tools
    from tooldecode.scoring.checks import edit_keys
    from tooldecode.scoring.schemas import resolve_schema, schema_properties

    edit = expected_tool(s)
    tool = next((t for t in record_tools(s) if t.name == edit), None)
    if tool is None:
        tools, _, _ = arm_tools(s.arm)
        tool = next((t for t in tools if t.name == edit), None)
    if tool is None:
        return "edits", "oldText", "newText", frozenset({"oldText", "newText"}), frozenset()
    array_key, old_key, new_key = edit_keys(tool)
    props = schema_properties(tool.parameters, tool.parameters)
    item_props: dict[str, Any] = {}
    if array_key is not None:
        sub = resolve_schema(props[array_key], tool.parameters)
        item_props = schema_properties(sub.get("items") if isinstance(sub, dict) else None, tool.parameters)
    names = set(props) | set(item_props)
    return (
        array_key or "edits",
        old_key or "oldText",
        new_key or "newText",
        frozenset(item_props),
        frozenset(names),
    )


def undeclared_keys(
    s: SampleRecord, sources: NameSources, *, parses: bool | None = None
) -> list[UndeclaredKey]:
    """Every undeclared key of every item of a draw's first call (prefill + text, ``scan_items``).

    ``sources.declared`` empty: the tool's own property names are used. ``parses``: whether the call
    parses (default: ``tooldecode.measures.call_parses``)."""
    from tooldecode.measures import call_parses

    array_key, _, new_key, item_declared, names = _tool_keys(s)
    if not sources.declared:
        sources = NameSources(names, sources.prompt, sources.stray_pool, sources.training)
    items = scan_items(s.call_text, array_key, new_key)
    ok = call_parses(s) if parses is None else parses
    out: list[UndeclaredKey] = []
    for it in items:
        keys = list(it.keys)
        extra = [j for j, k in enumerate(keys) if k.name not in item_declared]
        for pos, j in enumerate(extra, 1):
            k = keys[j]
            kinds = name_kinds(k.name, sources)
            out.append(
                UndeclaredKey(
                    sample=s.key,
                    model=s.arm.model,
                    scenario=s.scenario,
                    level=s.arm.level or "",
                    mode=s.arm.mode,
                    name=k.name,
                    kind=kinds[0],
                    kinds=kinds,
                    item=it.index,
                    items=len(items),
                    new_text_chars=None if it.new_text is None else len(it.new_text),
                    value_type=k.value_type,
                    chain_pos=pos,
                    chain_len=len(extra),
                    after=keys[j - 1].name if j else None,
                    last=j == len(keys) - 1,
                    parses=ok,
                )
            )
    return out


def chains(keys: Sequence[UndeclaredKey]) -> Counter[int]:
    """Items with undeclared keys by the length of their chain (one count per item, not per key)."""
    seen = {(k.sample, k.item): k.chain_len for k in keys}
    return Counter(seen.values())


def kind_counts(keys: Sequence[UndeclaredKey]) -> tuple[Counter[str], Counter[str]]:
    """(occurrences by kind, occurrences by every kind that applies) of ``keys``."""
    first = Counter(k.kind for k in keys)
    every = Counter(kind for k in keys for kind in k.kinds)
    return first, every


def name_richness(keys: Sequence[UndeclaredKey], kind: str | None = None) -> Richness:
    """Distinct names of ``keys`` (of the one ``kind`` when given) with their Chao1 estimate
    (``tooldecode.stats.chao1``: bias-corrected, 95% log-normal interval)."""
    return chao1(Counter(k.name for k in keys if kind is None or k.kind == kind))


def draws_of(samples: Iterable[SampleRecord], model: str, mode: str = "loose") -> list[SampleRecord]:
    """Distinct draws of ``model`` in ``mode`` without an error (every level)."""
    return distinct_draws([s for s in samples if not s.error and s.arm.model == model and s.arm.mode == mode])
