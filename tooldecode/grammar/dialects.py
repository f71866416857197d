"""Earlier JSON Schema drafts (04, 06, 07, 2019-09) translated exactly into draft 2020-12.

``to_2020(schema)`` returns ``(translated, ignored)``. The dialect comes from the root ``$schema``;
without one, the syntax only earlier drafts give a meaning to (an array ``items``, a boolean
``exclusiveMinimum``, ``dependencies``, ``additionalItems``) is read as draft-07 (draft-04 for the
booleans). Translation, per the drafts:

* ``id`` (04) -> ``$id``; an ``id``/``$id`` that is only a fragment (``#foo``) -> ``$anchor``;
* boolean ``exclusiveMinimum``/``exclusiveMaximum`` (04) -> the numeric form;
* ``dependencies`` (04-07) -> ``dependentRequired`` (arrays) / ``dependentSchemas`` (schemas);
* array ``items`` + ``additionalItems`` (04-2019) -> ``prefixItems`` + ``items``;
* ``$ref`` with siblings (04-07): the siblings are ignored, so they move under ``x-ignored`` (still
  reachable by JSON pointer: local ``$ref``s are rewritten to the new locations);
* keywords a draft does not define (``const`` in draft-04, ``if`` in draft-06, ``prefixItems`` in
  draft-07, ...) are annotations there: they move under ``x-ignored`` and are reported.

Everything else keeps its place. Unknown keywords stay where they are (the compiler reads them as
annotations) and are reported by the compiler.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote, unquote

DRAFT2020 = "https://json-schema.org/draft/2020-12/schema"
HOLDER = "x-ignored"

_ANN = {"title", "description", "default", "$schema", "format"}
_V4 = _ANN | {
    "id", "$ref", "type", "enum", "multipleOf", "maximum", "exclusiveMaximum", "minimum",
    "exclusiveMinimum", "maxLength", "minLength", "pattern", "items", "additionalItems", "maxItems",
    "minItems", "uniqueItems", "maxProperties", "minProperties", "required", "properties",
    "patternProperties", "additionalProperties", "dependencies", "allOf", "anyOf", "oneOf", "not",
    "definitions",
}  # fmt: skip
_V6 = (_V4 - {"id"}) | {"$id", "const", "contains", "propertyNames", "examples"}
_V7 = _V6 | {"if", "then", "else", "readOnly", "writeOnly", "$comment", "contentMediaType", "contentEncoding"}
_V2019 = (_V7 - {"dependencies"}) | {
    "$defs", "$anchor", "$recursiveRef", "$recursiveAnchor", "$vocabulary", "dependentRequired",
    "dependentSchemas", "unevaluatedItems", "unevaluatedProperties", "maxContains", "minContains",
    "deprecated", "contentSchema",
}  # fmt: skip
VOCAB = {"draft4": _V4, "draft6": _V6, "draft7": _V7, "draft2019-09": _V2019}

# every keyword of any draft that holds schemas: name -> "one" | "list" | "map" | "items"
_SUB = {
    "items": "items", "additionalItems": "one", "additionalProperties": "one", "not": "one",
    "contains": "one", "propertyNames": "one", "if": "one", "then": "one", "else": "one",
    "unevaluatedItems": "one", "unevaluatedProperties": "one", "contentSchema": "one",
    "allOf": "list", "anyOf": "list", "oneOf": "list", "prefixItems": "list",
    "properties": "map", "patternProperties": "map", "definitions": "map", "$defs": "map",
    "dependentSchemas": "map", "dependencies": "map",
}  # fmt: skip

_URIS = {
    "draft4": ("json-schema.org/draft-04/schema",),
    "draft6": ("json-schema.org/draft-06/schema",),
    "draft7": ("json-schema.org/draft-07/schema",),
    "draft2019-09": ("json-schema.org/draft/2019-09/schema",),
    "draft2020-12": ("json-schema.org/draft/2020-12/schema",),
}


def dialect_of(uri: Any) -> str | None:
    """The draft named by a ``$schema`` URI (``draft4`` ... ``draft2020-12``), or None if unknown."""
    if not isinstance(uri, str):
        return None
    u = uri.strip().removesuffix("#")
    for scheme in ("https://", "http://"):
        if u.startswith(scheme):
            u = u[len(scheme) :]
            break
    else:
        return None
    for name, stems in _URIS.items():
        if u in stems:
            return name
    return None


def _legacy_syntax(s: Any) -> str | None:
    """Without ``$schema``: the draft implied by syntax only earlier drafts define, else None."""
    stack = [s]
    found: str | None = None
    while stack:
        x = stack.pop()
        if isinstance(x, dict):
            if isinstance(x.get("exclusiveMinimum"), bool) or isinstance(x.get("exclusiveMaximum"), bool):
                return "draft4"
            if isinstance(x.get("items"), list) or "additionalItems" in x or "dependencies" in x:
                found = "draft7"
            for k, v in x.items():
                if k in _SUB:
                    stack.extend(v.values() if isinstance(v, dict) and _SUB[k] == "map" else [v])
                    if isinstance(v, list):
                        stack.extend(v)
        elif isinstance(x, list):
            stack.extend(x)
    return found


def to_2020(schema: Any) -> tuple[Any, str, list[tuple[str, str]]]:
    """``(translated schema, dialect, ignored (keyword, JSON pointer) pairs)``; the input is not changed.

    ``dialect`` is ``draft2020-12`` for a schema left as it is, ``unknown`` for a ``$schema`` this
    module does not know (then the schema is returned unchanged)."""
    if not isinstance(schema, dict):
        return schema, "draft2020-12", []
    if "$schema" in schema:
        d = dialect_of(schema["$schema"])
        if d is None:
            return schema, "unknown", []
    else:
        d = _legacy_syntax(schema) or "draft2020-12"
    if d == "draft2020-12":
        return schema, d, []
    t = _Translator(schema, d)
    out = t.run()
    return out, d, t.ignored


def _ptr(tokens: tuple[str, ...]) -> str:
    return "".join("/" + str(x).replace("~", "~0").replace("/", "~1") for x in tokens)


def _enc(tokens: tuple[str, ...]) -> list[str]:
    return [str(x).replace("~", "~0").replace("/", "~1") for x in tokens]


def parse_pointer(p: str) -> tuple[str, ...] | None:
    """The decoded tokens of a JSON pointer (the part after ``#`` of a local reference); ``None``
    where ``p`` is not one."""
    if p == "":
        return ()
    if not p.startswith("/"):
        return None
    return tuple(unquote(x).replace("~1", "/").replace("~0", "~") for x in p[1:].split("/"))


def json_at(doc: Any, tokens: Iterable[str]) -> Any:
    """The value at ``tokens`` (decoded pointer tokens) in the JSON document ``doc``.

    Raises
    ------
    LookupError
        Where a token names no member or no element.
    """
    for t in tokens:
        if isinstance(doc, dict) and t in doc:
            doc = doc[t]
        elif isinstance(doc, list) and t.isdigit() and int(t) < len(doc):
            doc = doc[int(t)]
        else:
            raise LookupError(t)
    return doc


class _Translator:
    def __init__(self, root: dict[str, Any], dialect: str) -> None:
        self.root = root
        self.d = dialect
        self.vocab = VOCAB[dialect]
        self.old_draft = dialect in ("draft4", "draft6", "draft7")
        self.ignored: list[tuple[str, str]] = []
        self.map: dict[tuple[str, ...], tuple[str, ...]] = {}
        self.refs: list[tuple[dict[str, Any], tuple[str, ...], tuple[str, ...]]] = []

    def run(self) -> Any:
        out = self.schema(self.root, (), (), ())
        self.out = out
        if isinstance(out, dict):
            out["$schema"] = DRAFT2020
        self._fix_refs()
        return out

    # -- one schema: old path, new path, old path of its resource root (for "#/..." references)
    def schema(self, s: Any, old: tuple[str, ...], new: tuple[str, ...], res: tuple[str, ...]) -> Any:
        if not isinstance(s, dict):
            if isinstance(s, bool) and self.d == "draft4":
                return s  # not a draft-04 schema; read as the boolean schema of later drafts
            return copy.deepcopy(s)
        self.map[old] = new
        ident = s.get("id" if self.d == "draft4" else "$id")
        if isinstance(ident, str) and not ident.startswith("#") and old:
            res = old
        out: dict[str, Any] = {}
        held: dict[str, Any] = {}
        ref_only = self.old_draft and "$ref" in s
        for k, v in s.items():
            if ref_only and k != "$ref":
                held[k] = (k, v)
            elif k == "$schema" and old:  # meaningless below the root in these drafts
                held[k] = (k, v)
            elif k in _SUB or k in self.vocab or k.startswith("x-") or k in ("$comment",):
                out[k] = v
            elif _is_keyword(k):
                held[k] = (k, v)
                self.ignored.append((k, _ptr(old + (k,))))
            else:
                out[k] = v  # unknown: stays in place, an annotation for the compiler
        for k in list(out):
            if k in _SUB and k not in self.vocab:
                held[k] = (k, out.pop(k))
                self.ignored.append((k, _ptr(old + (k,))))
        res_out = self._keywords(out, old, new, res)
        if held:
            box: dict[str, Any] = res_out.setdefault(HOLDER, {})
            for k, (_, v) in held.items():
                box[k] = self._any(v, old + (k,), new + (HOLDER, k), res, k)
        if "$ref" in res_out and isinstance(res_out["$ref"], str):
            self.refs.append((res_out, old, res))
        return res_out

    def _any(self, v: Any, old: tuple[str, ...], new: tuple[str, ...], res: tuple[str, ...], kw: str) -> Any:
        """A held (ignored) keyword's value: still translated, so pointers into it resolve alike."""
        kind = _SUB.get(kw)
        if kind == "map" and isinstance(v, dict):
            return {n: self.schema(x, old + (n,), new + (n,), res) for n, x in v.items()}
        if kind in ("list", "items") and isinstance(v, list):
            return [self.schema(x, old + (str(i),), new + (str(i),), res) for i, x in enumerate(v)]
        if kind in ("one", "items"):
            return self.schema(v, old, new, res)
        return copy.deepcopy(v)

    def _keywords(
        self, s: dict[str, Any], old: tuple[str, ...], new: tuple[str, ...], res: tuple[str, ...]
    ) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in s.items():
            kind = _SUB.get(k)
            if k == "items" and isinstance(v, list):
                out["prefixItems"] = [
                    self.schema(x, old + (k, str(i)), new + ("prefixItems", str(i)), res)
                    for i, x in enumerate(v)
                ]
                if "additionalItems" in s:
                    out["items"] = self.schema(
                        s["additionalItems"], old + ("additionalItems",), new + ("items",), res
                    )
            elif k == "additionalItems":
                if not isinstance(s.get("items"), list):
                    # ignored when items is absent or a single schema
                    out.setdefault(HOLDER, {})[k] = self.schema(v, old + (k,), new + (HOLDER, k), res)
            elif k == "dependencies" and isinstance(v, dict):
                for name, dep in v.items():
                    if isinstance(dep, list):
                        out.setdefault("dependentRequired", {})[name] = list(dep)
                    else:
                        out.setdefault("dependentSchemas", {})[name] = self.schema(
                            dep, old + (k, name), new + ("dependentSchemas", name), res
                        )
            elif k in ("exclusiveMinimum", "exclusiveMaximum") and isinstance(v, bool):
                bound = "minimum" if k == "exclusiveMinimum" else "maximum"
                if v and bound in s:
                    out[k] = s[bound]
                    out.pop(bound, None)
            elif k in ("minimum", "maximum") and s.get("exclusive" + k[0].upper() + k[1:]) is True:
                continue
            elif k == "id" and self.d == "draft4" and isinstance(v, str):
                if v.startswith("#"):
                    out["$anchor"] = v[1:]
                else:
                    out["$id"] = v
            elif k == "$id" and isinstance(v, str) and v.startswith("#") and self.d != "draft2019-09":
                out["$anchor"] = v[1:]
            elif kind == "one":
                out[k] = self.schema(v, old + (k,), new + (k,), res)
            elif kind == "items":
                out[k] = self.schema(v, old + (k,), new + (k,), res)
            elif kind == "list" and isinstance(v, list):
                out[k] = [self.schema(x, old + (k, str(i)), new + (k, str(i)), res) for i, x in enumerate(v)]
            elif kind == "map" and isinstance(v, dict):
                out[k] = {n: self.schema(x, old + (k, n), new + (k, n), res) for n, x in v.items()}
            else:
                out[k] = copy.deepcopy(v)
        return out

    # -- local references follow the schemas they point to
    def _fix_refs(self) -> None:
        done: set[int] = set()
        while True:
            todo = [r for r in self.refs if id(r[0]) not in done]
            if not todo:
                return
            for node, _old, res in todo:
                done.add(id(node))
                ref = node["$ref"]
                if not ref.startswith("#"):
                    continue
                tokens = parse_pointer(ref[1:])
                if tokens is None:
                    continue
                target = res + tokens
                new = self.map.get(target)
                if new is None:
                    new = self._translate_unmapped(target)
                    if new is None:
                        continue
                base = self.map.get(res, ())
                if new == target or new[: len(base)] != base:
                    continue
                node["$ref"] = "#" + "".join("/" + quote(t, safe="~") for t in _enc(new[len(base) :]))

    def _translate_unmapped(self, target: tuple[str, ...]) -> tuple[str, ...] | None:
        """A reference into a place that was not read as a schema (e.g. under an unknown keyword):
        translate that subschema where it lies."""
        try:
            cur = json_at(self.root, target)
        except LookupError:
            return None
        for i in range(len(target) - 1, -1, -1):
            if target[:i] in self.map:
                new = self.map[target[:i]] + target[i:]
                break
        else:
            return None
        try:
            parent = json_at(self.out, new[:-1])
        except LookupError:
            return None
        key = new[-1]
        tr = self.schema(cur, target, new, ())
        if isinstance(parent, dict):
            parent[key] = tr
        elif isinstance(parent, list) and key.isdigit():
            parent[int(key)] = tr
        else:
            return None
        return new


_ALL = set().union(*VOCAB.values()) | {
    "prefixItems", "$dynamicRef", "$dynamicAnchor", "dependentRequired", "dependentSchemas",
}  # fmt: skip


def _is_keyword(k: str) -> bool:
    """A keyword some draft defines (so its meaning elsewhere would change what a schema accepts)."""
    return k in _ALL
