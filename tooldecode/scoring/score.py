"""One verdict per sample: ``score_text`` for a text, ``score_record`` for a ``SampleRecord`` (against the
tools its prompt showed)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tooldecode.grammar import Tool
from tooldecode.grammar.schema import json_depth
from tooldecode.records import VARIANT_FIELDS, Condition, OfferedTool, SampleRecord, VerdictRecord
from tooldecode.scenarios import Scenario, get_scenario
from tooldecode.scoring.calls import primary_call
from tooldecode.scoring.checks import ArgumentCheck, check_arguments, check_payload, schema_echo
from tooldecode.scoring.extract import extract_calls, prose_outside
from tooldecode.scoring.jsonparse import MAX_JSON_DEPTH, TOO_DEEP
from tooldecode.scoring.outcome import verdict_outcome
from tooldecode.scoring.records import EXPECTED_TOOL, FLAGS, SCORER_VERSION, ExtractedCall, Verdict
from tooldecode.scoring.schemas import catalog_by_name, tool_keys


def score_text(
    text: str,
    tools: Sequence[Tool],
    *,
    wire: str | None = None,
    expected_tool: str | None = None,
    scenario: Scenario | None = None,
    finish_reason: str | None = None,
) -> Verdict:
    """The verdict of one raw model output (the call text, prefill included).

    With ``scenario`` the verdict carries ``outcome``: whether the edit works on the scenario's file
    (``scoring.outcome.edit_outcome``; a sample without a parsed call to the expected tool edits nothing).
    """
    tools = list(tools)
    verdict = _score_text(tools, text, wire, expected_tool, scenario, finish_reason)
    if scenario is not None:
        tool = next((t for t in tools if t.name == verdict.tool), None)
        outcome = verdict_outcome(verdict.verdict, verdict.arguments, tool, scenario).to_dict()
        verdict.outcome = {**outcome, "cut": finish_reason == "length"}
    return verdict


def _score_text(
    tools: list[Tool],
    text: str,
    wire: str | None,
    expected_tool: str | None,
    scenario: Scenario | None,
    finish_reason: str | None,
) -> Verdict:
    calls = extract_calls(text, wire=wire, tools=tools, expected_tool=expected_tool)
    flags: list[str] = []
    if len(calls) > 1:
        flags.append("multiple_calls")
    if calls and prose_outside(text, [c.span for c in calls]):
        flags.append("text_around_call")
    call = primary_call(calls, expected_tool)
    if call is None:
        return Verdict("no_call", flags, None, None, [], [], None, None, None, 0)
    base: dict[str, Any] = dict(
        flags=flags,
        wrapping=call.wrapping,
        shape=call.shape,
        n_calls=len(calls),
        duplicate_keys=list(call.duplicate_keys),
    )
    for f in call.flags:
        if f in FLAGS and f not in flags:
            flags.append(f)
    if call.duplicate_keys:
        flags.append("duplicate_key")
    failed = _unparsed_verdict(call, base, finish_reason)
    if failed is not None:
        return failed

    by_name = {t.name: t for t in tools}
    name = call.name
    if name is None:
        if wire not in (None, "json"):
            flags.append("unnamed_call")
        name = expected_tool if expected_tool is not None else _best_tool(call.arguments, tools)
    tool = by_name.get(name) if name is not None else None
    if tool is None or (expected_tool is not None and name != expected_tool):
        why = (
            f"called {name!r}, expected {expected_tool!r}"
            if tool is not None
            else f"tool {name!r} is not offered"
        )
        return Verdict(
            "wrong_tool",
            tool=name,
            invented_keys=[],
            errors=[why],
            payload=None,
            arguments=call.arguments,
            **base,
        )

    check = check_arguments(call.arguments, tool)
    verdict = _schema_verdict(check)
    if schema_echo(call.arguments, tool, check.invented):
        flags.append("schema_echo")
    payload = check_payload(call.arguments, tool, scenario) if scenario is not None else None
    if payload is not None and payload["file_correct"] and verdict != "valid":
        flags.append("payload_correct_schema_invalid")
    return Verdict(
        verdict,
        tool=tool.name,
        invented_keys=check.invented,
        errors=check.errors,
        payload=payload,
        arguments=call.arguments,
        **base,
    )


def _schema_verdict(check: ArgumentCheck) -> str:
    """The verdict of arguments checked against their tool's closed schema (worst class first)."""
    if check.invented:
        return "invented_key"
    if check.missing:
        return "missing_required"
    if check.other:
        return "wrong_type"
    return "valid"


def _unparsed_verdict(call: ExtractedCall, base: dict[str, Any], finish_reason: str | None) -> Verdict | None:
    """``too_deep``, ``truncated`` or ``json_syntax`` for a call whose JSON did not parse (None if it did)."""
    if call.error is not None and TOO_DEEP in call.error:
        return Verdict(
            "too_deep",
            tool=call.name,
            invented_keys=[],
            errors=[call.error],
            payload=None,
            arguments=None,
            **base,
        )
    if call.error is not None or (call.unbalanced and finish_reason == "length"):
        cut = finish_reason == "length" or (finish_reason is None and call.unbalanced)
        return Verdict(
            "truncated" if cut else "json_syntax",
            tool=call.name,
            invented_keys=[],
            errors=[call.error or "the sample ends inside the call"],
            payload=None,
            arguments=None,
            **base,
        )
    return None


def _best_tool(arguments: Any, tools: Sequence[Tool]) -> str | None:
    if not isinstance(arguments, dict) or not tools:
        return tools[0].name if tools else None
    keys = set(arguments)
    return max(tools, key=lambda t: len(keys & tool_keys(t)[1])).name


# ---------------------------------------------------------------------------------------------- records


def shown_tools(arm: Condition) -> tuple[OfferedTool, ...]:
    """The tools an arm's prompt showed at the call, from its variant fields (tool set, schema view,
    schema extra): what a run written before samples carried their tools is scored against (the one
    fallback; ``tooldecode.runs.load_run`` applies it as it reads such a run)."""
    from tooldecode.prompts import TranscriptOptions, offered_tools

    options = TranscriptOptions(**{k: getattr(arm, k) for k in VARIANT_FIELDS if getattr(arm, k) is not None})
    return tuple(OfferedTool(t.name, t.parameters) for t in offered_tools(options))


def _schema(parameters: dict[str, Any] | bool) -> dict[str, Any]:
    """A boolean arguments schema as its object form (``true``: anything, ``false``: nothing)."""
    if isinstance(parameters, dict):
        return parameters
    return {} if parameters else {"not": {}}


def offered_tool(tool: OfferedTool) -> Tool:
    """The ``Tool`` of a tool as a prompt showed it: a catalog tool of that name keeps its family,
    description and aliases, with the schema as shown."""
    known = catalog_by_name().get(tool.name)
    if known is None:
        return Tool(tool.name, description=tool.description or "", parameters=_schema(tool.parameters))
    return dataclasses.replace(known, parameters=_schema(tool.parameters))


def record_tools(record: SampleRecord) -> list[Tool]:
    """The tools a sample's prompt showed: the record's own, else its arm's (``shown_tools``)."""
    shown = record.tools if record.tools is not None else shown_tools(record.arm)
    return [offered_tool(t) for t in shown]


def record_context(
    record: SampleRecord, manifest: Mapping[str, Any]
) -> tuple[list[Tool], str | None, str | None, Scenario]:
    """(tools shown, wire, expected tool, scenario) of a sample of a run with ``manifest``."""
    arm = record.arm
    expected = arm.expected_tool or EXPECTED_TOOL.get(arm.toolset or "nested")
    return record_tools(record), arm.wire, expected, record_scenario(record.scenario, manifest)


def score_record(record: SampleRecord, scenario: Scenario | None) -> VerdictRecord:
    """The verdict of a raw sample, against the tools its prompt showed (``record_tools``).

    Parameters
    ----------
    record
        The sample (``tooldecode.records.SampleRecord``).
    scenario
        Its scenario (the payload check and the edit's outcome); None: no payload, no outcome.

    Returns
    -------
    VerdictRecord
        One line of ``verdicts-<SCORER_VERSION>.jsonl``; a failed sample's verdict is ``skipped``.
    """
    head: dict[str, Any] = {
        "key": record.key,
        "scorer": SCORER_VERSION,
        "arm": record.arm,
        "scenario": record.scenario,
    }
    if record.error:
        return VerdictRecord(**head, verdict=None, skipped=str(record.error))
    arm = record.arm
    expected = arm.expected_tool or EXPECTED_TOOL.get(arm.toolset or "nested")
    try:
        verdict = score_text(
            record.call_text,
            record_tools(record),
            wire=arm.wire,
            expected_tool=expected,
            scenario=scenario,
            finish_reason=record.finish_reason,
        )
        if json_depth(verdict.arguments) > MAX_JSON_DEPTH:
            raise RecursionError
    except RecursionError:  # pathological nesting that got past the parsers' own guards
        verdict = Verdict("too_deep", [], None, None, [], [TOO_DEEP], None, None, None, 0)
        if scenario is not None:
            verdict.outcome = verdict_outcome("too_deep", None, None, scenario).to_dict()
    return VerdictRecord(**head, **asdict(verdict))


_SCENARIOS: dict[tuple[str, tuple[str, ...]], Scenario] = {}


def record_scenario(scenario_id: str, manifest: Mapping[str, Any]) -> Scenario:
    """The scenario a run's sample names, read from the run's scenario folders (built-ins without)."""
    config = manifest.get("config") if isinstance(manifest.get("config"), dict) else {}
    raw_dirs = manifest.get("scenario_dirs") or (config or {}).get("scenario_dirs")
    dirs = [Path(d) for d in raw_dirs] if raw_dirs else None
    key = (scenario_id, tuple(str(d) for d in dirs or ()))
    if key not in _SCENARIOS:
        _SCENARIOS[key] = get_scenario(scenario_id, dirs=dirs)
    return _SCENARIOS[key]
