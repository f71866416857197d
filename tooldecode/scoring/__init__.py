"""Score raw model outputs: find the tool call in any wrapping, give one verdict per sample, check the payload.

``extract_calls`` finds every call in a text (``<tool_call>`` tags, fenced blocks, bare JSON, JSON inside
prose, antml markup, harmony, Python-style calls). ``score_text`` picks the primary call, validates it
against the closed (strictified) schema of the tool and checks its edits against the scenario's gold;
``outcome`` says whether the edit works on the scenario's file (valid, applies, correct, wrong but valid).
Verdict classes, their precedence and the flags are documented in docs/scoring.md.
"""

from __future__ import annotations

from tooldecode.scoring.calls import primary_call
from tooldecode.scoring.checks import (
    check_payload,
    is_edit_tool,
    schema_echo,
    strict_schema,
    validate_arguments,
)
from tooldecode.scoring.extract import extract_calls
from tooldecode.scoring.jsonparse import MAX_JSON_DEPTH, TOO_DEEP, JSONParseError, ParsedJSON, parse_json
from tooldecode.scoring.outcome import (
    OUTCOMES,
    SEQUENTIAL_TOOLS,
    EditError,
    EditOutcome,
    apply_in_original,
    apply_in_sequence,
    edit_outcome,
    edit_pairs,
    locate_edits,
    same_up_to_trailing_ws,
    stored_outcome,
    verdict_outcome,
)
from tooldecode.scoring.records import (
    ARGS_KEYS,
    EXPECTED_TOOL,
    FLAGS,
    NAME_KEYS,
    PRECEDENCE,
    SCORER_VERSION,
    VERDICTS,
    ExtractedCall,
    ScoringError,
    Verdict,
)
from tooldecode.scoring.schemas import (
    render_path,
    resolve_schema,
    schema_properties,
    schema_types,
    toolset_tools,
)
from tooldecode.scoring.score import (
    offered_tool,
    record_context,
    record_scenario,
    record_tools,
    score_record,
    score_text,
    shown_tools,
)

__all__ = [
    "EditError",
    "EditOutcome",
    "OUTCOMES",
    "SEQUENTIAL_TOOLS",
    "apply_in_original",
    "apply_in_sequence",
    "edit_outcome",
    "edit_pairs",
    "locate_edits",
    "same_up_to_trailing_ws",
    "stored_outcome",
    "verdict_outcome",
    "ARGS_KEYS",
    "EXPECTED_TOOL",
    "ExtractedCall",
    "FLAGS",
    "JSONParseError",
    "MAX_JSON_DEPTH",
    "NAME_KEYS",
    "PRECEDENCE",
    "ParsedJSON",
    "SCORER_VERSION",
    "ScoringError",
    "TOO_DEEP",
    "VERDICTS",
    "Verdict",
    "check_payload",
    "extract_calls",
    "is_edit_tool",
    "parse_json",
    "primary_call",
    "offered_tool",
    "record_context",
    "record_scenario",
    "record_tools",
    "shown_tools",
    "render_path",
    "resolve_schema",
    "schema_echo",
    "schema_properties",
    "schema_types",
    "score_record",
    "score_text",
    "strict_schema",
    "toolset_tools",
    "validate_arguments",
]
