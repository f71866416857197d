"""Cost of the strict-aligned sampler, measured side by side in one run (ratios are the result).

On an L2 prompt (gold call forced through newText's content) of Qwen2.5-Coder 0.5B, llama.cpp backend:
- samples/s of loose, strict and strict-aligned (importance resampling, 8 particles; and E14's exact
  rejection sampler, rounds of 8 particles, prefix target, with its masked draws per sample) and the
  ratios strict-aligned ÷ strict and strict ÷ loose;
- how the cost of strict-aligned grows with the number of particles (1, 2, 4, 8, 16): seconds per
  aligned sample and its ratio to particles=1 (ideal: linear in the particle count, less where the
  particles of several samples share a batch), with the particles' mean ESS fraction beside it.

With ``--adaptive`` instead: masked draws per accepted sample of plain exact rejection (rounds of 8
masked particles, at most 16 rounds, each accepted with probability w) against the adaptive exact sampler (walks of the
model with the mass known to be invalid removed, learned from each rejection), same prompts, same cap,
the ``complete`` target (a call completed within the cap), per scenario and pooled.

With ``--queue`` instead: the adaptive sampler one walk at a time, request by request (``sample_adaptive``,
as strict-aligned drew before) against the same requests' walks sharing decode steps in slots
(``sample_adaptive_queue``, what a ``fill_slots`` run does): E17's L2 prompts (agentic, gold-prefix) of
the given scenarios, the ``prefix`` target at ``--tokens`` (so a walk's length is bounded), ``--samples``
outputs each. Prints walk tokens per second of each, the ratios ``queue_vs_one_by_one_tokens_per_s`` and
``_seconds``, and the share of outputs that are the same draw (text and walks) both ways.

Prints `name: value` lines. Usage: python benchmarks/bench_distortion.py [--quick] [--samples 16]
       python benchmarks/bench_distortion.py --adaptive --model smollm2-135m-instruct --samples 4 [--toy]
       python benchmarks/bench_distortion.py --queue --samples 2 --tokens 128 --batch 8
"""

from __future__ import annotations

import argparse
import time

from tooldecode.backends import load_backend
from tooldecode.grammar import render_toolset
from tooldecode.masking import compile_mask
from tooldecode.models import resolve
from tooldecode.prompts import TranscriptOptions, render_prompt
from tooldecode.sampling import SamplingParams, sample, sample_aligned
from tooldecode.scenarios import get_scenario


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="few samples, particles up to 4 (checks it runs)")
    ap.add_argument("--samples", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--model", default="qwen2.5-coder-0.5b-instruct")
    ap.add_argument("--scenario", default="py-pagination-off-by-one")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--adaptive", action="store_true", help="plain vs adaptive exact rejection (see above)")
    ap.add_argument(
        "--toy",
        action="store_true",
        help="with --adaptive: the four-string grammar of tests/test_distortion_exact.py instead of scenarios",
    )
    ap.add_argument(
        "--scenarios",
        default="py-pagination-off-by-one,c-config-trim-crlf,toml-entry-point-colon",
        help="comma-separated scenario ids (--adaptive)",
    )
    ap.add_argument("--queue", action="store_true", help="adaptive one by one vs in shared slots (see above)")
    args = ap.parse_args()
    if args.queue:
        adaptive_queue_vs_one_by_one(args)
        return
    if args.adaptive:
        adaptive_vs_plain(args)
        return
    n = 2 if args.quick else args.samples
    particle_counts = (1, 2, 4) if args.quick else (1, 2, 4, 8, 16)
    ref = resolve(args.model, fetch=True)
    prompt = render_prompt(
        get_scenario(args.scenario),
        ref,
        TranscriptOptions(history="agentic", toolset="nested", conditioning="gold-prefix"),
    )
    be = load_backend("llamacpp", ref, n_ctx=8192, max_seqs=max(args.batch, 16) + 1)
    grammar = render_toolset(list(prompt.tools), format="gbnf", wire=prompt.wire, mode="strict", ws="bounded")
    mask = compile_mask("xgrammar", grammar, be)
    params = SamplingParams(max_new_tokens=args.tokens, stop=tuple(prompt.stop), seed=0, top_logprobs=0)
    common = {"prefill": prompt.prefill, "batch_size": args.batch}
    # warm the prompt cache once so every mode starts from the same state
    sample(be, prompt.text, 1, params, mask=mask, **common)

    def timed(fn) -> tuple[list, float]:
        t0 = time.perf_counter()
        out = fn()
        return out, time.perf_counter() - t0

    loose, t_loose = timed(lambda: sample(be, prompt.text, n, params, **common))
    strict, t_strict = timed(lambda: sample(be, prompt.text, n, params, mask=mask, **common))
    aligned, t_al = timed(
        lambda: sample_aligned(be, prompt.text, n, params, mask=mask, particles=8, **common)
    )
    # E14's sampler: exact rejection, rounds of 8 masked particles (at most 8 rounds), prefix target
    rej, t_rej = timed(
        lambda: sample_aligned(
            be, prompt.text, n, params, mask=mask, particles=8, method="rejection", max_rounds=8,
            target="prefix", **common,
        )
    )  # fmt: skip
    print(f"model: {args.model}")
    print(f"samples_per_mode: {n}")
    print(f"loose_samples_per_s: {n / t_loose:.3f}")
    print(f"strict_samples_per_s: {n / t_strict:.3f}")
    print(f"strict_aligned_p8_samples_per_s: {n / t_al:.3f}")
    print(f"strict_over_loose_time: {t_strict / t_loose:.3f}")
    print(f"strict_aligned_p8_over_strict_time: {t_al / t_strict:.3f}")
    print(f"strict_aligned_rejection_samples_per_s: {n / t_rej:.3f}")
    print(f"strict_aligned_rejection_over_strict_time: {t_rej / t_strict:.3f}")
    print(f"strict_aligned_rejection_draws_per_sample: {sum(s.particles['drawn'] for s in rej) / n:.1f}")
    print(f"loose_mean_tokens: {sum(len(s.token_ids) for s in loose) / n:.1f}")
    print(f"strict_mean_tokens: {sum(len(s.token_ids) for s in strict) / n:.1f}")
    print(f"strict_aligned_p8_tokens_per_sample: {sum(s.particles['tokens'] for s in aligned) / n:.1f}")
    base = None
    for k in particle_counts:
        out, t = timed(
            lambda k=k: sample_aligned(be, prompt.text, n, params, mask=mask, particles=k, **common)
        )
        per = t / n
        base = base or per
        ess = sum(s.particles["ess"] / k for s in out) / n
        print(f"aligned_s_per_sample_p{k}: {per:.3f}")
        print(f"aligned_cost_ratio_p{k}_over_p1: {per / base:.2f}")
        print(f"aligned_ess_fraction_p{k}: {ess:.3f}")
    be.close()


TOY_PROMPT = "<|im_start|>user\nIs the sky blue? Answer in one word.<|im_end|>\n<|im_start|>assistant\n"
TOY_GRAMMAR = 'root ::= "Yes" | "No" | "Yes." | "No."'


def adaptive_vs_plain(args: argparse.Namespace) -> None:
    """Masked draws (plain rejection) and walks (adaptive) per accepted sample, per scenario and pooled."""
    ref = resolve(args.model, fetch=True)
    be = load_backend("llamacpp", ref, n_ctx=8192, max_seqs=max(args.batch, 16) + 1)
    n = 2 if args.quick else args.samples
    opts = TranscriptOptions(history="agentic", toolset="nested", conditioning="gold-prefix")
    tot = {"plain": [0, 0, 0, 0.0], "adaptive": [0, 0, 0, 0.0]}  # draws, tokens, accepted, seconds
    print(f"model: {args.model}")
    print(f"max_new_tokens: {args.tokens}")
    print(f"samples_per_scenario: {n}")
    for sid in ["yes-no"] if args.toy else args.scenarios.split(","):
        if args.toy:
            text, prefill, stop = TOY_PROMPT, "", ()
            mask = compile_mask("xgrammar", TOY_GRAMMAR, be)
        else:
            prompt = render_prompt(get_scenario(sid), ref, opts)
            g = render_toolset(
                list(prompt.tools), format="gbnf", wire=prompt.wire, mode="strict", ws="bounded"
            )
            mask = compile_mask("xgrammar", g, be)
            text, prefill, stop = prompt.text, prompt.prefill, tuple(prompt.stop)
        params = SamplingParams(max_new_tokens=args.tokens, stop=stop, seed=0, top_logprobs=0)
        for method in ("plain", "adaptive"):
            t0 = time.perf_counter()
            out = sample_aligned(
                be, text, n, params, mask=mask, prefill=prefill, particles=8,
                method="rejection" if method == "plain" else "adaptive", max_rounds=16, target="complete",
                batch_size=args.batch,
            )  # fmt: skip
            dt = time.perf_counter() - t0
            ok = sum(1 for s in out if s.error is None)
            draws = sum(s.particles["drawn"] for s in out)
            tokens = sum(s.particles["tokens"] for s in out)
            for k, v in zip(range(4), (draws, tokens, ok, dt), strict=True):
                tot[method][k] += v
            per = f"{draws / ok:.2f}" if ok else f"> {draws} (none accepted)"
            print(f"{sid}.{method}_masked_draws_per_accepted_sample: {per}")
            print(f"{sid}.{method}_accepted: {ok}/{n}")
            print(f"{sid}.{method}_tokens_per_accepted_sample: {tokens / max(ok, 1):.1f}")
            print(f"{sid}.{method}_s_per_accepted_sample: {dt / max(ok, 1):.2f}")
    for method, (draws, tokens, ok, dt) in tot.items():
        print(f"all.{method}_masked_draws_per_accepted_sample: {draws / max(ok, 1):.2f}")
        print(f"all.{method}_accepted: {ok}")
        print(f"all.{method}_tokens_per_accepted_sample: {tokens / max(ok, 1):.1f}")
        print(f"all.{method}_s_per_accepted_sample: {dt / max(ok, 1):.2f}")
    be.close()


def adaptive_queue_vs_one_by_one(args: argparse.Namespace) -> None:
    """Walk tokens per second of the adaptive sampler request by request vs in shared slots."""
    import os

    from tooldecode.sampling import AdaptiveRequest, sample_adaptive, sample_adaptive_queue

    ref = resolve(args.model, fetch=True)
    be = load_backend("llamacpp", ref, n_ctx=32768, max_seqs=max(args.batch, 16) + 1)
    n = 1 if args.quick else args.samples
    opts = TranscriptOptions(history="agentic", toolset="nested", conditioning="gold-prefix")
    reqs = []
    for k, sid in enumerate(args.scenarios.split(",")):
        prompt = render_prompt(get_scenario(sid), ref, opts)
        g = render_toolset(list(prompt.tools), format="gbnf", wire=prompt.wire, mode="strict", ws="bounded")
        params = SamplingParams(max_new_tokens=args.tokens, stop=tuple(prompt.stop), seed=0, stream=k,
                                top_logprobs=0)  # fmt: skip
        reqs.append(AdaptiveRequest(be.tokenize(prompt.text), n, params, compile_mask("xgrammar", g, be),
                                    prefill=prompt.prefill, target="prefix", max_attempts=128))  # fmt: skip
    print(f"model: {args.model}")
    print(f"load_average_at_start: {os.getloadavg()[0]:.2f}")
    print(f"requests: {len(reqs)}  outputs_each: {n}  max_new_tokens: {args.tokens}  slots: {args.batch}")
    t0 = time.perf_counter()
    alone = [
        sample_adaptive(
            be,
            r.prompt_ids,
            r.n,
            r.params,
            mask=r.mask,
            prefill=r.prefill,
            target=r.target,
            max_attempts=r.max_attempts,
        )  # fmt: skip
        for r in reqs
    ]
    t_alone = time.perf_counter() - t0
    got: dict[int, list] = {k: [] for k in range(len(reqs))}
    for k, r in enumerate(reqs):
        r.on_batch = got[k].extend
    t0 = time.perf_counter()
    sample_adaptive_queue(be, reqs, slots=args.batch)
    t_queue = time.perf_counter() - t0
    tok_alone = sum(s.timing["tokens"] for out in alone for s in out)
    tok_queue = sum(s.timing["tokens"] for out in got.values() for s in out)
    same = sum(
        (a.text, a.timing["attempts"]) == (b.text, b.timing["attempts"])
        for k, out in enumerate(alone)
        for a, b in zip(out, got[k], strict=True)
    )
    print(f"one_by_one_walk_tokens_per_s: {tok_alone / t_alone:.1f}")
    print(f"queue_walk_tokens_per_s: {tok_queue / t_queue:.1f}")
    print(f"one_by_one_s: {t_alone:.1f}")
    print(f"queue_s: {t_queue:.1f}")
    print(f"same_draw_share: {same}/{len(reqs) * n}")
    # the draws differ where a batched step's float order flips a token, and a walk's length with them:
    # the throughput (walk tokens per second) is the comparable figure, the seconds are the run's
    print(f"queue_vs_one_by_one_tokens_per_s: {(tok_queue / t_queue) / (tok_alone / t_alone):.2f}")
    print(f"queue_vs_one_by_one_seconds: {t_alone / t_queue:.2f}")
    be.close()


if __name__ == "__main__":
    main()
