"""``tooldecode scenarios list|check|import|show``: the scenario corpus, session scenarios, and the exact
prompt a model sees (``show``, from ``tooldecode.cli.prompts``)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tooldecode.cli import prompts
from tooldecode.cli.options import add_command, add_group, add_switch
from tooldecode.errors import ScenarioError
from tooldecode.guard import check_output
from tooldecode.scenarios import SUFFIXES, line_count, load_scenarios, scenario_files
from tooldecode.scenarios.check import check_paths
from tooldecode.scenarios.importers import FORMATS, Session, load_session
from tooldecode.scenarios.sessions import (
    check_session_scenario,
    read_if_session,
    session_scenario,
    strip_thinking,
    write_session_scenario,
)


def _cmd_list(args: argparse.Namespace) -> int:
    scenarios = load_scenarios(args.dirs or None)
    if args.tag:
        scenarios = [s for s in scenarios if set(args.tag) <= set(s.tags)]
    rows = [("id", "language", "edits", "newText lines", "tags")]
    for s in scenarios:
        lines = ",".join(str(line_count(e.new_text)) for e in s.edits)
        rows.append((s.id, s.language, str(len(s.edits)), lines, ",".join(s.tags)))
    widths = [max(len(row[col]) for row in rows) for col in range(4)]
    for row in rows:
        cells = [row[col].ljust(widths[col]) for col in range(4)] + [row[4]]
        print("  ".join(cells).rstrip())
    print(f"{len(scenarios)} scenarios", file=sys.stderr)
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    scenarios, problems = check_paths(args.dirs or None)
    for line in problems:
        print(line)
    if problems:
        print(f"{len(problems)} problem(s) in {len(scenarios)} loaded scenario(s)", file=sys.stderr)
        return 1
    try:
        sessions = sum(1 for f in scenario_files(args.dirs or None) if read_if_session(f) is not None)
    except ScenarioError:
        sessions = 0
    print(f"{len(scenarios)} scenarios OK" + (f", {sessions} session scenario(s) OK" if sessions else ""))
    return 0


def report_guess(session: Session) -> None:
    """Print on stderr each tool schema that was guessed from the session's calls (``--guess-tools``)."""
    for t in session.tools:
        if t["name"] in session.guessed:
            print(
                f"tooldecode: guessed the schema of {t['name']!r} from its calls (no definition in the "
                f"session; pass --tools FILE for the real one): {json.dumps(t['parameters'], ensure_ascii=False)}",
                file=sys.stderr,
            )


def _cmd_import(args: argparse.Namespace) -> int:
    session = load_session(args.file, args.format, args.tools, guess=args.guess_tools)
    report_guess(session)
    calls = session.calls()
    if args.call is None:
        for n, (_, _, c) in enumerate(calls, 1):
            print(f"{n}\t{c['name']}\t{json.dumps(c['arguments'], ensure_ascii=False)[:100]}")
        print(f"{len(calls)} calls ({session.format}); pick one with --call N", file=sys.stderr)
        return 0
    data = session_scenario(session, args.call, id=args.id)
    if args.strip_thinking:
        data = strip_thinking(data)
    out = args.out or Path(f"{data['id']}.json")
    if out.is_dir() or (out.suffix not in SUFFIXES and not out.exists()):
        out.mkdir(parents=True, exist_ok=True)  # `-o out/` (or a name without .json): a folder
        out = out / f"{data['id']}.json"
    if out.stem != data["id"]:
        data["id"] = out.stem
    # never over an input (the session log, the tool list) nor over a file tooldecode did not write
    tools_file = Path(args.tools) if args.tools and Path(args.tools).exists() else None
    check_output(
        out,
        [args.file, tools_file],
        ours=lambda p: read_if_session(p) is not None,
        what="session scenario",
        error=ScenarioError,
    )
    problems = check_session_scenario(data, str(out))
    if problems:  # nothing written; one line (the first problem, and how many more)
        more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
        raise ScenarioError(f"{problems[0]}{more}; the session scenario was not written")
    try:
        write_session_scenario(data, out)
    except OSError as err:
        raise ScenarioError(
            f"{out}: cannot write the session scenario ({err.strerror or err}); check the folder exists "
            "and is writable"
        ) from None
    print(f"wrote {out}: call {args.call} of {len(calls)} ({data['call']['name']})", file=sys.stderr)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``scenarios`` group to the command line."""
    actions = add_group(sub, "scenarios", help="list, check and show editing scenarios")

    q = add_command(
        actions, "list", _cmd_list, help="id, language, edits, newText lines and tags of each scenario"
    )
    q.add_argument("dirs", nargs="*", type=Path, metavar="DIR", help="scenario folders (default: built-in)")
    q.add_argument("--tag", action="append", default=[], help="only scenarios with this tag (repeatable)")

    q = add_command(
        actions,
        "check",
        _cmd_check,
        help="validate scenario files: edits apply once each, do not overlap, give expected",
    )
    q.add_argument(
        "dirs", nargs="*", type=Path, metavar="DIR", help="scenario folders or files (default: built-in)"
    )

    q = add_command(
        actions,
        "import",
        _cmd_import,
        help="a session scenario from a session file (OpenAI chat, Anthropic messages, Claude Code or Pi JSONL)",
        description="Without --call, list the session's tool calls; with --call N, write the session "
        "scenario of call N (the history before it, the tool set, the call as gold; docs/scenarios.md).",
    )
    q.add_argument("file", type=Path, metavar="SESSION")
    q.add_argument("--call", type=int, help="which tool call (1-based, in session order)")
    q.add_argument("--format", choices=FORMATS, help="the session's format (default: detected)")
    q.add_argument("--tools", help="tool definitions to use (any shape `tooldecode grammar` reads)")
    q.add_argument("--id", help="scenario id (default: <file stem>-call-N)")
    q.add_argument(
        "--out",
        "-o",
        type=Path,
        help="output folder (created), or a file ending in .json/.yaml (default: <id>.json here)",
    )
    add_switch(
        q,
        "--guess-tools",
        "where the session stores no tool definitions, infer a schema from the calls (printed, and "
        "recorded in the scenario's source.guessed_tools) instead of refusing",
    )
    add_switch(q, "--strip-thinking", "write the scenario without the thinking of its assistant turns")

    prompts.register_show(actions)
