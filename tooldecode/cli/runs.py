"""``tooldecode rescore RUN ...`` and ``tooldecode runs list [DIR]``."""

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
        except (OSError, ValueError):
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
