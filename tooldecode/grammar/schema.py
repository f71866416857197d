"""JSON Schema (draft 2020-12 subset) -> schema IR, and ``strictify``.

``mode="spec"`` follows JSON Schema: an object without ``additionalProperties`` admits other keys,
``format`` is an annotation. ``mode="strict"`` compiles ``strictify(schema)`` (every object closed)
and asserts the formats that can be expressed exactly (``date``, ``uuid``, ``ipv4``).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any

from tooldecode.grammar import ir
from tooldecode.grammar.dialects import to_2020
from tooldecode.grammar.ecma import PatternError, pattern_ast
from tooldecode.grammar.errors import InvalidSchemaError, UnsupportedSchemaError, pointer_join
from tooldecode.grammar.ir import (
    ANY,
    NEVER,
    TOP,
    ArrA,
    BoolA,
    ConstA,
    Inexact,
    Node,
    NullA,
    NumA,
    ObjA,
    RefA,
    StrA,
    StrLang,
    intersect,
    node,
    union,
)
from tooldecode.grammar.negation import complement, difference
from tooldecode.grammar.strlang import FORMAT_PATTERNS

MODES = ("strict", "spec")
ORDERS = ("schema", "required-first", "any")

ANNOTATIONS = frozenset(
    {
        "title",
        "description",
        "default",
        "examples",
        "deprecated",
        "readOnly",
        "writeOnly",
        "$comment",
        "contentMediaType",
        "contentEncoding",
        "contentSchema",
        "$schema",
        "$id",
        "$anchor",
        "$dynamicAnchor",
        "$vocabulary",
        "$defs",
        "definitions",
    }
)
OBJECT_KW = (
    "properties",
    "patternProperties",
    "additionalProperties",
    "required",
    "propertyNames",
    "minProperties",
    "maxProperties",
    "dependentRequired",
    "dependentSchemas",
    "unevaluatedProperties",
)
ARRAY_KW = (
    "items",
    "prefixItems",
    "minItems",
    "maxItems",
    "contains",
    "minContains",
    "maxContains",
    "uniqueItems",
    "unevaluatedItems",
)
STRING_KW = ("minLength", "maxLength", "pattern", "format")
NUMBER_KW = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")
APPLICATORS = ("allOf", "anyOf", "oneOf", "not", "if", "then", "else", "$ref")
KNOWN = frozenset(OBJECT_KW + ARRAY_KW + STRING_KW + NUMBER_KW + APPLICATORS + ("type", "enum", "const"))
# keywords that constrain values but have no exact rendering: refused (or skipped under lenient)
UNEXPRESSIBLE = frozenset({"$dynamicRef", "$recursiveRef"})
JSON_TYPES = ("null", "boolean", "integer", "number", "string", "array", "object")
FORMATS = tuple(FORMAT_PATTERNS)
MAX_UNIQUE_ENUM = 2000
DIALECTS = frozenset(
    {"https://json-schema.org/draft/2020-12/schema", "https://json-schema.org/draft/2020-12/schema#"}
)


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
    """Compile a JSON Schema (dict or bool) to the IR. Unsupported keywords raise
    ``UnsupportedSchemaError`` (keyword + JSON pointer) unless ``lenient``."""
    from tooldecode.grammar.errors import GrammarError

    if mode not in MODES:
        raise GrammarError(f"unknown mode {mode!r}; use one of {', '.join(MODES)}")
    if order not in ORDERS:
        raise GrammarError(f"unknown order {order!r}; use one of {', '.join(ORDERS)}")
    check_depth(schema)
    translated, dialect, dropped = to_2020(schema)
    src = strictify(translated) if mode == "strict" else translated
    c = _Compiler(src, lenient=lenient, assert_format=(mode == "strict"))
    c.ignored.extend(dropped)
    root = c.compile_root()
    return SchemaIR(root, c.defs, c.ignored, mode, order, c.warnings, dialect)


MAX_DEPTH = 128


def json_depth(value: Any) -> int:
    """Nesting depth of a JSON value (a scalar is 0, ``[]`` and ``{}`` are 1), without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict):
            stack.extend((x, d + 1) for x in v.values())
            deepest = max(deepest, d + 1)
        elif isinstance(v, list):
            stack.extend((x, d + 1) for x in v)
            deepest = max(deepest, d + 1)
    return deepest


def check_depth(schema: Any) -> None:
    """Raise ``GrammarError`` for a schema nested deeper than ``MAX_DEPTH`` JSON levels (deeper
    schemas would exhaust the interpreter's recursion limit while rendering)."""
    from tooldecode.grammar.errors import GrammarError

    d = json_depth(schema)
    if d > MAX_DEPTH:
        raise GrammarError(
            f"the schema is nested {d} levels deep (JSON), more than the {MAX_DEPTH} this builder renders; "
            "flatten it or move repeated parts into $defs"
        )


# ---------------------------------------------------------------------------------------------
# strictify


def strictify(schema: Any) -> Any:
    """A copy of ``schema`` (in draft 2020-12, see ``tooldecode.grammar.dialects``) in which every
    object is closed.

    Every subschema in a value position (root, property values, items, ...) that can validate an
    object and gives neither ``additionalProperties`` nor ``unevaluatedProperties`` gets
    ``additionalProperties: false`` -- or ``unevaluatedProperties: false`` when it composes other
    schemas in place (``allOf``/``anyOf``/``oneOf``/``$ref``/``if``/``dependentSchemas``), so that the
    properties of all the composed schemas are merged before closing. Schemas used in place (the
    branches of those keywords, ``$defs`` entries) are not closed themselves. A schema that gives an
    ``additionalProperties`` schema (or ``true``) keeps it. An untyped schema without object keywords
    (``{}``, "any value") stays open.
    """
    root = copy.deepcopy(to_2020(schema)[0])
    seen: set[int] = set()
    out = _strictify(root, True, root, seen)
    # subschemas reached only through a $ref (under x-ignored or an unknown keyword): their own value
    # positions are closed too (the referenced schema itself is used in place)
    while True:
        todo = [t for t in _ref_targets(out) if isinstance(t, dict) and id(t) not in seen]
        if not todo:
            return out
        for t in todo:
            _strictify(t, False, out, seen)


def _ref_targets(root: Any) -> list[Any]:
    out: list[Any] = []
    stack = [root]
    while stack:
        x = stack.pop()
        if isinstance(x, dict):
            ref = x.get("$ref")
            if isinstance(ref, str) and ref.startswith("#"):
                t = _local_pointer(root, ref[1:])
                if t is not None:
                    out.append(t)
            stack.extend(x.values())
        elif isinstance(x, list):
            stack.extend(x)
    return out


_INPLACE_LIST = ("allOf", "anyOf", "oneOf")
_INPLACE_ONE = ("not", "if", "then", "else")
_VALUE_ONE = (
    "additionalProperties",
    "unevaluatedProperties",
    "items",
    "contains",
    "unevaluatedItems",
    "propertyNames",
)
_VALUE_MAP = ("properties", "patternProperties")


def _strictify(s: Any, value_pos: bool, root: Any, seen: set[int]) -> Any:
    if not isinstance(s, dict):
        return s
    seen.add(id(s))
    for k in _INPLACE_LIST:
        if isinstance(s.get(k), list):
            s[k] = [_strictify(x, False, root, seen) for x in s[k]]
    for k in _INPLACE_ONE:
        if k in s:
            s[k] = _strictify(s[k], False, root, seen)
    if isinstance(s.get("dependentSchemas"), dict):
        s["dependentSchemas"] = {
            k: _strictify(v, False, root, seen) for k, v in s["dependentSchemas"].items()
        }
    for k in _VALUE_ONE:
        if k in s:
            s[k] = _strictify(s[k], True, root, seen)
    for k in _VALUE_MAP:
        if isinstance(s.get(k), dict):
            s[k] = {name: _strictify(v, True, root, seen) for name, v in s[k].items()}
    if isinstance(s.get("prefixItems"), list):
        s["prefixItems"] = [_strictify(x, True, root, seen) for x in s["prefixItems"]]
    for k in ("$defs", "definitions"):
        if isinstance(s.get(k), dict):
            s[k] = {name: _strictify(v, False, root, seen) for name, v in s[k].items()}
    if value_pos and "additionalProperties" not in s and "unevaluatedProperties" not in s:
        if _declares_object(s, root, set()):
            inplace = any(
                k in s for k in ("allOf", "anyOf", "oneOf", "$ref", "if", "dependentSchemas", "$dynamicRef")
            )
            s["unevaluatedProperties" if inplace else "additionalProperties"] = False
    return s


def _declares_object(s: Any, root: Any, seen: set[int]) -> bool:
    if not isinstance(s, dict) or id(s) in seen:
        return False
    seen.add(id(s))
    t = s.get("type")
    if t is not None:
        types = [t] if isinstance(t, str) else list(t) if isinstance(t, list) else []
        if "object" not in types:
            return False
        return True
    if any(k in s for k in OBJECT_KW):
        return True
    for k in _INPLACE_LIST:
        if isinstance(s.get(k), list) and any(_declares_object(x, root, seen) for x in s[k]):
            return True
    for k in ("then", "else"):
        if _declares_object(s.get(k), root, seen):
            return True
    ref = s.get("$ref")
    if isinstance(ref, str) and ref.startswith("#"):
        target = _local_pointer(root, ref[1:])
        if target is not None and _declares_object(target, root, seen):
            return True
    return False


def _local_pointer(root: Any, ptr: str) -> Any:
    from urllib.parse import unquote

    if ptr == "":
        return root
    if not ptr.startswith("/"):
        return None
    cur = root
    for tok in ptr[1:].split("/"):
        tok = unquote(tok).replace("~1", "/").replace("~0", "~")
        if isinstance(cur, dict) and tok in cur:
            cur = cur[tok]
        elif isinstance(cur, list) and tok.isdigit() and int(tok) < len(cur):
            cur = cur[int(tok)]
        else:
            return None
    return cur


# ---------------------------------------------------------------------------------------------
# the compiler


class _Skip(Exception):
    pass


class _Compiler:
    def __init__(self, root: Any, *, lenient: bool, assert_format: bool) -> None:
        self.root = root
        self.lenient = lenient
        self.assert_format = assert_format
        self.ignored: list[tuple[str, str]] = []
        self.warnings: list[str] = []
        self.defs: dict[str, Node] = {}
        self.memo: dict[tuple[int, str], Node] = {}
        self.progress: dict[tuple[int, str], list[Any]] = {}
        self._keep: list[Any] = []
        self._resolver = None
        # unevaluated* applied to a recursive reference: derived definitions, built once every
        # definition is complete ((base, kind, id(u)) -> derived name; pending: name, base, kind, u)
        self.derived: dict[tuple[str, str, int], str] = {}
        self.pending: list[tuple[str, str, str, Node]] = []
        # under-approximations: a counter bumped by each (a subschema compiled narrower than it is
        # makes every schema around it narrower too), the memo keys and definitions concerned
        self.losses = 0
        self.lossy: set[tuple[int, str]] = set()
        self.lossy_defs: set[str] = set()

    def narrowed(self, keyword: str, ptr: str, why: list[str] | str) -> None:
        """Record that the rendered language at ``ptr`` is a subset of the schema's (sound, lossy)."""
        reasons = [why] if isinstance(why, str) else sorted(set(why))
        if not reasons:
            return
        self.losses += 1
        self.warnings.append(
            f"{keyword} at {ptr or '#'}: rendered narrower than the schema ({'; '.join(reasons)})"
        )

    def exact_defs(self) -> dict[str, Node]:
        """The finished definitions that are exact (the ones a negation may unfold)."""
        return {k: v for k, v in self.defs.items() if k not in self.lossy_defs}

    # -- errors
    def unsupported(self, keyword: str, ptr: str, detail: str = "") -> None:
        if self.lenient:
            self.ignored.append((keyword, ptr))
            return
        raise UnsupportedSchemaError(keyword, ptr, detail)

    # -- references
    def resolver(self) -> Any:
        if self._resolver is None:
            from referencing import Registry
            from referencing.jsonschema import DRAFT202012

            if isinstance(self.root, dict):
                res = DRAFT202012.create_resource(self.root)
                uri = res.id() or ""
            else:
                res = DRAFT202012.create_resource(self.root)
                uri = ""
            reg = Registry().with_resource(uri, res)
            self._resolver = reg.resolver(base_uri=uri)
        return self._resolver

    def compile_root(self) -> Node:
        n = self.compile(self.root, "", self.resolver(), 0)
        while self.pending:
            name, base, kind, u = self.pending.pop()
            self.defs[name] = self._uneval(self.defs[base], kind, u)
        return self.finalize(n)

    def _uneval(self, cur: Node, kind: str, u: Node) -> Node:
        """``cur`` with ``unevaluatedProperties`` (kind ``props``) or ``unevaluatedItems`` (``items``)
        ``u`` applied to each alternative; a recursive reference gets a derived definition."""
        out: list[ir.Alt] = []
        for a in _expand(cur).alts:
            if kind == "props" and isinstance(a, ObjA):
                out.append(self._apply_uneval_props(a, u))
            elif kind == "items" and isinstance(a, ArrA):
                out.append(self._apply_uneval_items(a, u))
            elif isinstance(a, RefA):
                out.append(RefA(self._derive(a.name, kind, u)))
            else:
                out.append(a)
        return node(*out)

    def _derive(self, base: str, kind: str, u: Node) -> str:
        key = (base, kind, id(u))
        if key not in self.derived:
            self._keep.append(u)
            stem = f"{base}-{'closed' if u.is_never else 'uneval'}"
            name, i = stem, 2
            while (
                name in self.defs
                or name in self.derived.values()
                or any(e[0] == name for e in self.progress.values())
            ):
                name, i = f"{stem}{i}", i + 1
            self.derived[key] = name
            self.pending.append((name, base, kind, u))
        return self.derived[key]

    def compile(self, s: Any, ptr: str, resolver: Any, depth: int) -> Node:
        if s is True:
            return ANY
        if s is False:
            return NEVER
        if not isinstance(s, dict):
            raise InvalidSchemaError(
                "(schema)", ptr, f"a schema must be an object or a boolean, not {type(s).__name__}"
            )
        if "$id" in s and s is not self.root and isinstance(s["$id"], str):
            from referencing.jsonschema import DRAFT202012

            resolver = resolver.in_subresource(DRAFT202012.create_resource(s))
        key = (id(s), str(resolver._base_uri))
        if key in self.memo:
            if key in self.lossy:
                self.losses += 1
            return self.memo[key]
        if key in self.progress:
            entry = self.progress[key]
            if entry[1] == depth:
                self.unsupported("$ref", ptr, "a reference cycle that does not nest into a value")
                return ANY
            entry[2] = True
            return node(RefA(entry[0]))
        name = self._def_name(ptr)
        entry = [name, depth, False]
        self.progress[key] = entry
        self._keep.append(s)
        before = self.losses
        try:
            result = self._compile_dict(s, ptr, resolver, depth)
        finally:
            del self.progress[key]
        if self.losses > before:
            self.lossy.add(key)
            self.lossy_defs.add(name)
        if entry[2]:
            self.defs[name] = result
        self.memo[key] = result
        return result

    def _def_name(self, ptr: str) -> str:
        base = ptr.rsplit("/", 1)[-1] if ptr else "root"
        base = base or "root"
        name = base
        i = 2
        while (
            name in self.defs
            or name in self.derived.values()
            or any(e[0] == name for e in self.progress.values())
        ):
            name = f"{base}{i}"
            i += 1
        return name

    # -- one schema object
    def _compile_dict(self, s: dict[str, Any], ptr: str, resolver: Any, depth: int) -> Node:
        for k in s:
            if k in KNOWN or k in ANNOTATIONS or k.startswith("x-"):
                continue
            if k in UNEXPRESSIBLE:
                self.unsupported(k, pointer_join(ptr, k))
            else:  # an unknown keyword is an annotation (JSON Schema 2020-12, section 6.5)
                self.ignored.append((k, pointer_join(ptr, k)))
        if "$schema" in s and s is not self.root and not isinstance(s.get("$id"), str):
            # below the root, outside an embedded resource, $schema has no meaning: an annotation
            self.ignored.append(("$schema", pointer_join(ptr, "$schema")))
        elif "$schema" in s and s["$schema"] not in DIALECTS:
            # another draft or a custom metaschema (vocabularies) changes the meaning of keywords
            self.unsupported(
                "$schema",
                pointer_join(ptr, "$schema"),
                f"only the draft 2020-12 dialect is supported, not {s['$schema']!r}",
            )

        alts: dict[str, Any] = {}
        # type
        types: list[str] | None = None
        if "type" in s:
            t = s["type"]
            tl = [t] if isinstance(t, str) else t
            if not isinstance(tl, list) or not all(isinstance(x, str) and x in JSON_TYPES for x in tl):
                raise InvalidSchemaError(
                    "type",
                    pointer_join(ptr, "type"),
                    f"unknown type {t!r} (JSON types: {', '.join(JSON_TYPES)})",
                )
            types = tl
        # per-type base alternatives
        alts["null"] = NullA()
        alts["boolean"] = BoolA()
        alts["number"] = self._number(s, ptr)
        alts["string"] = self._string(s, ptr)
        alts["array"] = self._array(s, ptr, resolver, depth)
        alts["object"] = self._object(s, ptr, resolver, depth)
        if types is not None:
            chosen = []
            for t in types:
                if t == "integer":
                    a = alts["number"]
                    chosen.append(ir.inter_num(a, NumA(kind="int")) if a is not None else None)
                else:
                    chosen.append(alts[t])
            base = node(*(a for a in chosen if a is not None))
        else:
            base = node(*(a for a in alts.values() if a is not None))
        if all(alts[t] == TOP[t] for t in alts) and types is None:
            base = ANY
        cur = base

        def meet(other: Node, kw: str, kptr: str) -> None:
            nonlocal cur
            try:
                cur = intersect(cur, other)
            except Inexact as e:
                self.unsupported(kw, kptr, str(e))

        # $ref
        if "$ref" in s:
            kptr = pointer_join(ptr, "$ref")
            ref = s["$ref"]
            try:
                resolved = resolver.lookup(ref)
            except Exception as e:  # referencing.exceptions.Unresolvable and friends
                self.unsupported("$ref", kptr, f"cannot resolve {ref!r} ({type(e).__name__})")
            else:
                tgt_ptr = "#" + ref.split("#", 1)[1] if "#" in ref else ref
                target = self.compile(
                    resolved.contents, tgt_ptr if tgt_ptr != "#" else "", resolved.resolver, depth
                )
                meet(target, "$ref", kptr)
        # allOf
        for i, sub in enumerate(self._list(s, "allOf", ptr)):
            sp = pointer_join(ptr, "allOf", i)
            meet(self.compile(sub, sp, resolver, depth), "allOf", sp)
        # anyOf
        if "anyOf" in s:
            branches = [
                self.compile(sub, pointer_join(ptr, "anyOf", i), resolver, depth)
                for i, sub in enumerate(self._list(s, "anyOf", ptr))
            ]
            meet(union(*branches), "anyOf", pointer_join(ptr, "anyOf"))
        # oneOf
        if "oneOf" in s:
            kptr = pointer_join(ptr, "oneOf")
            branches, lossy = [], []
            for i, sub in enumerate(self._list(s, "oneOf", ptr)):
                before = self.losses
                branches.append(self.compile(sub, pointer_join(ptr, "oneOf", i), resolver, depth))
                lossy.append(self.losses > before)
            try:
                loss: list[str] = []
                meet(self._one_of(branches, lossy, loss), "oneOf", kptr)
                self.narrowed("oneOf", kptr, loss)
            except Inexact as e:
                self.unsupported("oneOf", kptr, f"branches are not provably disjoint ({e})")
                if self.lenient:
                    meet(union(*branches), "oneOf", kptr)
        # not
        if "not" in s:
            kptr = pointer_join(ptr, "not")
            before = self.losses
            sub = self.compile(s["not"], kptr, resolver, depth)
            if self.losses > before:
                self.unsupported("not", kptr, "the negated schema is itself rendered narrower than it is")
            else:
                loss = []
                try:
                    cur = difference(cur, sub, loss, self.exact_defs())
                    self.narrowed("not", kptr, loss)
                except Inexact as e:
                    self.unsupported("not", kptr, str(e))
        # if / then / else
        if "if" in s and ("then" in s or "else" in s):
            kptr = pointer_join(ptr, "if")
            before = self.losses
            cond = self.compile(s["if"], kptr, resolver, depth)
            cond_lossy = self.losses > before
            then = self.compile(s["then"], pointer_join(ptr, "then"), resolver, depth) if "then" in s else ANY
            els = self.compile(s["else"], pointer_join(ptr, "else"), resolver, depth) if "else" in s else ANY
            loss = []
            try:
                if cond_lossy:  # no sound negation of a narrowed condition: the 'else' side is left out
                    loss.append("the condition is itself rendered narrower, so only its 'then' side is kept")
                    other = NEVER
                else:
                    other = difference(els, cond, loss, self.exact_defs())
                meet(union(intersect(cond, then), other), "if", kptr)
                self.narrowed("if", kptr, loss)
            except Inexact as e:
                self.unsupported("if", kptr, str(e))
        elif "if" in s and ("unevaluatedProperties" in s or "unevaluatedItems" in s):
            # no constraint, but the annotations of a successful 'if' count as evaluated
            kptr = pointer_join(ptr, "if")
            cond = self.compile(s["if"], kptr, resolver, depth)
            try:
                cur = intersect(cur, union(cond, complement(cond)))
            except Inexact:
                pass  # dropping the annotations only makes unevaluated* stricter (sound)
        elif "if" in s:
            self.compile(s["if"], pointer_join(ptr, "if"), resolver, depth)
        # dependentRequired / dependentSchemas
        non_obj = node(*(TOP[t] for t in ir.TYPES if t != "object"))
        dr = s.get("dependentRequired")
        if isinstance(dr, dict):
            for k, needs in dr.items():
                kptr = pointer_join(ptr, "dependentRequired", k)
                if not isinstance(needs, list) or not all(isinstance(x, str) for x in needs):
                    raise InvalidSchemaError("dependentRequired", kptr, "must map names to arrays of names")
                opt = node(
                    ObjA(keys=((k, NEVER),)),
                    ObjA(required=frozenset([k, *needs]), keys=tuple((x, ANY) for x in [k, *needs])),
                )
                meet(union(non_obj, opt), "dependentRequired", kptr)
        ds = s.get("dependentSchemas")
        if isinstance(ds, dict):
            for k, sub in ds.items():
                kptr = pointer_join(ptr, "dependentSchemas", k)
                subn = self.compile(sub, kptr, resolver, depth)
                try:
                    present = intersect(node(ObjA(keys=((k, ANY),), required=frozenset([k]))), subn)
                    meet(union(non_obj, node(ObjA(keys=((k, NEVER),))), present), "dependentSchemas", kptr)
                except Inexact as e:
                    self.unsupported("dependentSchemas", kptr, str(e))
        # unevaluatedProperties / unevaluatedItems
        if ("unevaluatedProperties" in s or "unevaluatedItems" in s) and _any_of_in_place(s, resolver):
            # a value may match several anyOf branches and gets the annotations of all of them; an
            # alternative of the IR carries one branch's, so what it lets through is a subset
            kw = "unevaluatedProperties" if "unevaluatedProperties" in s else "unevaluatedItems"
            self.narrowed(kw, pointer_join(ptr, kw), "only one anyOf branch's evaluated members count")
        if "unevaluatedProperties" in s:
            kptr = pointer_join(ptr, "unevaluatedProperties")
            u = self.compile(s["unevaluatedProperties"], kptr, resolver, depth + 1)
            cur = self._uneval(cur, "props", u)
        if "unevaluatedItems" in s:
            kptr = pointer_join(ptr, "unevaluatedItems")
            u = self.compile(s["unevaluatedItems"], kptr, resolver, depth + 1)
            cur = self._uneval(cur, "items", u)
        # enum / const
        vals: list[Any] | None = None
        if "enum" in s:
            if not isinstance(s["enum"], list):
                raise InvalidSchemaError("enum", pointer_join(ptr, "enum"), "must be an array")
            vals = list(s["enum"])
        if "const" in s:
            c = s["const"]
            vals = [c] if vals is None else [v for v in vals if ir.json_equal(v, c)]
        if vals is not None:
            kept = []
            for v in vals:
                try:
                    ok = ir.accepts(cur, v, self.defs)
                except Inexact as e:
                    self.unsupported("enum" if "enum" in s else "const", ptr, str(e))
                    ok = True
                if ok:
                    kept.append(ConstA(v))
            cur = node(*kept)
        return cur

    def _list(self, s: dict[str, Any], kw: str, ptr: str) -> list[Any]:
        v = s.get(kw)
        if v is None:
            return []
        if not isinstance(v, list) or not v:
            raise InvalidSchemaError(kw, pointer_join(ptr, kw), "must be a non-empty array")
        return v

    def _one_of(self, branches: list[Node], lossy: list[bool], loss: list[str]) -> Node:
        """Values in exactly one branch: each branch minus the branches it may overlap (a subset
        where a difference is not exact, with the reasons in ``loss``)."""
        n = len(branches)
        overlap = [[False] * n for _ in range(n)]
        for i in range(n):
            for j in range(i + 1, n):
                try:
                    disjoint = _provably_empty(intersect(branches[i], branches[j]))
                except Inexact:
                    disjoint = False
                # a narrowed branch proves nothing about the branch it stands for
                overlap[i][j] = overlap[j][i] = not disjoint or lossy[i] or lossy[j]
        if not any(map(any, overlap)):
            return union(*branches)
        if any(lossy):
            raise Inexact("a branch is itself rendered narrower than it is, so it cannot be excluded")
        defs = self.exact_defs()
        parts = []
        for i, b in enumerate(branches):
            cur = b
            for j in range(n):
                if overlap[i][j]:
                    cur = difference(cur, branches[j], loss, defs)
            parts.append(cur)
        return union(*parts)

    # -- per-type keyword groups
    def _num_value(self, s: dict[str, Any], kw: str, ptr: str) -> Fraction | None:
        if kw not in s:
            return None
        v = s[kw]
        if (
            isinstance(v, bool)
            or not isinstance(v, (int, float))
            or (isinstance(v, float) and not math.isfinite(v))
        ):
            raise InvalidSchemaError(kw, pointer_join(ptr, kw), "must be a finite number")
        return Fraction(v)

    def _count(self, s: dict[str, Any], kw: str, ptr: str) -> int | None:
        if kw not in s:
            return None
        v = s[kw]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 or not float(v).is_integer():
            raise InvalidSchemaError(kw, pointer_join(ptr, kw), "must be a non-negative integer")
        return int(v)

    def _number(self, s: dict[str, Any], ptr: str) -> NumA:
        a = NumA()
        lo, hi = self._num_value(s, "minimum", ptr), self._num_value(s, "maximum", ptr)
        xlo, xhi = self._num_value(s, "exclusiveMinimum", ptr), self._num_value(s, "exclusiveMaximum", ptr)
        if lo is not None:
            a = ir.inter_num(a, NumA(lo=lo)) or a
        if xlo is not None:
            a = ir.inter_num(a, NumA(lo=xlo, lo_x=True)) or a
        if hi is not None:
            a = ir.inter_num(a, NumA(hi=hi)) or a
        if xhi is not None:
            a = ir.inter_num(a, NumA(hi=xhi, hi_x=True)) or a
        m = self._num_value(s, "multipleOf", ptr)
        if m is not None:
            if m <= 0:
                raise InvalidSchemaError("multipleOf", pointer_join(ptr, "multipleOf"), "must be > 0")
            if m.denominator != 1 and (ints := float_multiple_integers(s["multipleOf"])) is not None:
                # a fractional divisor: only integers are rendered (a subset; see float_multiple_integers)
                step, bound = ints
                r = ir.inter_num(
                    a,
                    NumA(
                        kind="int",
                        lo=Fraction(-bound),
                        hi=Fraction(bound),
                        mult=step,
                        residues=frozenset({0}),
                    ),
                )
                a = r if r is not None else NumA(kind="int", lo=Fraction(1), hi=Fraction(0))
                self.narrowed(
                    "multipleOf",
                    pointer_join(ptr, "multipleOf"),
                    f"only integers that are multiples of {s['multipleOf']!r} are rendered",
                )
            elif m.denominator != 1 or m > 10000:
                self.unsupported(
                    "multipleOf",
                    pointer_join(ptr, "multipleOf"),
                    "only integer divisors up to 10000 and decimal divisors whose multiples include integers are expressible",
                )
            else:
                r = ir.inter_num(a, NumA(mult=int(m), residues=frozenset({0})))
                a = r if r is not None else NumA(kind="int", lo=Fraction(1), hi=Fraction(0))
        return a

    def _string(self, s: dict[str, Any], ptr: str) -> StrA:
        lang = StrLang()
        lo, hi = self._count(s, "minLength", ptr), self._count(s, "maxLength", ptr)
        if lo is not None or hi is not None:
            lang = lang.inter(StrLang(lo or 0, hi))
        if "pattern" in s:
            p = s["pattern"]
            kptr = pointer_join(ptr, "pattern")
            if not isinstance(p, str):
                raise InvalidSchemaError("pattern", kptr, "must be a string")
            try:
                pattern_ast(p)
                lang = lang.inter(StrLang(patterns=frozenset({p})))
            except PatternError as e:
                self.unsupported("pattern", kptr, str(e))
        if "format" in s and self.assert_format:
            f = s["format"]
            if f in FORMAT_PATTERNS:
                lang = lang.inter(StrLang(formats=frozenset({f})))
            else:
                fptr = pointer_join(ptr, "format")
                self.ignored.append(("format", fptr))
                self.warnings.append(
                    f"format {f!r} at {fptr} is not a regular language here, so it is not asserted "
                    f"(asserted formats: {', '.join(FORMATS)})"
                )
        return StrA(lang)

    def _array(self, s: dict[str, Any], ptr: str, resolver: Any, depth: int) -> ArrA:
        prefix: tuple[Node, ...] = ()
        if "prefixItems" in s:
            items = s["prefixItems"]
            if not isinstance(items, list):
                raise InvalidSchemaError("prefixItems", pointer_join(ptr, "prefixItems"), "must be an array")
            prefix = tuple(
                self.compile(x, pointer_join(ptr, "prefixItems", i), resolver, depth + 1)
                for i, x in enumerate(items)
            )
        rest: Node | None = None
        if "items" in s:
            if isinstance(s["items"], list):
                raise UnsupportedSchemaError(
                    "items",
                    pointer_join(ptr, "items"),
                    "an array of schemas is draft-07 syntax; use prefixItems",
                )
            r = self.compile(s["items"], pointer_join(ptr, "items"), resolver, depth + 1)
            rest = None if r.is_any else r
        lo = self._count(s, "minItems", ptr) or 0
        hi = self._count(s, "maxItems", ptr)
        contains: tuple[tuple[Node, int, int | None], ...] = ()
        if "contains" in s:
            c = self.compile(s["contains"], pointer_join(ptr, "contains"), resolver, depth + 1)
            cmin = self._count(s, "minContains", ptr)
            cmax = self._count(s, "maxContains", ptr)
            cmin = 1 if cmin is None else cmin
            if cmin > 0 or cmax is not None:
                contains = ((c, cmin, cmax),)
        unique = pointer_join(ptr, "uniqueItems") if s.get("uniqueItems") is True else ""
        a = ArrA(prefix, rest, lo, hi, contains, unique, len(prefix), "items" in s)
        return ir.norm_arr(a)

    def _object(self, s: dict[str, Any], ptr: str, resolver: Any, depth: int) -> ObjA:
        props = s.get("properties", {})
        if not isinstance(props, dict):
            raise InvalidSchemaError("properties", pointer_join(ptr, "properties"), "must be an object")
        pats = s.get("patternProperties", {})
        if not isinstance(pats, dict):
            raise InvalidSchemaError(
                "patternProperties", pointer_join(ptr, "patternProperties"), "must be an object"
            )
        pat_nodes: list[tuple[str, Node]] = []
        for p, sub in pats.items():
            kptr = pointer_join(ptr, "patternProperties", p)
            try:
                pattern_ast(p)
            except PatternError as e:
                self.unsupported("patternProperties", kptr, str(e))
                continue
            pat_nodes.append((p, self.compile(sub, kptr, resolver, depth + 1)))
        extras: list[tuple[StrLang, Node]] = [(StrLang(patterns=frozenset({p})), n) for p, n in pat_nodes]
        if "additionalProperties" in s:
            kptr = pointer_join(ptr, "additionalProperties")
            addn = self.compile(s["additionalProperties"], kptr, resolver, depth + 1)
            negs = frozenset(StrLang(patterns=frozenset({p})) for p, _ in pat_nodes)
            extras.append((StrLang(excluded=frozenset(props), negs=negs), addn))
        keys: list[tuple[str, Node]] = []
        for k, sub in props.items():
            n = self.compile(sub, pointer_join(ptr, "properties", k), resolver, depth + 1)
            for p, pn in pat_nodes:
                if StrLang(patterns=frozenset({p})).accepts(k):
                    n = intersect(n, pn)
            keys.append((k, n))
        req = s.get("required", [])
        if not isinstance(req, list) or not all(isinstance(x, str) for x in req):
            raise InvalidSchemaError("required", pointer_join(ptr, "required"), "must be an array of strings")
        o = ObjA(keys=tuple(keys), extras=tuple(extras))
        extra_keys = [k for k in dict.fromkeys(req) if k not in props]
        if extra_keys:
            o = replace(o, keys=o.keys + tuple((k, o.extra_value(k)) for k in extra_keys))
        o = replace(o, required=frozenset(req))
        names = None
        if "propertyNames" in s:
            names = self.compile(s["propertyNames"], pointer_join(ptr, "propertyNames"), resolver, depth + 1)
            if names.is_any:
                names = None
        o = replace(
            o,
            names=names,
            min_p=self._count(s, "minProperties", ptr) or 0,
            max_p=self._count(s, "maxProperties", ptr),
            eval_names=frozenset(props),
            eval_pats=frozenset(p for p, _ in pat_nodes),
            eval_all="additionalProperties" in s,
        )
        return ir.norm_obj(o)

    # -- unevaluated*
    def _apply_uneval_props(self, a: ObjA, u: Node) -> ObjA:
        if a.eval_all:
            return a
        pats = [StrLang(patterns=frozenset({p})) for p in a.eval_pats]

        def evaluated(k: str) -> bool:
            return k in a.eval_names or any(pl.accepts(k) for pl in pats)

        keys = tuple((k, n if evaluated(k) else intersect(n, u)) for k, n in a.keys)
        rule = (StrLang(excluded=a.eval_names, negs=frozenset(pats)), u)
        return ir.norm_obj(replace(a, keys=keys, extras=a.extras + (rule,), eval_all=True))

    def _apply_uneval_items(self, a: ArrA, u: Node) -> ArrA:
        if a.eval_all:
            return a
        n = a.eval_n
        prefix = list(a.prefix)
        while len(prefix) < n:
            prefix.append(a.item(len(prefix)))
        prefix = [p if i < n else intersect(p, u) for i, p in enumerate(prefix)]
        rest = a.rest if a.rest is not None else ANY
        rest = intersect(rest, u)
        return ir.norm_arr(
            replace(a, prefix=tuple(prefix), rest=None if rest.is_any else rest, eval_all=True)
        )

    # -- whole-IR post-processing (uniqueItems)
    def finalize(self, root: Node) -> Node:
        memo: dict[int, Node] = {}

        def walk(n: Node) -> Node:
            if id(n) in memo:
                return memo[id(n)]
            memo[id(n)] = n
            out = []
            for a in n.alts:
                out.extend(walk_alt(a))
            r = node(*out) if out != list(n.alts) else n
            memo[id(n)] = r
            return r

        def walk_alt(a: ir.Alt) -> list[ir.Alt]:
            if isinstance(a, ArrA):
                a2 = replace(
                    a,
                    prefix=tuple(walk(p) for p in a.prefix),
                    rest=walk(a.rest) if a.rest is not None else None,
                    contains=tuple((walk(c), lo, hi) for c, lo, hi in a.contains),
                )
                if a2.unique:
                    return self._unique(a2)
                return [a2 if a2 != a else a]
            if isinstance(a, ObjA):
                a2 = replace(
                    a,
                    keys=tuple((k, walk(v)) for k, v in a.keys),
                    extras=tuple((la, walk(v)) for la, v in a.extras),
                )
                return [a2 if a2 != a else a]
            return [a]

        for name in list(self.defs):
            self.defs[name] = walk(self.defs[name])
        return walk(root)

    def _unique(self, a: ArrA) -> list[ir.Alt]:
        if a.max is not None and a.max <= 1:
            return [replace(a, unique="")]
        # enumerate when every position has a small finite domain
        domains: list[list[Any]] = []
        limit = a.max if a.max is not None else len(a.prefix) + 64
        for i in range(limit):
            vals = _finite_values(a.item(i))
            if vals is None:
                if i >= a.min and a.item(i).is_never:
                    break
                return self._unique_narrowed(a, "items that are not a small finite set")
            if not vals:
                break
            domains.append(vals)
            if i >= len(a.prefix) and a.rest is not None:
                # remaining positions share the rest domain; uniqueness bounds the length
                total = len(vals)
                limit = min(limit, i + total)
        seqs: list[list[Any]] = []
        plain = replace(a, unique="")

        def go(prefix: list[Any], keys: set[Any]) -> None:
            if len(seqs) > MAX_UNIQUE_ENUM:
                return
            if len(prefix) >= a.min and ir.accepts_alt(plain, prefix, self.defs):
                seqs.append(list(prefix))
            i = len(prefix)
            if i >= len(domains) or (a.max is not None and i >= a.max):
                return
            for v in domains[i]:
                k = ir.value_key(v)
                if k in keys:
                    continue
                prefix.append(v)
                keys.add(k)
                go(prefix, keys)
                keys.discard(k)
                prefix.pop()

        go([], set())
        if len(seqs) > MAX_UNIQUE_ENUM:
            return self._unique_narrowed(a, "too many unique arrays to enumerate")
        return [ConstA(sq) for sq in seqs]

    def _unique_narrowed(self, a: ArrA, why: str) -> list[ir.Alt]:
        """uniqueItems without an exact rendering: arrays of at most one item (a subset: they are unique)."""
        self.narrowed("uniqueItems", a.unique, f"{why}: arrays of at most one item are rendered")
        return [ir.norm_arr(replace(a, unique="", max=1 if a.max is None else min(a.max, 1)))]


def float_multiple_integers(m: float | int) -> tuple[int, int] | None:
    """``(step, bound)``: the integers n with ``step | n`` and ``|n| <= bound`` pass ``multipleOf: m``
    for a fractional ``m`` as validators check it in floating point (``n / m`` is integral), or None.

    With ``m``'s shortest decimal ``P/Q`` (``0.01`` -> 1/100) and the double ``m = (P/Q)(1 + d)``:
    for ``P | n`` the exact quotient ``N = nQ/P`` is an integer, ``n / m = N / (1 + d)`` lies within
    ``|N| |d| / (1 + d)`` of it, and ``|d| <= 2**-54`` with ``|N| < 2**52`` keeps that under half a unit in the
    last place of ``N``, so the division rounds to ``N`` exactly. Other integers and all non-integral
    numbers are left out (a subset of the multiples; ``0.07 / 0.01`` is not integral in binary)."""
    from decimal import Decimal

    if isinstance(m, bool) or not isinstance(m, (int, float)) or not math.isfinite(m) or m <= 0:
        return None
    q = Fraction(Decimal(repr(float(m))))
    if q.denominator == 1 or q.numerator > 10000:
        return None
    d = Fraction(m) / q - 1
    if abs(d) > Fraction(1, 2**54):
        return None
    bound = min((2**52 - 1) * q.numerator // q.denominator, 2**52)
    return q.numerator, bound


def _any_of_in_place(s: Any, resolver: Any) -> bool:
    """Whether ``s`` applies an ``anyOf`` in place (through allOf/oneOf/if/$ref/dependentSchemas)."""
    seen: set[int] = set()
    stack = [(s, resolver)]
    while stack:
        x, res = stack.pop()
        if not isinstance(x, dict) or id(x) in seen:
            continue
        seen.add(id(x))
        if "anyOf" in x:
            return True
        subs = [y for k in ("allOf", "oneOf") if isinstance(x.get(k), list) for y in x[k]]
        subs += [x[k] for k in ("if", "then", "else") if k in x]
        if isinstance(x.get("dependentSchemas"), dict):
            subs += list(x["dependentSchemas"].values())
        stack.extend((y, res) for y in subs if isinstance(y, dict))
        if isinstance(x.get("$ref"), str):
            try:
                r = res.lookup(x["$ref"])
            except Exception:  # noqa: BLE001 -- unresolvable: reported where it is compiled
                continue
            stack.append((r.contents, r.resolver))
    return False


def _expand(n: Node) -> Node:
    """ANY written as one unconstrained alternative per type."""
    return node(*(TOP[t] for t in ir.TYPES)) if n.is_any else n


def _finite_values(n: Node) -> list[Any] | None:
    out: list[Any] = []
    for a in n.alts:
        if isinstance(a, ConstA):
            out.append(a.value)
        elif isinstance(a, NullA):
            out.append(None)
        elif isinstance(a, BoolA):
            out.extend(sorted(a.values))
        else:
            return None
    uniq: dict[Any, Any] = {}
    for v in out:
        uniq.setdefault(ir.value_key(v), v)
    return list(uniq.values())


def _provably_empty(n: Node, depth: int = 0) -> bool:
    """True when ``n`` has no value (False: maybe it has; through objects and arrays to depth 4)."""
    return all(_alt_provably_empty(a, depth) for a in n.alts)


def _alt_provably_empty(a: ir.Alt, depth: int) -> bool:
    if isinstance(a, StrA):
        return a.lang.is_empty()
    if isinstance(a, NumA):
        return ir.num_empty(a)
    if depth >= 4:
        return False
    if isinstance(a, ObjA):
        return any(_provably_empty(a.value_for(k), depth + 1) for k in a.required)
    if isinstance(a, ArrA):
        return any(_provably_empty(a.item(i), depth + 1) for i in range(min(a.min, 8)))
    return False
