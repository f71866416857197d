"""The grammar builder's stated budget: what one build may cost before it stops with one line.

Every build (``render``, ``render_toolset``, ``compile_schema``, ``build_grammar``) runs under a
budget; past any bound it raises ``GrammarError`` naming the schema pointer it was working on:

- ``MAX_SECONDS``: wall time of one build (the outermost call's clock; nested calls share it);
- ``MAX_RULES``: rules of one grammar;
- ``MAX_OUTPUT_BYTES``: bytes of one printed grammar;
- ``MAX_REPEAT``: a count a schema asks to be repeated (``minItems``, ``maxItems``,
  ``minProperties``, ``maxProperties``, ``minContains``, ``maxContains``), checked before compiling
  (``tooldecode.grammar.schema.check_budget``), and ``MAX_UNROLL``: a repetition a format has to write
  out (Lark's bounded repetitions, GBNF's chunks of ``{1000}``);
- ``MAX_ONEOF_OVERLAPS``: pairs of ``oneOf`` branches that may overlap (each overlap is excluded by a
  difference whose size can grow as a product);
- ``$ref`` chains are followed without recursion (an alias of an alias of ... is one step each), and a
  nesting of subschemas deeper than the interpreter allows is refused, naming where.

The schema's own size bounds (``MAX_DEPTH``, ``MAX_NODES``, ``MAX_MEMBERS``, ``MAX_ENUM``,
``MAX_INT_BITS``) are in ``tooldecode.grammar.schema``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

MAX_SECONDS = 8.0
MAX_RULES = 200_000
MAX_OUTPUT_BYTES = 32 * 1024 * 1024
MAX_REPEAT = 100_000
MAX_UNROLL = 10_000
MAX_ONEOF_OVERLAPS = 64


class _Budget:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.deadline = time.monotonic() + seconds
        self.where = ""


_local = threading.local()


@contextmanager
def budget(seconds: float = MAX_SECONDS) -> Iterator[None]:
    """Run a build under the budget (a nested build shares the outermost one's clock)."""
    if getattr(_local, "current", None) is not None:
        yield
        return
    _local.current = _Budget(seconds)
    try:
        yield
    finally:
        _local.current = None


def at(where: str) -> None:
    """Note the schema pointer being worked on (named if the budget runs out)."""
    b = getattr(_local, "current", None)
    if b is not None:
        b.where = where


def where() -> str:
    """The schema pointer last noted ("/" for the root, "" outside a build)."""
    b = getattr(_local, "current", None)
    return (b.where or "/") if b is not None else ""


def tick(where_: str | None = None) -> None:
    """Raise ``GrammarError`` when the build has run past its time."""
    b = getattr(_local, "current", None)
    if b is None:
        return
    if where_ is not None:
        b.where = where_
    if time.monotonic() > b.deadline:
        from tooldecode.grammar.errors import GrammarError

        _local.current = None  # one error, not one per frame unwinding
        raise GrammarError(
            f"building the grammar ran past its {b.seconds:g} s budget at {b.where or '/'}; "
            "simplify the schema there (fewer overlapping oneOf/anyOf branches, smaller bounds)"
        )


def too_big(what: str) -> Exception:
    """The one-line error for a build past a size bound, naming the pointer last noted."""
    from tooldecode.grammar.errors import GrammarError

    at_ = where()
    return GrammarError(
        f"{what}{f' (at {at_})' if at_ else ''}; this builder renders at most that: simplify the schema"
    )


__all__ = [
    "MAX_ONEOF_OVERLAPS",
    "MAX_OUTPUT_BYTES",
    "MAX_REPEAT",
    "MAX_RULES",
    "MAX_SECONDS",
    "MAX_UNROLL",
    "at",
    "budget",
    "tick",
    "too_big",
    "where",
]
