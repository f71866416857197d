"""Parser pieces the command groups share: a command, a group of actions, a switch, and the options that
name a model, a scenario folder, a backend and the probe's bounds.

Only the standard library and ``tooldecode.models`` (for ``DEFAULT_MODEL``) are imported here, so a
group module can use these helpers without slowing ``tooldecode --help``.
"""

from __future__ import annotations

import argparse
import inspect
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tooldecode.models import DEFAULT_MODEL

Command = Callable[[argparse.Namespace], int]

BACKENDS = ("llamacpp", "hf", "openai")
SCENARIO_DIR_HELP = (
    "read scenarios from this folder of *.yaml files instead of the built-in corpus (repeatable)"
)
# The probe's bounds (``tooldecode.probe.ProbeConfig`` fields) in the order their flags are listed.
PROBE_BOUNDS: tuple[tuple[str, type], ...] = (
    ("depth", int),
    ("key_depth", int),
    ("min_mass", float),
    ("max_branches", int),
    ("tail", float),
)


def add_command(
    sub: argparse._SubParsersAction, name: str, func: Command, *, help: str | None = None, **kwargs: Any
) -> argparse.ArgumentParser:
    """Add command ``name`` (run by ``func``) to ``sub``.

    Without ``help``, the command's texts come from ``func``'s docstring: its first paragraph is the
    one-line help, the rest (if any, and unless ``description`` is given) the description of its ``--help``.

    Parameters
    ----------
    sub
        The subparsers of the parent command.
    name
        The command's name on the command line.
    func
        What runs the command: parsed arguments in, the exit status out.
    help
        The one-line help shown in the parent's list of commands (default: ``func``'s docstring).
    **kwargs
        Further ``ArgumentParser`` keywords (``description``, ...).

    Returns
    -------
    argparse.ArgumentParser
        The command's parser, for its options.
    """
    if help is None:
        help, description = _doc_texts(func, name)
        if description and "description" not in kwargs:
            kwargs["description"] = description
    parser = sub.add_parser(name, help=help, **kwargs)
    parser.set_defaults(func=func)
    return parser


def _doc_texts(func: Command, name: str) -> tuple[str, str]:
    """``func``'s docstring as (help, description): its first paragraph, and the rest, each on one line."""
    doc = inspect.getdoc(func)
    if not doc:
        raise TypeError(f"command {name!r}: give help= or a docstring to {func.__name__}")
    paras = [" ".join(p.split()) for p in doc.split("\n\n") if p.strip()]
    return paras[0], " ".join(paras[1:])


def add_group(sub: argparse._SubParsersAction, name: str, *, help: str) -> argparse._SubParsersAction:
    """Add command group ``name`` whose action is required (``tooldecode NAME ACTION``).

    Returns
    -------
    argparse._SubParsersAction
        The group's subparsers, stored as ``<name>_command``, for its actions.
    """
    parser = sub.add_parser(name, help=help)
    return parser.add_subparsers(dest=f"{name}_command", metavar="ACTION", required=True)


def add_switch(parser: argparse.ArgumentParser, flag: str, help: str | None = None) -> None:
    """Add an on/off option ``flag`` (``store_true``)."""
    parser.add_argument(flag, action="store_true", help=help)


def add_model_option(parser: argparse.ArgumentParser, help: str | None = None) -> None:
    """Add ``--model`` (default ``tooldecode.models.DEFAULT_MODEL``)."""
    parser.add_argument("--model", default=DEFAULT_MODEL, help=help)


def add_backend_option(parser: argparse.ArgumentParser, choices: Sequence[str] = BACKENDS) -> None:
    """Add ``--backend`` (default ``llamacpp``) with the backends a command runs on."""
    parser.add_argument("--backend", default="llamacpp", choices=list(choices))


def add_scenario_dir_option(parser: argparse.ArgumentParser) -> None:
    """Add ``--dir FOLDER`` (repeatable, stored as ``dir``): scenario folders instead of the built-in corpus."""
    parser.add_argument("--dir", action="append", type=Path, metavar="FOLDER", help=SCENARIO_DIR_HELP)


def add_probe_bounds(
    parser: argparse.ArgumentParser, defaults: Mapping[str, float], helps: Mapping[str, str]
) -> None:
    """Add ``--depth``, ``--key-depth``, ``--min-mass``, ``--max-branches`` and ``--tail``.

    Parameters
    ----------
    parser
        The command's parser.
    defaults, helps
        Each bound's default and help text, by ``ProbeConfig`` field name (``depth``, ``key_depth``, ...).
    """
    for field, kind in PROBE_BOUNDS:
        flag = "--" + field.replace("_", "-")
        parser.add_argument(flag, type=kind, default=defaults[field], help=helps[field])
