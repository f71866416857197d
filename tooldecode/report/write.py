"""Writing ``summary.md`` and ``report.html`` for one or more runs (``report``)."""

from __future__ import annotations

import os
import shlex
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from tooldecode.guard import check_output
from tooldecode.report.data import ReportError, run_data
from tooldecode.report.page import clean_text, summary_html
from tooldecode.report.summary import summarize
from tooldecode.report.tables import summary_markdown
from tooldecode.runs import RunStore


def _write_text(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def _a_report(path: Path) -> bool:
    """Whether ``path`` is a summary.md or report.html this command wrote (it names the command)."""
    return "tooldecode report" in path.read_text(encoding="utf-8", errors="replace")


def report(
    runs: Sequence[str | os.PathLike[str]], out: str | os.PathLike[str] | None = None
) -> dict[str, Path]:
    """Write ``summary.md`` and ``report.html`` for ``runs`` into ``out`` and return the paths written.

    ``out`` defaults to the run's own directory for one run and ``./report`` for several. Verdict files
    that had to be (re)written are returned too, as ``verdicts:<run name>``.
    """
    paths: list[Path] = []
    for r in runs:
        p = Path(r)
        if p.resolve() not in [q.resolve() for q in paths]:
            paths.append(p)
    if not paths:
        raise ReportError("no runs given; pass one or more run directories, e.g. runs/e1")
    data = [run_data(p) for p in paths]
    names = Counter(d.name for d in data)
    for d in data:
        if names[d.name] > 1:
            d.name = str(d.path)
            for x in d.samples:
                x.run = d.name
    s = summarize(data)
    target = Path(out) if out is not None else (paths[0] if len(paths) == 1 else Path("report"))
    command = shlex.join(
        ["tooldecode", "report", *[str(p) for p in paths]] + (["--out", str(out)] if out is not None else [])
    )
    md = clean_text(summary_markdown(s) + f"\nThis report: `{command}`\n")
    page = summary_html(s, command)
    written: dict[str, Path] = {}
    own = next((d for d in data if target.resolve() == d.path.resolve()), None)
    if own is not None:
        store = RunStore.open(own.path)
        written["summary"] = store.write_derived("summary.md", md)
        written["html"] = store.write_derived("report.html", page)
    else:
        if target.exists() and not target.is_dir():
            raise ReportError(f"{target} exists and is not a directory; choose another --out")
        for name in (
            "summary.md",
            "report.html",
        ):  # a report written here before is replaced; a user's file is not
            check_output(target / name, ours=_a_report, what="report", error=ReportError)
        written["summary"] = _write_text(target / "summary.md", md)
        written["html"] = _write_text(target / "report.html", page)
    for d in data:
        if d.verdicts_written and d.verdict_file is not None:
            written[f"verdicts:{d.name}"] = d.verdict_file
    return written


# --- CLI -------------------------------------------------------------------------------------------
