"""`tooldecode sample`: draw loose or strict samples of a scenario's edit call and score each one."""

from __future__ import annotations

import argparse
import json

from tooldecode.cli.options import (
    add_backend_option,
    add_command,
    add_model_option,
    add_scenario_dir_option,
    add_switch,
)
from tooldecode.cli.server_flags import add_server_arguments


def _cmd_sample(args: argparse.Namespace) -> int:
    """sample a scenario's edit call (loose or strict) and score each sample"""
    from tooldecode.cli import Progress
    from tooldecode.cli.server_flags import check_server_flags, server_kwargs
    from tooldecode.experiments.spec import check_options
    from tooldecode.models import resolve
    from tooldecode.prompts import TranscriptOptions, parse_variant
    from tooldecode.records import Condition
    from tooldecode.scenarios import get_scenario
    from tooldecode.trial import ModelCache, Trial, channel_of, variant_of

    check_server_flags(args)
    check_options(
        {
            "-n": (args.n, "count"),
            "--temperature": (args.temperature, "temperature"),
            "--top-p": (args.top_p, "top_p"),
            "--max-new-tokens": (args.max_new_tokens, "count"),
            "--seed": (args.seed, "seed"),
            "--top-logprobs": (args.top_logprobs, "count0"),
            "--batch-size": (args.batch_size, "count"),
        },
        "sample: ",
    )
    opts = parse_variant(args.variant) if args.variant else TranscriptOptions()
    cond = Condition(
        args.model,
        args.backend,
        args.mode,
        args.temperature,
        engine=args.engine,
        duplicates=args.duplicates,
        **variant_of(opts),
    )
    # the same one-line errors as `tooldecode run` for a mode the backend cannot draw, before any model loads
    channel_of(
        args.mode, args.backend, args.engine, conditioning=opts.conditioning, duplicates=args.duplicates
    )
    server = server_kwargs(args) if args.backend == "openai" else None
    ref = resolve(args.model, fetch=True)
    sc = get_scenario(args.scenario, args.dir)
    trial = Trial(cond, sc, ref=ref)
    prompt = trial.prompt
    params = trial.params(
        top_p=args.top_p, max_new_tokens=args.max_new_tokens, seed=args.seed, top_logprobs=args.top_logprobs
    )
    with ModelCache(batch_size=args.batch_size, server=server) as models:
        be = models.get(args.backend, args.model)
        progress = Progress(f"sample {sc.id} ({args.mode})", args.n, unit="sample")
        progress.log.info(
            "sample: %d draws of %s on %s, up to %d new tokens each",
            args.n,
            sc.id,
            ref.id,
            args.max_new_tokens,
        )
        out = trial.sample(be, args.n, params, batch_size=args.batch_size)
        progress.step(len(out))
    if not args.json:
        print(
            f"model {ref.id} ({args.backend}), scenario {sc.id}, variant {args.variant or 'default'}, "
            f"mode {args.mode}, wire {prompt.wire}, conditioning {opts.conditioning}"
        )
    for s in out:
        v = trial.score(s)
        if args.json:
            rec = s.to_json()
            rec["verdict"] = v.verdict
            rec["invented_keys"] = v.invented_keys
            print(json.dumps(rec, ensure_ascii=False))
            continue
        inv = ", ".join(f"{k['key']} at {k['path']}" for k in v.invented_keys)
        extra = f" ({inv})" if inv else (f" ({s.error})" if s.error else "")
        n_tok = len(s.token_ids) if s.token_ids is not None else len(s.extra.get("tokens") or [])
        print(f"\n--- sample {s.index}: {v.verdict}{extra}, {n_tok} tokens, {s.finish_reason}")
        print((prompt.prefill + s.text) if args.show_prefill else s.text)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``sample`` to the command line."""
    from tooldecode.engines import ENGINES

    p = add_command(sub, "sample", _cmd_sample)
    p.add_argument("--scenario", required=True, help="scenario id (see `tooldecode scenarios list`)")
    add_scenario_dir_option(p)
    add_model_option(p)
    add_backend_option(p)
    add_server_arguments(p)
    p.add_argument(
        "--variant",
        default="",
        help="transcript variant words, e.g. agentic,gold-prefix (see docs/prompts.md)",
    )
    from tooldecode.records import MODES

    p.add_argument(
        "--mode",
        default="loose",
        choices=list(MODES),
        help="strict: every object closed; strict-spec: the schema as written; strict-aligned: masked "
        "particles resampled by importance weight; strict-prefix: a masked token's mass moved to its longest "
        "allowed token prefix; tools-strict / tools-loose: chat completions with tools=[...] on a server "
        "(the modes of `tooldecode run`)",
    )
    from tooldecode.grammar import DUPLICATES

    p.add_argument(
        "--duplicates",
        default="forbid",
        choices=list(DUPLICATES),
        help="with --mode strict-spec: whether the open grammar admits a key its object already has",
    )
    p.add_argument(
        "--engine",
        default="xgrammar",
        choices=list(ENGINES),
        metavar="ENGINE",
        help="strict channel (with a strict mode): "
        + ", ".join(f"{e.name} ({e.library}, {e.setting})" for e in ENGINES.values())
        + " (see docs/engines.md)",
    )
    p.add_argument("-n", type=int, default=4, help="number of samples")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--top-logprobs", type=int, default=20)
    p.add_argument(
        "--batch-size", type=int, default=None, help="parallel sequences (default: from the backend)"
    )
    add_switch(p, "--show-prefill", "print the forced prefill before each sample")
    add_switch(p, "--json", "one JSON record per sample (with its verdict)")
