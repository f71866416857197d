"""The recipes of docs/grammar.md ("Using tooldecode's grammars in other engines"), executed as written."""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parent.parent / "docs" / "grammar.md"
SECTION = "## Using tooldecode's grammars in other engines"


def _recipes() -> list[tuple[str, str]]:
    text = DOC.read_text()
    assert SECTION in text, "docs/grammar.md lost its recipes section"
    body = text.split(SECTION, 1)[1]
    out = []
    for block in re.findall(r"```python\n(.*?)```", body, flags=re.S):
        m = re.match(r"# recipe: (\S+)\n", block)
        assert m, f"a recipe must start with '# recipe: <module>': {block[:60]!r}"
        out.append((m.group(1), block))
    return out


def test_every_engine_has_a_recipe():
    assert [m for m, _ in _recipes()] == ["llama_cpp", "outlines", "xgrammar", "llguidance", "vllm"]


@pytest.mark.model
@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("module,code", _recipes(), ids=[m for m, _ in _recipes()])
def test_recipe_runs(module, code, tmp_path, smol_ref):
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed")
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        exec(compile(code, f"docs/grammar.md ({module})", "exec"), {"__name__": "recipe"})
    finally:
        os.chdir(cwd)
