"""Sessions in, from the formats agents write them: OpenAI chat messages, Anthropic messages, Claude Code
JSONL and Pi session JSONL; and the session scenario (history, tool set, the call under test as gold).

Every importer returns a ``Session``: messages in one neutral shape (OpenAI chat's roles; an assistant
message's calls as ``{"id", "name", "arguments"}`` with ``arguments`` an object; a tool result as
``{"role": "tool", "tool_call_id", "name", "content"}``) and the tool set. Formats that do not store the
tool definitions (Claude Code, Pi) take the built-in tool of the same name when every call of it in the
session is valid for it, and otherwise a schema inferred from the calls (``infer_schema``).

A session scenario (``kind: session``, docs/scenarios.md) is one call of a session with everything
before it: ``tooldecode scenarios import FILE --call N`` writes one, ``scenarios check`` checks it and
``probe`` / ``replay`` probe it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tooldecode.errors import ScenarioError, SchemaError, ToolDecodeError

FORMATS = ("openai", "anthropic", "claude-code", "pi")
SESSION_FIELDS = ("id", "kind", "title", "source", "tools", "history", "before_call", "call")
SESSION_REQUIRED = ("id", "kind", "tools", "history", "call")


@dataclass
class Session:
    """A conversation in the neutral shape, its tool set (OpenAI-style tool dicts) and where it came from."""

    format: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)
    source: str = ""

    def calls(self) -> list[tuple[int, int, dict[str, Any]]]:
        """Every tool call in order: (message index, index within the message, the call)."""
        return [
            (i, j, c)
            for i, m in enumerate(self.messages)
            if m["role"] == "assistant"
            for j, c in enumerate(m.get("tool_calls", []))
        ]


# ---------------------------------------------------------------------------------------------- helpers


def _text(content: Any) -> str:
    """Text of a message content: a string, or the text of its text blocks."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for b in content:
            if isinstance(b, str):
                parts.append(b)
            elif isinstance(b, dict) and b.get("type") in ("text", "input_text", "output_text"):
                parts.append(str(b.get("text", "")))
        return "\n".join(parts)
    return json.dumps(content, ensure_ascii=False)


def _args(raw: Any, where: str) -> dict[str, Any]:
    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError as e:
            raise ScenarioError(
                f"{where}: arguments are not valid JSON ({e.msg}); fix the session file"
            ) from None
    if not isinstance(raw, dict):
        raise ScenarioError(f"{where}: arguments must be a JSON object, got {type(raw).__name__}")
    return raw


def _lines(text: str, where: str) -> list[dict[str, Any]]:
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise ScenarioError(f"{where}:{n}: not valid JSON ({e.msg}); one JSON object per line") from None
        if isinstance(obj, dict):
            out.append(obj)
    return out


# ---------------------------------------------------------------------------------------------- importers


def from_openai(data: Any, where: str = "session") -> Session:
    """OpenAI chat completions: a request body ``{"messages", "tools"}`` or a bare list of messages."""
    messages = data.get("messages") if isinstance(data, dict) else data
    if not isinstance(messages, list):
        raise ScenarioError(f"{where}: expected an OpenAI request body with 'messages' or a list of messages")
    out: list[dict[str, Any]] = []
    names: dict[str, str] = {}
    for i, m in enumerate(messages):
        at = f"{where}: messages[{i}]"
        role = m.get("role") if isinstance(m, dict) else None
        if role in ("system", "developer", "user"):
            out.append(
                {"role": "system" if role == "developer" else role, "content": _text(m.get("content"))}
            )
        elif role == "assistant":
            calls = []
            for j, c in enumerate(m.get("tool_calls") or []):
                fn = c.get("function", {})
                cid = c.get("id") or f"call_{i}_{j}"
                names[cid] = fn.get("name", "")
                calls.append(
                    {
                        "id": cid,
                        "name": fn.get("name", ""),
                        "arguments": _args(fn.get("arguments"), f"{at}.tool_calls[{j}]"),
                    }
                )
            msg: dict[str, Any] = {"role": "assistant", "content": _text(m.get("content"))}
            if calls:
                msg["tool_calls"] = calls
            out.append(msg)
        elif role == "tool":
            cid = m.get("tool_call_id", "")
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": cid,
                    "name": m.get("name") or names.get(cid, ""),
                    "content": _text(m.get("content")),
                }
            )
        else:
            raise ScenarioError(f"{at}: unknown role {role!r}; expected system, user, assistant or tool")
    tools = data.get("tools", []) if isinstance(data, dict) else []
    return Session("openai", out, list(tools or []), where)


def _anthropic_messages(messages: list[Any], where: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    names: dict[str, str] = {}
    for i, m in enumerate(messages):
        at = f"{where}: messages[{i}]"
        if not isinstance(m, dict) or m.get("role") not in ("user", "assistant"):
            raise ScenarioError(f"{at}: expected a message with role user or assistant")
        content = m.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
        if m["role"] == "assistant":
            calls = []
            for b in blocks:
                if b.get("type") == "tool_use":
                    names[b.get("id", "")] = b.get("name", "")
                    calls.append(
                        {
                            "id": b.get("id", ""),
                            "name": b.get("name", ""),
                            "arguments": _args(b.get("input", {}), f"{at} tool_use {b.get('name')}"),
                        }
                    )
            msg: dict[str, Any] = {"role": "assistant", "content": _text(blocks)}
            if calls:
                msg["tool_calls"] = calls
            if msg["content"] or calls:
                out.append(msg)
            continue
        results = [b for b in blocks if b.get("type") == "tool_result"]
        for b in results:
            cid = b.get("tool_use_id", "")
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": cid,
                    "name": names.get(cid, ""),
                    "content": _text(b.get("content")),
                }
            )
        text = _text([b for b in blocks if b.get("type") == "text"])
        if text:
            out.append({"role": "user", "content": text})
    return out


def from_anthropic(data: Any, where: str = "session") -> Session:
    """Anthropic Messages API: a request body ``{"system", "tools", "messages"}``."""
    if not isinstance(data, dict) or not isinstance(data.get("messages"), list):
        raise ScenarioError(f"{where}: expected an Anthropic messages body with 'messages'")
    out = []
    if data.get("system"):
        out.append({"role": "system", "content": _text(data["system"])})
    out += _anthropic_messages(data["messages"], where)
    return Session("anthropic", out, list(data.get("tools") or []), where)


def from_claude_code(text: str, where: str = "session") -> Session:
    """Claude Code's session JSONL (``~/.claude/projects/<project>/<session>.jsonl``): ``user`` and
    ``assistant`` lines carry an Anthropic ``message``; an assistant message split over several lines
    (one content block each, same ``message.id``) is joined; side chains and other line types are skipped."""
    messages: list[dict[str, Any]] = []
    last_id = None
    for obj in _lines(text, where):
        if obj.get("type") not in ("user", "assistant") or obj.get("isSidechain"):
            continue
        msg = obj.get("message")
        if not isinstance(msg, dict):
            continue
        mid = msg.get("id")
        content = msg.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
        if msg.get("role") == "assistant" and mid and mid == last_id and messages:
            messages[-1]["content"] = list(messages[-1]["content"]) + blocks
            continue
        messages.append({"role": msg.get("role", obj["type"]), "content": blocks})
        last_id = mid if msg.get("role") == "assistant" else None
    return Session("claude-code", _anthropic_messages(messages, where), [], where)


def from_pi(text: str, where: str = "session") -> Session:
    """Pi's session JSONL (``~/.pi/agent/sessions/...``): a ``session`` header, then ``message`` entries
    with ``user``, ``assistant`` (text, thinking and ``toolCall`` blocks) and ``toolResult`` messages.
    Entries form a tree (``id``/``parentId``); the branch ending at the last entry is taken."""
    entries = _lines(text, where)
    by_id = {e["id"]: e for e in entries if "id" in e}
    chain = entries
    if entries and all("id" in e for e in entries[1:]) and by_id:
        last = entries[-1]
        chain = []
        seen: set[str] = set()
        while last is not None and last.get("id") not in seen:
            chain.append(last)
            seen.add(last.get("id", ""))
            last = by_id.get(last.get("parentId")) if last.get("parentId") else None
        chain.reverse()
    out: list[dict[str, Any]] = []
    for e in chain:
        if e.get("type") != "message" or not isinstance(e.get("message"), dict):
            continue
        m = e["message"]
        role = m.get("role")
        content = m.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
        if role == "user":
            out.append({"role": "user", "content": _text(blocks)})
        elif role == "assistant":
            calls = [
                {
                    "id": b.get("id", ""),
                    "name": b.get("name", ""),
                    "arguments": _args(b.get("arguments", {}), f"{where}: entry {e.get('id')} toolCall"),
                }
                for b in blocks
                if b.get("type") == "toolCall"
            ]
            msg: dict[str, Any] = {"role": "assistant", "content": _text(blocks)}
            if calls:
                msg["tool_calls"] = calls
            out.append(msg)
        elif role == "toolResult":
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": m.get("toolCallId", ""),
                    "name": m.get("toolName", ""),
                    "content": _text(blocks),
                }
            )
    return Session("pi", out, [], where)


def sniff(path: Path, text: str) -> str:
    """The format of a session file, from its content."""
    first = next((line for line in text.splitlines() if line.strip()), "")
    try:
        head = json.loads(first)
    except json.JSONDecodeError:
        head = None
    if isinstance(head, dict) and "type" in head and len(text.strip().splitlines()) >= 1:
        try:
            json.loads(text)
            whole = True
        except json.JSONDecodeError:
            whole = False
        if not whole or path.suffix == ".jsonl":
            return "pi" if head.get("type") == "session" or "parentId" in head else "claude-code"
    data = json.loads(text)
    if isinstance(data, dict) and isinstance(data.get("messages"), list):
        msgs = data["messages"]
        blocky = any(
            isinstance(m, dict)
            and isinstance(m.get("content"), list)
            and any(
                isinstance(b, dict) and b.get("type") in ("tool_use", "tool_result") for b in m["content"]
            )
            for m in msgs
        )
        if (
            blocky
            or "system" in data
            and not any(isinstance(m, dict) and m.get("role") == "system" for m in msgs)
        ):
            return "anthropic"
        return "openai"
    if isinstance(data, list):
        return "openai"
    raise ScenarioError(f"{path}: not a session in a known format ({', '.join(FORMATS)})")


def load_session(path: Path | str, format: str | None = None, tools: Any = None) -> Session:
    """Read a session file in any of ``FORMATS`` (detected when ``format`` is None); ``tools`` (anything
    ``tooldecode.grammar.load_tools`` reads) overrides the tool set."""
    from tooldecode.guard import nesting_problem, read_text

    path = Path(path)
    # a regular UTF-8 file within bounds (a FIFO or /dev/zero is refused before a byte is read), its
    # nesting and integers bounded before any JSON parser runs
    text = read_text(path, "session log", error=ScenarioError)
    problem = nesting_problem(text)
    if problem:
        raise ScenarioError(f"{path}: the session log is {problem}; tooldecode reads at most that")
    try:
        fmt = format or sniff(path, text)
    except json.JSONDecodeError as e:
        raise ScenarioError(f"{path}: not valid JSON or JSONL ({e.msg})") from None
    if fmt not in FORMATS:
        raise ScenarioError(f"unknown session format {fmt!r}; use one of {', '.join(FORMATS)}")
    where = str(path)
    try:
        if fmt in ("claude-code", "pi"):
            session = from_claude_code(text, where) if fmt == "claude-code" else from_pi(text, where)
        else:
            data = json.loads(text)
            session = from_openai(data, where) if fmt == "openai" else from_anthropic(data, where)
    except json.JSONDecodeError as e:
        raise ScenarioError(
            f"{path}: not valid JSON ({e.msg} at line {e.lineno}); fix the session file"
        ) from None
    except (AttributeError, TypeError, KeyError, IndexError) as e:  # a value of the wrong shape
        raise ScenarioError(
            f"{path}: not a {fmt} session: a message, block or call has the wrong shape "
            f"({type(e).__name__}: {' '.join(str(e).split())[:100]}); fix the file or give --format"
        ) from None
    if tools is not None:
        session.tools = [_tool_dict(t) for t in _load_tools(tools)]
    session.tools = resolve_tools(session)
    if not session.calls():
        raise ScenarioError(f"{path}: the session has no tool call; nothing to probe")
    return session


# ---------------------------------------------------------------------------------------------- tools


def _load_tools(obj: Any) -> list[Any]:
    from tooldecode.grammar import load_tools

    try:
        return load_tools(obj)
    except SchemaError as e:
        raise ScenarioError(str(e)) from None


def _tool_dict(t: Any) -> dict[str, Any]:
    return {"name": t.name, "description": t.description, "parameters": t.parameters}


def infer_schema(calls: list[dict[str, Any]]) -> dict[str, Any]:
    """An arguments schema from observed calls: every key seen, typed by its values (``integer`` widened to
    ``number`` when both occur), required when present in every call. Deliberately loose inside values."""
    from tooldecode.grammar import json_type

    types: dict[str, set[str]] = {}
    for c in calls:
        for k, v in c.items():
            types.setdefault(k, set()).add(json_type(v, integer=True))
    props: dict[str, Any] = {}
    for k, ts in types.items():
        if ts == {"integer", "number"}:
            ts = {"number"}
        props[k] = {"type": sorted(ts)[0]} if len(ts) == 1 else {"type": sorted(ts)}
    required = [k for k in types if all(k in c for c in calls)]
    return {"type": "object", "properties": props, "required": required}


def _valid(args: dict[str, Any], schema: dict[str, Any]) -> bool:
    import jsonschema

    try:
        jsonschema.validate(args, schema)
    except jsonschema.ValidationError:
        return False
    return True


def resolve_tools(session: Session) -> list[dict[str, Any]]:
    """The session's tool set as ``{"name", "description", "parameters"}``: its own definitions, else per
    called tool the built-in tool of that name (when every call validates against it) or an inferred one."""
    from tooldecode.grammar import tool_catalog

    if session.tools:
        return [_tool_dict(t) for t in _load_tools(session.tools)]
    by_name: dict[str, list[dict[str, Any]]] = {}
    for _, _, c in session.calls():
        by_name.setdefault(c["name"], []).append(c["arguments"])
    cat = tool_catalog()
    out = []
    for name, calls in by_name.items():
        t = cat.get(name)
        if t is not None and all(_valid(a, t.parameters) for a in calls):
            out.append(_tool_dict(t))
        else:
            desc = f"The {name} tool (schema inferred from the session's calls)."
            out.append({"name": name, "description": desc, "parameters": infer_schema(calls)})
    return out


# ---------------------------------------------------------------------------------------------- scenarios


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
    if ci:
        before["tool_calls"] = [dict(c) for c in turn["tool_calls"][:ci]]
    stem = _slug(Path(session.source).stem) if session.source else "session"
    return {
        "id": id or f"{stem}-call-{call}",
        "kind": "session",
        "title": title or f"call {call} of {len(calls)} ({gold['name']}) from {Path(session.source).name}",
        "source": {"format": session.format, "file": Path(session.source).name, "call": call},
        "tools": session.tools,
        "history": session.messages[:mi],
        "before_call": before,
        "call": {"name": gold["name"], "arguments": gold["arguments"]},
    }


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
    elif not _valid(call["arguments"], by_name[call["name"]].parameters):
        problem("call.arguments", f"not valid for the schema of {call['name']!r}")
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

    from tooldecode.guard import nesting_problem, read_text

    try:
        text = read_text(path, "scenario")  # a regular file within bounds: never a FIFO's endless read
        if "session" not in text or nesting_problem(text):
            return None
        data = json.loads(text) if Path(path).suffix == ".json" else yaml.safe_load(text)
    except (ToolDecodeError, ValueError, RecursionError, yaml.YAMLError):
        return None
    return data if is_session_scenario(data) else None
