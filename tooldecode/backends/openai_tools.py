"""Provider-style tool calling through a server: chat completions with ``tools=[…]`` and per-tool
``strict``, the channel a production agent uses.

Two arms (modes of a run on ``--backend openai``): ``tools-strict`` (every tool ``"strict": true``) and
``tools-loose`` (``"strict": false``). The server renders the prompt with its own chat template from the
scenario's messages (the edit turn's gold call left out) and the tools as the prompt shows them; the
conditioning picks ``tool_choice``: ``free`` → ``"auto"`` (the model decides), ``forced-tool`` → the
expected tool by name. ``gold-prefix`` cannot be expressed in a chat request and is refused.

A sample's ``text`` is what the classifier scores, as for every other arm: each returned tool call
written as call JSON, ``{"name": NAME, "arguments": ARGUMENTS}``, with the server's ``arguments``
string inserted verbatim (never re-serialised here), after the message content if there is any.
``tool_name`` names the first call. Token fields are ``None`` (see ``absent``): the server returns
the call it parsed, not the tokens it generated.

What the servers do with ``strict`` (read from their code, pinned by the tests):

- llama-cpp-python (0.3.x): ``strict`` is ignored. A named ``tool_choice`` constrains the arguments
  with a grammar converted from the tool's ``parameters`` (a schema it cannot convert falls back to
  any JSON without a word); ``"auto"`` and ``"required"`` constrain nothing and return the model's
  text as ``content``; a named call's ``finish_reason`` is always ``"tool_calls"`` (a cut call is
  recognised here by ``completion_tokens == max_tokens``).
- vLLM (≥ 0.2x with ``--enable-auto-tool-choice --tool-call-parser …``): structural tags. A
  ``strict: true`` tool has its arguments constrained to its schema; with ``tool_choice`` required or
  named the call envelope is constrained too; ``"auto"`` with no strict tool constrains nothing.
  ``--tool-strict-level function|parameter`` raises the floor server-wide. Its parser re-serialises
  the arguments it parsed (duplicate keys collapse, whitespace normalised).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from typing import Any

from tooldecode.backends.openai_http import ServerError, check_chat
from tooldecode.backends.openai_records import PARSED_CALL, ServerSample, draw_concurrently, request_seed
from tooldecode.records import TOOL_MODES

_TOKEN_FIELDS = ("token_ids", "logprobs", "top", "tokens")


def chat_tools(tools: Sequence[Any], *, strict: bool) -> list[dict]:
    """``tools=[…]`` for a chat request: each tool (a ``tooldecode.tools.Tool``, or an OpenAI-style
    ``{"type": "function", "function": {…}}`` dict) with ``strict`` set."""
    out = []
    for t in tools:
        if isinstance(t, dict):
            fn = dict(t["function"])
        else:
            fn = {"name": t.name, "description": t.description, "parameters": t.parameters}
        fn["strict"] = bool(strict)
        out.append({"type": "function", "function": fn})
    return out


def tool_choice_for(conditioning: str, expected_tool: str) -> str | dict:
    """``tool_choice`` of a conditioning: ``free`` → ``"auto"``, ``forced-tool`` → the tool by name."""
    if conditioning == "free":
        return "auto"
    if conditioning == "forced-tool":
        return {"type": "function", "function": {"name": expected_tool}}
    raise ServerError(
        f"the tool-calling arms send a chat request, which cannot carry conditioning={conditioning!r} "
        "(a prefill inside the call); run them with conditioning 'free' or 'forced-tool'"
    )


def call_text(content: str | None, calls: Sequence[dict]) -> str:
    """The text the classifier scores: ``content`` (if any), then each call as call JSON with its
    ``arguments`` string verbatim."""
    parts = [content] if content else []
    for c in calls:
        fn = c.get("function") or {}
        args = fn.get("arguments")
        args = args if isinstance(args, str) else json.dumps(args)
        parts.append('{"name": ' + json.dumps(str(fn.get("name", ""))) + ', "arguments": ' + args + "}")
    return "\n".join(parts)


def _one(
    backend: Any, messages: list[dict], tools: list[dict], choice: Any, params: Any, i: int
) -> ServerSample:
    body: dict[str, Any] = {
        "model": backend.server_model,
        "messages": messages,
        "tools": tools,
        "tool_choice": choice,
        "max_tokens": params.max_new_tokens,
        "seed": request_seed(params, i),
        **backend.sampling_fields(params.temperature, params.top_p, params.top_k, params.min_p),
    }
    t = time.perf_counter()
    got = backend.http.request("POST", "/chat/completions", body)
    backend.count_request()
    choice0 = check_chat(got, backend.http.url("/chat/completions"))
    msg = choice0.get("message") or {}
    calls = [c for c in msg.get("tool_calls") or [] if isinstance(c, dict)]
    usage = got.get("usage") or {}
    finish = choice0.get("finish_reason") or "length"
    if finish in ("tool_calls", "function_call"):
        cut = (
            usage.get("completion_tokens") is not None and usage["completion_tokens"] >= params.max_new_tokens
        )
        finish = "length" if cut else "stop"
    error = None if finish in ("stop", "length") else f"the server finished with {finish!r}"
    return ServerSample(
        index=i,
        seed=params.seed,
        text=call_text(msg.get("content"), calls),
        token_ids=None,
        logprobs=None,
        top=None,
        finish_reason=finish if error is None else "error",
        error=error,
        timing={
            "request_s": round(time.perf_counter() - t, 4),
            "prompt_tokens": usage.get("prompt_tokens"),
            "tokens": usage.get("completion_tokens"),
        },
        tool_name=(calls[0].get("function") or {}).get("name") if calls else None,
        absent={f: PARSED_CALL for f in _TOKEN_FIELDS},
    )


def chat_tool_samples(
    backend: Any,
    messages: Sequence[dict],
    tools: Sequence[Any],
    n: int,
    params: Any,
    *,
    strict: bool,
    tool_choice: str | dict = "auto",
    start_index: int = 0,
    on_batch: Callable[[list[ServerSample]], None] | None = None,
) -> list[ServerSample]:
    """Samples ``start_index`` … ``start_index + n - 1`` of a chat request with ``tools`` (per-tool
    ``strict``), one request per sample (its seed from ``(params.seed, index)``).

    ``backend`` is an ``OpenAIBackend``. ``on_batch`` receives each sample as it arrives, so a server
    that goes away loses none that completed; the call then raises ``ServerError``.
    """
    fns = chat_tools(tools, strict=strict)
    msgs = [dict(m) for m in messages]

    def job(i: int) -> Callable[[], list[ServerSample]]:
        return lambda: [_one(backend, msgs, fns, tool_choice, params, i)]

    jobs = [job(i) for i in range(start_index, start_index + n)]
    return draw_concurrently(jobs, backend.concurrency, on_batch)


def draw_tools(
    backend: Any,
    prompt: Any,
    n: int,
    params: Any,
    *,
    strict: bool,
    conditioning: str = "free",
    start_index: int = 0,
    on_batch: Callable[[list[ServerSample]], None] | None = None,
) -> list[ServerSample]:
    """The ``tools-strict`` / ``tools-loose`` arm for one rendered ``tooldecode.prompts.Prompt``: its
    messages without the edit turn's gold call, its tools, ``tool_choice`` from ``conditioning``."""
    choice = tool_choice_for(conditioning, prompt.expected_tool)
    return chat_tool_samples(
        backend,
        list(prompt.messages[:-1]),
        list(prompt.tools),
        n,
        params,
        strict=strict,
        tool_choice=choice,
        start_index=start_index,
        on_batch=on_batch,
    )


def tool_drawer(prompt: Any, mode: str, conditioning: str = "free") -> Callable[..., list[ServerSample]]:
    """The ``tools-strict`` / ``tools-loose`` arm for ``prompt`` as a function of
    ``tooldecode.sampling.sample``'s call shape (a run's draw function; the prompt text, mask, prefill and
    batch size it is handed are the server's business here and ignored)."""
    if mode not in TOOL_MODES:
        raise ServerError(f"unknown tool-calling mode {mode!r}; choose one of: {', '.join(TOOL_MODES)}")
    tool_choice_for(conditioning, prompt.expected_tool)  # refuse a conditioning a chat request cannot carry

    def drawer(backend: Any, _text: str, n: int, params: Any, *, start_index: int = 0,
               on_batch: Callable[[list[ServerSample]], None] | None = None, **_ignored: Any) -> list[ServerSample]:  # fmt: skip
        return draw_tools(
            backend, prompt, n, params, strict=mode == "tools-strict", conditioning=conditioning,
            start_index=start_index, on_batch=on_batch,
        )  # fmt: skip

    return drawer
