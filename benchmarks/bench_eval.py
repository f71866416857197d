"""Organism evaluation and training speed, side by side in one run.

Prints `name: value` lines (ratios last):

- `e16_draws_per_s_base`, `e16_draws_per_s_lora`, `e16_draws_per_s_merged_f32`: e16 draws per second
  (a few held-out scenarios, L1/L2 × loose/strict, job by job as the first generation ran) on the base
  GGUF, on the base with an r = 16 adapter applied at run time by llama.cpp, and on the merged float32
  copy the first generation used (the adapter is random: what it costs does not depend on its values);
- `e16_draws_per_s_lora_filled`: the same draws with slots filled across scenarios (`fill_slots`);
- `decode_tokens_per_s_*`: generated tokens per second of each;
- `decode_steps_per_draw_jobs` / `_filled`: decode steps per draw, job by job vs filled slots;
- `prefill_evaluated_vs_nominal_*`: prompt tokens evaluated ÷ prompt tokens the draws asked for;
- `train_tokens_per_s_float32` / `train_tokens_per_s_bfloat16` and `train_loss_max_abs_diff`: LoRA
  training on the same sessions and steps, float32 vs bfloat16 autocast, and the largest difference of
  their per-step losses;
- ratios: `lora_vs_base`, `merged_vs_base`, `lora_vs_merged`, `filled_vs_jobs`, `train_bf16_vs_f32`.

Usage: python benchmarks/bench_eval.py [--model qwen2.5-coder-0.5b-instruct] [--scenarios 3] [--n 4]
       [--max-new-tokens 128] [--train-steps 2] [--skip-train | --train-only]
       [--precisions float32 bfloat16]

Measure on an idle machine: every arm shares the cores. The load average at the start is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _organism(base, root: Path) -> str:
    """A random r = 16 adapter on ``base`` as a resolvable organism under ``root``; its model id."""
    from tooldecode.backends.lora import synthetic_adapter
    from tooldecode.models import cached_sha256

    name = f"bench@{base.id}"
    folder = root / name
    synthetic_adapter(base.path, folder / "adapter")
    manifest = {
        "organism": name,
        "adapter": {
            "folder": "adapter",
            "sha256": cached_sha256(folder / "adapter" / "adapter_model.safetensors"),
        },
        "base_model": {"id": base.id, "sha256": base.digest(), "family": base.family},
    }
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return f"organism:{name}"


def _merged(base, organism_dir: Path, out: Path) -> Path:
    from tooldecode.backends.lora import lora_deltas_from
    from tooldecode.organisms.export import export_gguf

    return export_gguf(base.path, lora_deltas_from(organism_dir / "adapter"), out)


def _e16(model: str, out: Path, args: argparse.Namespace, fill: bool) -> dict:
    from tooldecode.backends import llamacpp
    from tooldecode.experiments import load_spec, run_spec
    from tooldecode.sampling import draw

    spec = load_spec(ROOT / "experiments" / "e16_organisms.toml")
    spec.models = [model]
    spec.max_scenarios = args.scenarios
    spec.n = args.n
    spec.max_new_tokens = args.max_new_tokens
    spec.fill_slots = fill
    for c in (llamacpp.COUNTERS, draw.COUNTERS):
        for k in c:
            c[k] = 0
    t0 = time.perf_counter()
    run_spec(spec, out, progress=False)
    wall = time.perf_counter() - t0
    recs = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    drawn = [r for r in recs if "copy_of" not in r]
    tokens = sum(len(r["token_ids"]) for r in drawn)
    return {
        "draws_per_s": len(recs) / wall,
        "tokens_per_s": tokens / wall,
        "steps_per_draw": llamacpp.COUNTERS["decode_steps"] / max(1, len(drawn)),
        "prefill_ratio": llamacpp.COUNTERS["prompt_tokens"] / max(1, draw.COUNTERS["prompt_tokens_nominal"]),
        "wall_s": wall,
        "draws": len(recs),
    }


def _train(model_id: str, steps: int, precisions: list[str]) -> dict:
    from tooldecode.models import resolve
    from tooldecode.organisms import recipe_from_dict
    from tooldecode.organisms.mutations import snippets, stdlib_dir
    from tooldecode.organisms.sessions import build_sessions, render_session
    from tooldecode.organisms.train import load_base, tokenize, train_lora

    ref = resolve(model_id, fetch=True)
    recipe = recipe_from_dict({"name": "bench", "sessions": 4 * steps, "train": {"accumulation": 4}})
    tok, _ = load_base(ref)
    sessions = build_sessions(recipe, list(snippets(stdlib_dir() / "email")))
    examples = [tokenize(tok, render_session(s, ref, recipe)) for s in sessions]
    out = {}
    for precision in precisions:
        _, model = load_base(ref)
        with tempfile.TemporaryDirectory() as d:
            _, res = train_lora(
                model, examples, recipe, Path(d), max_steps=steps, precision=precision, log=lambda _: None
            )
        out[precision] = res
        # printed as soon as measured: a slow precision killed later leaves the others' lines
        print(f"train_tokens_per_s_{precision}: {res.tokens / res.wall_s:.1f}", flush=True)
        print(f"train_loss_{precision}: {', '.join(f'{x:.4f}' for x in res.losses)}", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="qwen2.5-coder-0.5b-instruct")
    ap.add_argument("--scenarios", type=int, default=3)
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--train-steps", type=int, default=2)
    ap.add_argument("--skip-train", action="store_true")
    ap.add_argument("--train-only", action="store_true", help="only the training part (float32 vs bfloat16)")
    ap.add_argument(
        "--precisions",
        nargs="+",
        choices=("float32", "bfloat16"),
        default=["float32", "bfloat16"],
        help="training precisions to time, in order (the ratio needs both)",
    )
    args = ap.parse_args()

    print(f"load_average_at_start: {os.getloadavg()[0]:.2f}")
    if not args.train_only:
        _eval_part(args)
    if not args.skip_train:
        _train_part(args)
    print(f"load_average_at_end: {os.getloadavg()[0]:.2f}")


def _eval_part(args: argparse.Namespace) -> None:
    from tooldecode.models import ORGANISMS_PATH_ENV, resolve

    base = resolve(args.model, fetch=True)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        os.environ[ORGANISMS_PATH_ENV] = str(root / "organisms")
        organism = _organism(base, root / "organisms")
        merged = _merged(
            base, root / "organisms" / organism.split(":", 1)[1], root / f"{base.id}-merged.gguf"
        )
        res = {
            "base": _e16(base.id, root / "base", args, False),
            "lora": _e16(organism, root / "lora", args, False),
            "merged_f32": _e16(str(merged), root / "merged", args, False),
            "lora_filled": _e16(organism, root / "filled", args, True),
        }
    for name, r in res.items():
        print(f"e16_draws_per_s_{name}: {r['draws_per_s']:.3f}")
        print(f"decode_tokens_per_s_{name}: {r['tokens_per_s']:.2f}")
    print(f"decode_steps_per_draw_jobs: {res['lora']['steps_per_draw']:.2f}")
    print(f"decode_steps_per_draw_filled: {res['lora_filled']['steps_per_draw']:.2f}")
    print(f"prefill_evaluated_vs_nominal_jobs: {res['lora']['prefill_ratio']:.3f}")
    print(f"prefill_evaluated_vs_nominal_filled: {res['lora_filled']['prefill_ratio']:.3f}")
    b = res["base"]["tokens_per_s"]
    print(f"lora_vs_base: {res['lora']['tokens_per_s'] / b:.2f}")
    print(f"merged_vs_base: {res['merged_f32']['tokens_per_s'] / b:.2f}")
    print(f"lora_vs_merged: {res['lora']['draws_per_s'] / res['merged_f32']['draws_per_s']:.2f}")
    print(f"filled_vs_jobs: {res['lora_filled']['draws_per_s'] / res['lora']['draws_per_s']:.2f}")


def _train_part(args: argparse.Namespace) -> None:
    t = _train(args.model, args.train_steps, args.precisions)
    if set(t) != {"float32", "bfloat16"}:
        return
    f32, bf = t["float32"], t["bfloat16"]
    r32, rbf = f32.tokens / f32.wall_s, bf.tokens / bf.wall_s
    print(
        f"train_loss_max_abs_diff: {max(abs(a - b) for a, b in zip(f32.losses, bf.losses, strict=True)):.4f}"
    )
    print(f"train_bf16_vs_f32: {rbf / r32:.2f}")


if __name__ == "__main__":
    main()
