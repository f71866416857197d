"""Error types of the grammar builder. Messages are one line: what, where (JSON pointer), what to do."""

from __future__ import annotations

from tooldecode.errors import SchemaError


class UnsupportedSchemaError(SchemaError):
    """A schema keyword (or combination) that cannot be rendered exactly.

    ``keyword`` and ``pointer`` name what was refused; ``lenient=True`` ignores it and records it instead.
    """

    def __init__(self, keyword: str, pointer: str, detail: str = "") -> None:
        self.keyword = keyword
        self.pointer = pointer or ""
        where = pointer if pointer else "(root)"
        tail = f": {detail}" if detail else ""
        super().__init__(
            f"unsupported schema keyword '{keyword}' at {where}{tail}; "
            "remove it, or pass lenient=True (CLI: --lenient) to ignore it; ignored keywords are reported"
        )


class InvalidSchemaError(UnsupportedSchemaError):
    """A keyword whose value is not valid JSON Schema (an unknown type name, ``minLength: -1``, ...).

    Not affected by ``lenient``: the schema itself needs fixing."""

    def __init__(self, keyword: str, pointer: str, detail: str = "") -> None:
        self.keyword = keyword
        self.pointer = pointer or ""
        where = pointer if pointer else "(root)"
        tail = f": {detail}" if detail else ""
        SchemaError.__init__(self, f"invalid schema keyword '{keyword}' at {where}{tail}; fix the schema")


class GrammarError(SchemaError):
    """A schema that is fine but cannot be rendered with the requested options (format, wire, order, ...)."""


class GrammarWarning(UserWarning):
    """A schema rendered with a documented narrowing (e.g. a constrained string inside a delimited wire
    that never holds the delimiter's first character raw; see ``tooldecode.grammar.textlang``)."""


def pointer_join(pointer: str, *tokens: object) -> str:
    """Append reference tokens to a JSON pointer (RFC 6901 escaping)."""
    out = pointer
    for tok in tokens:
        out += "/" + str(tok).replace("~", "~0").replace("/", "~1")
    return out
