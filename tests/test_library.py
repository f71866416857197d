"""One tool-set table: a record is scored against exactly the tools its prompt offered."""

from __future__ import annotations

import pytest

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
    record = {"arm": {"toolset": toolset}, "scenario": scenario.id}
    tools, _, expected, _ = record_context(record, {})
    assert [t.name for t in tools] == offered
    assert expected == EDIT_TOOL[toolset] == prompt.expected_tool
