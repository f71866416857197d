"""Reports over runs: ``summary.md`` (tables) and a self-contained ``report.html`` (tables, plots, samples).

Every number comes from the raw samples of the runs, scored by the current scorer: a run's
``verdicts-<SCORER_VERSION>.jsonl`` is used when it covers exactly the run's samples, otherwise the run
is scored again and that file is (re)written, exactly as ``tooldecode rescore`` writes it. Samples are
grouped by arm (the record's ``arm`` dict); the fields that differ between arms label them.

Public surface: ``load_run``, ``summarize``, ``summary_markdown``, ``summary_html``, the ``plot_*``
functions (matplotlib figures, Agg backend) and ``report(runs, out)``. docs/report.md has the details.

Modules, in the order data flows: ``data`` (load a run, verdicts scored once) → ``summary`` (arms,
rates, intervals, differences) → ``tables`` (tables and ``summary.md``), ``plots``, ``distortion`` →
``page`` (``report.html``) → ``write`` (``report``).
"""

from __future__ import annotations

from tooldecode.report.data import ReportError, RunData, load_run
from tooldecode.report.page import highlight, summary_html
from tooldecode.report.plots import plot_probe, plot_rates, plot_zoo
from tooldecode.report.summary import Arm, Summary, summarize
from tooldecode.report.tables import summary_markdown
from tooldecode.report.write import report

__all__ = [
    "Arm",
    "ReportError",
    "RunData",
    "Summary",
    "highlight",
    "load_run",
    "plot_probe",
    "plot_rates",
    "plot_zoo",
    "report",
    "summarize",
    "summary_html",
    "summary_markdown",
]
