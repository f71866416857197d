"""The commit the package runs from, and whether its code had changes (``git_state``). One rule for every
record of provenance: a run's manifest and a trained organism's manifest both read it here."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

__all__ = ["git_state"]


def git_state() -> tuple[str, bool | None]:
    """(sha, dirty) of the checkout the package runs from; ("unknown", None) outside git. Dirty counts
    tracked code only: run data under ``runs/`` (rows a job writes beside the code) leaves it clean."""
    here = Path(__file__).resolve().parent
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        status = subprocess.run(
            # run data (``runs/``) is not code: a run's rows written beside a job leave the code clean
            ["git", "status", "--porcelain", "--untracked-files=no", "--", ":(top,exclude)runs"],
            cwd=here, capture_output=True, text=True, timeout=10, check=True,
        ).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return "unknown", None
    if not re.fullmatch(r"[0-9a-f]{40,64}", sha):
        return "unknown", None
    return sha, bool(status.strip())
