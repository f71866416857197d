"""The ``tooldecode`` command line: one module of this package per command group, in ``COMMAND_MODULES``.

Each group module's ``register(subparsers)`` adds its commands and sets ``func`` on them; the group
modules import their stage at the top and heavy libraries (torch, llama_cpp, transformers) only inside
the command functions, so ``tooldecode --help`` stays fast. ``scenarios show`` (``cli.prompts``) is
added by the ``scenarios`` group; ``cli.options`` and ``cli.server_flags`` hold the parser pieces the
groups share. argparse is used in this package only.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from tooldecode.cli import (
    distortion,
    grammar,
    models,
    organisms,
    probe,
    repair,
    replay,
    report,
    run,
    runs,
    sample,
    scenarios,
)
from tooldecode.errors import ToolDecodeError
from tooldecode.guard import RedactingFilter, redact

# The extra that brings each optional import a command may need (one-line hint instead of a traceback).
EXTRA_OF = {
    "jinja2": "models",
    "torch": "models",
    "transformers": "models",
    "llama_cpp": "models",
    "xgrammar": "models",
    "llguidance": "models",
    "gguf": "models",
    "outlines": "models",
    "matplotlib": "report",
    "nbclient": "report",
    "nbformat": "report",
}

# Every command group, in help order.
COMMAND_MODULES = (
    models,
    grammar,
    scenarios,
    sample,
    probe,
    replay,
    runs,
    repair,
    run,
    report,
    distortion,
    organisms,
)


def build_parser() -> argparse.ArgumentParser:
    """The ``tooldecode`` parser with every command group of ``COMMAND_MODULES`` registered."""
    parser = argparse.ArgumentParser(
        prog="tooldecode",
        description="Strict (grammar-constrained) and loose decoding of tool calls: grammars, prompts, "
        "samples, verdicts, runs and reports.",
    )
    from tooldecode import __version__

    parser.add_argument("--version", action="version", version=f"tooldecode {__version__}")
    noise = parser.add_mutually_exclusive_group()
    noise.add_argument(
        "-v",
        "--verbose",
        dest="log_verbose",
        action="count",
        default=0,
        help="more log lines on stderr (-v: progress and info, -vv: debug)",
    )
    noise.add_argument(
        "-q",
        "--quiet",
        dest="log_quiet",
        action="store_true",
        help="only errors on stderr (no progress lines)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for group in COMMAND_MODULES:
        group.register(sub)
    return parser


def configure_logging(verbose: int = 0, quiet: bool = False) -> None:
    """Log lines of the ``tooldecode`` loggers on stderr as ``tooldecode: message``: warnings by default,
    info with ``-v``, debug with ``-vv``, errors only with ``-q``."""
    level = logging.ERROR if quiet else (logging.WARNING, logging.INFO, logging.DEBUG)[min(verbose, 2)]
    log = logging.getLogger("tooldecode")
    log.setLevel(level)
    for h in log.handlers:  # main() called again (a library caller, a test): write to today's stderr
        if getattr(h, "tooldecode_cli", False) and isinstance(h, logging.StreamHandler):
            h.stream = sys.stderr  # not setStream: it flushes the old stream, which may be closed
    if not any(getattr(h, "tooldecode_cli", False) for h in log.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("tooldecode: %(message)s"))
        handler.addFilter(RedactingFilter())  # no key, Authorization value or URL password is logged
        handler.tooldecode_cli = True  # type: ignore[attr-defined]
        log.addHandler(handler)
        log.propagate = False
    logging.getLogger("tooldecode.progress").setLevel(logging.ERROR if quiet else logging.INFO)


class Progress:
    """Progress of long work as log lines on stderr (logger ``tooldecode.progress``; ``-q`` silences
    them): one every ``every`` items with the rate and the time left, so a run off a terminal is not
    silent for minutes."""

    def __init__(self, what: str, total: int, every: int = 1, unit: str = "item") -> None:
        import time

        self.what, self.total, self.every, self.unit = what, total, max(1, every), unit
        self.done = 0
        self.t0 = time.monotonic()
        self.log = logging.getLogger("tooldecode.progress")

    def step(self, n: int = 1, note: str = "") -> None:
        import time

        self.done += n
        if self.done % self.every and self.done != self.total:
            return
        dt = time.monotonic() - self.t0
        rate = self.done / dt if dt > 0 else float("inf")
        left = (self.total - self.done) / rate if rate > 0 else 0.0
        tail = f"; {note}" if note else ""
        self.log.info(
            "%s: %d/%d %ss, %.2f %ss/s, %.0f s elapsed, ETA %.0f s%s",
            self.what,
            self.done,
            self.total,
            self.unit,
            rate,
            self.unit,
            dt,
            left,
            tail,
        )


def main(argv: list[str] | None = None) -> int:
    """Run the command line; the exit status (2 for a usage or ``ToolDecodeError``)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(getattr(args, "log_verbose", 0), getattr(args, "log_quiet", False))
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    try:
        rc = func(args)
    except ToolDecodeError as err:
        print(redact(f"tooldecode: error: {err}"), file=sys.stderr)
        return 2
    except ModuleNotFoundError as err:
        top = (err.name or "").split(".")[0]
        if top not in EXTRA_OF:
            return _unexpected()
        extra = EXTRA_OF[top]
        print(
            f"tooldecode: error: {args.command} needs {top}, which is not installed; install the "
            f"'{extra}' extra: pip install 'tooldecode[{extra}]' (or run make setup)",
            file=sys.stderr,
        )
        return 2
    except BrokenPipeError:  # e.g. `tooldecode scenarios list | head`
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print(
            "tooldecode: interrupted; completed samples are kept and the run resumes where it stopped",
            file=sys.stderr,
        )
        return 130
    except Exception:  # a defect: the traceback is kept for its report, with every secret masked
        return _unexpected()
    return int(rc or 0)


def _unexpected() -> int:
    """Print the current exception's traceback through ``redact`` (exit status 1, as Python's own)."""
    import traceback

    sys.stderr.write(redact(traceback.format_exc()))
    return 1


if __name__ == "__main__":
    sys.exit(main())
