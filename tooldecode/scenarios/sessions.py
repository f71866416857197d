"""Session scenarios (``kind: session``, docs/scenarios.md): one call of a session with everything before
it (``session_scenario``), its check, the "thinking stripped" transform, and ``SessionScenario``: the
file loaded as a scenario that every command takes. Sessions themselves are read by ``importers``."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tooldecode.errors import ScenarioError
from tooldecode.scenarios.importers import (
    SESSION_FIELDS,
    SESSION_REQUIRED,
    Session,
    _load_tools,
    call_problem,
)


def _slug(text: str) -> str:
    s = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return s or "session"


def session_scenario(
    session: Session, call: int, *, id: str | None = None, title: str | None = None
) -> dict[str, Any]:
    """The session scenario of call ``call`` (1-based, in session order): the messages before the
    assistant turn that makes it (``history``), that turn's text and earlier calls (``before_call``), and
    the call itself as the gold call."""
    calls = session.calls()
    if not 1 <= call <= len(calls):
        raise ScenarioError(
            f"{session.source}: --call {call} is out of range; the session has {len(calls)} calls"
        )
    mi, ci, gold = calls[call - 1]
    turn = session.messages[mi]
    before: dict[str, Any] = {"content": turn.get("content", "")}
    if turn.get("thinking"):
        before["thinking"] = turn["thinking"]
    if ci:
        before["tool_calls"] = [dict(c) for c in turn["tool_calls"][:ci]]
    stem = _slug(Path(session.source).stem) if session.source else "session"
    return {
        "id": id or f"{stem}-call-{call}",
        "kind": "session",
        "title": title or f"call {call} of {len(calls)} ({gold['name']}) from {Path(session.source).name}",
        "source": {
            "format": session.format,
            "file": Path(session.source).name,
            "call": call,
            **({"guessed_tools": list(session.guessed)} if session.guessed else {}),
        },
        "tools": session.tools,
        "history": session.messages[:mi],
        "before_call": before,
        "call": {"name": gold["name"], "arguments": gold["arguments"]},
    }


def strip_thinking(data: dict[str, Any]) -> dict[str, Any]:
    """A copy of session scenario ``data`` without thinking: no ``thinking`` on any history message nor
    on ``before_call`` (the "thinking stripped" arm of a session; the scenario itself keeps it)."""
    out = dict(data)
    out["history"] = [{k: v for k, v in m.items() if k != "thinking"} for m in data.get("history", [])]
    if isinstance(data.get("before_call"), dict):
        out["before_call"] = {k: v for k, v in data["before_call"].items() if k != "thinking"}
    return out


@dataclass(frozen=True, eq=False)
class SessionScenario:
    """A session scenario loaded as a scenario: what ``load_scenario`` returns for a ``kind: session``
    file, so that every command that takes a scenario (``sample``, ``run``, ``probe``, ``scenarios
    show``) takes it. ``data`` is the file's content (docs/scenarios.md); the prompt is rendered by
    ``tooldecode.prompts.session``. The edit-scenario fields it has no use for are empty."""

    id: str
    title: str
    data: dict[str, Any]
    source: Path | None = None
    kind: str = "session"
    language: str = "session"
    path: str = ""
    content: str = ""
    diagnosis: str = ""
    expected: str = ""
    edits: tuple = ()
    tags: tuple[str, ...] = ("session",)
    reasoning: dict[str, str] = field(default_factory=dict)

    @property
    def task(self) -> str:
        """The last user message of the history."""
        users = [m.get("content", "") for m in self.data["history"] if m.get("role") == "user"]
        return users[-1] if users else ""

    @property
    def call(self) -> dict[str, Any]:
        """The gold call ``{name, arguments}``."""
        return self.data["call"]

    def sha256(self) -> str:
        """Stable hash of the scenario's content."""
        import hashlib

        text = json.dumps(self.data, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()


def as_session_scenario(data: dict[str, Any], where: str, source: Path | None = None) -> SessionScenario:
    """``data`` (a parsed ``kind: session`` file) as a ``SessionScenario``; ScenarioError naming the first
    problem (``check_session_scenario``) when it does not check."""
    problems = check_session_scenario(data, where)
    if problems:
        more = (
            f" (and {len(problems) - 1} more; `tooldecode scenarios check` lists them)"
            if len(problems) > 1
            else ""
        )
        raise ScenarioError(problems[0] + more)
    return SessionScenario(
        id=data["id"], title=str(data.get("title") or data["id"]), data=data, source=source
    )


def is_session_scenario(data: Any) -> bool:
    return isinstance(data, dict) and data.get("kind") == "session"


def check_session_scenario(data: dict[str, Any], where: str) -> list[str]:
    """Problems of a session scenario, one line each (empty: it is fine)."""
    problems: list[str] = []
    sid = data.get("id", "?")

    def problem(f: str, what: str) -> None:
        problems.append(f"{where}: {sid}: {f}: {what}")

    for k in data:
        if k not in SESSION_FIELDS:
            problem(k, f"unknown field; known fields of a session scenario: {', '.join(SESSION_FIELDS)}")
    for k in SESSION_REQUIRED:
        if k not in data:
            problem(k, "missing; every session scenario needs it")
    if problems:
        return problems
    if not isinstance(sid, str) or not re.fullmatch(r"[a-z0-9]+(?:-[a-z0-9]+)*", sid):
        problem("id", "must be kebab-case")
    elif Path(where).stem != sid and Path(where).suffix:
        problem("id", f"must equal the file name without extension ({Path(where).stem})")
    try:
        tools = _load_tools(data["tools"])
    except ScenarioError as e:
        problem("tools", str(e))
        return problems
    call = data["call"]
    if (
        not isinstance(call, dict)
        or set(call) != {"name", "arguments"}
        or not isinstance(call.get("arguments"), dict)
    ):
        problem("call", "must be {name, arguments} with arguments an object")
        return problems
    by_name = {t.name: t for t in tools}
    if call["name"] not in by_name:
        problem("call.name", f"{call['name']!r} is not in the tool set ({', '.join(by_name)})")
    else:
        why = call_problem(call["arguments"], by_name[call["name"]].parameters)
        if why is not None:
            problem("call.arguments", f"not valid for the schema of {call['name']!r}: {why}")
    problems.extend(f"{where}: {sid}: {p}" for p in _history_problems(data["history"]))
    return problems


def _history_problems(history: Any) -> list[str]:
    if not isinstance(history, list):
        return ["history: must be a list of messages"]
    out = []
    for i, m in enumerate(history):
        if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant", "tool"):
            out.append(f"history[{i}]: must be a message with role system, user, assistant or tool")
        elif not isinstance(m.get("content", ""), str):
            out.append(f"history[{i}].content: must be a string")
    if not any(isinstance(m, dict) and m.get("role") == "user" for m in history):
        out.append("history: has no user message")
    return out


def load_session_scenario(path: Path) -> dict[str, Any]:
    """A session scenario file (JSON or YAML) as a dict; ScenarioError when it is not one."""
    import yaml

    from tooldecode.guard import nesting_problem, read_text

    path = Path(path)
    text = read_text(path, "session scenario", error=ScenarioError)  # a regular UTF-8 file, bounded
    if nesting_problem(text):
        raise ScenarioError(f"{path}: the session scenario is {nesting_problem(text)}; simplify it")
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, RecursionError, yaml.YAMLError) as e:
        raise ScenarioError(
            f"{path}: cannot read a session scenario ({' '.join(str(e).split())[:160]})"
        ) from None
    if not is_session_scenario(data):
        raise ScenarioError(f"{path}: not a session scenario (no 'kind: session')")
    problems = check_session_scenario(data, str(path))
    if problems:
        raise ScenarioError(problems[0])
    return data


def write_session_scenario(data: dict[str, Any], path: Path) -> None:
    path.write_text(json.dumps(data, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")


def read_if_session(path: Path) -> dict[str, Any] | None:
    """The parsed file when it is a session scenario (``kind: session``), else None (unreadable included)."""
    import yaml

    from tooldecode.errors import ToolDecodeError
    from tooldecode.guard import nesting_problem, read_text

    try:
        text = read_text(path, "scenario")  # a regular file within bounds: never a FIFO's endless read
        if "session" not in text or nesting_problem(text):
            return None
        data = json.loads(text) if Path(path).suffix == ".json" else yaml.safe_load(text)
    except (ToolDecodeError, ValueError, RecursionError, yaml.YAMLError):
        return None
    return data if is_session_scenario(data) else None
