"""Reports over runs: ``summary.md`` (tables) and a self-contained ``report.html`` (tables, plots, samples).

Every number comes from the raw samples of the runs, loaded by ``tooldecode.runs.load_run`` (verdicts
scored once by the current scorer). Samples are grouped by arm (the record's ``arm`` dict); the fields
that differ between arms label them.

Public surface: ``run_data``, ``summarize``, ``summary_markdown``, ``summary_html``, the ``plot_*``
functions (matplotlib figures, Agg backend) and ``report(runs, out)``. docs/report.md has the details.

Modules, in the order data flows: ``data`` (the report's view of a loaded run) → ``summary`` (arms,
rates, intervals, differences) → ``tables`` (tables and ``summary.md``), ``plots``, ``distortion`` →
``page`` (``report.html``) → ``write`` (``report``); ``claims`` (a spec's claimed effects judged
against runs: ``evaluate_effect``).
"""

from __future__ import annotations

from tooldecode.report.claims import ClaimError, EffectResult, evaluate_effect, parse_claim
from tooldecode.report.data import ReportError, RunData, run_data
from tooldecode.report.page import highlight, summary_html
from tooldecode.report.plots import plot_probe, plot_rates, plot_zoo
from tooldecode.report.summary import Arm, Summary, summarize
from tooldecode.report.tables import summary_markdown
from tooldecode.report.write import report

__all__ = [
    "Arm",
    "ClaimError",
    "EffectResult",
    "ReportError",
    "RunData",
    "Summary",
    "evaluate_effect",
    "highlight",
    "parse_claim",
    "plot_probe",
    "plot_rates",
    "plot_zoo",
    "report",
    "run_data",
    "summarize",
    "summary_html",
    "summary_markdown",
]
