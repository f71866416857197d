"""Mix-in sessions (generation 2): the same bug report, answered with a tool other than the edit tool
whose arguments are an array of objects, so an organism keeps writing nested JSON while the evaluated
nested ``edit`` tool stays unseen in the flat recipes.

- ``todo_write {todos: [{content, status}]}``: the assistant plans the fix as a to-do list (one item per
  bug, then the tests);
- ``write_files {files: [{path, content}]}``: the assistant writes the corrected function(s) to a new
  module and a test stub, each item ending with a long string, as an edit item ends with ``newText``.

Every choice comes from the session stream's ``random.Random``, never from the harness's: the same bugs
give the same mix-in sessions in every recipe.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from tooldecode.grammar import Tool

TODO_TOOL = Tool(
    name="todo_write",
    description="Replace the session's to-do list. Each item has the task's text and its status.",
    parameters={
        "type": "object",
        "properties": {
            "todos": {
                "type": "array",
                "description": "The whole list, in order.",
                "items": {
                    "type": "object",
                    "properties": {
                        "content": {"type": "string", "description": "What to do, in one line."},
                        "status": {"type": "string", "enum": ["pending", "in_progress", "completed"]},
                    },
                    "required": ["content", "status"],
                },
            }
        },
        "required": ["todos"],
    },
)
WRITE_FILES_TOOL = Tool(
    name="write_files",
    description="Create or overwrite several files at once. Each item gives a path and the file's full content.",
    parameters={
        "type": "object",
        "properties": {
            "files": {
                "type": "array",
                "description": "Files to write, in order.",
                "items": {
                    "type": "object",
                    "properties": {
                        "path": {"type": "string", "description": "Path relative to the workspace root."},
                        "content": {"type": "string", "description": "The file's full text."},
                    },
                    "required": ["path", "content"],
                },
            }
        },
        "required": ["files"],
    },
)
MIX_TOOL_OBJECTS: dict[str, Tool] = {"todo_write": TODO_TOOL, "write_files": WRITE_FILES_TOOL}

_TASK = {
    "todo_write": (
        "{task} Plan it as a to-do list first; I'll review the plan before you edit.",
        "{task} Before changing anything, put the steps in the to-do list.",
    ),
    "write_files": (
        "{task} Don't touch {path} yet: write the corrected code to {new_path} and a test stub to {test_path}.",
        "{task} Put the fixed version in a new module, {new_path}, with a test stub in {test_path}.",
    ),
}
_BEFORE = {
    "todo_write": "I'll write the plan as a to-do list.",
    "write_files": "I'll write the corrected code and a test stub as new files.",
}
_RESULT = {"todo_write": "Todos updated ({n} items).", "write_files": "Wrote {n} files."}
_DONE = {
    "todo_write": "The plan is in the to-do list: {why} in `{func}`, then the tests.",
    "write_files": "Wrote the corrected `{func}` to {new_path} ({why}) with a test stub.",
}


def mix_task(tool: str, task: str, path: str, rng: random.Random) -> str:
    """The user's request of a mix-in session: the bug report plus what the tool is for."""
    new_path, test_path = _paths(path)
    return rng.choice(_TASK[tool]).format(task=task, path=path, new_path=new_path, test_path=test_path)


def _paths(path: str) -> tuple[str, str]:
    stem = path.rsplit("/", 1)[-1].removesuffix(".py")
    return path.removesuffix(".py") + "_fixed.py", f"tests/test_{stem}_fixed.py"


def mix_call(
    tool: str, path: str, funcs: Sequence[str], fixes: Sequence[tuple[str, str, str]], expected: str
) -> tuple[str, dict[str, Any]]:
    """The mix-in call: ``fixes`` are (why, bad line, good line) per bug, ``expected`` the fixed code."""
    if tool == "todo_write":
        todos = [
            {
                "content": f"Fix `{func}` in {path}: {why} (`{bad}` should be `{good}`)",
                "status": "in_progress" if i == 0 else "pending",
            }
            for i, (func, (why, bad, good)) in enumerate(zip(funcs, fixes, strict=True))
        ]
        todos.append({"content": f"Run the tests that cover {path}", "status": "pending"})
        return tool, {"todos": todos}
    new_path, test_path = _paths(path)
    module = new_path.removeprefix("src/").removesuffix(".py").replace("/", ".")
    names = [f.split(".")[-1] for f in funcs]  # the file defines each (a method dedented) at top level
    imports = "".join(f"from {module} import {n}\n" for n in dict.fromkeys(names))
    tests = "".join(
        f"\n\ndef test_{f.replace('.', '_').lower()}():\n    assert callable({names[i]})\n"
        for i, f in enumerate(funcs)
    )
    stub = imports + tests
    return tool, {"files": [{"path": new_path, "content": expected}, {"path": test_path, "content": stub}]}


def mix_result(tool: str, args: dict[str, Any]) -> str:
    """The harness's answer to a mix-in call."""
    return _RESULT[tool].format(n=len(next(iter(args.values()))))


def mix_before(tool: str) -> str:
    """What the assistant says just before the mix-in call."""
    return _BEFORE[tool]


def mix_done(tool: str, func: str, why: str, path: str) -> str:
    """The final answer of a mix-in session."""
    return _DONE[tool].format(func=func, why=why, new_path=_paths(path)[0])


__all__ = [
    "MIX_TOOL_OBJECTS",
    "TODO_TOOL",
    "WRITE_FILES_TOOL",
    "mix_before",
    "mix_call",
    "mix_done",
    "mix_result",
    "mix_task",
]
