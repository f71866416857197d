"""`tooldecode replay SESSION --model M`: the close-brace probe at every tool call of a real session.

Each call of the session (an OpenAI chat, Anthropic messages, Claude Code or Pi session file) becomes a
session scenario (``tooldecode.scenarios.importers``): the history before it and the call as the gold
call. The history is rendered with the model's chat template and tool block, the call is teacher-forced
in the model's wire, and every decision point after a value is probed (``tooldecode.probe``).

Loose is the model's own distribution. Strict is that distribution renormalised over what a closed
(strict) grammar admits at the point: closing, a declared key not yet present, or a next array item; a
repeated, invented, wrong-level or schema-word key and anything else are masked. A call is *at risk*
when the loose probability of continuing with a key the strict grammar masks reaches ``--threshold``
at one of its points.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tooldecode.cli.options import (
    add_backend_option,
    add_command,
    add_model_option,
    add_probe_bounds,
    add_switch,
)

MASKED_KINDS = ("repeat", "wrong_level", "schema_word", "invented", "other")


def _lower(messages: Sequence[dict[str, Any]], wire: str, tool_role: bool) -> list[dict[str, Any]]:
    """Session messages as chat-template messages: calls written into the assistant text in ``wire``,
    tool results as ``tool`` turns (or, without ``tool_role``, ``<tool_response>`` user turns)."""
    from tooldecode.prompts.wires import calls_text

    out: list[dict[str, Any]] = []
    for m in messages:
        role = m["role"]
        if role == "assistant":
            calls = [(c["name"], c["arguments"]) for c in m.get("tool_calls", [])]
            text = calls_text(calls, wire, "compact") if calls else ""
            out.append(
                {"role": "assistant", "content": "\n".join(p for p in (m.get("content", ""), text) if p)}
            )
        elif role == "tool" and not tool_role:
            body = f"<tool_response>\n{m.get('content', '')}\n</tool_response>"
            if out and out[-1]["role"] == "user" and out[-1]["content"].startswith("<tool_response>"):
                out[-1] = {"role": "user", "content": out[-1]["content"] + "\n" + body}
            else:
                out.append({"role": "user", "content": body})
        elif role == "tool":
            out.append({"role": "tool", "name": m.get("name", ""), "content": m.get("content", "")})
        else:
            out.append({"role": role, "content": m.get("content", "")})
    return out


def render_session(ref: Any, data: dict[str, Any]) -> tuple[str, str, str, list[Any]]:
    """(prompt ending where the call starts, the call in the model's wire, the wire, the tools) of a
    session scenario ``data`` for model ``ref``."""
    from tooldecode.chat_templates import apply_template, template_info
    from tooldecode.errors import PromptError
    from tooldecode.grammar import load_tools
    from tooldecode.prompts.conversation import SYSTEM_TEXT, qwen_tool_block, smollm2_tool_block
    from tooldecode.prompts.wires import calls_text, wires_for

    template, bos, eos = template_info(ref)
    if not template:
        raise PromptError(f"model '{ref.id}' has no chat template; replay needs a chat model")
    tools = load_tools(data["tools"])
    history_wire, wire = wires_for(ref.family, "native", template)
    block = (smollm2_tool_block if ref.family == "smollm2" else qwen_tool_block)(tools, history_wire)
    messages = _lower(data["history"], history_wire, tool_role=ref.family != "smollm2")
    if messages and messages[0]["role"] == "system":
        messages[0] = {"role": "system", "content": f"{messages[0]['content']}\n\n{block}"}
    else:
        messages.insert(0, {"role": "system", "content": f"{SYSTEM_TEXT}\n\n{block}"})
    text = apply_template(template, messages, None, bos, eos, add_generation_prompt=True)
    before = data.get("before_call") or {}
    earlier = [(c["name"], c["arguments"]) for c in before.get("tool_calls", [])]
    lead = "\n".join(
        p for p in (before.get("content", ""), calls_text(earlier, wire, "compact") if earlier else "") if p
    )
    prompt = text + (lead + "\n" if lead else "")
    call = calls_text([(data["call"]["name"], data["call"]["arguments"])], wire, "compact")
    return prompt, call, wire, tools


def strict_view(p: Any) -> tuple[float, float]:
    """(P(close), P(continue)) of a decision point renormalised over what a strict grammar admits."""
    k = p.p_continue_by_kind
    allowed = k.get("declared", 0.0) + k.get("next_item", 0.0)
    total = p.p_close + allowed
    return (p.p_close / total, allowed / total) if total > 0 else (0.0, 0.0)


def masked_continue(p: Any) -> float:
    """Loose probability of continuing with a key a strict grammar masks (repeat, invented, ...)."""
    return sum(p.p_continue_by_kind.get(k, 0.0) for k in MASKED_KINDS)


def probe_scenario(backend: Any, ref: Any, data: dict[str, Any], config: Any = None) -> list[Any]:
    """The probe's decision points of a session scenario's gold call."""
    from tooldecode.probe import probe_call

    prompt, call, _, tools = render_session(ref, data)
    points = probe_call(backend, prompt, call, config=config, tools=tools, expected_tool=data["call"]["name"])
    inside = [p for p in points if "arguments" in p.path]  # not the envelope's own name / arguments keys
    return inside or points


def call_row(n: int, name: str, points: Sequence[Any], threshold: float) -> dict[str, Any]:
    """One row of the replay table: the worst point of call ``n`` loose and strict."""
    closes = [p for p in points if p.actual == "close"] or list(points)
    worst = max(points, key=masked_continue, default=None)
    row: dict[str, Any] = {"call": n, "tool": name, "points": len(points)}
    row["min_p_close_loose"] = min((p.p_close for p in closes), default=float("nan"))
    row["min_p_close_strict"] = min((strict_view(p)[0] for p in closes), default=float("nan"))
    row["max_p_continue_loose"] = max((p.p_continue for p in closes), default=float("nan"))
    row["max_p_masked_loose"] = masked_continue(worst) if worst is not None else 0.0
    row["worst_at"] = f"{worst.path}.{worst.after}" if worst is not None else ""
    kinds: dict[str, float] = {}
    if worst is not None:
        kinds = {k: v for k, v in worst.p_continue_by_kind.items() if v > 0}
    row["worst_kinds"] = kinds
    row["at_risk"] = row["max_p_masked_loose"] >= threshold
    return row


def format_table(rows: Sequence[dict[str, Any]], threshold: float) -> str:
    head = (
        f"{'call':>4} {'tool':14s} {'pts':>4} {'P(close) loose':>15} {'strict':>8} {'P(cont) loose':>14} "
        f"{'P(masked)':>10}  worst point / kinds"
    )
    lines = [head]
    for r in rows:
        kinds = ",".join(f"{k}={v:.3f}" for k, v in sorted(r["worst_kinds"].items()))
        flag = "  AT RISK" if r["at_risk"] else ""
        lines.append(
            f"{r['call']:>4} {r['tool'][:14]:14s} {r['points']:>4} {r['min_p_close_loose']:15.4f} "
            f"{r['min_p_close_strict']:8.4f} {r['max_p_continue_loose']:14.4f} {r['max_p_masked_loose']:10.4f}  "
            f"{r['worst_at']} {kinds}{flag}"
        )
    first = next((r for r in rows if r["at_risk"]), None)
    if first is None:
        lines.append(
            f"no call at risk (P(masked continue) < {threshold:g} at every point of {len(rows)} calls)"
        )
    else:
        lines.append(
            f"first call at risk: call {first['call']} of {len(rows)} ({first['tool']}) at {first['worst_at']}: "
            f"P(masked continue) {first['max_p_masked_loose']:.4f} >= {threshold:g}"
        )
    return "\n".join(lines)


def _config(args: argparse.Namespace) -> Any:
    from tooldecode.probe import ProbeConfig

    return ProbeConfig(
        depth=args.depth,
        key_depth=args.key_depth,
        min_mass=args.min_mass,
        max_branches=args.max_branches,
        tail=args.tail,
    )


def check_flags(args: argparse.Namespace, where: str) -> None:
    """The probe bounds by the rules specs follow, and ``--threshold`` a probability (before any model
    loads; one line naming the flag)."""
    from tooldecode.experiments.spec import PROBE_RULES
    from tooldecode.validate import check_options

    flags = {f"--{b.replace('_', '-')}": (getattr(args, b, None), rule) for b, rule in PROBE_RULES.items()}
    flags["--threshold"] = (getattr(args, "threshold", None), "probability")
    check_options(flags, f"{where}: ")


def _wanted(spec: str | None, n_calls: int) -> list[int]:
    """The 1-based call numbers of ``--calls`` (all calls when it is not given)."""
    from tooldecode.validate import ValidationError

    if not spec:
        return list(range(1, n_calls + 1))
    out = []
    for part in spec.split(","):
        if not part.strip().isdigit() or not 1 <= int(part) <= n_calls:
            raise ValidationError(
                f"replay: --calls {spec!r}: {part.strip()!r} is not a call number in 1..{n_calls}; "
                "give 1-based call numbers separated by commas (e.g. 1,3)"
            )
        out.append(int(part))
    return out


def probe_session_file(args: argparse.Namespace, data: dict[str, Any]) -> int:
    """`tooldecode probe --scenario FILE` for a session scenario file: the probe table of its gold call."""
    from tooldecode.backends import load_backend
    from tooldecode.models import resolve, verified
    from tooldecode.probe import summarize
    from tooldecode.trial import backend_kwargs

    check_flags(args, "probe")
    ref = verified(resolve(args.model, fetch=True))
    be = load_backend(args.backend, ref, **backend_kwargs(args.backend, branches=args.max_branches))
    points = probe_scenario(be, ref, data, _config(args))
    if args.select:
        points = [p for p in points if p.after == args.select]
    if args.json:
        for p in points:
            print(json.dumps(p.to_dict()))
        return 0
    print(f"model {ref.id} ({args.backend}), session scenario {data['id']}, call {data['call']['name']}")
    print(summarize(points))
    return 0


def _cmd_replay(args: argparse.Namespace) -> int:
    """probe every tool call of a session (P(close) / P(continue) by kind, loose and strict)

    Replay a session file (OpenAI chat, Anthropic messages, Claude Code or Pi JSONL): probe each
    tool call at its decision points and print one row per call, with the first call at risk (see
    docs/scenarios.md).
    """
    from tooldecode.backends import load_backend
    from tooldecode.models import resolve, verified
    from tooldecode.scenarios.importers import load_session, session_scenario
    from tooldecode.trial import backend_kwargs

    check_flags(args, "replay")
    session = load_session(args.session, args.format, args.tools)
    calls = session.calls()
    wanted = _wanted(args.calls, len(calls))
    ref = verified(resolve(args.model, fetch=True))
    be = load_backend(args.backend, ref, **backend_kwargs(args.backend, branches=args.max_branches))
    cfg = _config(args)
    from tooldecode.cli import Progress

    rows = []
    progress = Progress("replay", len(wanted), unit="call")
    for n in wanted:
        data = session_scenario(session, n)
        points = probe_scenario(be, ref, data, cfg)
        row = call_row(n, data["call"]["name"], points, args.threshold)
        rows.append(row)
        if args.json:
            print(json.dumps({**row, "decision_points": [p.to_dict() for p in points]}))
        progress.step(note=f"call {n} of {len(calls)} ({data['call']['name']}): {len(points)} points")
    if not args.json:
        print(
            f"session {Path(args.session).name} ({session.format}), model {ref.id} ({args.backend}), {len(calls)} calls"
        )
        print(format_table(rows, args.threshold))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``replay`` to the command line."""
    p = add_command(sub, "replay", _cmd_replay)
    p.add_argument("session", type=Path, metavar="SESSION")
    add_model_option(p)
    add_backend_option(p, ("llamacpp", "hf"))
    p.add_argument("--format", help="the session's format (default: detected)")
    p.add_argument("--tools", help="tool definitions to use (any shape `tooldecode grammar` reads)")
    p.add_argument("--calls", help="only these calls, e.g. 1,3 (1-based)")
    p.add_argument(
        "--threshold", type=float, default=0.05, help="P(masked continue) that puts a call at risk"
    )
    add_probe_bounds(
        p,
        {"depth": 3, "key_depth": 4, "min_mass": 2e-3, "max_branches": 12, "tail": 1e-3},
        {
            "depth": "probe expansion depth",
            "key_depth": "further levels to resolve a continue's key",
            "min_mass": "expand a branch only above this probability",
            "max_branches": "expansions per level",
            "tail": "mass left unclassified (reported undetermined)",
        },
    )
    add_switch(p, "--json", "one JSON object per call, with its decision points")
