"""One tool-set table: a record is scored against exactly the tools its prompt offered."""

from __future__ import annotations

import pytest
from conftest import make_record

from tooldecode.prompts import TranscriptOptions, render_prompt
from tooldecode.scenarios import load_scenarios
from tooldecode.scoring import record_context, toolset_tools
from tooldecode.toolsets import EDIT_TOOL, TOOLSETS


@pytest.mark.parametrize("toolset", sorted(TOOLSETS))
def test_scoring_uses_the_tools_the_prompt_offered(toolset, smol_ref):
    scenario = load_scenarios()[0]
    prompt = render_prompt(scenario, smol_ref, TranscriptOptions(toolset=toolset))
    offered = [t.name for t in prompt.tools]
    assert offered == [t.name for t in toolset_tools(toolset)]
    record = make_record(arm={"toolset": toolset}, scenario=scenario.id)  # a run before records held tools
    tools, _, expected, _ = record_context(record, {})
    assert [t.name for t in tools] == offered
    assert [t.parameters for t in tools] == [t.parameters for t in prompt.tools]
    assert expected == EDIT_TOOL[toolset] == prompt.expected_tool


def test_a_report_scores_each_sample_once(tmp_path, monkeypatch):
    import json

    from conftest import make_sample

    import tooldecode.repair.rescue as repair_rescue
    import tooldecode.scoring as scoring
    from tooldecode.report import run_data
    from tooldecode.runs import RunStore, build_manifest

    store = RunStore.create(tmp_path / "run", build_manifest({"spec": "t"}))
    gold = (
        '{"name": "edit", "arguments": {"path": "src/config.c", "edits": [{"oldText": "a", "newText": "b"}]}}'
    )
    texts = [gold, gold.replace('"newText"', '"newText": "b", "note"'), "no call here", gold[:40]]
    store.append(
        [
            make_sample(
                t,
                arm={"mode": "loose", "wire": "call-json", "expected_tool": "edit", "toolset": "nested"},
                key=f"loose/c-config-trim-crlf/0/{i}",
                index=i,
            )
            for i, t in enumerate(texts)
        ]
    )
    store.close()
    calls: list[str] = []
    real = scoring.score_record

    def counting(record, scenario):
        calls.append(record.key)
        return real(record, scenario)

    monkeypatch.setattr(scoring, "score_record", counting)
    monkeypatch.setattr(repair_rescue, "score_record", counting)
    run = run_data(tmp_path / "run")
    assert run.rescue is not None and len(run.samples) == len(texts)
    assert sorted(calls) == sorted(f"loose/c-config-trim-crlf/0/{i}" for i in range(len(texts)))
    verdicts = [json.loads(x) for x in run.verdict_file.read_text().splitlines()]
    assert {v["verdict"] for v in verdicts} >= {"invented_key", "no_call"}


def test_every_command_group_is_registered():
    """An explicit command list: a module that cannot be imported fails loudly, none is dropped."""
    import argparse

    from tooldecode.cli import COMMAND_MODULES, build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert len(sub.choices) >= len(COMMAND_MODULES)
    for name in ("models", "grammar", "scenarios", "sample", "probe", "rescore", "repair", "run", "report"):
        assert name in sub.choices
    scenarios = sub.choices["scenarios"]
    inner = next(a for a in scenarios._actions if isinstance(a, argparse._SubParsersAction))
    assert {"list", "check", "show"} <= set(inner.choices)
