"""Scenario files: one realistic editing task per file (YAML or JSON); load, validate, apply edits.

A scenario is a source file with a bug, the user's request, the assistant's diagnosis (and optional
reasoning text), and the gold ``edit`` call that fixes it as a list of ``{oldText, newText}`` items.
``docs/scenarios.md`` documents the file format. The built-in corpus lives in ``scenarios/data/``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tooldecode.errors import ScenarioError

__all__ = [
    "Edit",
    "Scenario",
    "ScenarioError",
    "apply_edits",
    "builtin_dir",
    "check_scenario",
    "get_scenario",
    "line_count",
    "load_scenario",
    "load_scenarios",
    "scenario_files",
    "standard_tags",
]

SUFFIXES = (".yaml", ".yml", ".json")
REQUIRED_FIELDS = ("id", "language", "title", "path", "content", "task", "diagnosis", "edits", "expected")
OPTIONAL_FIELDS = ("reasoning", "tags")
REASONING_KEYS = ("read", "edit")
EDIT_KEYS = ("oldText", "newText")
ID_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")

# Tags whose truth follows from the scenario itself; `check` verifies them when present.
LONG_NEWTEXT_LINES = 15
VERY_LONG_NEWTEXT_LINES = 40
ESCAPE_THRESHOLD = 10  # characters JSON must escape (", \, tab, other controls) in the edits' text


@dataclass(frozen=True)
class Edit:
    """One item of the ``edit`` tool's ``edits`` array."""

    old_text: str
    new_text: str


@dataclass(frozen=True)
class Scenario:
    """One editing task. ``content`` is the file before the edit; ``expected`` the file after the gold edits."""

    id: str
    language: str
    title: str
    path: str
    content: str
    task: str
    diagnosis: str
    reasoning: dict[str, str] = field(hash=False)
    edits: tuple[Edit, ...]
    expected: str
    tags: tuple[str, ...] = ()
    source: Path | None = field(default=None, compare=False)

    def apply(self, edits: Sequence[Edit] | None = None) -> str:
        """Apply ``edits`` (the gold edits by default) to ``content``; raises ScenarioError."""
        try:
            return apply_edits(self.content, self.edits if edits is None else edits)
        except ScenarioError as err:
            raise ScenarioError(f"scenario {self.id}: {err}") from None

    def sha256(self) -> str:
        """Stable hash of everything the scenario says (not where it was loaded from)."""
        payload = {
            "id": self.id,
            "language": self.language,
            "title": self.title,
            "path": self.path,
            "content": self.content,
            "task": self.task,
            "diagnosis": self.diagnosis,
            "reasoning": dict(sorted(self.reasoning.items())),
            "edits": [{"oldText": e.old_text, "newText": e.new_text} for e in self.edits],
            "expected": self.expected,
            "tags": list(self.tags),
        }
        text = json.dumps(payload, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()


def builtin_dir() -> Path:
    """The folder of the built-in corpus."""
    return Path(__file__).resolve().parent / "data"


# ---------------------------------------------------------------------------------------------- applying


def _positions(content: str, needle: str) -> list[int]:
    """Start offsets of every occurrence of ``needle``, overlapping ones included."""
    found: list[int] = []
    start = content.find(needle)
    while start != -1:
        found.append(start)
        start = content.find(needle, start + 1)
    return found


def apply_edits(content: str, edits: Sequence[Edit]) -> str:
    """Apply ``edits`` in order, like the ``edit`` tool does.

    Each ``old_text`` must occur exactly once in the content as it is when that edit is applied.
    Raises ScenarioError naming the edit (``edits[i].oldText``) otherwise.
    """
    text = content
    for i, edit in enumerate(edits):
        if not isinstance(edit.old_text, str) or not isinstance(edit.new_text, str):
            raise ScenarioError(f"edits[{i}]: oldText and newText must be strings")
        if edit.old_text == "":
            raise ScenarioError(f"edits[{i}].oldText: is empty; give the exact text to replace")
        hits = _positions(text, edit.old_text)
        if len(hits) != 1:
            done = "edits[0]" if i == 1 else f"edits[0..{i - 1}]"
            where = "the file" if i == 0 else f"the file after applying {done}"
            raise ScenarioError(
                f"edits[{i}].oldText: occurs {len(hits)} times in {where}; it must occur exactly once "
                f"(start: {_preview(edit.old_text)})"
            )
        at = hits[0]
        text = text[:at] + edit.new_text + text[at + len(edit.old_text) :]
    return text


# ---------------------------------------------------------------------------------------------- loading


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """Safe loader that rejects duplicate mapping keys (a silent overwrite hides copy-paste mistakes)."""


def _construct_mapping(loader: Any, node: yaml.MappingNode) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    result: dict[Any, Any] = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in result:
            line = key_node.start_mark.line + 1
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r} (line {line})")
        result[key] = loader.construct_object(value_node, deep=True)
    return result


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _json_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key!r}")
        result[key] = value
    return result


def _parse(path: Path) -> Any:
    from tooldecode.guard import check_regular, nesting_problem

    check_regular(path, "scenario", ScenarioError)  # a FIFO or a device is refused unread
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise ScenarioError(f"{path}: cannot read ({err.strerror}); check the path") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ScenarioError(f"{path}: not valid UTF-8 at byte {err.start}; save the file as UTF-8") from None
    if nesting_problem(text):  # brackets and numbers bounded before either parser runs
        raise ScenarioError(f"{path}: the scenario is {nesting_problem(text)}; simplify it")
    if path.suffix == ".json":
        try:
            return json.loads(text, object_pairs_hook=_json_pairs)
        except (ValueError, RecursionError) as err:
            raise ScenarioError(f"{path}: invalid JSON: {err}") from None
    try:
        return yaml.load(text, Loader=_Loader)  # a SafeLoader subclass
    except RecursionError:
        raise ScenarioError(f"{path}: invalid YAML: nested too deeply; simplify it") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
        problem = getattr(err, "problem", None) or str(err)
        context = getattr(err, "context", None)
        detail = f"{context}: {problem}" if context else problem
        raise ScenarioError(f"{where}: invalid YAML: {detail}") from None


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _string(path: Path, data: dict[str, Any], key: str, where: str | None = None) -> str:
    value = data[key]
    if not isinstance(value, str):
        raise ScenarioError(f"{path}: field '{where or key}': expected a string, got {_type_name(value)}")
    return value


def load_scenario(path: Path) -> Scenario:
    """Load one scenario file (``.yaml``, ``.yml`` or ``.json``).

    Raises ScenarioError with one line naming the file and the field for unreadable files, bad YAML/JSON,
    missing or unknown fields and wrong types. Consistency (edits apply, ``expected`` matches) is
    ``check_scenario``'s job. A session scenario (``kind: session``) comes back as a
    ``tooldecode.scenarios.sessions.SessionScenario``, already checked.
    """
    path = Path(path)
    data = _parse(path)
    if not isinstance(data, dict):
        raise ScenarioError(f"{path}: expected a mapping of fields at the top level, got {_type_name(data)}")
    if data.get("kind") == "session":  # a session scenario (docs/scenarios.md): checked on load
        from tooldecode.scenarios.sessions import as_session_scenario

        return as_session_scenario(data, str(path), path)  # type: ignore[return-value]
    for key in data:
        if key not in REQUIRED_FIELDS and key not in OPTIONAL_FIELDS:
            known = ", ".join(REQUIRED_FIELDS + OPTIONAL_FIELDS)
            raise ScenarioError(f"{path}: field '{key}': unknown field; known fields: {known}")
    for key in REQUIRED_FIELDS:
        if key not in data:
            raise ScenarioError(f"{path}: field '{key}': missing; every scenario needs it")
    strings = {
        key: _string(path, data, key)
        for key in ("id", "language", "title", "path", "content", "task", "diagnosis", "expected")
    }

    raw_edits = data["edits"]
    if not isinstance(raw_edits, list) or not raw_edits:
        got = "an empty list" if raw_edits == [] else _type_name(raw_edits)
        raise ScenarioError(
            f"{path}: field 'edits': expected a non-empty list of {{oldText, newText}}, got {got}"
        )
    edits: list[Edit] = []
    for i, item in enumerate(raw_edits):
        if not isinstance(item, dict):
            raise ScenarioError(f"{path}: field 'edits[{i}]': expected a mapping, got {_type_name(item)}")
        for key in item:
            if key not in EDIT_KEYS:
                raise ScenarioError(
                    f"{path}: field 'edits[{i}].{key}': unknown field; an edit has exactly oldText and newText"
                )
        for key in EDIT_KEYS:
            if key not in item:
                raise ScenarioError(f"{path}: field 'edits[{i}].{key}': missing")
        edits.append(
            Edit(
                old_text=_string(path, item, "oldText", f"edits[{i}].oldText"),
                new_text=_string(path, item, "newText", f"edits[{i}].newText"),
            )
        )

    raw_reasoning = data.get("reasoning")
    reasoning: dict[str, str] = {}
    if raw_reasoning is not None:
        if not isinstance(raw_reasoning, dict):
            raise ScenarioError(
                f"{path}: field 'reasoning': expected a mapping with keys read/edit, got {_type_name(raw_reasoning)}"
            )
        for key in raw_reasoning:
            if key not in REASONING_KEYS:
                raise ScenarioError(f"{path}: field 'reasoning.{key}': unknown key; use 'read' and/or 'edit'")
            reasoning[key] = _string(path, raw_reasoning, key, f"reasoning.{key}")

    raw_tags = data.get("tags")
    tags: tuple[str, ...] = ()
    if raw_tags is not None:
        if not isinstance(raw_tags, list):
            raise ScenarioError(
                f"{path}: field 'tags': expected a list of strings, got {_type_name(raw_tags)}"
            )
        for i, tag in enumerate(raw_tags):
            if not isinstance(tag, str):
                raise ScenarioError(f"{path}: field 'tags[{i}]': expected a string, got {_type_name(tag)}")
        tags = tuple(raw_tags)

    return Scenario(
        id=strings["id"],
        language=strings["language"],
        title=strings["title"],
        path=strings["path"],
        content=strings["content"],
        task=strings["task"],
        diagnosis=strings["diagnosis"],
        reasoning=reasoning,
        edits=tuple(edits),
        expected=strings["expected"],
        tags=tags,
        source=path,
    )


def scenario_files(dirs: Sequence[Path] | None = None) -> list[Path]:
    """Scenario files in ``dirs`` (folders, not recursive, or single files); default: the built-in corpus."""
    files: list[Path] = []
    for entry in [builtin_dir()] if dirs is None else dirs:
        entry = Path(entry)
        if entry.is_dir():
            files.extend(sorted(p for p in entry.iterdir() if p.suffix in SUFFIXES and p.is_file()))
        elif entry.is_file():
            files.append(entry)
        else:
            raise ScenarioError(f"{entry}: no such scenario folder or file; pass a folder of *.yaml files")
    return files


def load_scenarios(dirs: Sequence[Path] | None = None) -> list[Scenario]:
    """Load every scenario in ``dirs`` (default: the built-in corpus), sorted by id; ids must be unique."""
    seen: dict[str, Scenario] = {}
    for file in scenario_files(dirs):
        scenario = load_scenario(file)
        if scenario.id in seen:
            other = seen[scenario.id].source
            raise ScenarioError(
                f"{file}: field 'id': '{scenario.id}' is also used by {other}; ids must be unique"
            )
        seen[scenario.id] = scenario
    return sorted(seen.values(), key=lambda s: s.id)


def get_scenario(scenario_id: str, dirs: Sequence[Path] | None = None) -> Scenario:
    """The scenario with this id; raises ScenarioError naming close matches when there is none."""
    scenarios = load_scenarios(dirs)
    for scenario in scenarios:
        if scenario.id == scenario_id:
            return scenario
    import difflib

    close = difflib.get_close_matches(scenario_id, [s.id for s in scenarios], n=3)
    hint = f"did you mean {', '.join(close)}?" if close else "`tooldecode scenarios list` shows the ids"
    raise ScenarioError(f"unknown scenario '{scenario_id}'; {hint}")


# ---------------------------------------------------------------------------------------------- checking


def line_count(text: str) -> int:
    """Lines in ``text``; a final newline does not start a new line ("a\\nb\\n" has 2)."""
    if not text:
        return 0
    return text.count("\n") + (0 if text.endswith("\n") else 1)


def _escape_weight(text: str) -> int:
    """Characters of ``text`` that a JSON string must escape, newlines excluded."""
    return sum(1 for ch in text if ch in '"\\' or (ord(ch) < 0x20 and ch != "\n"))


def standard_tags(s: Scenario) -> set[str]:
    """The standard tags that follow from the scenario's content (``mid-file`` and ``end-of-function``
    describe code structure and are set by hand)."""
    tags = {"multi-edit" if len(s.edits) > 1 else "single-edit"}
    longest = max((line_count(e.new_text) for e in s.edits), default=0)
    if longest >= LONG_NEWTEXT_LINES:
        tags.add("long-newtext")
    if longest >= VERY_LONG_NEWTEXT_LINES:
        tags.add("very-long-newtext")
    edit_text = "".join(e.old_text + e.new_text for e in s.edits)
    if _escape_weight(edit_text) >= ESCAPE_THRESHOLD:
        tags.add("escapes")
    if any(ord(ch) > 0x7F for ch in edit_text):
        tags.add("non-ascii")
    if "\t" in edit_text:
        tags.add("tabs")
    return tags


DERIVED_TAGS = (
    "multi-edit",
    "single-edit",
    "long-newtext",
    "very-long-newtext",
    "escapes",
    "non-ascii",
    "tabs",
)
TAG_RULES = {
    "multi-edit": "needs 2 or more edits",
    "single-edit": "needs exactly 1 edit",
    "long-newtext": f"needs a newText of {LONG_NEWTEXT_LINES}+ lines",
    "very-long-newtext": f"needs a newText of {VERY_LONG_NEWTEXT_LINES}+ lines",
    "escapes": f'needs {ESCAPE_THRESHOLD}+ characters JSON must escape (", \\, tab) in the edits',
    "non-ascii": "needs a non-ASCII character in the edits",
    "tabs": "needs a tab in the edits",
    "mid-file": "needs an edit followed by more code in the file",
}


def _preview(text: str, width: int = 40) -> str:
    short = text if len(text) <= width else text[:width] + "…"
    return json.dumps(short, ensure_ascii=False)


def _first_difference(got: str, want: str) -> str:
    got_lines, want_lines = got.split("\n"), want.split("\n")
    for n, (a, b) in enumerate(zip(got_lines, want_lines, strict=False), start=1):
        if a != b:
            return f"line {n}: edits give {_preview(a)}, expected has {_preview(b)}"
    if got.rstrip("\n") == want.rstrip("\n"):
        ends = f"{len(got) - len(got.rstrip(chr(10)))} vs {len(want) - len(want.rstrip(chr(10)))}"
        return f"trailing newlines differ ({ends}); in YAML '|' keeps one, '|-' none, '|+' all"
    return f"line counts differ: edits give {len(got_lines)}, expected has {len(want_lines)}"


def check_scenario(s: Scenario) -> list[str]:
    """Problems with ``s``, one line each, formatted ``<id>: <field>: <what is wrong>``; empty when valid.

    Checks the id, non-empty fields, that every gold oldText occurs exactly once in ``content``, that the
    edits do not overlap, that applying them gives ``expected`` byte for byte, and that standard tags hold.
    """
    if getattr(s, "kind", "edit") == "session":  # checked on load (``as_session_scenario``)
        return []
    problems: list[str] = []

    def problem(where: str, what: str) -> None:
        problems.append(f"{s.id or '<no id>'}: {where}: {what}")

    if not ID_RE.match(s.id):
        problem("id", f"{s.id!r} is not kebab-case (lowercase letters, digits and single dashes)")
    if s.source is not None and s.source.stem != s.id:
        problem("id", f"differs from the file name {s.source.name!r}; name the file <id>.yaml")
    for name in ("language", "title", "path", "content", "task", "diagnosis"):
        if not getattr(s, name).strip():
            problem(name, "is empty")
    if s.language != s.language.strip().lower() or " " in s.language:
        problem("language", f"{s.language!r} should be one lowercase word, e.g. python")
    if s.path.startswith(("/", "\\")) or ".." in s.path.replace("\\", "/").split("/") or ":" in s.path[:3]:
        problem("path", f"{s.path!r} must be relative to the workspace root")
    for key in s.reasoning:
        if key not in REASONING_KEYS:
            problem(f"reasoning.{key}", "unknown key; use 'read' and/or 'edit'")
    if not s.edits:
        problem("edits", "is empty; give at least one {oldText, newText}")

    spans: list[tuple[int, int, int]] = []
    edits_ok = True
    for i, edit in enumerate(s.edits):
        if edit.old_text == "":
            problem(f"edits[{i}].oldText", "is empty")
            edits_ok = False
            continue
        if edit.old_text == edit.new_text:
            problem(f"edits[{i}].newText", "equals oldText; the edit changes nothing")
        hits = _positions(s.content, edit.old_text)
        if len(hits) != 1:
            problem(
                f"edits[{i}].oldText",
                f"occurs {len(hits)} times in content, must occur exactly once (start: {_preview(edit.old_text)})",
            )
            edits_ok = False
            continue
        spans.append((hits[0], hits[0] + len(edit.old_text), i))
    spans.sort()
    for (_, end_a, a), (start_b, _, b) in zip(spans, spans[1:], strict=False):
        if start_b < end_a:
            first, second = sorted((a, b))
            problem(f"edits[{second}].oldText", f"overlaps edits[{first}].oldText in content")
            edits_ok = False

    if s.edits and edits_ok:
        try:
            result = apply_edits(s.content, s.edits)
        except ScenarioError as err:
            problem("edits", f"applying the gold edits in order fails: {err}")
        else:
            if result != s.expected:
                diff = _first_difference(result, s.expected)
                problem("expected", f"differs from content with the gold edits applied: {diff}")
    if s.content == s.expected:
        problem("expected", "equals content; the scenario must change the file")

    derived = standard_tags(s)
    for tag in s.tags:
        if tag in DERIVED_TAGS and tag not in derived:
            problem("tags", f"'{tag}' does not hold: it {TAG_RULES[tag]}")
        if tag == "mid-file" and edits_ok and not _has_mid_file_edit(s):
            problem("tags", f"'mid-file' does not hold: it {TAG_RULES['mid-file']}")
    if len(set(s.tags)) != len(s.tags):
        problem("tags", "lists a tag twice")
    return problems


def _has_mid_file_edit(s: Scenario) -> bool:
    for edit in s.edits:
        hits = _positions(s.content, edit.old_text) if edit.old_text else []
        if len(hits) == 1 and s.content[hits[0] + len(edit.old_text) :].strip():
            return True
    return False
