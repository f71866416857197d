"""Checking scenario folders: every file loaded and checked, the problems as one line each."""

from __future__ import annotations

from pathlib import Path

from tooldecode.errors import ScenarioError
from tooldecode.scenarios import Scenario, check_scenario, load_scenario, scenario_files
from tooldecode.scenarios.sessions import check_session_scenario, read_if_session


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
        session = read_if_session(file)
        if session is not None:  # a session scenario (docs/scenarios.md): checked on its own terms
            problems.extend(check_session_scenario(session, str(file)))
            continue
        try:
            scenario = load_scenario(file)
        except ScenarioError as err:
            problems.append(str(err))
            continue
        if getattr(scenario, "kind", "edit") == "session":  # a list item, not a kind:session mapping
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
