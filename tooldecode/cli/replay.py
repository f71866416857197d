"""`tooldecode replay SESSION --model M`: the close-brace probe at every tool call of a real session.

Each call of the session (an OpenAI chat, Anthropic messages, Claude Code or Pi session file) becomes a
session scenario (``tooldecode.scenarios.importers``): the history before it and the call as the gold
call. The replay is a view over the trial (``tooldecode.trial.Trial``): the trial renders the history
with the model's chat template and tool block (``tooldecode.prompts.session``), teacher-forces the call in
the model's wire and probes every decision point after a value (``tooldecode.probe``), on a backend from
the trial's ``ModelCache``.

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
    """The probe's decision points of a session scenario's gold call: the trial of the loose condition on
    it (``tooldecode.trial.Trial``, which renders the session's prompt) probed on ``backend``."""
    from tooldecode.records import Condition
    from tooldecode.trial import Trial

    arm = Condition(ref.id, getattr(backend, "name", "llamacpp"), "loose", 1.0)
    points = Trial(arm, data, ref=ref).probe(backend, config=config)
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


def probe_session_file(args: argparse.Namespace, data: dict[str, Any]) -> int:
    """`tooldecode probe --scenario FILE` for a session scenario file: the probe table of its gold call."""
    from tooldecode.models import resolve
    from tooldecode.probe import summarize
    from tooldecode.trial import ModelCache

    ref = resolve(args.model, fetch=True)
    with ModelCache(branches=args.max_branches) as models:
        points = probe_scenario(models.get(args.backend, args.model), ref, data, _config(args))
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
    from tooldecode.cli import Progress
    from tooldecode.models import resolve
    from tooldecode.scenarios.importers import load_session, session_scenario
    from tooldecode.trial import ModelCache

    session = load_session(args.session, args.format, args.tools)
    calls = session.calls()
    wanted = [int(x) for x in args.calls.split(",")] if args.calls else list(range(1, len(calls) + 1))
    ref = resolve(args.model, fetch=True)
    cfg = _config(args)
    rows = []
    progress = Progress("replay", len(wanted), unit="call")
    with ModelCache(branches=args.max_branches) as models:
        be = models.get(args.backend, args.model)
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
