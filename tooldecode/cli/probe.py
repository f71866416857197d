"""`tooldecode probe`: the per-position close-brace table for a scenario's gold call."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from tooldecode.cli.options import (
    add_backend_option,
    add_command,
    add_model_option,
    add_probe_bounds,
    add_scenario_dir_option,
    add_switch,
)
from tooldecode.cli.server_flags import add_server_arguments


def _cmd_probe(args: argparse.Namespace) -> int:
    """P(close) / P(continue) at each decision point of a scenario's gold call"""
    from tooldecode.cli import Progress
    from tooldecode.cli.server_flags import server_kwargs
    from tooldecode.models import resolve
    from tooldecode.probe import ProbeConfig, summarize
    from tooldecode.prompts import TranscriptOptions, parse_variant
    from tooldecode.records import Condition
    from tooldecode.scenarios import get_scenario
    from tooldecode.scenarios.sessions import read_if_session
    from tooldecode.trial import ModelCache, Trial, variant_of

    session = read_if_session(Path(args.scenario)) if Path(args.scenario).is_file() else None
    if session is not None:  # a session scenario file (docs/scenarios.md)
        from tooldecode.cli.replay import probe_session_file

        return probe_session_file(args, session)
    sc = get_scenario(args.scenario, args.dir)
    if getattr(sc, "kind", "edit") == "session":  # a session scenario found in --dir
        from tooldecode.cli.replay import probe_session_file

        return probe_session_file(args, sc.data)
    ref = resolve(args.model, fetch=True)
    opts = parse_variant(args.variant) if args.variant else TranscriptOptions()
    cond = Condition(args.model, args.backend, "loose", 1.0, **{**variant_of(opts), "conditioning": "free"})
    trial = Trial(cond, sc, ref=ref)
    _check_flags(args, trial.call, sc.id)  # before the model loads
    config = ProbeConfig(
        depth=args.depth,
        key_depth=args.key_depth,
        min_mass=args.min_mass,
        max_branches=args.max_branches,
        tail=args.tail,
    )
    server = server_kwargs(args) if args.backend == "openai" else None
    with ModelCache(branches=config.max_branches, server=server) as models:
        be = models.get(args.backend, args.model)
        progress = Progress(f"probe {sc.id}", 1, unit="call")
        progress.log.info("probe: the gold call of %s on %s (an exact probe: minutes on CPU)", sc.id, ref.id)
        points = trial.probe(be, select=args.select, config=config, samples=args.samples)
        progress.step(note=f"{len(points)} decision points")
        n_prompt = len(be.tokenize(trial.text))
    if args.json:
        for p in points:
            print(json.dumps(p.to_dict()))
        return 0
    print(
        f"model {ref.id} ({args.backend}), scenario {sc.id}, variant {args.variant or 'default'}, "
        f"wire {trial.prompt.wire}, style {trial.options.call_style}, prompt {n_prompt} tokens"
    )
    print(summarize(points))
    if args.samples:
        for p in points:
            if p.continuations:
                print(f"{p.path}.{p.after}: {p.continuations}")
    return 0


def _cmd_probe_suite(args: argparse.Namespace) -> int:
    """an exact-probe suite (experiments/p*.toml): transcript variants and tool views over the
    corpus

    Run an exact-probe suite spec into a resumable run folder: P(close) / P(continue by kind) after
    a key for each variant (transcript options and a tool_view: as-written, required-first,
    no-required, typescript), scenarios in the spec's fixed shuffled order (see docs/report.md).
    """
    from tooldecode.experiments.probes import run_probe_suite
    from tooldecode.experiments.spec import check_options

    check_options(
        {"--max-scenarios": (args.max_scenarios, "count"), "--hours": (args.hours, "number0")},
        "probe-suite: ",
    )

    def say(line: str) -> None:
        print(line, flush=True)

    run_probe_suite(
        args.spec, args.out, args.model, max_scenarios=args.max_scenarios, hours=args.hours, say=say
    )
    return 0


def _check_flags(args: argparse.Namespace, call: str, scenario: str) -> None:
    """The probe's bounds by the rules specs follow, the server flags, and ``--select`` naming a key of ``call``."""
    from tooldecode.cli.server_flags import check_server_flags
    from tooldecode.experiments.spec import PROBE_RULES, check_options
    from tooldecode.prompts import PromptError

    check_server_flags(args)
    flags = {f"--{b.replace('_', '-')}": (getattr(args, b), rule) for b, rule in PROBE_RULES.items()}
    check_options({**flags, "--samples": (args.samples, "count0")}, "probe: ")
    if args.select and not re.search(re.escape(json.dumps(args.select)) + r"\s*:", call):
        raise PromptError(
            f"probe: --select {args.select!r} is not a key of scenario {scenario}'s gold call; "
            "pass a key it has (e.g. newText) or leave --select out"
        )


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``probe`` to the command line."""
    from tooldecode.probe import ProbeConfig

    p = add_command(sub, "probe", _cmd_probe)
    add_model_option(p)
    p.add_argument("--scenario", required=True)
    add_scenario_dir_option(p)
    p.add_argument(
        "--variant", default="", help="transcript variant words, e.g. agentic,thinking (see docs/prompts.md)"
    )
    add_backend_option(p)
    add_server_arguments(p)
    p.add_argument("--select", help="only decision points after this key (e.g. newText)")
    d = ProbeConfig()
    add_probe_bounds(
        p,
        {"depth": 3, "key_depth": 6, "min_mass": d.min_mass, "max_branches": d.max_branches, "tail": d.tail},
        {
            "depth": "expansion depth for tokens that stop before the decision",
            "key_depth": "further expansion levels to resolve the key after a ',' (0: close/continue/other only)",
            "min_mass": f"expand an undetermined branch only above this path probability (default {d.min_mass:g})",
            "max_branches": f"expansions per level (default {d.max_branches})",
            "tail": f"classify tokens until this much mass is left; the rest is reported undetermined (default {d.tail:g})",
        },
    )
    p.add_argument(
        "--samples", type=int, default=0, help="also sample K continuations per point and tally keys"
    )
    add_switch(p, "--json", "one JSON object per decision point")
    _register_suite(sub)


def _register_suite(sub: argparse._SubParsersAction) -> None:
    s = add_command(sub, "probe-suite", _cmd_probe_suite)
    s.add_argument("spec", type=Path, metavar="SPEC")
    s.add_argument("--out", type=Path, required=True, help="the run folder (resumed where it exists)")
    s.add_argument("--model", required=True)
    s.add_argument("--max-scenarios", type=int, default=None, help="only the first N scenarios of the order")
    s.add_argument("--hours", type=float, default=None, help="stop after this long (rerun to resume)")
