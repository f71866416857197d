"""``make test-fast`` fetches no model weights into an empty model home."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_fast_suite_fetches_nothing_into_an_empty_model_home(tmp_path):
    home = tmp_path / "home"
    code = (
        "import model_guard, pytest\n"
        "from tooldecode.models import fetch_model\n"
        "try:\n"
        "    fetch_model('smollm2-135m-instruct', quiet=True)\n"
        "except model_guard.ModelLoadInFastSuite as e:\n"
        "    print('refused:', e)\n"
    )
    env = {
        **os.environ,
        "TOOLDECODE_TEST_FAST": "1",
        "TOOLDECODE_HOME": str(home),
        "XDG_CACHE_HOME": str(home),
    }
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT)
    assert "refused: fetching model smollm2-135m-instruct in the fast suite" in out.stdout, out.stderr
    assert not any(p.is_file() and p.stat().st_size > 1_000_000 for p in home.rglob("*"))
