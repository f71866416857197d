"""``tooldecode rescore RUN ...``, ``tooldecode runs list [DIR]``, ``runs extend RUN`` and ``runs ended RUN``."""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from tooldecode.cli.options import add_command
from tooldecode.errors import RunError
from tooldecode.runs import MANIFEST, SAMPLES, load_run


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "rescore", cmd_rescore)
    p.add_argument("runs", nargs="+", metavar="RUN", help="run directory, e.g. runs/e1-loose")

    runs = sub.add_parser("runs", help="inspect run directories")
    runs_sub = runs.add_subparsers(dest="runs_command", metavar="ACTION")
    ls = add_command(runs_sub, "list", cmd_runs_list, help="list runs: name, samples, model, created")
    ls.add_argument("dir", nargs="?", default="runs", metavar="DIR", help="folder of runs (default: ./runs)")

    ext = add_command(
        runs_sub,
        "extend",
        cmd_runs_extend,
        help="continue a run's cut draws to a larger cap: would they have ended? (the run is only read)",
    )
    ext.add_argument("run", metavar="RUN", help="run directory, e.g. runs/e17-strict-cost-base")
    ext.add_argument(
        "--cap", type=int, required=True, help="the total token cap to continue to (above the run's)"
    )
    ext.add_argument(
        "--out", required=True, help="folder of the continued draws (extended.jsonl, extend.json)"
    )
    ext.add_argument(
        "--modes",
        nargs="+",
        metavar="MODE",
        help="only these arms' modes (default: loose strict strict-prefix)",
    )
    ext.add_argument("--levels", nargs="+", metavar="LEVEL", help="only these levels (L1, L2, ...)")
    ext.add_argument("--spec", help="the run's spec file (default: the one its manifest's command names)")
    ext.add_argument(
        "--slots", type=int, help="sequences decoded at once (default: one per cut draw, at most 16)"
    )
    ended = add_command(
        runs_sub,
        "ended",
        cmd_runs_ended,
        help="per arm: the share of draws that ended before the cap (the cap rule asks 95%%)",
    )
    ended.add_argument("run", metavar="RUN", help="run directory")
    ended.add_argument(
        "--extended", metavar="DIR", help="an extension folder of the run (tooldecode runs extend)"
    )

    def runs_help(args: argparse.Namespace) -> int:
        runs.print_help()
        return 2

    runs.set_defaults(func=runs_help)


def cmd_rescore(args: argparse.Namespace) -> int:
    """score the raw samples of runs again (writes verdicts-<scorer version>.jsonl)

    Score every raw sample of each run with the current scorer and write verdicts-<scorer
    version>.jsonl beside it. Raw files are only read.
    """
    for run_path in args.runs:
        run = load_run(run_path, rescore=True)
        counts = Counter(str(v.verdict) for v in run.verdicts.values())
        total = sum(counts.values())
        summary = ", ".join(f"{verdict} {n}" for verdict, n in counts.most_common()) or "no samples"
        print(run.verdict_file)
        print(f"  {total} samples: {summary}")
    return 0


def cmd_runs_extend(args: argparse.Namespace) -> int:
    """continue a run's cut draws to a larger cap

    Each draw the run cut at its cap continues from its own tokens, with the same prompt, channel and
    mask, up to --cap tokens in all, into --out/extended.jsonl; then the table of `runs ended`.
    """
    from tooldecode.experiments.extend import extend_cut

    if args.cap < 1:
        raise RunError(f"--cap {args.cap}: give a positive number of tokens")
    modes = args.modes or ["loose", "strict", "strict-prefix"]
    extend_cut(
        args.run, args.cap, args.out, modes=modes, levels=args.levels, spec_path=args.spec, slots=args.slots
    )
    return _print_ended(args.run, args.out)


def cmd_runs_ended(args: argparse.Namespace) -> int:
    """per arm: the share of draws that ended before the cap

    The share of each arm's draws that ended on their own (a stop, not the cap), and whether it reaches
    the 95% a run needs (tooldecode.distortion.caps); with --extended, also within the extension's cap.
    """
    return _print_ended(args.run, args.extended)


def _print_ended(run_path: str, extended: str | None) -> int:
    from tooldecode.distortion.caps import MIN_ENDED
    from tooldecode.experiments.extend import ended_at_cap, read_extended

    need = f"{100 * MIN_ENDED:.0f}%"
    if extended is not None and not Path(extended).is_dir():
        raise RunError(f"--extended {extended}: no such folder; give the --out of `tooldecode runs extend`")
    run = load_run(run_path)
    table = ended_at_cap(run, read_extended(extended) if extended else [])
    cap = run.manifest.get("config", {}).get("max_new_tokens")
    print(f"{run.name}: draws that ended on their own, per arm (a run needs >= {need} in every arm)")
    for arm, r in sorted(table.items()):
        line = f"  {arm}: {r['ended']}/{r['n']} = {100 * r['ended_share']:.1f}% at {cap}"
        line += "" if r["meets"] else f" (below {need})"
        if r["continued"]:
            line += (
                f"; {r['ended_later']} of {r['continued']} cut draws ended by {r['cap']} "
                f"({r['works_later']} of them a call that works): "
                f"{100 * r['ended_share_at_cap']:.1f}% at {r['cap']}"
                + ("" if r["meets_at_cap"] else f" (below {need})")
            )
        print(line)
    return 0


def _count_lines(path: Path) -> int:
    n = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            n += chunk.count(b"\n")
    return n


def _model_of(manifest: dict) -> str:
    model = manifest.get("model")
    if isinstance(model, dict) and model.get("id"):
        return str(model["id"])
    config = manifest.get("config")
    if isinstance(config, dict):
        for key in ("model", "models"):
            value = config.get(key)
            if isinstance(value, str):
                return value
            if isinstance(value, list) and value:
                return ",".join(str(v) for v in value)
    return "-"


def cmd_runs_list(args: argparse.Namespace) -> int:
    root = Path(args.dir)
    if not root.is_dir():
        raise RunError(f"no runs folder {root}; pass the folder that holds the runs (default ./runs)")
    rows = [("name", "samples", "model", "created")]
    for d in sorted(p for p in root.iterdir() if (p / MANIFEST).is_file()):
        try:
            manifest = json.loads((d / MANIFEST).read_text(encoding="utf-8"))
            if not isinstance(manifest, dict):
                raise ValueError
        except (OSError, ValueError, RecursionError):  # ValueError: also bad UTF-8, huge integers
            rows.append((d.name, "?", "(unreadable manifest)", "-"))
            continue
        samples = d / SAMPLES
        n = str(_count_lines(samples)) if samples.is_file() else "?"
        rows.append((d.name, n, _model_of(manifest), str(manifest.get("created", "-"))))
    if len(rows) == 1:
        print(f"no runs in {root}")
        return 0
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for r in rows:
        cells = [c.rjust(w) if i == 1 else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))]
        print("  ".join(cells).rstrip())
    return 0
