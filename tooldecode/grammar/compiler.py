"""The compiler: one JSON Schema (draft 2020-12, already translated) -> the schema IR.

Applicators are combined in the IR (``intersect``, ``union``, ``difference``); what has no exact
form is refused with the keyword and its JSON pointer (``unsupported``), or -- where a subset is
sound -- rendered narrower and recorded in ``warnings`` (``narrowed``). A subschema compiled narrower
than it is is never negated (``not``, the other branches of ``oneOf``, an ``if`` condition).
"""

from __future__ import annotations

from typing import Any

from tooldecode.grammar import ir
from tooldecode.grammar.budget import MAX_ONEOF_OVERLAPS, at, tick, where
from tooldecode.grammar.compile_types import TypeKeywords
from tooldecode.grammar.errors import GrammarError, InvalidSchemaError, UnsupportedSchemaError, pointer_join
from tooldecode.grammar.keywords import (
    ANNOTATIONS,
    DIALECTS,
    JSON_TYPES,
    KNOWN,
    UNEXPRESSIBLE,
    VALUE_TYPES,
    json_type,
)
from tooldecode.grammar.negation import complement, difference
from tooldecode.grammar.refs import follow_aliases, is_alias

MAX_MEET_ALTS = (
    4096  # alternatives of one allOf / $ref intersection (a product of the branches' alternatives)
)


class Compiler(TypeKeywords):
    """Compiles one root schema; ``compile_root`` gives the IR, ``defs`` its recursive definitions."""

    def __init__(self, root: Any, *, lenient: bool, assert_format: bool) -> None:
        self.root = root
        self.lenient = lenient
        self.assert_format = assert_format
        self.ignored: list[tuple[str, str]] = []
        self.warnings: list[str] = []
        self.defs: dict[str, ir.Node] = {}
        self.memo: dict[tuple[int, str], ir.Node] = {}
        self.progress: dict[tuple[int, str], list[Any]] = {}
        self._keep: list[Any] = []
        self._resolver = None
        # unevaluated* applied to a recursive reference: derived definitions, built once every
        # definition is complete ((base, kind, id(u)) -> derived name; pending: name, base, kind, u)
        self.derived: dict[tuple[str, str, int], str] = {}
        self.pending: list[tuple[str, str, str, ir.Node]] = []
        # under-approximations: a counter bumped by each (a subschema compiled narrower than it is
        # makes every schema around it narrower too), the memo keys and definitions concerned
        self.losses = 0
        self.lossy: set[tuple[int, str]] = set()
        self.lossy_defs: set[str] = set()
        # anyOf branches by schema (id), and whether a value may match two of them
        self.anyof_nodes: dict[int, list[ir.Node]] = {}
        self.anyof_overlap: dict[int, bool] = {}
        # subschemas being compiled inside each other now, the most so far and the pointer where
        self._nesting = self._deepest_n = 0
        self.deepest = ""

    def narrowed(self, keyword: str, ptr: str, why: list[str] | str) -> None:
        """Record that the rendered language at ``ptr`` is a subset of the schema's (sound, lossy)."""
        reasons = [why] if isinstance(why, str) else sorted(set(why))
        if not reasons:
            return
        self.losses += 1
        self.warnings.append(
            f"{keyword} at {ptr or '#'}: rendered narrower than the schema ({'; '.join(reasons)})"
        )

    def exact_defs(self) -> dict[str, ir.Node]:
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

    def compile_root(self) -> ir.Node:
        n = self.compile(self.root, "", self.resolver(), 0)
        while self.pending:
            name, base, kind, u = self.pending.pop()
            self.defs[name] = self._uneval(self.defs[base], kind, u)
        return self.finalize(n)

    def _uneval(self, cur: ir.Node, kind: str, u: ir.Node) -> ir.Node:
        """``cur`` with ``unevaluatedProperties`` (kind ``props``) or ``unevaluatedItems`` (``items``)
        ``u`` applied to each alternative; a recursive reference gets a derived definition."""
        out: list[ir.Alt] = []
        for a in _expand(cur).alts:
            if kind == "props" and isinstance(a, ir.ObjA):
                out.append(self._apply_uneval_props(a, u))
            elif kind == "items" and isinstance(a, ir.ArrA):
                out.append(self._apply_uneval_items(a, u))
            elif isinstance(a, ir.RefA):
                out.append(ir.RefA(self._derive(a.name, kind, u)))
            else:
                out.append(a)
        return ir.node(*out)

    def _derive(self, base: str, kind: str, u: ir.Node) -> str:
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

    def compile(self, s: Any, ptr: str, resolver: Any, depth: int) -> ir.Node:
        if s is True:
            return ir.ANY
        if s is False:
            return ir.NEVER
        if not isinstance(s, dict):
            raise InvalidSchemaError(
                "(schema)", ptr, f"a schema must be an object or a boolean, not {type(s).__name__}"
            )
        if "$id" in s and s is not self.root and isinstance(s["$id"], str):
            from referencing.jsonschema import DRAFT202012

            resolver = resolver.in_subresource(DRAFT202012.create_resource(s))
        key = (id(s), str(resolver._base_uri))  # noqa: SLF001 -- the compiler's own resolver
        if key in self.memo:
            if key in self.lossy:
                self.losses += 1
            return self.memo[key]
        if key in self.progress:
            entry = self.progress[key]
            if entry[1] == depth:
                self.unsupported("$ref", ptr, "a reference cycle that does not nest into a value")
                return ir.ANY
            entry[2] = True
            return ir.node(ir.RefA(entry[0]))
        tick(ptr)
        if is_alias(s):  # {"$ref": ...} and annotations: followed without recursion
            return follow_aliases(self, s, key, ptr, resolver, depth)
        name = self._def_name(ptr)
        entry = [name, depth, False]
        self.progress[key] = entry
        self._keep.append(s)
        before = self.losses
        self._nesting += 1
        if self._nesting > self._deepest_n:
            self._deepest_n, self.deepest = self._nesting, ptr
        try:
            result = self._compile_dict(s, ptr, resolver, depth)
        finally:
            self._nesting -= 1
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
    def _compile_dict(self, s: dict[str, Any], ptr: str, resolver: Any, depth: int) -> ir.Node:
        self._check_keywords(s, ptr)
        cur = self._base(s, ptr, resolver, depth)
        cur = self._in_place(cur, s, ptr, resolver, depth)
        cur = self._negations(cur, s, ptr, resolver, depth)
        cur = self._dependents(cur, s, ptr, resolver, depth)
        cur = self._unevaluated(cur, s, ptr, resolver, depth)
        return self._values(cur, s, ptr)

    def _meet(self, cur: ir.Node, other: ir.Node, kw: str, kptr: str) -> ir.Node:
        if len(cur.alts) * len(other.alts) > MAX_MEET_ALTS:
            # the intersection of two unions is the union of every pair: allOf over anyOf grows as a product
            raise GrammarError(
                f"{kw} at {kptr or '/'} combines {len(cur.alts)} × {len(other.alts)} alternatives, more than the "
                f"{MAX_MEET_ALTS:,} this builder renders; merge the branches or move the alternatives into one anyOf"
            )
        try:
            return ir.intersect(cur, other)
        except ir.Inexact as e:
            try:  # a finished recursive definition stands for its own alternatives
                return ir.intersect(self._unfold(cur), self._unfold(other))
            except ir.Inexact:
                pass
            self.unsupported(kw, kptr, str(e))
            return cur

    def _unfold(self, n: ir.Node) -> ir.Node:
        """``n`` with each reference to a finished definition replaced by the definition's alternatives."""
        if not any(isinstance(a, ir.RefA) and a.name in self.defs for a in n.alts):
            return n
        return ir.node(
            *(
                x
                for a in n.alts
                for x in (self.defs[a.name].alts if isinstance(a, ir.RefA) and a.name in self.defs else (a,))
            )
        )

    def _anyof_overlaps(self, s: dict[str, Any]) -> bool:
        """Whether a value may match two branches of ``s``'s anyOf (True when not proven otherwise)."""
        key = id(s)
        if key not in self.anyof_overlap:
            branches = self.anyof_nodes.get(key)
            nodes = branches or []
            overlap = branches is None or len(nodes) > 12
            for i in range(0 if overlap else len(nodes)):
                for j in range(i + 1, len(nodes)):
                    try:
                        overlap = overlap or not _provably_empty(ir.intersect(nodes[i], nodes[j]))
                    except ir.Inexact:
                        overlap = True
            self.anyof_overlap[key] = overlap
        return self.anyof_overlap[key]

    def _any_of_in_place(self, s: Any, resolver: Any) -> bool:
        """Whether ``s`` applies an ``anyOf`` whose branches may overlap in place (through
        allOf/oneOf/if/$ref/dependentSchemas)."""
        seen: set[int] = set()
        stack = [(s, resolver)]
        while stack:
            x, res = stack.pop()
            if not isinstance(x, dict) or id(x) in seen:
                continue
            seen.add(id(x))
            if "anyOf" in x and self._anyof_overlaps(x):
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

    def _compile_counted(self, s: Any, ptr: str, resolver: Any, depth: int) -> tuple[ir.Node, bool]:
        """A subschema and whether it was compiled narrower than it is."""
        before = self.losses
        n = self.compile(s, ptr, resolver, depth)
        return n, self.losses > before

    def _check_keywords(self, s: dict[str, Any], ptr: str) -> None:
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

    def _base(self, s: dict[str, Any], ptr: str, resolver: Any, depth: int) -> ir.Node:
        """The type and per-type keywords."""
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
        alts["null"] = ir.NullA()
        alts["boolean"] = ir.BoolA()
        alts["number"] = self._number(s, ptr)
        alts["string"] = self._string(s, ptr)
        alts["array"] = self._array(s, ptr, resolver, depth)
        alts["object"] = self._object(s, ptr, resolver, depth)
        if types is not None:
            chosen = []
            for t in types:
                if t == "integer":
                    a = alts["number"]
                    chosen.append(ir.inter_num(a, ir.NumA(kind="int")) if a is not None else None)
                else:
                    chosen.append(alts[t])
            base = ir.node(*(a for a in chosen if a is not None))
        else:
            base = ir.node(*(a for a in alts.values() if a is not None))
        if all(alts[t] == ir.TOP[t] for t in alts) and types is None:
            base = ir.ANY
        return base

    def _in_place(self, cur: ir.Node, s: dict[str, Any], ptr: str, resolver: Any, depth: int) -> ir.Node:
        """$ref, allOf, anyOf, oneOf."""
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
                cur = self._meet(cur, target, "$ref", kptr)
        # allOf
        for i, sub in enumerate(self._list(s, "allOf", ptr)):
            sp = pointer_join(ptr, "allOf", i)
            cur = self._meet(cur, self.compile(sub, sp, resolver, depth), "allOf", sp)
        # anyOf
        if "anyOf" in s:
            branches = [
                self.compile(sub, pointer_join(ptr, "anyOf", i), resolver, depth)
                for i, sub in enumerate(self._list(s, "anyOf", ptr))
            ]
            self.anyof_nodes[id(s)] = branches
            cur = self._meet(cur, ir.union(*branches), "anyOf", pointer_join(ptr, "anyOf"))
        # oneOf
        if "oneOf" in s:
            kptr = pointer_join(ptr, "oneOf")
            branches, lossy, bounds = [], [], []
            for i, sub in enumerate(self._list(s, "oneOf", ptr)):
                before = self.losses
                branches.append(self.compile(sub, pointer_join(ptr, "oneOf", i), resolver, depth))
                lossy.append(self.losses > before)
                bounds.append(_type_bound(sub, resolver))
            try:
                loss: list[str] = []
                at(kptr)
                cur = self._meet(cur, self._one_of(branches, lossy, bounds, loss), "oneOf", kptr)
                self.narrowed("oneOf", kptr, loss)
            except ir.Inexact as e:
                self.unsupported("oneOf", kptr, f"branches are not provably disjoint ({e})")
                if self.lenient:
                    cur = self._meet(cur, ir.union(*branches), "oneOf", kptr)
        return cur

    def _negations(self, cur: ir.Node, s: dict[str, Any], ptr: str, resolver: Any, depth: int) -> ir.Node:
        """not, if / then / else."""
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
                except ir.Inexact as e:
                    self.unsupported("not", kptr, str(e))
        # if / then / else
        if "if" in s and ("then" in s or "else" in s):
            kptr = pointer_join(ptr, "if")
            before = self.losses
            cond = self.compile(s["if"], kptr, resolver, depth)
            cond_lossy = self.losses > before
            then = (
                self.compile(s["then"], pointer_join(ptr, "then"), resolver, depth) if "then" in s else ir.ANY
            )
            els = (
                self.compile(s["else"], pointer_join(ptr, "else"), resolver, depth) if "else" in s else ir.ANY
            )
            loss = []
            try:
                if cond_lossy:  # no sound negation of a narrowed condition: the 'else' side is left out
                    loss.append("the condition is itself rendered narrower, so only its 'then' side is kept")
                    other = ir.NEVER
                else:
                    other = difference(els, cond, loss, self.exact_defs())
                cur = self._meet(cur, ir.union(ir.intersect(cond, then), other), "if", kptr)
                self.narrowed("if", kptr, loss)
            except ir.Inexact as e:
                self.unsupported("if", kptr, str(e))
        elif "if" in s and ("unevaluatedProperties" in s or "unevaluatedItems" in s):
            # no constraint, but the annotations of a successful 'if' count as evaluated
            kptr = pointer_join(ptr, "if")
            cond = self.compile(s["if"], kptr, resolver, depth)
            try:
                cur = ir.intersect(cur, ir.union(cond, complement(cond)))
            except ir.Inexact:
                pass  # dropping the annotations only makes unevaluated* stricter (sound)
        elif "if" in s:
            self.compile(s["if"], pointer_join(ptr, "if"), resolver, depth)
        return cur

    def _dependents(self, cur: ir.Node, s: dict[str, Any], ptr: str, resolver: Any, depth: int) -> ir.Node:
        """dependentRequired, dependentSchemas."""
        # dependentRequired / dependentSchemas
        non_obj = ir.node(*(ir.TOP[t] for t in VALUE_TYPES if t != "object"))
        dr = s.get("dependentRequired")
        if isinstance(dr, dict):
            for k, needs in dr.items():
                kptr = pointer_join(ptr, "dependentRequired", k)
                if not isinstance(needs, list) or not all(isinstance(x, str) for x in needs):
                    raise InvalidSchemaError("dependentRequired", kptr, "must map names to arrays of names")
                opt = ir.node(
                    ir.ObjA(keys=((k, ir.NEVER),)),
                    ir.ObjA(required=frozenset([k, *needs]), keys=tuple((x, ir.ANY) for x in [k, *needs])),
                )
                cur = self._meet(cur, ir.union(non_obj, opt), "dependentRequired", kptr)
        ds = s.get("dependentSchemas")
        if isinstance(ds, dict):
            for k, sub in ds.items():
                kptr = pointer_join(ptr, "dependentSchemas", k)
                subn = self.compile(sub, kptr, resolver, depth)
                try:
                    present = ir.intersect(
                        ir.node(ir.ObjA(keys=((k, ir.ANY),), required=frozenset([k]))), subn
                    )
                    cur = self._meet(
                        cur,
                        ir.union(non_obj, ir.node(ir.ObjA(keys=((k, ir.NEVER),))), present),
                        "dependentSchemas",
                        kptr,
                    )
                except ir.Inexact as e:
                    self.unsupported("dependentSchemas", kptr, str(e))
        return cur

    def _unevaluated(self, cur: ir.Node, s: dict[str, Any], ptr: str, resolver: Any, depth: int) -> ir.Node:
        """unevaluatedProperties, unevaluatedItems."""
        # unevaluatedProperties / unevaluatedItems
        if ("unevaluatedProperties" in s or "unevaluatedItems" in s) and self._any_of_in_place(s, resolver):
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
        return cur

    def _values(self, cur: ir.Node, s: dict[str, Any], ptr: str) -> ir.Node:
        """enum, const."""
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
                except ir.Inexact as e:
                    self.unsupported("enum" if "enum" in s else "const", ptr, str(e))
                    ok = True
                if ok:
                    kept.append(ir.ConstA(v))
            cur = ir.node(*kept)
        return cur

    def _list(self, s: dict[str, Any], kw: str, ptr: str) -> list[Any]:
        v = s.get(kw)
        if v is None:
            return []
        if not isinstance(v, list) or not v:
            raise InvalidSchemaError(kw, pointer_join(ptr, kw), "must be a non-empty array")
        return v

    def _one_of(
        self, branches: list[ir.Node], lossy: list[bool], bounds: list[frozenset[str]], loss: list[str]
    ) -> ir.Node:
        """Values in exactly one branch: each branch minus the branches it may overlap (a subset
        where a difference is not exact, with the reasons in ``loss``). ``bounds``: the JSON types
        each branch's schema can hold at most (read from the schema, so true of a narrowed branch too)."""
        n = len(branches)
        overlap = [[False] * n for _ in range(n)]
        overlaps = 0
        for i in range(n):
            for j in range(i + 1, n):
                if not bounds[i] & bounds[j]:
                    continue
                if lossy[i] or lossy[j]:  # a narrowed branch proves nothing about the one it stands for
                    disjoint = False
                else:
                    try:
                        disjoint = _provably_empty(ir.intersect(branches[i], branches[j]))
                    except ir.Inexact:
                        disjoint = False
                overlap[i][j] = overlap[j][i] = not disjoint
                if not disjoint:
                    overlaps += 1
                    if overlaps > MAX_ONEOF_OVERLAPS:  # each overlap is a difference that can multiply
                        raise GrammarError(
                            f"oneOf at {where() or '/'} has more than {MAX_ONEOF_OVERLAPS} pairs of branches "
                            f"that may overlap ({n} branches), more than this builder excludes; make the "
                            "branches disjoint (a const discriminator, or required keys of closed objects) "
                            "or use anyOf"
                        )
                tick()
        if not any(map(any, overlap)):
            return ir.union(*branches)
        if any(lossy[j] and any(overlap[j]) for j in range(n)):
            raise ir.Inexact(
                "a branch that may overlap another is itself rendered narrower, so it cannot be excluded"
            )
        defs = self.exact_defs()
        parts = []
        for i, b in enumerate(branches):
            cur = b
            for j in range(n):
                if overlap[i][j]:
                    cur = difference(cur, branches[j], loss, defs)
            parts.append(cur)
        return ir.union(*parts)

    # -- per-type keyword groups


ALL_TYPES = frozenset(VALUE_TYPES)


def _type_bound(s: Any, resolver: Any, depth: int = 0) -> frozenset[str]:
    """The JSON types a schema's values can have at most, read from ``type``, ``const``, ``enum`` and
    what applies in place (``allOf``, ``$ref``, ``anyOf``, ``oneOf``); all types when unsure."""
    if s is False:
        return frozenset()
    if not isinstance(s, dict) or depth > 8:
        return ALL_TYPES
    out = ALL_TYPES
    t = s.get("type")
    if isinstance(t, (str, list)):
        names = [t] if isinstance(t, str) else t
        out &= frozenset("number" if x == "integer" else x for x in names if isinstance(x, str))
    try:
        if "const" in s:
            out &= {json_type(s["const"])}
        if isinstance(s.get("enum"), list):
            out &= frozenset(json_type(v) for v in s["enum"])
    except TypeError:
        pass
    for sub in s.get("allOf", []) if isinstance(s.get("allOf"), list) else []:
        out &= _type_bound(sub, resolver, depth + 1)
    for kw in ("anyOf", "oneOf"):
        if isinstance(s.get(kw), list):
            out &= frozenset().union(*(_type_bound(b, resolver, depth + 1) for b in s[kw]))
    if isinstance(s.get("$ref"), str):
        try:
            r = resolver.lookup(s["$ref"])
        except Exception:  # noqa: BLE001 -- unresolvable: reported where it is compiled
            return out
        out &= _type_bound(r.contents, r.resolver, depth + 1)
    return out


def _expand(n: ir.Node) -> ir.Node:
    """ANY written as one unconstrained alternative per type."""
    return ir.node(*(ir.TOP[t] for t in VALUE_TYPES)) if n.is_any else n


def _provably_empty(n: ir.Node, depth: int = 0) -> bool:
    """True when ``n`` has no value (False: maybe it has; through objects and arrays to depth 4)."""
    return all(_alt_provably_empty(a, depth) for a in n.alts)


def _alt_provably_empty(a: ir.Alt, depth: int) -> bool:
    if isinstance(a, ir.StrA):
        return a.lang.is_empty()
    if isinstance(a, ir.NumA):
        return ir.num_empty(a)
    if depth >= 4:
        return False
    if isinstance(a, ir.ObjA):
        return any(_provably_empty(a.value_for(k), depth + 1) for k in a.required)
    if isinstance(a, ir.ArrA):
        return any(_provably_empty(a.item(i), depth + 1) for i in range(min(a.min, 8)))
    return False
