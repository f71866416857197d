"""Where a process runs: the commit of the package and whether its code had changes (``git_state``), and
the CPU as far as it changes a draw (``cpu``). One rule for every record of provenance: a run's manifest
and a trained organism's manifest both read them here."""

from __future__ import annotations

import platform
import re
import subprocess
from pathlib import Path

__all__ = ["cpu", "git_state"]


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


#: the vector instruction sets that decide which kernels llama.cpp and torch pick (x86, then arm)
_SIMD = (
    "avx",
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "avx512_vnni",
    "avx512_bf16",
    "avx_vnni",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
    "asimd",
    "asimddp",
    "sve",
    "sve2",
    "i8mm",
    "bf16",
)


def cpu(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU this process runs on, as far as it changes a draw: the first processor's model name and the
    vector instruction sets (of ``_SIMD``) that decide which kernels the backends pick, e.g. ``"AMD EPYC;
    avx avx2 fma f16c avx512f …"``. The same weights, prompt and stream give first-token probabilities
    that differ in the third decimal on an AVX2 and an AVX-512 machine, so a draw can differ too.
    ``platform.processor()`` (or the machine type) where ``cpuinfo`` cannot be read."""
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return platform.processor() or platform.machine() or "unknown"
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break  # the first processor's block is enough
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    name = fields.get("model name") or fields.get("Hardware") or fields.get("CPU implementer")
    name = name or platform.machine() or "unknown"
    flags = set((fields.get("flags") or fields.get("Features") or "").split())
    simd = [f for f in _SIMD if f in flags]
    return f"{name}; {' '.join(simd)}" if simd else name
