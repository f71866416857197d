"""What follows a value inside a JSON object: one key-resolved definition for samples and the probe.

A decision point is the place right after a value (for a string, its closing quote is still to be
written: the *pending* bytes). What the model writes from there is classified into one **kind**,
grouped into **close**, **continue** or **other**:

close
    ``close`` — the pending bytes, then the container's own closer (``}`` in an object).
continue (a ``,`` after the pending bytes), split by what follows the comma:
    ``repeat`` — a key the object already has, including mangled spellings of it: the key followed by
    junk inside the key string (``newText\\": ``, ``newText': ``, ``newText proof``), an
    unterminated key string that starts with it, a numbered copy (``newText1``, ``oldText_2``), the
    key plus a camel-case suffix or prefix (``newTextDoc``, ``oldTextModifier``, ``myNewText``), or
    the key spelled another way (``new_text``: the same letters once case, ``_`` and ``-`` are dropped);
    ``declared`` — a key the schema declares for this object that it does not have yet (legitimate);
    ``wrong_level`` — a key the tool declares at another level (``path`` or ``edits`` inside an item);
    ``schema_word`` — a word of the tool definitions shown in the prompt (``required``,
    ``properties``, ``additionalProperties``, ``type``, another tool's property, the tools of an
    earlier turn the prompt shows, …), or one spelled another way (``oldString`` for ``old_string``);
    ``invented`` — any other name;
    ``next_item`` — an object or array opened where a key belongs (the next item started inside the
    object; in an array every next element is a next item);
    ``other`` — anything else after the comma: a trailing comma, a quoted string not followed by
    ``:``, a bare word.
    A key is a key only when a ``:`` follows its closing quote (mangled repeats excepted: their key
    string never closes cleanly).
other
    ``string_goes_on`` — the value was a string and the model did not write its closing quote;
    ``wrong_closer`` — the pending bytes, then the other container's closer (``]`` in an object);
    ``stray`` — the pending bytes, then anything else.

An **extra key** is a ``repeat``, ``wrong_level``, ``schema_word`` or ``invented`` key. What the
whole call does after it is its **outcome** (``call_outcome``, from the scorer's verdict of the call):

``source_shaped``
    the source's failure: the call parses under its wire format, every declared key is present, and
    its only schema violations are additional properties inside ``edits[]`` items;
``duplicate``
    an exact repeat of a key the object has: JSON-legal as written (``JSON.parse`` and ``json.loads``
    keep one value), so never counted as a validation failure, whether or not the call closes later
    (most such draws repeat ``newText``/``oldText`` until the token budget ends them); reported apart;
``derailment``
    any other extra key after which the call does not parse (cut by the token budget included);
``extra_other``
    the call parses but fails otherwise (a missing key, a wrong type, a key outside the items, …).

Every other continuation's outcome is its kind; ``string_goes_on`` reads as a *run-on string*.

While the text is too short to decide, the kind is ``undetermined`` (the group may already be
known: ``",`` is a continue whose kind is not). With ``final=True`` the text is taken as complete
(a sample that stopped) and an unresolved key is decided from what was written.

``KeyContext`` says which keys count as present, declared, elsewhere and schema words;
``key_context`` builds it from the text before the decision point and the tools shown in the prompt.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tooldecode.grammar.wire import ENVELOPE_KEYS

__all__ = [
    "CLOSE",
    "CONTINUE",
    "DERAILMENT",
    "DUPLICATE",
    "EXTRA_KEY_KINDS",
    "EXTRA_OTHER",
    "EXTRA_OUTCOMES",
    "OUTCOMES",
    "SOURCE_SHAPED",
    "UNPARSED_VERDICTS",
    "CONTINUE_KINDS",
    "DECLARED",
    "GROUPS",
    "INVENTED",
    "KINDS",
    "NEXT_ITEM",
    "OTHER",
    "OTHER_KINDS",
    "REPEAT",
    "SCHEMA_WORD",
    "STRAY",
    "STRING_GOES_ON",
    "UNDETERMINED",
    "WRONG_CLOSER",
    "WRONG_LEVEL",
    "Continuation",
    "KeyContext",
    "call_outcome",
    "classify_continuation",
    "source_shaped",
    "key_context",
    "open_object_keys",
    "tool_words",
]

# groups
CLOSE = "close"
CONTINUE = "continue"
OTHER = "other"
UNDETERMINED = "undetermined"
GROUPS = (CLOSE, CONTINUE, OTHER)

# continue kinds (``OTHER`` doubles as the continue kind "something else after the comma")
REPEAT = "repeat"
DECLARED = "declared"
WRONG_LEVEL = "wrong_level"
SCHEMA_WORD = "schema_word"
INVENTED = "invented"
NEXT_ITEM = "next_item"
CONTINUE_KINDS = (REPEAT, DECLARED, WRONG_LEVEL, SCHEMA_WORD, INVENTED, NEXT_ITEM, OTHER)
# other kinds
STRING_GOES_ON = "string_goes_on"
WRONG_CLOSER = "wrong_closer"
STRAY = "stray"
OTHER_KINDS = (STRING_GOES_ON, WRONG_CLOSER, STRAY)
KINDS = (CLOSE, *CONTINUE_KINDS, *OTHER_KINDS)
# a key the object must not get
EXTRA_KEY_KINDS = (REPEAT, WRONG_LEVEL, SCHEMA_WORD, INVENTED)
# outcomes of an extra key (what the whole call does after it)
SOURCE_SHAPED = "source_shaped"
DUPLICATE = "duplicate"
DERAILMENT = "derailment"
EXTRA_OTHER = "extra_other"
EXTRA_OUTCOMES = (SOURCE_SHAPED, DUPLICATE, DERAILMENT, EXTRA_OTHER)
OUTCOMES = (CLOSE, *EXTRA_OUTCOMES, DECLARED, NEXT_ITEM, OTHER, *OTHER_KINDS)
# scorer verdicts of a call that did not parse
UNPARSED_VERDICTS = ("no_call", "too_deep", "truncated", "json_syntax")
# scorer flags of a call that parsed only outside its wire format's envelope
_ENVELOPE_FLAGS = (
    "unnamed_call",
    "name_key_variant",
    "arguments_key_variant",
    "arguments_as_string",
    "flat_envelope",
)
_ITEM_KEY = re.compile(r"^edits\[\d+\](\.[^.\[]+|\[\".*\"\])$")  # the scorer's path of a key in an item
_ITEM_ERROR = re.compile(r"^edits\[\d+\]: (Additional|Unevaluated) properties ")

_WS = b" \t\r\n"
_IDENT = re.compile(rb"[A-Za-z0-9_]")
_WORD = re.compile(r"^[A-Za-z_$][A-Za-z0-9_$-]*$")


@dataclass(frozen=True)
class KeyContext:
    """The keys that resolve a continuation's key name (see the module docstring for the order).

    Attributes
    ----------
    present : frozenset[str]
        Keys the object already has (the key of the value just written included).
    declared : frozenset[str]
        Keys the schema declares for this object (present ones may be included; they count as repeats).
    elsewhere : frozenset[str]
        Keys the tool declares at other levels (a gold key at the wrong level).
    schema_words : frozenset[str]
        Words of the tool definitions shown in the prompt.
    """

    present: frozenset[str] = frozenset()
    declared: frozenset[str] = frozenset()
    elsewhere: frozenset[str] = frozenset()
    schema_words: frozenset[str] = frozenset()

    def key_kind(self, key: str) -> str:
        """The continue kind of a clean key ``key`` (its string closed and a ``:`` followed)."""
        if key in self.present:
            return REPEAT
        if key in self.declared:
            return DECLARED
        if any(_spelling_of(key, k) for k in self.present):
            return REPEAT
        if key in self.elsewhere:
            return WRONG_LEVEL
        if key in self.schema_words:
            return SCHEMA_WORD
        norm = _norm(key)
        if norm and any(_norm(w) == norm for w in self.schema_words):
            return SCHEMA_WORD
        return INVENTED

    def mangled_repeat(self, raw: bytes) -> bool:
        """``raw`` (key string bytes, maybe unterminated) is a present key followed by junk in the string."""
        for k in self.present:
            kb = k.encode("utf-8")
            if len(raw) > len(kb) and raw.startswith(kb) and not _IDENT.match(raw[len(kb) : len(kb) + 1]):
                return True
        return False


def _norm(key: str) -> str:
    return re.sub(r"[_\-]", "", key).lower()


def _spelling_of(key: str, present: str) -> bool:
    """``key`` is a mangled spelling of the present key ``present``: a numbered copy (``newText1``,
    ``oldText_2``), a camel-case suffix (``newTextDoc``) or prefix (``myNewText``), or the same letters
    once case, ``_`` and ``-`` are dropped (``new_text``). ``newTextual`` (a lowercase run-on: another
    word) is not one."""
    if not present or key == present:
        return False
    if re.fullmatch(re.escape(present) + r"(_?\d+|_\w+|[A-Z]\w*)", key):
        return True
    cap = present[:1].upper() + present[1:]
    if re.fullmatch(r"[a-z][A-Za-z0-9]*" + re.escape(cap), key):
        return True
    return _norm(key) == _norm(present)


@dataclass(frozen=True)
class Continuation:
    """The class of a continuation: ``group`` (close/continue/other/undetermined), ``kind`` (one of
    ``KINDS`` or ``undetermined``) and, for continuations with a key string, the ``key`` as written."""

    group: str
    kind: str
    key: str | None = None

    @property
    def determined(self) -> bool:
        return self.kind != UNDETERMINED


def _decode_key(raw: bytes) -> str:
    try:
        out = json.loads(b'"' + raw + b'"')
        if isinstance(out, str):
            return out
    except (ValueError, UnicodeDecodeError):
        pass
    return raw.decode("utf-8", "replace")


def _string_end(data: bytes, i: int) -> int | None:
    """Index of the unescaped closing quote of a string whose content starts at ``i`` (None: unterminated)."""
    while i < len(data):
        c = data[i]
        if c == 0x5C:
            i += 2
            continue
        if c == 0x22:
            return i
        i += 1
    return None


def classify_continuation(
    text: str | bytes,
    *,
    context: KeyContext | None = None,
    pending: str | bytes = b'"',
    container: str = "object",
    in_string: bool = True,
    final: bool = False,
) -> Continuation:
    """Classify what a model wrote at a decision point (see the module docstring for the kinds).

    Parameters
    ----------
    text : str or bytes
        What was written from the decision point on (the pending bytes first).
    context : KeyContext, optional
        Keys that resolve a key name; without it every key is ``invented``.
    pending : str or bytes
        Bytes of the value still to be written before the decision (``"`` for a string whose content
        was forced; empty after a complete value).
    container : {"object", "array"}
        The container the value sits in.
    in_string : bool
        The pending bytes end a string (a mismatch is then ``string_goes_on``, else ``stray``).
    final : bool
        The text is complete: decide what is still open instead of returning ``undetermined``.

    Returns
    -------
    Continuation
    """
    ctx = context or KeyContext()
    data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
    pend = pending.encode("utf-8") if isinstance(pending, str) else bytes(pending)
    closer, other_closer = (b"}", b"]") if container == "object" else (b"]", b"}")
    miss = STRING_GOES_ON if in_string else STRAY
    if len(data) < len(pend):
        if not pend.startswith(data):
            return Continuation(OTHER, miss)
        return Continuation(OTHER, miss) if final else Continuation(UNDETERMINED, UNDETERMINED)
    if not data.startswith(pend):
        return Continuation(OTHER, miss)
    rest = data[len(pend) :].lstrip(_WS)
    if not rest:
        return Continuation(OTHER, STRAY) if final else Continuation(UNDETERMINED, UNDETERMINED)
    head = rest[:1]
    if head == closer:
        return Continuation(CLOSE, CLOSE)
    if head == other_closer:
        return Continuation(OTHER, WRONG_CLOSER)
    if head != b",":
        return Continuation(OTHER, STRAY)
    r = rest[1:].lstrip(_WS)
    if not r:
        return Continuation(CONTINUE, OTHER) if final else Continuation(CONTINUE, UNDETERMINED)
    if container != "object":
        return Continuation(CONTINUE, NEXT_ITEM)
    if r[:1] in (b"{", b"["):
        return Continuation(CONTINUE, NEXT_ITEM)
    if r[:1] != b'"':
        return Continuation(CONTINUE, OTHER)
    end = _string_end(r, 1)
    raw = r[1:] if end is None else r[1:end]
    if ctx.mangled_repeat(raw):
        return Continuation(CONTINUE, REPEAT, _decode_key(raw))
    if end is None:
        if not final:
            return Continuation(CONTINUE, UNDETERMINED)
        starts = any(raw.startswith(k.encode("utf-8")) for k in ctx.present)
        return Continuation(CONTINUE, REPEAT if starts else OTHER, _decode_key(raw))
    key = _decode_key(raw)
    after = r[end + 1 :].lstrip(_WS)
    if not after:
        return Continuation(CONTINUE, OTHER if final else UNDETERMINED, key)
    if after[:1] != b":":
        return Continuation(CONTINUE, OTHER, key)
    return Continuation(CONTINUE, ctx.key_kind(key), key)


def source_shaped(verdict: Mapping[str, Any]) -> bool:
    """Whether a scorer verdict (a ``verdicts-*.jsonl`` line) is the source's failure: the call parsed
    under its wire format, to the tool expected, with every declared key present, and its only schema
    violations are additional properties directly inside ``edits[]`` items."""
    if verdict.get("verdict") != "invented_key":
        return False
    if any(f in _ENVELOPE_FLAGS for f in verdict.get("flags") or ()):
        return False
    keys = verdict.get("invented_keys") or []
    errors = verdict.get("errors") or []
    return (
        bool(keys)
        and all(_ITEM_KEY.match(str(k.get("path", ""))) for k in keys)
        and all(_ITEM_ERROR.match(str(e)) for e in errors)
    )


def call_outcome(
    c: Continuation,
    verdict: Mapping[str, Any] | None,
    present: Iterable[str] = (),
    tool: str | None = None,
    parsed_here: bool | None = None,
) -> str:
    """The outcome (``OUTCOMES``) of a continuation ``c`` in a call whose scorer verdict is ``verdict``.

    ``present`` holds the keys the object had before the decision point (an exact repeat of one is a
    ``duplicate``). ``tool`` names the call the decision point sits in: a verdict of another tool's
    call (the scorer fell back to a later call that parsed) means this one did not parse;
    ``parsed_here`` False says so directly (the call at the decision point did not parse, whatever
    later call of the same tool the verdict describes). A continuation that is no extra key has its kind as outcome; an extra key's outcome needs
    ``verdict`` (the precedence: duplicate, derailment, source-shaped, other).
    """
    if c.kind not in EXTRA_KEY_KINDS:
        return c.kind
    if verdict is None:
        raise ValueError("call_outcome: an extra key's outcome needs the call's scorer verdict")
    if c.kind == REPEAT and c.key in set(present):
        return DUPLICATE
    if (
        parsed_here is False
        or verdict.get("verdict") in UNPARSED_VERDICTS
        or (tool is not None and verdict.get("tool") != tool)
    ):
        return DERAILMENT
    if source_shaped(verdict):
        return SOURCE_SHAPED
    return EXTRA_OTHER


# --------------------------------------------------------------------------------------------- context


def open_object_keys(prefix: str | bytes) -> list[str] | None:
    """Keys of the innermost JSON object still open at the end of ``prefix`` (None: no object open).

    ``prefix`` may start with non-JSON text (a wrapper such as ``<tool_call>``) and may end inside a
    string value; the key whose value is being written counts as present.
    """
    data = prefix.encode("utf-8") if isinstance(prefix, str) else prefix
    start = min((i for i in (data.find(b"{"), data.find(b"[")) if i >= 0), default=-1)
    if start < 0:
        return None
    stack: list[list[str] | None] = []  # None for arrays
    i = start
    n = len(data)
    while i < n:
        c = data[i : i + 1]
        if c in (b"{", b"["):
            stack.append([] if c == b"{" else None)
        elif c in (b"}", b"]"):
            if stack:
                stack.pop()
            if not stack:
                # the first JSON value closed; look for the next one
                nxt = [j for j in (data.find(b"{", i + 1), data.find(b"[", i + 1)) if j >= 0]
                if not nxt:
                    return None
                i = min(nxt)
                continue
        elif c == b'"':
            end = _string_end(data, i + 1)
            if end is None:
                break
            j = end + 1
            while j < n and data[j] in _WS:
                j += 1
            if j < n and data[j : j + 1] == b":" and stack and stack[-1] is not None:
                stack[-1].append(_decode_key(data[i + 1 : end]))
            i = end
        i += 1
    for frame in reversed(stack):
        if frame is not None:
            return frame
    return None


def _tool_json(tool: Any) -> dict:
    if isinstance(tool, Mapping):
        return dict(tool)
    return {
        "type": "function",
        "function": {
            "name": getattr(tool, "name", ""),
            "description": getattr(tool, "description", ""),
            "parameters": getattr(tool, "parameters", {}),
        },
    }


def tool_words(tools: Iterable[Any]) -> frozenset[str]:
    """Words of the tool definitions as a chat template shows them: every key and every word-like
    string value (``string``, ``object``, tool and property names) of each tool's JSON form.

    ``tools`` holds ``tooldecode.grammar.Tool`` objects or their JSON forms.
    """
    out: set[str] = set()

    def walk(v: Any, depth: int) -> None:
        if depth > 60:
            return
        if isinstance(v, Mapping):
            for k, sub in v.items():
                out.add(str(k))
                walk(sub, depth + 1)
        elif isinstance(v, list):
            for sub in v:
                walk(sub, depth + 1)
        elif isinstance(v, str) and _WORD.match(v):
            out.add(v)

    for t in tools:
        walk(_tool_json(t), 0)
    return frozenset(out)


def _object_schemas(schema: Any, depth: int = 0) -> list[dict]:
    """Every subschema with ``properties`` (``$ref`` not followed: built-in tools inline their items)."""
    out: list[dict] = []
    if depth > 60:
        return out
    if isinstance(schema, Mapping):
        if isinstance(schema.get("properties"), Mapping):
            out.append(dict(schema))
        for v in schema.values():
            out.extend(_object_schemas(v, depth + 1))
    elif isinstance(schema, list):
        for v in schema:
            out.extend(_object_schemas(v, depth + 1))
    return out


def key_context(
    prefix: str | bytes, tools: Sequence[Any] = (), *, expected_tool: str | None = None
) -> KeyContext:
    """The ``KeyContext`` at the end of ``prefix`` (the call text before the decision point).

    Present keys come from the innermost open object of ``prefix``. The object's schema is the
    subschema of a tool (``expected_tool`` first) whose properties include every present key;
    ``declared`` is its properties, ``elsewhere`` the tool's other property names, ``schema_words`` the
    words of all ``tools`` (``tool_words``) that are none of these.
    """
    present = frozenset(open_object_keys(prefix) or [])
    forms = [_tool_json(t) for t in tools]
    forms.sort(key=lambda f: f.get("function", {}).get("name") != expected_tool)
    declared: frozenset[str] = frozenset()
    elsewhere: frozenset[str] = frozenset()
    for form in forms:
        objs = _object_schemas(form.get("function", {}).get("parameters", {}))
        match = [o for o in objs if present <= set(o["properties"])]
        if match:
            declared = frozenset(match[0]["properties"])
            names = {k for o in objs for k in o["properties"]}
            elsewhere = frozenset(names - declared)
            break
    else:
        if present and present <= set(ENVELOPE_KEYS):
            # the wire's envelope around the arguments ({"name": ..., "arguments": ...})
            declared = frozenset(ENVELOPE_KEYS)
    words = tool_words(forms) - present - declared - elsewhere
    return KeyContext(present, declared, elsewhere, frozenset(words))
