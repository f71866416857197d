"""``tooldecode run SPEC``: run an experiment spec (resumable), on its models or ``--model``/``--backend``."""

from __future__ import annotations

import argparse
from pathlib import Path

from tooldecode.cli.options import add_command, add_switch
from tooldecode.cli.server_flags import add_server_arguments
from tooldecode.experiments import SpecError, load_spec, run_spec, validate_spec


def cmd_run(args: argparse.Namespace) -> int:
    """``tooldecode run SPEC``."""
    spec = load_spec(args.spec, quick=args.quick)
    if args.model:
        spec.models = list(args.model)
        validate_spec(spec)
    server = None
    if args.backend:
        spec.backend = args.backend
    if args.fill_slots:
        spec.fill_slots = True
        validate_spec(spec)
    from tooldecode.cli.server_flags import check_server_flags

    check_server_flags(args, spec.backend)
    if spec.backend == "openai":
        from tooldecode.cli.server_flags import server_kwargs

        server = server_kwargs(args)
    out = Path(args.out) if args.out else Path("runs") / (spec.name + ("-quick" if args.quick else ""))
    if args.modes:
        unknown = sorted(set(args.modes) - set(spec.modes))
        if unknown:
            raise SpecError(
                f"--modes: {', '.join(unknown)} not among {spec.path or spec.name}'s modes "
                f"({', '.join(spec.modes)}); name modes of the spec"
            )
    if args.levels:
        levels = sorted({arm["level"] for arm in spec.arms()})
        unknown = sorted(set(args.levels) - set(levels))
        if unknown:
            raise SpecError(
                f"--levels: {', '.join(unknown)} not among {spec.path or spec.name}'s levels "
                f"({', '.join(levels)}); name levels the spec's arms have"
            )
    run_spec(
        spec,
        out,
        fresh=args.fresh,
        progress=not args.no_progress,
        server=server,
        only_modes=args.modes,
        only_levels=args.levels,
    )
    print(f"run written: {out}")
    if args.report:
        from tooldecode.report import report

        paths = report([out], out)
        for p in paths.values() if isinstance(paths, dict) else paths:
            print(f"report: {p}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``run`` to the command line."""
    p = add_command(sub, "run", cmd_run, help="run an experiment spec (experiments/*.toml); resumable")
    p.add_argument("spec")
    p.add_argument("--out", help="run directory (default runs/<name>)")
    add_switch(p, "--quick", "use the spec's [quick] overrides (small N)")
    p.add_argument(
        "--model",
        action="append",
        metavar="ID_OR_PATH",
        help="run on this model instead of the spec's (id, .gguf file or model folder; repeatable)",
    )
    add_switch(
        p,
        "--fresh",
        "replace an existing run: with its write lock held and the model loaded, delete the files "
        "tooldecode wrote there (a run directory only; other files stay and are named)",
    )
    add_switch(p, "--report", "write summary.md and report.html when done")
    add_switch(p, "--no-progress")
    p.add_argument("--backend", help="run on this backend instead of the spec's (llamacpp, hf, openai)")
    p.add_argument(
        "--modes",
        nargs="+",
        metavar="MODE",
        help="draw only these modes' arms now; the run stays the spec's, and a later call without "
        "--modes draws the rest (e.g. the cheap arms first)",
    )
    p.add_argument(
        "--levels",
        nargs="+",
        metavar="LEVEL",
        help="draw only the arms of these levels now (L1, L2, ...; with --modes, arms that have both); "
        "the run stays the spec's, and a later call without --levels draws the rest",
    )
    add_switch(
        p,
        "--fill-slots",
        "draw all of a model's jobs from one queue, refilling each finished slot from any scenario and arm "
        "(spec field fill_slots; llama.cpp)",
    )
    add_server_arguments(p)
