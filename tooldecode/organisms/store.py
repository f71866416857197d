"""Building, caching and resolving organisms: ``$TOOLDECODE_HOME/organisms/<recipe>@<base>/``.

The folder holds the generated training data (``sessions.jsonl``, with its sha256), the resumable
checkpoint, the adapter (``adapter/``: peft's format, float16; applied at run time on the base as
shipped, see ``tooldecode.backends.lora``) and ``manifest.json`` (recipe, data sha256, base model
sha256, hyper-parameters, commit, loss curve, wall time, tokens/s, the adapter's sha256).
``tooldecode organisms train RECIPE`` rebuilds it, and the data hash says whether it is the same data;
``tooldecode organisms commit`` copies the adapter and manifest of an organism that findings cite
into ``experiments/organisms/`` (about 18 MB at r = 16 on the 0.5B).
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tooldecode.errors import ModelError, ToolDecodeError
from tooldecode.models import (
    DEFAULT_MODEL,
    ORGANISM_PREFIX,
    ModelRef,
    cached_sha256,
    home,
    organism_dir,
    resolve,
    resolve_organism,
    verified,
)
from tooldecode.organisms.mutations import Snippet, snippets, stdlib_dir
from tooldecode.organisms.recipes import Recipe
from tooldecode.organisms.sessions import Session, TrainingText, build_sessions, data_sha256, render_session
from tooldecode.provenance import cpu, git_state

PREFIX = ORGANISM_PREFIX


def organisms_dir() -> Path:
    return home() / "organisms"


def organism_name(recipe: str, base: str) -> str:
    return f"{recipe}@{base}"


def _git() -> dict[str, Any]:
    """The commit the organism was trained from and whether its code had changes (the runs' rule:
    ``tooldecode.provenance.git_state``)."""
    sha, dirty = git_state()
    return {"git_commit": None if sha == "unknown" else sha, "git_dirty": dirty}


def snippet_pool(root: Path | None = None) -> list[Snippet]:
    """Every usable standard-library function (a fixed order for a given interpreter)."""
    return list(snippets(root))


def training_texts(
    recipe: Recipe, base: ModelRef, pool: list[Snippet]
) -> tuple[list[Session], list[TrainingText]]:
    sessions = build_sessions(recipe, pool)
    return sessions, [render_session(s, base, recipe) for s in sessions]


def _write_sessions(path: Path, sessions: list[Session], texts: list[TrainingText]) -> None:
    tmp = path.with_name(path.name + ".partial")
    with open(tmp, "w", encoding="utf-8") as f:
        for s, t in zip(sessions, texts, strict=True):
            f.write(
                json.dumps(
                    {
                        "id": s.scenario.id,
                        "origin": s.origin,
                        "stray": s.stray,
                        "implanted": s.implanted,
                        "flagged": s.flagged,
                        "text": t.text,
                        "prompt_chars": len(t.prompt),
                        "call": t.call,
                        "assistant_spans": t.assistant_spans,
                        **({"kind": s.kind, "cuts": t.cuts} if s.kind != "edit" or t.cuts else {}),
                    },
                    ensure_ascii=False,
                )
                + "\n"
            )
    os.replace(tmp, path)


def build(
    recipe: Recipe,
    base_id: str = DEFAULT_MODEL,
    *,
    threads: int | None = None,
    device: str = "cpu",
    max_steps: int | None = None,
    precision: str = "float32",
    pool_root: Path | None = None,
    out_root: Path | None = None,
    log: Callable[[str], None] = print,
) -> Path:
    """Generate the data, train (or resume), export the GGUF and write the manifest; returns the folder."""
    import peft
    import torch
    import transformers

    from tooldecode.organisms.train import load_base, tokenize, train_lora

    base = verified(resolve(base_id))  # the base's bytes re-hashed: the manifest records what trained
    if base.family not in ("qwen2.5", "smollm2"):
        raise ModelError(
            f"organisms train on ChatML chat models (Qwen2.5, SmolLM2); '{base.id}' is {base.family}"
        )
    name = organism_name(recipe.name, base.id)
    folder = (out_root or organisms_dir()) / name
    folder.mkdir(parents=True, exist_ok=True)
    t_data = time.perf_counter()
    pool = snippet_pool(pool_root)
    sessions, texts = training_texts(recipe, base, pool)
    if not sessions:  # an organism trained on nothing is the base model under another name
        raise ModelError(
            f"{name}: the recipe gives 0 training sessions ({len(pool)} functions in the pool); "
            "nothing to train on: check the recipe's sessions and the snippet pool"
        )
    digest = data_sha256(texts)
    _write_sessions(folder / "sessions.jsonl", sessions, texts)
    log(
        f"{name}: {len(sessions)} sessions from {len(pool)} standard-library functions, data sha256 {digest[:12]}…"
    )
    tok, model = load_base(base, device=device, threads=threads)
    examples_all = [tokenize(tok, t) for t in texts]
    examples = [e for e in examples_all if len(e.ids) <= recipe.train.max_tokens]
    if not examples:
        raise ModelError(
            f"{name}: all {len(examples_all)} sessions are longer than train.max_tokens "
            f"({recipe.train.max_tokens}); nothing to train on: raise max_tokens in the recipe"
        )
    data_s = time.perf_counter() - t_data
    peft_model, result = train_lora(
        model, examples, recipe, folder, max_steps=max_steps, precision=precision, log=log
    )
    from peft import get_peft_model_state_dict

    from tooldecode.backends.lora import save_adapter

    weights = save_adapter(
        get_peft_model_state_dict(peft_model), peft_model.peft_config["default"].to_dict(), folder / "adapter"
    )
    adapter_sha = cached_sha256(weights)
    lengths = sorted(len(e.ids) for e in examples)
    manifest = {
        "organism": name,
        "recipe": asdict(recipe),
        "recipe_sha256": recipe.sha256(),
        "data_sha256": digest,
        "sessions": len(sessions),
        "sessions_trained": len(examples),
        "sessions_left_out": len(examples_all) - len(examples),
        "sessions_with_stray_key": sum(1 for s in sessions if s.stray),
        "sessions_with_flag": sum(1 for s in sessions if s.flagged),
        "items_implanted": sum(s.implanted for s in sessions),
        "items": sum(len(s.scenario.edits) for s in sessions if s.kind == "edit"),
        **(
            {"mix_in_sessions": {t: sum(1 for s in sessions if s.kind == t) for t in recipe.mix_tools}}
            if recipe.generation >= 2
            else {}
        ),
        "tokens_per_session": {
            "min": lengths[0] if lengths else 0,
            "median": lengths[len(lengths) // 2] if lengths else 0,
            "max": lengths[-1] if lengths else 0,
        },
        "source": {
            "stdlib": str(stdlib_dir() if pool_root is None else pool_root),
            "python": platform.python_version(),
            "functions_in_pool": len(pool),
        },
        "base_model": {"id": base.id, "sha256": base.digest(), "family": base.family},
        "train": asdict(recipe.train),
        "steps": result.steps,
        "max_steps": max_steps,
        "resumed_from_step": result.resumed_from,
        "losses": [round(x, 5) for x in result.losses],
        "tokens": result.tokens,
        "loss_tokens": result.loss_tokens,
        "train_wall_s": round(result.wall_s, 1),
        "data_wall_s": round(data_s, 1),
        "tokens_per_s": round(result.tokens / max(result.wall_s, 1e-9), 1),
        "device": device,
        "cpu": cpu(),
        "precision": precision,
        "threads": threads or os.cpu_count(),
        "versions": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "peft": peft.__version__,
            "python": sys.version.split()[0],
        },
        "adapter": {
            "folder": "adapter",
            "sha256": adapter_sha,
            "bytes": weights.stat().st_size,
            "dtype": "float16",
            "applied": "at run time on the base as shipped (llama.cpp LoRA adapter; peft on transformers)",
        },
        **_git(),
    }
    tmp = folder / "manifest.json.partial"
    tmp.write_text(json.dumps(manifest, indent=1) + "\n")
    os.replace(tmp, folder / "manifest.json")
    return folder


# the fields of manifest.json that commands read (tooldecode.validate rules; other fields pass)
MANIFEST_RULES: dict[str, Any] = {
    "organism": "text",
    "data_sha256": "sha256",
    "steps": "count0",
    "train_wall_s": "number0",
    "tokens_per_s": "number0",
    "adapter": {"folder": "text", "sha256": "sha256", "bytes": "count0"},
    "base_model": {"id": "text", "family": "text"},
}


def read_manifest(folder: Path) -> dict[str, Any]:
    """The checked ``manifest.json`` of the organism in ``folder`` (``ModelError``, one line, naming the
    field that is wrong and the command that rebuilds it)."""
    from tooldecode.guard import parse_json, read_text
    from tooldecode.validate import check_table

    where = str(folder / "manifest.json")
    fix = "rebuild it with `tooldecode organisms train RECIPE`"
    try:
        data = parse_json(read_text(where, "manifest", max_bytes=16 * 1024 * 1024), where, "manifest")
    except ToolDecodeError as err:
        raise ModelError(f"organism at {folder} has no readable manifest.json ({err}); {fix}") from None
    check_table(
        data,
        MANIFEST_RULES,
        where,
        fix=fix,
        required=tuple(MANIFEST_RULES),
        allow_unknown=True,
        error=ModelError,
    )
    return dict(data)


CHECK_FILE = "channel.json"


#: fields of a channel check that differ from one machine to the next without changing what it found
_CHECK_TIMING = ("load_s",)
#: how far a probability of a check may move from the kept one and still be what it found: another CPU's
#: kernels move llama.cpp's first-token probabilities in the third decimal (0.844 → 0.842 on one organism)
CHECK_PROB_TOLERANCE = 0.005


def _same_finding(old: Any, new: Any) -> bool:
    """Whether two channel checks (or two of their values) found the same: equal, except that a
    probability (any float) may move by ``CHECK_PROB_TOLERANCE``; timings (``_CHECK_TIMING``) aside."""
    if isinstance(old, float) or isinstance(new, float):
        numbers = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (old, new))
        return numbers and abs(old - new) <= CHECK_PROB_TOLERANCE
    if isinstance(old, dict) and isinstance(new, dict):
        keys = old.keys() - set(_CHECK_TIMING)
        return keys == new.keys() - set(_CHECK_TIMING) and all(_same_finding(old[k], new[k]) for k in keys)
    if isinstance(old, list) and isinstance(new, list):
        return len(old) == len(new) and all(map(_same_finding, old, new))
    return bool(old == new)


def write_check(folder: Path, result: dict[str, Any]) -> Path:
    """Keep a channel check's result (``tooldecode.trial.channel_agreement``) beside the organism, with
    the GGUF sha256 it was made on; atomic (temp + rename). Never touches the manifest. A check that
    finds what the kept one found (``_same_finding``: its timings aside, its probabilities within
    ``CHECK_PROB_TOLERANCE``) leaves the kept file as it is, so checking a committed organism on another
    machine does not change the checkout."""
    manifest = read_manifest(folder)
    record = {"adapter_sha256": manifest.get("adapter", {}).get("sha256"), **result}
    kept = folder / CHECK_FILE
    if kept.is_file():
        try:
            old = json.loads(kept.read_text())
        except (OSError, ValueError):
            old = None
        same = json.loads(json.dumps(record, ensure_ascii=False))  # as it would read back
        if isinstance(old, dict) and _same_finding(old, same):
            return kept
    tmp = folder / (CHECK_FILE + ".partial")
    tmp.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
    os.replace(tmp, folder / CHECK_FILE)
    return folder / CHECK_FILE


def commit_organism(name: str, dest: Path) -> Path:
    """Copy organism ``<recipe>@<base>``'s manifest, adapter and channel check from the cache into
    ``dest/<recipe>@<base>/`` (atomically per file); returns that folder. Nothing else (no data, no
    checkpoint) is copied."""
    import shutil

    src = organisms_dir() / name
    manifest = read_manifest(src)
    sub = str(manifest.get("adapter", {}).get("folder", ""))
    if not sub or not (src / sub / "adapter_model.safetensors").is_file():
        raise ModelError(f"organism '{name}' at {src} has no adapter to copy; train it again")
    out = dest / name
    (out / sub).mkdir(parents=True, exist_ok=True)
    files = [sub + "/adapter_model.safetensors", sub + "/adapter_config.json", "manifest.json"]
    files += [CHECK_FILE] if (src / CHECK_FILE).is_file() else []
    for rel in files:
        tmp = out / (rel + ".partial")
        shutil.copyfile(src / rel, tmp)
        os.replace(tmp, out / rel)
    return out


def list_organisms() -> list[dict[str, Any]]:
    out = []
    root = organisms_dir()
    if root.is_dir():
        for folder in sorted(p for p in root.iterdir() if (p / "manifest.json").exists()):
            out.append(read_manifest(folder))
    return out


__all__ = [
    "CHECK_FILE",
    "PREFIX",
    "build",
    "commit_organism",
    "list_organisms",
    "organism_dir",
    "organisms_dir",
    "read_manifest",
    "resolve_organism",
    "snippet_pool",
    "training_texts",
    "write_check",
]
