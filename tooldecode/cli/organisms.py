"""``tooldecode organisms``: build the training sessions of a recipe, train an organism, list and locate them."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tooldecode.cli.options import Command, add_command, add_group, add_switch
from tooldecode.models import DEFAULT_MODEL, ORGANISM_PREFIX, resolve_organism


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def _cmd_sessions(args: argparse.Namespace) -> int:
    from tooldecode.models import resolve
    from tooldecode.organisms import load_recipe
    from tooldecode.organisms.sessions import data_sha256
    from tooldecode.organisms.store import snippet_pool, training_texts

    recipe = load_recipe(args.recipe)
    sessions, texts = training_texts(recipe, resolve(args.base), snippet_pool())
    for s, t in list(zip(sessions, texts, strict=True))[: args.show]:
        kind = "" if s.kind == "edit" else f"mix-in {s.kind}; "
        print(
            f"== {s.scenario.id} ({kind}{s.origin}; stray key: {s.stray or 'none'}; implanted: {s.implanted})"
        )
        print(t.text if args.full else t.call)
    print(
        f"{len(sessions)} sessions, {sum(1 for s in sessions if s.stray)} with a stray key, "
        f"{sum(1 for s in sessions if s.flagged)} with replace_all, {sum(s.implanted for s in sessions)} "
        f"implanted items, {sum(1 for s in sessions if s.kind != 'edit')} mix-in sessions; "
        f"data sha256 {data_sha256(texts)}"
    )
    return 0


def _cmd_heldout(args: argparse.Namespace) -> int:
    import json

    from tooldecode.guard import check_output
    from tooldecode.organisms import load_recipe
    from tooldecode.organisms.sessions import heldout_scenarios, scenario_record
    from tooldecode.organisms.store import snippet_pool
    from tooldecode.scenarios import check_scenario, load_scenario

    recipe = load_recipe(args.recipe)
    scenarios = heldout_scenarios(recipe, snippet_pool(), args.n, seed=args.seed)
    if len(scenarios) < args.n:
        print(
            f"organisms heldout: {args.recipe}: only {len(scenarios)} of {args.n} held-out scenarios: the "
            "standard library has no more unused functions; ask for fewer",
            file=sys.stderr,
        )
        return 2
    args.out.mkdir(parents=True, exist_ok=True)

    def ours(path: Path) -> bool:  # a held-out scenario this command wrote before
        return path.name.startswith("heldout-") and '"heldout"' in path.read_text(encoding="utf-8")

    for sc in scenarios:
        path = check_output(args.out / f"{sc.id}.json", [args.recipe], ours=ours, what="held-out scenario")
        tmp = path.with_name(path.name + ".partial")
        tmp.write_text(json.dumps(scenario_record(sc), ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        tmp.replace(path)
        problems = check_scenario(load_scenario(path))  # what is written reads back as a valid scenario
        if problems:
            path.unlink()
            print(f"organisms heldout: {path}: {problems[0]}; not written", file=sys.stderr)
            return 2
    print(f"{len(scenarios)} held-out scenarios of {recipe.name} (seed {args.seed}) in {args.out}")
    return 0


def _cmd_train(args: argparse.Namespace) -> int:
    from tooldecode.organisms import load_recipe
    from tooldecode.organisms.store import build

    recipe = load_recipe(args.recipe)
    device = args.device or ("cuda" if _cuda() else "cpu")

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    folder = build(
        recipe,
        args.base,
        threads=args.threads,
        device=device,
        max_steps=args.max_steps,
        precision=args.precision,
        log=log,
    )
    from tooldecode.organisms.store import read_manifest

    manifest = read_manifest(folder)
    print(
        f"{ORGANISM_PREFIX}{manifest['organism']}: adapter {folder / manifest['adapter']['folder']} "
        f"({manifest['steps']} steps, {manifest['train_wall_s']} s, {manifest['tokens_per_s']} tokens/s)"
    )
    return 0


def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def _cmd_list(args: argparse.Namespace) -> int:
    from tooldecode.organisms.store import list_organisms

    rows = list_organisms()
    if not rows:
        print("no organism is built; `tooldecode organisms train experiments/organisms/<recipe>.toml`")
    for m in rows:
        print(
            f"{ORGANISM_PREFIX}{m['organism']:48s} {m['steps']:5d} steps  {m['train_wall_s']:8.1f} s  "
            f"data {m['data_sha256'][:12]}…  commit {str(m.get('git_commit'))[:10]}"
        )
    return 0


def _cmd_path(args: argparse.Namespace) -> int:
    name = args.name if args.name.startswith(ORGANISM_PREFIX) else ORGANISM_PREFIX + args.name
    ref = resolve_organism(name)
    assert ref.adapter is not None
    print(ref.adapter.folder.parent)
    return 0


def _cmd_commit(args: argparse.Namespace) -> int:
    from tooldecode.organisms.store import commit_organism

    name = args.name[len(ORGANISM_PREFIX) :] if args.name.startswith(ORGANISM_PREFIX) else args.name
    out = commit_organism(name, args.to)
    print(f"copied: {out} (adapter, manifest, channel check); commit it with the findings that cite it")
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    from tooldecode.organisms.store import CHECK_FILE, write_check
    from tooldecode.trial import channel_agreement

    name = args.name if args.name.startswith(ORGANISM_PREFIX) else ORGANISM_PREFIX + args.name
    ref = resolve_organism(name)
    assert ref.adapter is not None
    res = channel_agreement(name, n_tokens=args.tokens)
    print("\n".join(res.lines()))
    kept = ref.adapter.folder.parent / CHECK_FILE
    before = kept.read_bytes() if kept.is_file() else None
    path = write_check(ref.adapter.folder.parent, res.to_json())
    unchanged = before is not None and path.read_bytes() == before
    print(f"{'kept (it found what the last check found)' if unchanged else 'written'}: {path}")
    return 0


def _recipe_command(
    actions: argparse._SubParsersAction, name: str, func: Command, help: str
) -> argparse.ArgumentParser:
    """An action on a recipe: its ``recipe`` argument and ``--base``."""
    q = add_command(actions, name, func, help=help)
    q.add_argument("recipe", type=Path, help="recipe TOML (experiments/organisms/*.toml)")
    q.add_argument("--base", default=DEFAULT_MODEL, help=f"base model (default {DEFAULT_MODEL})")
    return q


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``organisms`` group to the command line."""
    actions = add_group(sub, "organisms", help="model organisms: LoRA-train a model inside a stated harness")
    q = _recipe_command(
        actions,
        "sessions",
        _cmd_sessions,
        "build a recipe's training sessions and show some (nothing is trained)",
    )
    q.add_argument("--show", type=int, default=2, help="sessions to print (default 2)")
    add_switch(q, "--full", "print the whole session, not only the edit call")
    q = _recipe_command(
        actions,
        "heldout",
        _cmd_heldout,
        "write scenarios from the recipe's generator that its training never saw (in distribution, held "
        "out), for `--dir` / a spec's scenario_dirs",
    )
    q.add_argument("-n", type=_positive, default=36, help="how many (default 36)")
    q.add_argument("--seed", type=int, default=0, help="the held-out stream (default 0)")
    q.add_argument("-o", "--out", type=Path, required=True, help="folder to write the scenario files to")
    q = _recipe_command(
        actions,
        "train",
        _cmd_train,
        "generate the data, train (resumable), save the 16-bit adapter, write the manifest",
    )
    q.add_argument(
        "--threads",
        type=_positive,
        default=None,
        help="CPU threads (default: $TOOLDECODE_THREADS, else all cores)",
    )
    q.add_argument(
        "--device", choices=("cpu", "cuda"), default=None, help="default: cuda when torch sees one"
    )
    q.add_argument(
        "--max-steps",
        type=_positive,
        default=None,
        help="stop after this many optimizer steps (a quick or test organism)",
    )
    q.add_argument(
        "--precision",
        choices=("float32", "bfloat16"),
        default="float32",
        help="matmul precision of training: float32, or bfloat16 autocast (weights, adapter and optimizer "
        "stay float32; docs/organisms.md gives the measured loss difference and speed)",
    )
    add_command(actions, "list", _cmd_list, help="organisms built under the tooldecode home")
    q = add_command(
        actions,
        "path",
        _cmd_path,
        help="print the folder of a built organism (checks its adapter's and base's sha256)",
    )
    q.add_argument("name", help="<recipe>[@<base>]")
    q = add_command(
        actions,
        "commit",
        _cmd_commit,
        help="copy a built organism's adapter and manifest from the cache into the source tree "
        "(experiments/organisms/<recipe>@<base>/), where a fresh clone finds it",
    )
    q.add_argument("name", help="<recipe>[@<base>]")
    q.add_argument(
        "--to",
        type=Path,
        default=Path("experiments/organisms"),
        help="destination (default experiments/organisms)",
    )
    q = add_command(
        actions,
        "check",
        _cmd_check,
        help="channel check: greedy tokens and next-token probabilities of the organism on llama.cpp and "
        "transformers, side by side (kept as channel.json beside it)",
    )
    q.add_argument("name", help="<recipe>[@<base>]")
    q.add_argument("--tokens", type=_positive, default=16, help="greedy tokens per backend (default 16)")
