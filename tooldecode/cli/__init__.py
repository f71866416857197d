"""The ``tooldecode`` command line: one module per command group, listed in ``COMMAND_MODULES``.

Each module's ``register(subparsers)`` adds its subcommands and sets ``func`` on them; a module that
fails to import is an error, never a silently missing command. The groups of ``models``, ``grammar``
and ``scenarios`` live beside their stage (``tooldecode.models``, ``tooldecode.grammar.cli``,
``tooldecode.scenarios.cli``); ``scenarios show`` renders prompts, so the prompts group adds it.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from tooldecode.errors import ToolDecodeError

# Every command group, in help order.
COMMAND_MODULES = (
    "tooldecode.models",
    "tooldecode.grammar.cli",
    "tooldecode.scenarios.cli",
    "tooldecode.cli.sample",
    "tooldecode.cli.probe",
    "tooldecode.cli.replay",
    "tooldecode.cli.runs",
    "tooldecode.cli.repair",
    "tooldecode.cli.run",
    "tooldecode.cli.report",
    "tooldecode.cli.distortion",
    "tooldecode.cli.organisms",
)


def build_parser() -> argparse.ArgumentParser:
    """The ``tooldecode`` parser with every command group of ``COMMAND_MODULES`` registered."""
    from tooldecode.cli import prompts

    parser = argparse.ArgumentParser(
        prog="tooldecode",
        description="Strict (grammar-constrained) and loose decoding of tool calls: grammars, prompts, "
        "samples, verdicts, runs and reports.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        group = importlib.import_module(name).register(sub)
        if name == "tooldecode.scenarios.cli":
            prompts.register_show(group)  # `scenarios show` renders prompts: a later stage
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line; the exit status (2 for a usage or ``ToolDecodeError``)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    try:
        rc = func(args)
    except ToolDecodeError as err:
        print(f"tooldecode: error: {err}", file=sys.stderr)
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
    return int(rc or 0)


if __name__ == "__main__":
    sys.exit(main())
