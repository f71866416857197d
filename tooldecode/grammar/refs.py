"""``$ref`` chains without recursion: a schema that is only a ``$ref`` (and annotations) is an alias of
its target, and a chain of aliases is followed in a loop, one step a link (a chain of any length a real
schema can have renders; the compiler's recursion is left for subschemas that are values)."""

from __future__ import annotations

from typing import Any

from tooldecode.grammar import ir
from tooldecode.grammar.budget import tick
from tooldecode.grammar.errors import pointer_join

# keywords an alias may carry besides its $ref (annotations: they change no value's validity)
ALIAS_EXTRAS = frozenset(
    {"$ref", "title", "description", "default", "examples", "deprecated", "readOnly", "writeOnly"}
    | {"$comment", "$defs", "definitions", "$anchor"}
)


def is_alias(s: Any) -> bool:
    """Whether schema ``s`` is a ``$ref`` and annotations only (the referenced schema, unchanged)."""
    return isinstance(s, dict) and isinstance(s.get("$ref"), str) and s.keys() <= ALIAS_EXTRAS


def follow_aliases(
    c: Any, s: dict[str, Any], key: tuple[int, str], ptr: str, resolver: Any, depth: int
) -> ir.Node:
    """The node of a chain of aliases (schemas that are only a ``$ref``), followed in a loop: a chain
    of any length costs one step per link, not a stack frame."""
    keys: list[tuple[int, str]] = []
    before = c.losses
    while True:
        keys.append(key)
        c._keep.append(s)  # noqa: SLF001 -- kept alive: the memo is keyed by id
        kptr, ref = pointer_join(ptr, "$ref"), s["$ref"]
        try:
            resolved = resolver.lookup(ref)
        except Exception as e:  # referencing.exceptions.Unresolvable and friends
            c.unsupported("$ref", kptr, f"cannot resolve {ref!r} ({type(e).__name__})")
            result = ir.ANY
            break
        tgt = "#" + ref.split("#", 1)[1] if "#" in ref else ref
        ptr = tgt if tgt != "#" else ""
        s, resolver = resolved.contents, resolved.resolver
        tick(ptr)
        if not is_alias(s) or (isinstance(s, dict) and "$id" in s):
            result = c.compile(s, ptr, resolver, depth)
            break
        key = (id(s), str(resolver._base_uri))  # noqa: SLF001 -- the compiler's own resolver
        if key in c.memo or key in c.progress:
            result = c.compile(s, ptr, resolver, depth)
            break
        if key in keys:
            c.unsupported("$ref", kptr, "a reference cycle that does not nest into a value")
            result = ir.ANY
            break
    lossy = c.losses > before
    for k in keys:
        c.memo[k] = result
        if lossy:
            c.lossy.add(k)
    return result
