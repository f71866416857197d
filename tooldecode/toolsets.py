"""Tool sets: which tools a transcript variant offers, and which one an edit turn is expected to call.

The one home of this fact: prompts render these tools, scoring validates against them, findings and
repair read them from here.
"""

from __future__ import annotations

# Tools offered by each tool-set variant (names in the tool catalog, ``tooldecode/tools/*.json``).
TOOLSETS: dict[str, tuple[str, ...]] = {
    "nested": ("edit", "read", "write", "bash"),
    "flat-edit": ("Edit", "Read", "Write", "Bash"),
    "multiedit": ("MultiEdit", "Read", "Write", "Bash"),
}
# The tool an edit turn is expected to call, and the one that reads a file, per tool set.
EDIT_TOOL: dict[str, str] = {"nested": "edit", "flat-edit": "Edit", "multiedit": "MultiEdit"}
READ_TOOL: dict[str, str] = {"nested": "read", "flat-edit": "Read", "multiedit": "Read"}

__all__ = ["EDIT_TOOL", "READ_TOOL", "TOOLSETS"]
