"""JSON Schema (draft 2020-12 subset) -> schema IR, and ``strictify``.

``mode="spec"`` follows JSON Schema: an object without ``additionalProperties`` admits other keys,
``format`` is an annotation. ``mode="strict"`` compiles ``strictify(schema)`` (every object closed)
and asserts the formats that are regular languages (``strlang.FORMAT_PATTERNS``). The compiler is in
``compiler`` (per-type keywords: ``compile_types``), ``strictify`` in ``strictify``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tooldecode.grammar import ir
from tooldecode.grammar.budget import MAX_REPEAT, budget
from tooldecode.grammar.compiler import Compiler
from tooldecode.grammar.dialects import to_2020
from tooldecode.grammar.ir import Node
from tooldecode.grammar.keywords import KNOWN, MODES, ORDERS
from tooldecode.grammar.strictify import strictify

__all__ = [
    "KNOWN",
    "MAX_DEPTH",
    "MODES",
    "ORDERS",
    "SchemaIR",
    "check_budget",
    "check_depth",
    "compile_schema",
    "json_depth",
    "strictify",
]


@dataclass
class SchemaIR:
    """A compiled schema.

    ``ignored`` lists the (keyword, JSON pointer) pairs that do not constrain the grammar: unknown
    keywords and keywords the schema's draft does not define (annotations, as JSON Schema says),
    formats not asserted, and what ``lenient=True`` skipped. ``warnings`` says which formats were
    read as annotations in strict mode; ``dialect`` is the draft the schema was read as."""

    root: Node
    defs: dict[str, Node] = field(default_factory=dict)
    ignored: list[tuple[str, str]] = field(default_factory=list)
    mode: str = "strict"
    order: str = "schema"
    warnings: list[str] = field(default_factory=list)
    dialect: str = "draft2020-12"

    def accepts(self, value: Any) -> bool:
        """Whether ``value`` is in the language of the IR (a semantic check, not a grammar run)."""
        return ir.accepts(self.root, value, self.defs)


def compile_schema(
    schema: Any, *, mode: str = "strict", order: str = "schema", lenient: bool = False
) -> SchemaIR:
    """Compile a JSON Schema to the grammar IR that every grammar format is printed from.

    Parameters
    ----------
    schema : dict or bool
        A JSON Schema of any supported draft (4, 6, 7, 2019-09, 2020-12; see
        ``tooldecode.grammar.dialects``), translated to 2020-12 first.
    mode : str, default "strict"
        ``strict`` closes every object (``strictify``) and asserts ``format``; ``spec`` follows the
        schema as written (one of ``MODES``).
    order : str, default "schema"
        Key order of objects (one of ``ORDERS``), kept on the IR for the printers.
    lenient : bool, default False
        Skip keywords that have no exact rendering (listed in ``SchemaIR.ignored``) instead of raising.

    Returns
    -------
    SchemaIR
        The root expression, its named definitions, the ignored keywords, warnings and the dialect.

    Raises
    ------
    GrammarError
        An unknown mode or order, or a schema nested deeper than ``MAX_DEPTH`` or too large to render.
    UnsupportedSchemaError
        A keyword with no exact rendering (keyword and JSON pointer named), unless ``lenient``.
    InvalidSchemaError
        A schema that is not valid JSON Schema.
    """
    from tooldecode.grammar.errors import GrammarError

    if mode not in MODES:
        raise GrammarError(f"unknown mode {mode!r}; use one of {', '.join(MODES)}")
    if order not in ORDERS:
        raise GrammarError(f"unknown order {order!r}; use one of {', '.join(ORDERS)}")
    check_depth(schema)
    check_budget(schema)
    with budget():
        translated, dialect, dropped = to_2020(schema)
        src = strictify(translated) if mode == "strict" else translated
        c = Compiler(src, lenient=lenient, assert_format=(mode == "strict"))
        c.ignored.extend(dropped)
        try:
            root = c.compile_root()
        except RecursionError:  # subschemas inside each other (through $ref) past the interpreter's depth
            raise GrammarError(
                f"the schema's subschemas nest too deep to render (through $ref chains or values, down to "
                f"{short_pointer(c.deepest)}); flatten it or make the chain shorter"
            ) from None
    return SchemaIR(root, c.defs, c.ignored, mode, order, c.warnings, dialect)


MAX_DEPTH = 128


def json_depth(value: Any) -> int:
    """Nesting depth of a JSON value (a scalar is 0, ``[]`` and ``{}`` are 1), without recursion."""
    return _deepest(value)[0]


def short_pointer(ptr: str, keep: int = 100) -> str:
    """A JSON pointer fit for a one-line message: its start and its end when it is long."""
    ptr = ptr or "/"
    return ptr if len(ptr) <= keep else f"{ptr[: keep // 2]}…{ptr[-keep // 2 :]}"


def _deepest(value: Any) -> tuple[int, str]:
    """(depth, JSON pointer of a deepest container) of a JSON value, without recursion."""
    from tooldecode.grammar.errors import pointer_join

    deepest, where = 0, ""
    stack: list[tuple[Any, int, str]] = [(value, 0, "")]
    while stack:
        v, d, ptr = stack.pop()
        if isinstance(v, dict):
            stack.extend((x, d + 1, pointer_join(ptr, k)) for k, x in v.items())
        elif isinstance(v, list):
            stack.extend((x, d + 1, pointer_join(ptr, i)) for i, x in enumerate(v))
        else:
            continue
        if d + 1 > deepest:
            deepest, where = d + 1, ptr
    return deepest, where


def check_depth(schema: Any) -> None:
    """Raise ``GrammarError`` for a schema nested deeper than ``MAX_DEPTH`` JSON levels (deeper
    schemas would exhaust the interpreter's recursion limit while rendering)."""
    from tooldecode.grammar.errors import GrammarError

    d, where = _deepest(schema)
    if d > MAX_DEPTH:
        raise GrammarError(
            f"the schema is nested {d} levels deep (JSON, down to {short_pointer(where)}), more than the {MAX_DEPTH} "
            "this builder renders; flatten it or move repeated parts into $defs"
        )


# what this builder renders in reasonable time and memory: past these it fails fast, naming where
MAX_NODES = 100_000  # JSON values in the whole schema
MAX_MEMBERS = 500  # properties of one object (the ordered-optional automaton grows as the square)
MAX_ENUM = 10_000  # values of one enum
MAX_INT_BITS = 13_000  # integer literals (about 3,900 decimal digits; Python prints at most 4,300)
# counts a grammar has to repeat an item (budget.MAX_REPEAT); string lengths are the string renderer's
REPEAT_KEYWORDS = ("minItems", "maxItems", "minProperties", "maxProperties", "minContains", "maxContains")


def check_budget(schema: Any) -> None:
    """Raise ``GrammarError`` (naming the JSON pointer) for a schema too big to render: more than
    ``MAX_NODES`` values, an object of more than ``MAX_MEMBERS`` properties, an enum of more than
    ``MAX_ENUM`` values, or an integer literal of more than ``MAX_INT_BITS`` bits. Without recursion."""
    from tooldecode.grammar.errors import GrammarError, pointer_join

    nodes = 0
    stack: list[tuple[Any, str, str | None]] = [(schema, "", None)]
    while stack:
        v, where, key = stack.pop()
        nodes += 1
        if nodes > MAX_NODES:
            raise GrammarError(
                f"the schema has more than {MAX_NODES:,} JSON values (at {where or '/'}), more than this "
                "builder renders; split the tool or move repeated parts into $defs"
            )
        if isinstance(v, bool):
            continue
        if isinstance(v, int) and v.bit_length() > MAX_INT_BITS:
            raise GrammarError(
                f"the integer at {where or '/'} has about {int(v.bit_length() * 0.30103):,} digits, more than "
                f"the {int(MAX_INT_BITS * 0.30103):,} this builder renders; use a smaller bound"
            )
        if isinstance(v, dict):
            for kw in REPEAT_KEYWORDS:
                n = v.get(kw) if key != "properties" else None
                if isinstance(n, int | float) and not isinstance(n, bool) and n > MAX_REPEAT:
                    raise GrammarError(
                        f"{kw} at {pointer_join(where, kw)} is {n:,}, more than the {MAX_REPEAT:,} this "
                        f"builder renders; use a smaller {kw} (or none)"
                    )
            if key == "properties" and len(v) > MAX_MEMBERS:
                raise GrammarError(
                    f"the object at {where} has {len(v):,} properties, more than the {MAX_MEMBERS:,} this "
                    "builder renders; split the tool or use patternProperties / additionalProperties"
                )
            stack.extend(
                (x, pointer_join(where, k), k if key != "properties" else None) for k, x in v.items()
            )
        elif isinstance(v, list):
            if key == "enum" and len(v) > MAX_ENUM:
                raise GrammarError(
                    f"the enum at {where} has {len(v):,} values, more than the {MAX_ENUM:,} this builder "
                    "renders; use a pattern or a plain type"
                )
            stack.extend((x, pointer_join(where, i), None) for i, x in enumerate(v))
