"""Lenient-harness repairs: what a tolerant client does to a sloppy tool call before running it.

Each repair is named, switchable and recorded on the call it changed with the JSON path it touched.
``rescue_accounting`` answers, over a run: of the loose calls that fail strict validation, how many would
a lenient harness rescue, how many of those with a byte-correct payload, and how that compares with strict
decoding and with one retry. Imports neither torch, transformers nor llama_cpp.
"""

from __future__ import annotations

from tooldecode.repair.arguments import (
    REPAIR_VERSION,
    REPAIRS,
    Change,
    RepairError,
    RepairResult,
    repair_arguments,
)
from tooldecode.repair.jsonrepair import (
    JSON_REPAIR,
    format_json_repair,
    json_repair_call,
    json_repair_row,
    json_repair_summary,
    json_repair_version,
)
from tooldecode.repair.rescue import (
    CONDITION_IGNORES,
    format_rescue,
    repair_record,
    rescue_accounting,
    rescue_summary,
)
from tooldecode.repair.text import leaked_markup, repair_text

__all__ = [
    "CONDITION_IGNORES",
    "Change",
    "JSON_REPAIR",
    "REPAIRS",
    "REPAIR_VERSION",
    "RepairError",
    "RepairResult",
    "format_json_repair",
    "format_rescue",
    "json_repair_call",
    "json_repair_row",
    "json_repair_summary",
    "json_repair_version",
    "leaked_markup",
    "repair_arguments",
    "repair_record",
    "repair_text",
    "rescue_accounting",
    "rescue_summary",
]
