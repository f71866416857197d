"""Did the edit work: a call's outcome against the scenario's file and its expected result (``edit_outcome``).

Four outcomes per sample, the way a user of the harness feels them:

- ``valid``: the call passes its tool's closed schema (verdict ``valid``);
- ``applies``: the edit tool would run it: the path names the scenario's file and every old text matches
  exactly once, the matches not overlapping (``locate_edits``);
- ``correct``: the edited file equals the scenario's expected file up to trailing whitespace
  (``same_up_to_trailing_ws``; ``exact`` says whether it is equal byte for byte);
- ``wrong_but_valid``: valid, and the edit does not yield the expected file.

``works`` (valid and correct) is what a harness that validates before running gets. ``correct`` does not
need ``valid``: a lenient harness runs calls a validator rejects. A verdict's outcome also says whether
the draw was ``cut`` at the token cap (``finish_reason == "length"``): cut draws are reported apart.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from tooldecode.errors import ScenarioError
from tooldecode.grammar import Tool
from tooldecode.scenarios import Edit, Scenario, apply_edits
from tooldecode.scoring.checks import edit_pairs
from tooldecode.scoring.records import ScoringError

OUTCOMES = ("valid", "applies", "correct", "works", "wrong_but_valid")
#: edit tools whose items apply one after another, each to the file the previous ones left (Claude Code's
#: MultiEdit: "in sequence"); every other edit tool matches each old text in the original file
SEQUENTIAL_TOOLS = frozenset({"MultiEdit"})


class EditError(ScoringError):
    """An edit that the edit tool would refuse (old text not found, found twice, edits overlapping)."""


@dataclass(frozen=True)
class EditOutcome:
    """What one call did to the scenario's file. ``why``: the first reason it does not work (None if it does)."""

    valid: bool
    applies: bool
    correct: bool
    exact: bool
    why: str | None = None

    @property
    def works(self) -> bool:
        return self.valid and self.correct

    @property
    def wrong_but_valid(self) -> bool:
        return self.valid and not self.correct

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "works": self.works, "wrong_but_valid": self.wrong_but_valid}


def _positions(content: str, needle: str) -> list[int]:
    found: list[int] = []
    at = content.find(needle)
    while at != -1 and len(found) < 2:
        found.append(at)
        at = content.find(needle, at + 1)
    return found


def locate_edits(content: str, pairs: Sequence[tuple[Any, Any]]) -> list[tuple[int, int]]:
    """The span in ``content`` of each ``(old, new)`` pair's old text, as an edit tool that matches every
    item against the original file requires: strings, old text not empty, exactly one occurrence
    (overlapping occurrences count), no two spans overlapping. Raises ``EditError`` naming the item."""
    spans: list[tuple[int, int]] = []
    for i, (old, new) in enumerate(pairs):
        if not isinstance(old, str) or not isinstance(new, str):
            raise EditError(f"edits[{i}]: oldText and newText must be strings")
        if old == "":
            raise EditError(f"edits[{i}].oldText is empty")
        hits = _positions(content, old)
        if len(hits) != 1:
            raise EditError(f"edits[{i}].oldText occurs {'0' if not hits else '2 or more'} times in the file")
        spans.append((hits[0], hits[0] + len(old)))
    order = sorted(range(len(spans)), key=lambda k: spans[k])
    for a, b in zip(order, order[1:], strict=False):
        if spans[b][0] < spans[a][1]:
            raise EditError(f"edits[{min(a, b)}] and edits[{max(a, b)}] overlap in the file")
    return spans


def apply_in_original(content: str, pairs: Sequence[tuple[Any, Any]]) -> str:
    """``content`` with every pair's old text replaced by its new text, each matched in the original file
    (``locate_edits``; raises ``EditError``)."""
    spans = locate_edits(content, pairs)
    out, last = [], 0
    for k in sorted(range(len(spans)), key=lambda k: spans[k]):
        start, end = spans[k]
        out += [content[last:start], pairs[k][1]]
        last = end
    return "".join(out) + content[last:]


def apply_in_sequence(content: str, pairs: Sequence[tuple[Any, Any]]) -> str:
    """``content`` with the pairs applied one after another (``scenarios.apply_edits``; raises ``EditError``)."""
    try:
        return apply_edits(content, [Edit(old_text=o, new_text=n) for o, n in pairs])
    except ScenarioError as err:
        raise EditError(str(err)) from None


_TRAILING = re.compile(r"[ \t]+(?=\r?\n|\r|\Z)")


def same_up_to_trailing_ws(got: str, want: str) -> bool:
    """Whether two files are equal once spaces and tabs at line ends and whitespace at the end of the file
    are removed. Line endings count: a CRLF line written as LF is a difference."""
    return _TRAILING.sub("", got).rstrip() == _TRAILING.sub("", want).rstrip()


def _norm_path(p: Any) -> Any:
    return p[2:] if isinstance(p, str) and p.startswith("./") else p


def no_outcome(valid: bool, why: str) -> EditOutcome:
    """The outcome of a sample whose call edits nothing (no call, a broken call, another tool)."""
    return EditOutcome(valid=valid, applies=False, correct=False, exact=False, why=why)


def edit_outcome(arguments: Any, tool: Tool | None, scenario: Scenario, *, valid: bool) -> EditOutcome:
    """The outcome of a call with ``arguments`` to ``tool`` on ``scenario`` (``valid``: its schema verdict)."""
    if tool is None:
        return no_outcome(valid, "no call to an edit tool")
    found = edit_pairs(arguments, tool)
    if found is None:
        return no_outcome(valid, f"the call to {tool.name} carries no edits")
    pairs, path = found
    if not pairs:
        return no_outcome(valid, "the call has no edit items")
    if _norm_path(path) != _norm_path(scenario.path):
        return no_outcome(valid, f"path {str(path)[:60]!r} is not the scenario's file")
    try:
        if tool.name in SEQUENTIAL_TOOLS:
            result = apply_in_sequence(scenario.content, pairs)
        else:
            result = apply_in_original(scenario.content, pairs)
    except EditError as err:
        return no_outcome(valid, str(err))
    exact = result == scenario.expected
    correct = exact or same_up_to_trailing_ws(result, scenario.expected)
    return EditOutcome(valid, True, correct, exact, None if correct else "the edited file differs")


#: verdict classes whose call parsed: its edits are checked whatever the schema verdict
PARSED_VERDICTS = ("valid", "invented_key", "missing_required", "wrong_type")


def verdict_outcome(
    verdict: str | None, arguments: Any, tool: Tool | None, scenario: Scenario
) -> EditOutcome:
    """The outcome of a sample with verdict class ``verdict`` whose primary call has ``arguments`` to ``tool``."""
    valid = verdict == "valid"
    if verdict not in PARSED_VERDICTS:
        return no_outcome(valid, f"verdict {verdict}")
    return edit_outcome(arguments, tool, scenario, valid=valid)


def stored_outcome(
    verdict: dict, scenario: Scenario, tools: Sequence[Tool], finish_reason: str | None = None
) -> dict[str, Any]:
    """The outcome of a stored verdict record (``score_record``'s dict), from its ``outcome`` field or, for
    records scored before it existed, from its ``verdict``, ``arguments`` and ``tool`` (``cut`` from the
    raw record's ``finish_reason``)."""
    if isinstance(verdict.get("outcome"), dict):
        return verdict["outcome"]
    tool = next((t for t in tools if t.name == verdict.get("tool")), None)
    out = verdict_outcome(verdict.get("verdict"), verdict.get("arguments"), tool, scenario).to_dict()
    return {**out, "cut": finish_reason == "length"}
