"""A lenient read of a call's ``edits`` items (``scan_items``): keys in written order, value types, the
new text and the flat closer after it, for calls that parse and calls that do not."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

__all__ = ["ScannedItem", "ScannedKey", "scan_items"]


@dataclass(frozen=True)
class ScannedKey:
    """A key of an item as written: its name and the JSON type of its value (``string``, ``number``,
    ``boolean``, ``null``, ``object``, ``array``; ``missing`` where the text ends before a value,
    ``invalid`` for anything else)."""

    name: str
    value_type: str


@dataclass(frozen=True)
class ScannedItem:
    """One object of a call's ``edits`` array (``scan_items``).

    ``index``: its place in the array; ``keys``: its keys in written order (repeats kept);
    ``new_text``: the decoded value of its first new-text key (None: none, or a value that is no
    complete string); ``flat_closer``: that value's closing quote is followed by ``}}`` (whitespace
    between allowed), the flat tool's closer; ``closed``: the item's object was closed."""

    index: int
    keys: tuple[ScannedKey, ...]
    new_text: str | None = None
    flat_closer: bool = False
    closed: bool = False


@dataclass
class _Frame:
    kind: str  # "{" or "["
    role: str  # top, args, edits, item, other
    key: str | None = None  # the object's key whose value is being written
    keys: list[ScannedKey] = field(default_factory=list)
    item: int = -1
    new_text: str | None = None
    flat: bool = False


_CLOSER = re.compile(r"\s*\}\s*\}")
_STRING_END = re.compile(r'["\\]')
_WS = " \t\r\n"
_ARGS_KEYS = ("arguments", "parameters", "args", "input")


def _value_type(text: str, i: int) -> str:
    while i < len(text) and text[i] in _WS:
        i += 1
    if i >= len(text):
        return "missing"
    c = text[i]
    if c == '"':
        return "string"
    if c == "{":
        return "object"
    if c == "[":
        return "array"
    if c == "-" or c.isdigit():
        return "number"
    for word, kind in (("true", "boolean"), ("false", "boolean"), ("null", "null")):
        if word.startswith(text[i : i + len(word)]):
            return kind
    return "invalid"


def _string_end(text: str, i: int) -> int | None:
    """Index of the closing quote of the string whose content starts at ``i`` (None: it never closes)."""
    while True:
        m = _STRING_END.search(text, i)
        if m is None:
            return None
        if m.group() == '"':
            return m.start()
        i = m.start() + 2


def _decode(raw: str) -> str:
    try:
        out = json.loads('"' + raw + '"')
        return out if isinstance(out, str) else raw
    except ValueError:
        return raw


class _Scanner:
    """One lenient read of a call's first JSON object (``scan_items``)."""

    def __init__(self, text: str, array_key: str, new_key: str) -> None:
        self.text, self.array_key, self.new_key = text, array_key, new_key
        self.stack: list[_Frame] = []
        self.items: list[ScannedItem] = []
        self.n_items = 0

    def run(self, start: int) -> list[ScannedItem]:
        text, i = self.text, start
        while i < len(text):
            c = text[i]
            if c in "{[":
                self.open(c)
            elif c in "}]":
                if not self.close("{" if c == "}" else "["):
                    break
            elif c == '"':
                nxt = self.string(i)
                if nxt is None:
                    break
                i = nxt
                continue
            i += 1
        while self.stack:  # the text ended inside the call: what is open stays unclosed
            self.finish(self.stack.pop(), False)
        return sorted(self.items, key=lambda it: it.index)

    def role(self, kind: str) -> str:
        if not self.stack:
            return "top" if kind == "{" else "other"
        parent = self.stack[-1]
        if parent.kind == "[":
            return "item" if parent.role == "edits" and kind == "{" else "other"
        if kind == "[" and parent.key == self.array_key:
            enveloped = any(k.name in _ARGS_KEYS for k in parent.keys[:-1])
            if parent.role == "args" or (parent.role == "top" and not enveloped):
                return "edits"
        if kind == "{" and parent.role == "top" and parent.key in _ARGS_KEYS:
            return "args"
        return "other"

    def open(self, kind: str) -> None:
        frame = _Frame(kind, self.role(kind))
        if frame.role == "item":
            frame.item = self.n_items
            self.n_items += 1
        self.stack.append(frame)

    def finish(self, frame: _Frame, closed: bool) -> None:
        if frame.role == "item":
            self.items.append(ScannedItem(frame.item, tuple(frame.keys), frame.new_text, frame.flat, closed))

    def close(self, opener: str) -> bool:
        """Close up to the nearest ``opener``; False when the read ends (none open, or the call closed)."""
        if not any(f.kind == opener for f in self.stack):
            return False
        while self.stack:
            frame = self.stack.pop()
            self.finish(frame, True)
            if frame.kind == opener:
                break
        return bool(self.stack)

    def string(self, i: int) -> int | None:
        """Read the string opening at ``i`` (a key when ``:`` follows it); the index to go on from, None
        when it never closes."""
        text = self.text
        end = _string_end(text, i + 1)
        if end is None:
            return None
        j = end + 1
        while j < len(text) and text[j] in _WS:
            j += 1
        top = self.stack[-1] if self.stack else None
        if top is None or top.kind != "{":
            return end + 1
        if j < len(text) and text[j] == ":":
            name = _decode(text[i + 1 : end])
            top.key = name
            top.keys.append(ScannedKey(name, _value_type(text, j + 1)))
            return j + 1
        if top.role == "item" and top.key == self.new_key and top.new_text is None:
            top.new_text = _decode(text[i + 1 : end])
            top.flat = bool(_CLOSER.match(text, end + 1))
        return end + 1


def scan_items(call_text: str, array_key: str = "edits", new_key: str = "newText") -> list[ScannedItem]:
    """The items of the ``array_key`` array of the first JSON object in ``call_text``, read leniently.

    The object is read from its ``{`` to where it closes or the text ends; what follows it (a second
    call, text) is not read. A string followed by ``:`` inside an object is a key. A closer that does
    not match the open container closes the containers up to the nearest one it matches (``}`` where
    ``]`` belongs closes the array and its object: the flat closer ``"}}`` after an item's newText ends
    the item, the array and the arguments), and one that matches none ends the read. The array is the
    value of ``array_key`` in the call's arguments: the envelope's ``arguments``, or the object itself
    when it holds the array directly and no ``arguments`` before it."""
    start = call_text.find("{")
    if start < 0:
        return []
    return _Scanner(call_text, array_key, new_key).run(start)
