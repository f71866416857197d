"""Command-line conventions: --version, -q/-v and logging, progress lines, a hint naming a missing extra."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

from tooldecode import __version__
from tooldecode.cli import Progress, configure_logging

ROOT = Path(__file__).resolve().parents[1]


def _run(*code_or_args: str, code: str | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-c", code] if code else [sys.executable, "-m", "tooldecode", *code_or_args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)


def test_version():
    out = _run("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"tooldecode {__version__}"


def test_quiet_and_verbose_are_global_and_leave_subcommand_flags_alone():
    assert _run("-q", "grammar", "edit").returncode == 0
    out = _run("grammar", "edit", "-v", "--wire", "hermes")  # grammar's own --verbose
    assert out.returncode == 0 and out.stdout.startswith("root ::=")
    assert _run("-q", "-v", "grammar", "edit").returncode == 2  # one or the other


def test_progress_lines_carry_rate_and_eta(capsys):
    configure_logging(0, False)
    p = Progress("sample", 4, every=2, unit="sample")
    for _ in range(4):
        p.step()
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and err[0].startswith("tooldecode: sample: 2/4 samples,") and "ETA" in err[0]
    configure_logging(0, True)
    Progress("sample", 1).step()
    assert capsys.readouterr().err == ""
    configure_logging(0, False)
    assert logging.getLogger("tooldecode.progress").level == logging.INFO


def test_a_missing_extra_is_one_line_naming_it(tmp_path):
    code = (
        "import sys; sys.modules['matplotlib'] = None\n"
        "from tooldecode.cli import main\n"
        f"sys.exit(main(['report', 'runs/e0-native-format-6', '--out', {str(tmp_path)!r}]))\n"
    )
    out = _run(code=code)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert (
        lines[-1].startswith("tooldecode: error: report needs matplotlib")
        and "tooldecode[report]" in lines[-1]
    )
    assert "Traceback" not in out.stderr
