"""`pip install tooldecode` without extras is enough for the grammar builder and the repair library."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import tooldecode

ROOT = Path(__file__).resolve().parent.parent


def test_one_version_source_and_a_license():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "version" not in meta and "version" in meta["dynamic"]
    assert tooldecode.__version__
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")
    base = " ".join(meta["dependencies"])
    for heavy in ("torch", "transformers", "llama", "xgrammar", "llguidance", "outlines", "lark"):
        assert heavy not in base, f"{heavy} must stay out of the base install"
    assert any(d.startswith("jinja2") for d in meta["optional-dependencies"]["models"])


CHECK = r"""
import importlib.util, json, sys
from tooldecode.grammar import render_toolset, load_tool
import tooldecode.repair
gbnf = render_toolset([load_tool("edit")], format="gbnf", wire="hermes", mode="strict")
assert "root" in gbnf and "newText" in gbnf, gbnf[:200]
absent = [m for m in ("torch", "transformers", "llama_cpp", "xgrammar", "llguidance", "lark")
          if importlib.util.find_spec(m) is not None]
print(json.dumps({"absent_ok": not absent, "present": absent, "bytes": len(gbnf)}))
"""


@pytest.mark.slow
def test_fresh_venv_without_extras_renders_the_edit_grammar(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    py = venv / "bin" / "python"
    install = subprocess.run(
        [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(ROOT)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert install.returncode == 0, install.stderr[-2000:]
    # run outside the checkout so the installed package is the one imported
    out = subprocess.run([str(py), "-c", CHECK], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert '"absent_ok": true' in out.stdout, out.stdout
    cli = subprocess.run(
        [str(venv / "bin" / "tooldecode"), "grammar", "edit", "--format", "gbnf", "--wire", "hermes"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert cli.returncode == 0 and "newText" in cli.stdout, cli.stderr[-2000:]
