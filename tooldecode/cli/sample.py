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
    from tooldecode.backends import load_backend
    from tooldecode.cli import Progress
    from tooldecode.cli.server_flags import check_server_flags
    from tooldecode.engines import build_strict, check_engine, draw
    from tooldecode.experiments.spec import check_options
    from tooldecode.models import resolve
    from tooldecode.prompts import TranscriptOptions, parse_variant, render_prompt
    from tooldecode.sampling import SamplingParams
    from tooldecode.scenarios import get_scenario
    from tooldecode.scoring import score_text

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
    strict = args.mode in ("strict", "strict-prefix")
    if args.mode == "strict-prefix" and args.backend == "openai":
        from tooldecode.errors import MaskError

        raise MaskError("--mode strict-prefix needs the full logits; use --backend llamacpp or hf")
    if strict and args.backend != "openai":
        check_engine(args.engine, backend=args.backend, modes=[args.mode])  # before any model loads
    ref = resolve(args.model, fetch=True)
    sc = get_scenario(args.scenario, args.dir)
    opts = parse_variant(args.variant) if args.variant else TranscriptOptions()
    prompt = render_prompt(sc, ref, opts)
    kw = {"n_ctx": 8192, "max_seqs": 33} if args.backend == "llamacpp" else {}
    if args.backend == "openai":
        from tooldecode.cli.server_flags import server_kwargs

        kw = server_kwargs(args)
    be = load_backend(args.backend, ref, **kw)
    mask = None
    if strict and args.backend != "openai":
        # an engine setting: tooldecode's grammar or the engine's own JSON-schema mode (or its own sampler)
        mask = build_strict(args.engine, prompt.tools, prompt.wire, be, mode=args.mode, ws="bounded")
        if args.mode == "strict-prefix":  # a masked token's mass moved to its longest allowed token prefix
            from tooldecode.masking import prefix_keeping

            mask = prefix_keeping(mask, be)
    params = SamplingParams(
        temperature=args.temperature,
        top_p=args.top_p,
        max_new_tokens=args.max_new_tokens,
        stop=tuple(prompt.stop),
        seed=args.seed,
        top_logprobs=args.top_logprobs,
    )
    progress = Progress(f"sample {sc.id} ({args.mode})", args.n, unit="sample")
    progress.log.info(
        "sample: %d draws of %s on %s, up to %d new tokens each", args.n, sc.id, ref.id, args.max_new_tokens
    )
    if args.backend == "openai":
        # the server's own strict mode (its grammar field) with tooldecode's strict GBNF; --engine unused
        grammar = None
        if args.mode == "strict":
            from tooldecode.grammar import render_toolset

            grammar = render_toolset(
                list(prompt.tools), format="gbnf", wire=prompt.wire, mode="strict", ws="bounded"
            )
        out = be.sample(prompt.text, args.n, params, grammar=grammar, prefill=prompt.prefill)
    else:
        out = draw(
            be, prompt.text, args.n, params, mask=mask, prefill=prompt.prefill, batch_size=args.batch_size
        )
    progress.step(len(out))
    if not args.json:
        print(
            f"model {ref.id} ({args.backend}), scenario {sc.id}, variant {args.variant or 'default'}, "
            f"mode {args.mode}, wire {prompt.wire}, conditioning {opts.conditioning}"
        )
    for s in out:
        v = score_text(
            prompt.prefill + s.text,
            list(prompt.tools),
            wire=prompt.wire,
            expected_tool=prompt.expected_tool,
            scenario=sc,
            finish_reason=s.finish_reason,
        )
        if args.json:
            rec = s.to_record()
            rec["prefill"] = prompt.prefill
            rec["verdict"] = v.verdict
            rec["invented_keys"] = v.invented_keys
            print(json.dumps(rec, ensure_ascii=False))
            continue
        inv = ", ".join(f"{k['key']} at {k['path']}" for k in v.invented_keys)
        extra = f" ({inv})" if inv else (f" ({s.error})" if s.error else "")
        n_tok = len(s.token_ids) if s.token_ids is not None else len(getattr(s, "tokens", None) or [])
        print(f"\n--- sample {s.index}: {v.verdict}{extra}, {n_tok} tokens, {s.finish_reason}")
        print((prompt.prefill + s.text) if args.show_prefill else s.text)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``sample`` to the command line."""
    from tooldecode.engines import ENGINES

    p = add_command(
        sub,
        "sample",
        _cmd_sample,
        help="sample a scenario's edit call (loose or strict) and score each sample",
    )
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
    p.add_argument(
        "--mode",
        default="loose",
        choices=["loose", "strict", "strict-prefix"],
        help="strict-prefix: strict, with a masked token's mass moved to its longest allowed token prefix",
    )
    p.add_argument(
        "--engine",
        default="xgrammar",
        choices=list(ENGINES),
        metavar="ENGINE",
        help="strict channel (with --mode strict): "
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
