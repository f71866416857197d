"""``tooldecode scenarios list|check`` (``show`` is added by the prompts stage, see ``tooldecode.cli``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tooldecode.errors import ScenarioError
from tooldecode.scenarios import (
    Scenario,
    check_scenario,
    line_count,
    load_scenario,
    load_scenarios,
    scenario_files,
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


def check_paths(dirs: list[Path] | None) -> tuple[list[Scenario], list[str]]:
    """Load and check every scenario file in ``dirs``; returns the loaded scenarios and the problem lines."""
    problems: list[str] = []
    try:
        files = scenario_files(dirs)
    except ScenarioError as err:
        return [], [str(err)]
    if not files:
        shown = ", ".join(str(d) for d in dirs) if dirs else "the built-in corpus"
        return [], [f"{shown}: no scenario files (*.yaml, *.yml, *.json)"]
    scenarios: list[Scenario] = []
    first_file: dict[str, Path] = {}
    for file in files:
        try:
            scenario = load_scenario(file)
        except ScenarioError as err:
            problems.append(str(err))
            continue
        scenarios.append(scenario)
        problems.extend(f"{file}: {p}" for p in check_scenario(scenario))
        if scenario.id in first_file:
            problems.append(
                f"{file}: {scenario.id}: id: also used by {first_file[scenario.id]}; ids must be unique"
            )
        else:
            first_file[scenario.id] = file
    return scenarios, problems


def _cmd_check(args: argparse.Namespace) -> int:
    scenarios, problems = check_paths(args.dirs or None)
    for line in problems:
        print(line)
    if problems:
        print(f"{len(problems)} problem(s) in {len(scenarios)} loaded scenario(s)", file=sys.stderr)
        return 1
    print(f"{len(scenarios)} scenarios OK")
    return 0


def register(sub: argparse._SubParsersAction) -> argparse._SubParsersAction:
    p = sub.add_parser("scenarios", help="list, check and show editing scenarios")
    scenarios_subparsers = p.add_subparsers(dest="scenarios_command", metavar="ACTION", required=True)

    q = scenarios_subparsers.add_parser(
        "list", help="id, language, edits, newText lines and tags of each scenario"
    )
    q.add_argument("dirs", nargs="*", type=Path, metavar="DIR", help="scenario folders (default: built-in)")
    q.add_argument("--tag", action="append", default=[], help="only scenarios with this tag (repeatable)")
    q.set_defaults(func=_cmd_list)

    q = scenarios_subparsers.add_parser(
        "check", help="validate scenario files: edits apply once each, do not overlap, give expected"
    )
    q.add_argument(
        "dirs", nargs="*", type=Path, metavar="DIR", help="scenario folders or files (default: built-in)"
    )
    q.set_defaults(func=_cmd_check)

    return scenarios_subparsers  # `tooldecode.cli` adds `scenarios show` (it renders prompts: a later stage)
