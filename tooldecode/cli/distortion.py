"""`tooldecode distortion RUN_DIR`: how far each strict arm's masked samples are from the model
conditioned on validity (importance weights from the stored mask data), against the loose arm's
grammar-valid samples as the exact reference. `tooldecode decision RUN...`: the exact decision table
after the gold newText (a run of a spec with a ``[decision]`` table), set against sampled runs."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from tooldecode.cli.options import add_command, add_switch


def _cmd_distortion(args: argparse.Namespace) -> int:
    """per strict arm: P(valid), KL(Q‖P_L) in nats, ESS, and the check against loose grammar-valid
    samples"""
    from tooldecode.distortion import analyse_run, reference_validity
    from tooldecode.validate import check_options

    check_options({"--n-boot": (args.n_boot, "count")}, "distortion: ")
    run_dir = Path(args.run_dir)
    if not (run_dir / "manifest.json").exists():
        from tooldecode.distortion import DistortionError

        raise DistortionError(f"{run_dir} is not a run directory (no manifest.json); pass runs/<name>")
    validity = None if args.no_reference else reference_validity(run_dir)
    results = analyse_run(run_dir, validity=validity, n_boot=args.n_boot, target=args.target)
    if args.json:
        print(json.dumps([r.to_dict() for r in results], ensure_ascii=False, indent=1))
        return 0
    for r in results:
        print(format_arm(r))
    return 0


def format_arm(r) -> str:  # noqa: ANN001 - ArmDistortion
    """The human-readable block of one arm (``name: value`` lines)."""
    lines = [f"arm: {r.arm}", f"  target: {r.target}"]
    lines.append(
        f"  n: {r.n} masked samples over {r.n_scenarios} scenarios "
        f"({r.n_errors} errors excluded, {r.n_truncated} cut at the token cap, {r.n_censored} with censored weights)"
    )
    lines.append(f"  p_valid: {r.p_valid.fmt(4)}  (E_Q[w]; {r.p_valid.kind})")
    lines.append(f"  kl_q_pl: {r.kl_q_pl.fmt(3)} nats  (log E_Q[w] − E_Q[log w])")
    lines.append(f"  kl_pl_q: {r.kl_pl_q.fmt(3)} nats")
    lines.append(f"  kl_q_pl_per_scenario_mean: {r.kl_q_pl_scenario_mean.fmt(3)} nats")
    lines.append(f"  ess: {r.ess:.1f} of {r.n_weights} weights ({100 * r.ess / max(r.n_weights, 1):.1f}%)")
    if r.particles is not None:
        lines.append(
            f"  cost: {r.particles:.1f} masked draws, {r.tokens_per_sample:.0f} tokens per strict-aligned sample"
        )
    for name in r.rates_q:
        q, pl = r.rates_q[name], r.rates_pl[name]
        pct = name != "extra chars"
        lines.append(f"  {name}: strict (Q) {q.fmt(3, pct)}; reweighted to P_L {pl.fmt(3, pct)}")
    if r.reference_arm and r.n_reference_valid is None:
        lines.append(
            f"  reference: {r.reference_arm} — {r.n_reference} loose samples, not replayed (--no-reference): "
            "how many are valid under this arm's grammar is unknown"
        )
    elif r.reference_arm:
        lines.append(
            f"  reference: {r.reference_arm} — {r.n_reference_valid}/{r.n_reference} loose samples valid "
            "under this arm's grammar (rejection sampling: exact draws of P_L)"
        )
    src = "aligned samples" if r.mode == "strict-aligned" else "strict reweighted"
    for c in r.checks:
        pct = c.name != "extra chars"
        verdict = {True: "agree", False: "DISAGREE", None: "no reference sample"}[c.agree]
        lines.append(
            f"  check {c.name}: {src} {c.strict_sn.fmt(3, pct)} vs reference {c.reference.fmt(3, pct)}"
            f" (n_ref {c.n_reference}); difference {c.diff.fmt(3, pct)} → {verdict}"
        )
    for note in r.notes:
        lines.append(f"  note: {note}")
    return "\n".join(lines)


def _cmd_decision(args: argparse.Namespace) -> int:
    """the decision table at L2: per model and policy, the exact outcome probabilities after the gold
    newText

    Reads the decision.jsonl of each run (a spec with a [decision] table, e.g.
    experiments/e20_decision_l2.toml) and prints, per model, one row per policy: P(correct), P(close),
    P(the string goes on), P(an invented key), P(other) and the undetermined mass, each the mean over
    scenarios with a 95% t interval over scenarios, and P(correct) against loose's, paired over
    scenarios. With --sampled, the exact probabilities next to the rates sampled in E17/E18 runs (L2).
    """
    from tooldecode.distortion import DistortionError
    from tooldecode.distortion.decision import DecisionRow, read_decision_rows
    from tooldecode.distortion.decision_table import (
        compare_sampled,
        decision_table,
        format_comparison,
        format_decision_table,
        plot_comparison,
        with_draw_validity,
        with_goes_on_validity,
    )
    from tooldecode.validate import check_options

    check_options({"--goes-on-valid": (args.goes_on_valid, "share")}, "decision: ")
    rows: list[DecisionRow] = []
    for run in args.runs:
        path = Path(run)
        if not (path / "decision.jsonl").is_file():
            raise DistortionError(
                f"{path} has no decision.jsonl; run a spec with a [decision] table into it first "
                "(tooldecode run experiments/e20_decision_l2.toml --out runs/<name>)"
            )
        rows += read_decision_rows(path)
    if args.goes_on_valid is not None and args.valid_from:
        raise DistortionError(
            "decision: --goes-on-valid and --valid-from both set strict-aligned's validity; give one of them"
        )
    for run in args.valid_from:
        if not (Path(run) / "samples.jsonl").is_file():
            raise DistortionError(
                f"decision: --valid-from {run}: no samples.jsonl there; give a sampled run folder"
            )
    if args.valid_from:
        rows = with_draw_validity(rows, [Path(r) for r in args.valid_from])
    if args.goes_on_valid is not None:
        rows = [
            with_goes_on_validity(r, args.goes_on_valid) if r.policy == "strict-aligned" else r for r in rows
        ]
    if args.json:
        for r in rows:
            print(json.dumps(r.to_json(), ensure_ascii=False))
        return 0
    print(format_decision_table(decision_table(rows)))
    if args.sampled:
        comparison = compare_sampled(rows, [Path(r) for r in args.sampled])
        print(format_comparison(comparison))
        if args.figure:
            saved = plot_comparison(comparison, args.figure)
            print(f"figure: {saved}" if saved else "figure: matplotlib is not installed; the table above")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    d = add_command(sub, "decision", _cmd_decision)
    d.add_argument("runs", nargs="+", metavar="RUN", help="run folders holding decision.jsonl")
    d.add_argument(
        "--sampled",
        nargs="*",
        default=[],
        metavar="RUN",
        help="E17/E18 runs to set the sampled L2 rates against",
    )
    d.add_argument("--figure", type=Path, help="with --sampled: save exact against sampled as this image")
    d.add_argument(
        "--valid-from",
        nargs="*",
        default=[],
        metavar="RUN",
        help="strict-aligned from loose's exact masses and the share of these runs' loose L2 draws in each "
        "bucket that ended valid (per model, the run with the most such draws)",
    )
    d.add_argument(
        "--goes-on-valid",
        type=float,
        default=None,
        help="strict-aligned: the share of goes-on continuations taken to complete validly (default: as computed)",
    )
    add_switch(d, "--json", "the rows as JSON lines")
    p = add_command(sub, "distortion", _cmd_distortion)
    p.add_argument(
        "run_dir", help="a run directory (runs/<name>) with a strict arm (and a loose arm as reference)"
    )
    add_switch(p, "--json", "all figures as JSON")
    add_switch(
        p,
        "--no-reference",
        "skip replaying loose samples through the strict grammar (no model load, no checks)",
    )
    p.add_argument("--n-boot", type=int, default=2000, help="bootstrap replicates over scenarios")
    p.add_argument(
        "--target",
        choices=["prefix", "complete"],
        default="prefix",
        help="what counts as valid under the token cap: a viable prefix (default) or a call completed "
        "within the cap (docs/distortion.md)",
    )
