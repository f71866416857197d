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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tooldecode.errors import ScenarioError, SchemaError

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
    guessed: list[str] = field(default_factory=list)  # tools whose schema was inferred from the calls

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


REDACTED_THINKING = "[redacted thinking]"


def _keep_thinking(msg: dict[str, Any], blocks: list[Any]) -> None:
    """Set ``msg["thinking"]`` from an assistant turn's thinking blocks (Anthropic ``thinking`` and
    ``redacted_thinking``, Pi ``thinking``): the texts in order, a redacted block as
    ``REDACTED_THINKING`` (its text is encrypted; the model saw it, the log does not hold it)."""
    parts = []
    for b in blocks:
        if not isinstance(b, dict):
            continue
        if b.get("type") == "thinking" and b.get("redacted"):
            parts.append(REDACTED_THINKING)
        elif b.get("type") == "thinking" and isinstance(b.get("thinking"), str) and b["thinking"]:
            parts.append(b["thinking"])
        elif b.get("type") == "redacted_thinking":
            parts.append(REDACTED_THINKING)
    if parts:
        msg["thinking"] = "\n\n".join(parts)


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
            thinking = m.get("reasoning_content") or m.get("reasoning")
            if isinstance(thinking, str) and thinking:
                msg["thinking"] = thinking
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
            _keep_thinking(msg, blocks)
            if calls:
                msg["tool_calls"] = calls
            if msg["content"] or calls or "thinking" in msg:
                out.append(msg)
            continue
        results = [b for b in blocks if b.get("type") == "tool_result"]
        for b in results:
            cid = b.get("tool_use_id", "")
            result: dict[str, Any] = {
                "role": "tool",
                "tool_call_id": cid,
                "name": names.get(cid, ""),
                "content": _text(b.get("content")),
            }
            if b.get("is_error"):
                result["is_error"] = True
            out.append(result)
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
    (one content block each, same ``message.id``) is joined; side chains and other line types are skipped.
    Lines form a tree (``uuid``/``parentUuid``): after a rewind the abandoned branch stays in the file,
    so only the branch ending at the last line is taken."""
    messages: list[dict[str, Any]] = []
    last_id = None
    lines = [o for o in _lines(text, where) if not o.get("isSidechain")]
    for obj in _active_branch(lines, "uuid", "parentUuid"):
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


def _active_branch(entries: list[dict[str, Any]], key: str, parent: str) -> list[dict[str, Any]]:
    """The entries on the path from the root to the last entry that has an id (``key``), following
    ``parent`` links; entries without an id (headers, summaries) are dropped. Without ids: all entries."""
    by_id = {e[key]: e for e in entries if isinstance(e.get(key), str)}
    if not by_id:
        return entries
    last: dict[str, Any] | None = next(e for e in reversed(entries) if isinstance(e.get(key), str))
    chain: list[dict[str, Any]] = []
    seen: set[str] = set()
    while last is not None and last[key] not in seen:
        chain.append(last)
        seen.add(last[key])
        up = last.get(parent)
        last = by_id.get(up) if isinstance(up, str) else None
    chain.reverse()
    return chain


# Pi's texts for entries that are not model messages (pi-coding-agent's ``convertToLlm``)
PI_BRANCH_SUMMARY = (
    "The following is a summary of a branch that this conversation came back from:\n\n"
    "<summary>\n{summary}</summary>"
)


PI_COMPACTION_SUMMARY = (
    "The conversation history before this point was compacted into the following summary:\n\n"
    "<summary>\n{summary}\n</summary>"
)


def _pi_compacted(chain: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The branch as the model saw it after the last ``compaction`` entry: its summary, the entries it
    kept (from ``firstKeptEntryId``), then what came after it."""
    at = next((i for i in range(len(chain) - 1, -1, -1) if chain[i].get("type") == "compaction"), None)
    if at is None:
        return chain
    first = chain[at].get("firstKeptEntryId")
    kept_from = next((i for i, e in enumerate(chain[:at]) if e.get("id") == first), at)
    return [chain[at], *chain[kept_from:at], *chain[at + 1 :]]


def pi_bash_text(m: dict[str, Any]) -> str:
    """A Pi ``bashExecution`` message as the user turn the model sees (Pi's ``bashExecutionToText``)."""
    text = f"Ran `{m.get('command', '')}`\n"
    output = m.get("output")
    text += f"```\n{output}\n```" if output else "(no output)"
    code = m.get("exitCode")
    if m.get("cancelled"):
        text += "\n\n(command cancelled)"
    elif isinstance(code, int) and code != 0:
        text += f"\n\nCommand exited with code {code}"
    if m.get("truncated") and m.get("fullOutputPath"):
        text += f"\n\n[Output truncated. Full output: {m['fullOutputPath']}]"
    return text


def from_pi(text: str, where: str = "session") -> Session:
    """Pi's session JSONL (``~/.pi/agent/sessions/...``): a ``session`` header, then ``message`` entries
    with ``user``, ``assistant`` (text, thinking and ``toolCall`` blocks), ``toolResult`` and
    ``bashExecution`` messages, ``custom_message``, ``branch_summary`` and ``compaction`` entries. Entries form a tree
    (``id``/``parentId``); the branch ending at the last entry is taken. A shell run, an extension's
    message and a branch summary become user turns written as Pi writes them for the model."""
    chain = _pi_compacted(_active_branch(_lines(text, where), "id", "parentId"))
    out: list[dict[str, Any]] = []
    for e in chain:
        if e.get("type") == "compaction":
            out.append(
                {"role": "user", "content": PI_COMPACTION_SUMMARY.format(summary=e.get("summary", ""))}
            )
            continue
        if e.get("type") == "custom_message":  # an extension's message: a user turn, as Pi sends it
            body = _text(e.get("content"))
            if body:
                out.append({"role": "user", "content": body})
            continue
        if e.get("type") == "branch_summary":
            out.append({"role": "user", "content": PI_BRANCH_SUMMARY.format(summary=e.get("summary", ""))})
            continue
        if e.get("type") != "message" or not isinstance(e.get("message"), dict):
            continue
        m = e["message"]
        if m.get("role") == "bashExecution":  # the user's `!command`: a user turn with its output
            if not m.get("excludeFromContext"):
                out.append({"role": "user", "content": pi_bash_text(m)})
            continue
        if m.get("role") in ("custom", "branchSummary"):
            body = (
                PI_BRANCH_SUMMARY.format(summary=m.get("summary", ""))
                if m["role"] == "branchSummary"
                else _text(m.get("content"))
            )
            out.append({"role": "user", "content": body})
            continue
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
            _keep_thinking(msg, blocks)
            if calls:
                msg["tool_calls"] = calls
            out.append(msg)
        elif role == "toolResult":
            result: dict[str, Any] = {
                "role": "tool",
                "tool_call_id": m.get("toolCallId", ""),
                "name": m.get("toolName", ""),
                "content": _text(blocks),
            }
            if m.get("isError"):
                result["is_error"] = True
            out.append(result)
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


def load_session(
    path: Path | str, format: str | None = None, tools: Any = None, *, guess: bool = False
) -> Session:
    """Read a session file in any of ``FORMATS`` (detected when ``format`` is None).

    Parameters
    ----------
    path
        The session file.
    format
        One of ``FORMATS``; None: detected from the content (``sniff``).
    tools
        Tool definitions (anything ``tooldecode.grammar.load_tools`` reads) that replace the session's.
    guess
        Where the file stores no definitions (Claude Code, Pi) and a called tool is not a built-in one
        its calls fit, infer its schema from the calls (``infer_schema``; named in ``Session.guessed``)
        instead of refusing.

    Returns
    -------
    Session
        The messages in the neutral shape and the resolved tool set.

    Raises
    ------
    ScenarioError
        An unreadable or unknown file, a session without tool calls, or a tool without a definition
        (unless ``guess``).
    """
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
    session.tools, session.guessed = resolve_tools(session, guess=guess)
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
    ``number`` when both occur), required when present in every call; arrays and objects are inferred
    the same way from their items and members (an array seen only empty has unconstrained items).

    Parameters
    ----------
    calls
        The arguments objects of the calls of one tool.

    Returns
    -------
    dict
        A JSON Schema of type ``object``.
    """
    return _infer_values(list(calls)) if calls else {"type": "object", "properties": {}}


def _infer_values(values: list[Any]) -> dict[str, Any]:
    from tooldecode.grammar import json_type

    ts = {json_type(v, integer=True) for v in values}
    if ts == {"integer", "number"}:
        ts = {"number"}
    if len(ts) != 1:
        return {"type": sorted(ts)}
    (t,) = ts
    if t == "object":
        keys: dict[str, list[Any]] = {}
        for v in values:
            for k, x in v.items():
                keys.setdefault(k, []).append(x)
        return {
            "type": "object",
            "properties": {k: _infer_values(xs) for k, xs in keys.items()},
            "required": [k for k in keys if all(k in v for v in values)],
        }
    if t == "array":
        items = [x for v in values for x in v]
        return {"type": "array", "items": _infer_values(items)} if items else {"type": "array"}
    return {"type": t}


def _valid(args: dict[str, Any], schema: dict[str, Any]) -> bool:
    return call_problem(args, schema) is None


def call_problem(args: Any, schema: Any, *, strict: bool = False) -> str | None:
    """Why ``args`` is not a valid call for ``schema`` (one line naming the key and the path), or None.

    With ``strict`` the schema is first closed as strict mode closes it (``strictify``): a key the
    schema does not declare is then named as invented, which a strict grammar can never write.
    """
    import jsonschema

    from tooldecode.grammar import arguments_schema, strictify

    try:
        target = arguments_schema(schema)
    except Exception as e:  # noqa: BLE001 -- a SchemaError names the tool's type
        return str(e)
    if strict:
        target = strictify(target)
    cls = jsonschema.validators.validator_for(target)
    errors = sorted(cls(target).iter_errors(args), key=lambda e: list(e.absolute_path))
    if not errors:
        return None
    e = errors[0]
    at = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in e.absolute_path) or "(root)"
    if e.validator in ("additionalProperties", "unevaluatedProperties"):
        extra = [
            k for k in (e.instance if isinstance(e.instance, dict) else {}) if k not in _declared(e.schema)
        ]
        keys = ", ".join(repr(k) for k in extra) or e.message
        return f"invented key {keys} at {at}: the schema does not declare it"
    return f"{e.message} at {at}"


def _declared(schema: Any) -> set[str]:
    if not isinstance(schema, dict):
        return set()
    names = set(schema.get("properties") or {})
    for k in ("allOf", "anyOf", "oneOf"):
        for sub in schema.get(k) or []:
            names |= _declared(sub)
    return names


def resolve_tools(session: Session, *, guess: bool = False) -> tuple[list[dict[str, Any]], list[str]]:
    """The session's tool set as ``{"name", "description", "parameters"}`` and the names of the tools
    whose schema was guessed: its own definitions, else per called tool the built-in tool of that name
    (when every call validates against it), else -- only with ``guess`` -- one inferred from its calls.

    Raises
    ------
    ScenarioError
        A called tool with neither a definition nor a fitting built-in tool, without ``guess``.
    """
    from tooldecode.grammar import tool_catalog

    if session.tools:
        return [_tool_dict(t) for t in _load_tools(session.tools)], []
    by_name: dict[str, list[dict[str, Any]]] = {}
    for _, _, c in session.calls():
        by_name.setdefault(c["name"], []).append(c["arguments"])
    cat = tool_catalog()
    out, guessed = [], []
    for name, calls in by_name.items():
        t = cat.get(name)
        if t is not None and all(_valid(a, t.parameters) for a in calls):
            out.append(_tool_dict(t))
        else:
            desc = f"The {name} tool (schema inferred from the session's calls)."
            out.append({"name": name, "description": desc, "parameters": infer_schema(calls)})
            guessed.append(name)
    if guessed and not guess:
        which = ", ".join(repr(n) for n in guessed)
        raise ScenarioError(
            f"{session.source}: the {session.format} session stores no tool definitions and {which} "
            f"{'is not a built-in tool its calls fit' if len(guessed) == 1 else 'are not built-in tools their calls fit'}; "
            "pass the definitions with --tools FILE, or --guess-tools to infer a schema from the calls "
            "(printed, and recorded in the scenario)"
        )
    return out, guessed


__all__ = [
    "FORMATS",
    "Session",
    "call_problem",
    "from_anthropic",
    "from_claude_code",
    "from_openai",
    "from_pi",
    "infer_schema",
    "load_session",
    "resolve_tools",
    "sniff",
]
