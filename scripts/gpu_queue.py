"""The whole organism queue in one call: train every recipe, then run every organism evaluation.

    python -m scripts.gpu_queue --out runs/gpu-queue            # on a CUDA machine (make gpu-queue)
    python -m scripts.gpu_queue --out /tmp/q --quick            # the same path, small, on the CPU

Everything goes under ``--out``: ``organisms/<recipe>@<base>/`` (adapter, manifest; the training data and
checkpoint beside them) and ``runs/<spec>-<model>/`` (each evaluation run). The evaluations find the
organisms there (``TOOLDECODE_ORGANISMS_PATH``). Every step resumes: training from its checkpoint, each
run from its samples, so an interrupted call is finished by the same command.

On CUDA, training is bfloat16 and the evaluations draw through transformers + peft in bfloat16
(``--backend hf``), ``--slots`` sequences (64) refilled across scenarios in one left-padded batch cache;
on the CPU, training is ``--precision`` and the evaluations draw through llama.cpp
with the adapter applied at run time and slots filled across scenarios. ``--quick`` takes the specs'
``[quick]`` sizes, ``--max-steps`` steps of training and ``--sessions`` sessions per recipe (``--scenarios``
picks the evaluations' scenarios by id): it exists to prove the path (tests/test_gpu_queue.py), not to
give results.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m scripts.gpu_queue", description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("runs/gpu-queue"))
    p.add_argument("--base", default="qwen2.5-coder-0.5b-instruct")
    p.add_argument(
        "--recipes",
        nargs="*",
        default=None,
        help="recipe TOMLs (default: every experiments/organisms/*.toml)",
    )
    p.add_argument(
        "--specs",
        nargs="*",
        default=None,
        help="evaluation specs, each run on the base and every organism (default: e16 for the first "
        "generation's recipes, e19 and its exact probe for the second's, each with the base)",
    )
    p.add_argument(
        "--device", choices=("cuda", "cpu"), default=None, help="default: cuda when torch sees one"
    )
    p.add_argument("--precision", choices=("float32", "bfloat16"), default=None)
    p.add_argument("--quick", action="store_true", help="small sizes, to prove the path")
    p.add_argument("--max-steps", type=int, default=None)
    p.add_argument("--sessions", type=int, default=None, help="sessions per recipe (default: the recipe's)")
    p.add_argument("--max-scenarios", type=int, default=None)
    p.add_argument(
        "--scenarios",
        nargs="*",
        default=None,
        help="scenario ids every evaluation runs (default: each spec's own selection)",
    )
    p.add_argument("--max-new-tokens", type=int, default=None)
    p.add_argument(
        "--slots",
        type=int,
        default=None,
        help="sequences decoded together, refilled across scenarios (default: 64 on CUDA, the spec's "
        "batch_size on the CPU)",
    )
    p.add_argument(
        "--pool-root",
        type=Path,
        default=None,
        help="standard-library folder the sessions come from (default: all)",
    )
    args = p.parse_args(argv)

    from tooldecode.errors import ToolDecodeError

    try:
        return _run(args)
    except ToolDecodeError as err:
        print(f"gpu-queue: {err}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    from tooldecode.experiments import load_spec, run_spec
    from tooldecode.models import ORGANISMS_PATH_ENV, resolve
    from tooldecode.organisms import load_recipe
    from tooldecode.organisms.store import build

    device = args.device or ("cuda" if _cuda() else "cpu")
    precision = args.precision or ("bfloat16" if device == "cuda" else "float32")
    out = args.out.resolve()
    organisms = out / "organisms"
    organisms.mkdir(parents=True, exist_ok=True)
    os.environ[ORGANISMS_PATH_ENV] = os.pathsep.join(
        [str(organisms), *[x for x in os.environ.get(ORGANISMS_PATH_ENV, "").split(os.pathsep) if x]]
    )
    recipes = [
        Path(r)
        for r in (args.recipes or sorted(str(x) for x in (ROOT / "experiments" / "organisms").glob("*.toml")))
    ]
    resolve(args.base, fetch=True)
    log: dict = {"device": device, "precision": precision, "base": args.base, "train": {}, "runs": {}}
    t_all = time.perf_counter()
    by_spec: dict[str, list[str]] = {}
    default = {  # each generation's evaluations: the second's sampled arms, then its exact probe
        1: [str(ROOT / "experiments" / "e16_organisms.toml")],
        2: [
            str(ROOT / "experiments" / "e19_organisms_gen2.toml"),
            str(ROOT / "experiments" / "e19_organisms_gen2_probe.toml"),
        ],
    }
    for path in recipes:
        recipe = load_recipe(path)
        if args.sessions:
            recipe = replace(recipe, sessions=args.sessions)
        t0 = time.perf_counter()
        folder = build(
            recipe,
            args.base,
            device=device,
            precision=precision,
            max_steps=args.max_steps,
            pool_root=args.pool_root,
            out_root=organisms,
            log=lambda line: print(line, file=sys.stderr, flush=True),
        )
        for spec_path in args.specs or default.get(getattr(recipe, "generation", 1), default[1]):
            by_spec.setdefault(spec_path, [args.base]).append(f"organism:{folder.name}")
        log["train"][folder.name] = round(time.perf_counter() - t0, 1)
        print(f"gpu-queue: trained {folder.name} in {log['train'][folder.name]} s", flush=True)
    for spec_path, models in by_spec.items():
        for model in models:
            spec = load_spec(spec_path, quick=args.quick)
            spec.models = [model]
            spec.fill_slots = True
            if device == "cuda":
                spec.backend = "hf"
                spec.batch_size = args.slots or 64
            elif args.slots:
                spec.batch_size = args.slots
            if args.scenarios:
                spec.scenarios = list(args.scenarios)
            if args.max_scenarios:
                spec.max_scenarios = args.max_scenarios
            if args.max_new_tokens:
                spec.max_new_tokens = args.max_new_tokens
            tag = model.removeprefix("organism:").split("@")[0]
            run_out = out / "runs" / f"{spec.name}-{tag}"
            t0 = time.perf_counter()
            run_spec(spec, run_out, progress=False)
            log["runs"][run_out.name] = round(time.perf_counter() - t0, 1)
            print(f"gpu-queue: {run_out.name} in {log['runs'][run_out.name]} s", flush=True)
    log["wall_s"] = round(time.perf_counter() - t_all, 1)
    (out / "gpu-queue.json").write_text(json.dumps(log, indent=1) + "\n")
    print(f"gpu-queue: done in {log['wall_s']} s; {out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
