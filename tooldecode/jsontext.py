"""JSON text read as characters, for the scans that must not parse: the brackets of a text outside its
JSON strings (escapes honoured), in order. Pure Python; imported by ``tooldecode.repair`` and
``tooldecode.measures``."""

from __future__ import annotations

from collections.abc import Iterator

__all__ = ["brackets"]


def brackets(text: str) -> Iterator[str]:
    """The characters ``{``, ``[``, ``}`` and ``]`` of ``text`` that stand outside JSON strings, in order.

    Parameters
    ----------
    text
        JSON text, whole or cut anywhere (an unclosed string hides the rest).

    Yields
    ------
    str
        Each bracket character, one at a time.
    """
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "{[}]":
            yield ch
