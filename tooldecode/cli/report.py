"""``tooldecode report RUN...``: ``summary.md`` and ``report.html`` for runs."""

from __future__ import annotations

import argparse

from tooldecode.cli.options import add_command
from tooldecode.report import report


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``report`` to the command line."""
    p = add_command(sub, "report", cmd_report)
    p.add_argument("runs", nargs="+", metavar="RUN", help="run directory, e.g. runs/e1")
    p.add_argument(
        "--out",
        metavar="DIR",
        default=None,
        help="output folder (default: the run's directory for one run, ./report for several)",
    )


def cmd_report(args: argparse.Namespace) -> int:
    """write summary.md and a self-contained report.html for runs

    Score the runs' raw samples (using verdicts-<scorer>.jsonl when it is current, else writing it)
    and write summary.md and report.html: rates with Wilson intervals per arm, differences between
    arms that differ in one field, noise floor, invented keys, probe plots.
    """
    for what, path in report(args.runs, args.out).items():
        print(f"{what}: {path}")
    return 0
