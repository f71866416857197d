"""The ``tooldecode`` command line. Each stage module registers its own subcommands."""

from __future__ import annotations

import argparse
import importlib
import sys

from tooldecode.errors import ToolDecodeError

# Every command group, in help order: each module's ``register(subparsers)`` adds its subcommands and sets
# ``func`` on them. A module that fails to import is an error, never a silently missing command.
COMMAND_MODULES = (
    "tooldecode.models",
    "tooldecode.grammar.cli",
    "tooldecode.scenarios.cli",
    "tooldecode.sampling_cli",
    "tooldecode.probe_cli",
    "tooldecode.runstore_cli",
    "tooldecode.repair_cli",
    "tooldecode.experiments",
    "tooldecode.report",
    "tooldecode.distortion_cli",
)


def build_parser() -> argparse.ArgumentParser:
    from tooldecode import prompts_cli

    parser = argparse.ArgumentParser(prog="tooldecode", description=__doc__)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        group = importlib.import_module(name).register(sub)
        if name == "tooldecode.scenarios.cli":
            prompts_cli.register_show(group)  # `scenarios show` renders prompts: a later stage
    return parser


def main(argv: list[str] | None = None) -> int:
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
        import os

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
