"""The notebooks run top to bottom on the smallest model with small N (nbclient), and are committed clean."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from tooldecode.models import TEST_MODEL

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
NAMES = ("01_quickstart.ipynb", "02_close_brace_probe.ipynb", "03_findings.ipynb")


def _execute(name: str) -> nbformat.NotebookNode:
    from nbclient import NotebookClient

    book = nbformat.read(NOTEBOOKS / name, as_version=4)
    client = NotebookClient(
        book, timeout=1200, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOKS)}}
    )
    client.execute()  # raises CellExecutionError, with the cell and its traceback, when a cell fails
    return book


def _text(book: nbformat.NotebookNode) -> str:
    parts = []
    for cell in book.cells:
        for out in cell.get("outputs", []):
            parts.append(out.get("text", ""))
            parts.extend(str(v) for k, v in out.get("data", {}).items() if k.startswith("text/"))
    return "\n".join(parts)


def _images(book: nbformat.NotebookNode) -> int:
    return sum("image/png" in out.get("data", {}) for cell in book.cells for out in cell.get("outputs", []))


@pytest.fixture
def notebook_env(tmp_path, monkeypatch):
    monkeypatch.setenv("TOOLDECODE_NOTEBOOK_MODEL", TEST_MODEL)
    monkeypatch.setenv("TOOLDECODE_NOTEBOOK_N", "2")
    # a scenario with one of the corpus's shortest prompts (1,450 tokens at L2 on SmolLM2; the quickstart's
    # default, py-slugify-accents, has 2,340): the prompt's prefill is most of a notebook's time
    monkeypatch.setenv("TOOLDECODE_NOTEBOOK_SCENARIO", "json-tsconfig-path-aliases")
    monkeypatch.setenv("TOOLDECODE_NOTEBOOK_OUT", str(tmp_path / "runs" / "scratch"))
    monkeypatch.setenv("TOOLDECODE_NOTEBOOK_RUNS", str(tmp_path / "runs"))
    return tmp_path


@pytest.mark.parametrize("name", NAMES)
def test_committed_without_outputs(name):
    book = nbformat.read(NOTEBOOKS / name, as_version=4)
    nbformat.validate(book)
    code = [c for c in book.cells if c.cell_type == "code"]
    assert code and all(not c.outputs and c.execution_count is None for c in code)
    assert "TOOLDECODE_NOTEBOOK_MODEL" in json.dumps(book)


@pytest.mark.slow
@pytest.mark.model
def test_quickstart_then_findings(notebook_env, smol_ref):
    book = _execute("01_quickstart.ipynb")
    text = _text(book)
    assert f"model {TEST_MODEL}, N = 2" in text
    assert "edits-item ::=" in text and "invented key" in text
    run = notebook_env / "runs" / "scratch" / f"quickstart-{TEST_MODEL}"
    samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    assert sorted(s["arm"]["mode"] for s in samples) == ["loose", "loose", "strict", "strict"]
    assert (run / "report.html").is_file() and (run / "summary.md").is_file()
    assert "A call, token by token" in text and "<th>strict</th><th>loose</th>" in text  # the token strip

    book = _execute("03_findings.ipynb")
    text = _text(book)
    assert "1 run(s) under" in text and "2 arm(s), 4 scored samples" in text
    assert "## Arms" in text and "mode=loose" in text
    assert _images(book) >= 1  # the rates plot


@pytest.mark.slow
@pytest.mark.model
def test_close_brace_probe(notebook_env, smol_ref, monkeypatch):
    monkeypatch.setenv("TOOLDECODE_NOTEBOOK_N", "1")  # one scenario in the across-scenarios part
    # shallow bounds (the defaults' expansion took over 4 minutes a probe on 2 busy cores): every part
    # runs, with few expansions (the mass left unexpanded is reported as undetermined)
    monkeypatch.setenv(
        "TOOLDECODE_NOTEBOOK_PROBE", '{"depth": 2, "key_depth": 1, "tail": 1e-2, "max_branches": 4}'
    )
    book = _execute("02_close_brace_probe.ipynb")
    text = _text(book)
    assert "P(close)" in text and "P(continue)" in text
    assert "edits[0]" in text
    assert _images(book) == 1
