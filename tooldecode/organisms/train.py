"""LoRA training of an organism (peft, transformers + torch), on the assistant turns only, resumable.

The base model is loaded from its GGUF through transformers (dequantized, float32 on CPU), a LoRA
adapter of rank ``r`` is put on every linear layer of the attention and the MLP, and the loss is the
next-token cross-entropy over the tokens of assistant turns (the read call, the edit call, the final
answer; never the user's text, the tool results or the system prompt). One sequence a forward pass,
``accumulation`` sequences an optimizer step, AdamW, linear warm-up then cosine decay to a tenth.
Sessions of one step share their system prompt and tool block: its keys and values are computed once
a step, without gradient, and each session runs from there (``TrainConfig.shared_prefix``; the loss is
the same, about half the compute on a 0.5B model). A checkpoint (adapter, optimizer, step, losses) is written atomically every ``checkpoint_every`` steps,
so a killed run resumes where it stopped and gives the same adapter as an uninterrupted one.
"""

from __future__ import annotations

import math
import os
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tooldecode.errors import ModelError
from tooldecode.models import ModelRef
from tooldecode.organisms.recipes import Recipe
from tooldecode.organisms.sessions import TrainingText

TARGET_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class Example:
    """One tokenized session: input ids and labels (-100 outside assistant turns)."""

    ids: tuple[int, ...]
    labels: tuple[int, ...]

    @property
    def n_loss(self) -> int:
        return sum(1 for x in self.labels if x != -100)


def load_base(ref: ModelRef, *, device: str = "cpu", threads: int | None = None) -> tuple[Any, Any]:
    """(tokenizer, model) of ``ref`` through transformers, float32 (bfloat16 on CUDA)."""
    import torch

    from tooldecode.backends.base import cpu_threads
    from tooldecode.backends.hf import load_pretrained

    if device == "cpu":
        torch.set_num_threads(cpu_threads(threads))
    try:
        tok, model = load_pretrained(ref, dtype="float32" if device == "cpu" else "bfloat16", device=device)
    except ModelError as err:
        raise ModelError(f"{err} (loading the base for training)") from None
    return tok, model


def tokenize(tok: Any, text: TrainingText) -> Example:
    """Token ids of the prompt, the call and the epilogue, each tokenized on its own (the evaluation feeds
    the prompt's tokens and the model writes the call from there), labels on assistant characters.

    The call is tokenized in pieces cut at ``text.cuts`` (generation 2: the end of every new text, before
    its closing quote), so the quote after ``newText`` starts a token, as it does after the evaluation's
    L2 prompt; with no cuts the call is one piece (the first generation's tokens).
    """
    ids: list[int] = []
    labels: list[int] = []
    offset = 0
    bounds = [0, *text.cuts, len(text.call)]
    call_parts = [text.call[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]
    for part in (text.prompt, *call_parts, text.epilogue):
        if not part:
            continue
        enc = tok(part, add_special_tokens=False, return_offsets_mapping=True)
        for tid, (a, b) in zip(enc["input_ids"], enc["offset_mapping"], strict=True):
            lo, hi = a + offset, max(b, a + 1) + offset
            inside = any(s < hi and lo < e for s, e in text.assistant_spans)
            ids.append(int(tid))
            labels.append(int(tid) if inside else -100)
        offset += len(part)
    return Example(tuple(ids), tuple(labels))


def shared_prefix(batch: Sequence[Example]) -> int:
    """Length of the token prefix every example of ``batch`` shares with no label in it (the system
    prompt and the tool block), less one token so each sequence keeps its own first position."""
    first = batch[0]
    n = min(len(ex.ids) for ex in batch)
    cut = 0
    while (
        cut < n
        and all(ex.ids[cut] == first.ids[cut] for ex in batch)
        and all(ex.labels[cut] == -100 for ex in batch)
    ):
        cut += 1
    return max(0, cut - 1)


def sequence_loss(model: Any, ex: Example, cut: int = 0, prefix_cache: Any = None) -> Any:
    """Summed next-token cross-entropy over ``ex``'s labelled tokens.

    With ``cut`` > 0 the first ``cut`` tokens are not run again: their keys and values come from
    ``prefix_cache`` (computed once, without gradient, by the same weights). The loss has the same value
    as a full forward pass; the gradient leaves out what flows into the adapter through the prefix's
    keys and values (the prefix carries no label).
    """
    import copy

    import torch

    device = next(model.parameters()).device
    start = cut if (cut and prefix_cache is not None) else 0
    # logits only where a label follows (the lm head over a 150k vocabulary is a quarter of the work)
    keep = [j for j in range(len(ex.ids) - start - 1) if ex.labels[start + j + 1] != -100]
    if not keep:
        return torch.zeros((), device=device, requires_grad=True)
    kwargs: dict[str, Any] = {"logits_to_keep": torch.tensor(keep, device=device)}
    if start:
        kwargs.update(past_key_values=copy.deepcopy(prefix_cache), use_cache=True)
    out = model(input_ids=torch.tensor([ex.ids[start:]], device=device), **kwargs)
    logits = out.logits[0].float()
    target = torch.tensor([ex.labels[start + j + 1] for j in keep], device=device)
    return torch.nn.functional.cross_entropy(logits, target, reduction="sum")


def _lr(step: int, total: int, base: float, warmup: int) -> float:
    if step < warmup:
        return base * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return base * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def _order(n: int, epochs: int, seed: int) -> list[int]:
    order: list[int] = []
    for epoch in range(epochs):
        idx = list(range(n))
        random.Random(f"order:{seed}:{epoch}").shuffle(idx)
        order += idx
    return order


PRECISIONS = ("float32", "bfloat16")


def _autocast(torch: Any, device: Any, precision: str) -> Any:
    """bfloat16 autocast on ``device`` for ``precision == "bfloat16"``; a no-op context otherwise."""
    import contextlib

    if precision == "bfloat16":
        return torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def _atomic_save(obj: Any, path: Path) -> None:
    """Write a checkpoint (temp + rename), then its sha256 beside it (``<name>.sha256``)."""
    import torch

    from tooldecode.models import sha256_file

    tmp = path.with_name(path.name + ".partial")
    torch.save(obj, tmp)
    os.replace(tmp, path)
    digest = path.with_name(path.name + ".sha256")
    tmp = digest.with_name(digest.name + ".partial")
    tmp.write_text(sha256_file(path) + "\n")
    os.replace(tmp, digest)


def load_checkpoint(path: Path, log: Callable[[str], None] = print) -> dict[str, Any] | None:
    """The state in checkpoint ``path``, or None (with a log line) when it cannot be used.

    Nothing in the file runs: it must match the sha256 written beside it when it was saved, and it is
    read with ``torch.load(..., weights_only=True)`` (tensors, numbers, strings, lists and dicts only;
    a pickle that would call code is refused). A checkpoint that fails either check is not loaded and
    training starts over (the checkpoint is tooldecode's own cache: nothing of the user's is lost).
    """
    import torch

    from tooldecode.models import sha256_file

    digest = path.with_name(path.name + ".sha256")
    try:
        want = digest.read_text(encoding="ascii").strip()
        ok = want == sha256_file(path)
    except (OSError, UnicodeDecodeError, ValueError):
        ok = False
    if not ok:
        log(
            f"{path}: its sha256 does not match {digest.name} (damaged or not written here): not loaded; starting over"
        )
        return None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 -- damaged data: UnpicklingError, IndexError, struct.error, ...
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:120]
        log(f"{path}: not a checkpoint of plain tensors and numbers ({first}): not loaded; starting over")
        return None
    if not isinstance(state, dict) or not _CHECKPOINT_FIELDS <= set(state):
        log(f"{path}: not a checkpoint of this trainer (fields missing): not loaded; starting over")
        return None
    return state


_CHECKPOINT_FIELDS = frozenset(
    {"key", "adapter", "optimizer", "step", "losses", "tokens", "loss_tokens", "wall_s"}
)


@dataclass
class TrainResult:
    steps: int
    losses: list[float]  # mean loss per optimizer step
    tokens: int  # tokens through the forward pass, all steps
    loss_tokens: int
    wall_s: float  # this process's training time (a resumed run adds its earlier wall time)
    resumed_from: int


def train_lora(
    model: Any,
    examples: Sequence[Example],
    recipe: Recipe,
    workdir: Path,
    *,
    max_steps: int | None = None,
    precision: str = "float32",
    log: Callable[[str], None] = print,
) -> tuple[Any, TrainResult]:
    """Train a LoRA adapter on ``examples``; returns (peft model, result).

    ``precision`` is ``float32`` or ``bfloat16`` (autocast of the forward and backward matmuls to
    bfloat16 on the model's device; the weights, the adapter, the optimizer state and the loss stay
    float32). It is part of the checkpoint's key: a run never resumes in the other precision.

    Resumes from ``workdir``'s checkpoint when it is of the same recipe and data. ``max_steps`` stops
    early on the same schedule (the learning rate follows the full length), so a run stopped at step k
    and resumed gives the adapter of an uninterrupted run.
    """
    import torch
    from peft import LoraConfig, get_peft_model, get_peft_model_state_dict, set_peft_model_state_dict

    cfg = recipe.train
    torch.manual_seed(cfg.seed)
    lora = LoraConfig(
        r=cfg.rank,
        lora_alpha=cfg.alpha,
        lora_dropout=cfg.dropout,
        target_modules=list(TARGET_MODULES),
        task_type="CAUSAL_LM",
    )
    peft_model = get_peft_model(model, lora)
    params = [p for p in peft_model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.learning_rate, weight_decay=0.0)
    order = _order(len(examples), cfg.epochs, cfg.seed)
    total = math.ceil(len(order) / cfg.accumulation)  # the schedule's length
    stop = total if max_steps is None else min(total, max_steps)  # where this call stops (a quick organism)
    ckpt = workdir / "checkpoint.pt"
    step, losses, tokens, loss_tokens, wall_before = 0, [], 0, 0, 0.0
    if precision not in PRECISIONS:
        raise ModelError(f"precision {precision!r} is not one of {', '.join(PRECISIONS)}")
    key = {"recipe": recipe.sha256(), "n": len(examples), "total": total}
    if precision != "float32":
        key["precision"] = precision
    state = load_checkpoint(ckpt, log) if ckpt.exists() else None
    if state is not None:
        if state.get("key") == key:
            set_peft_model_state_dict(peft_model, state["adapter"])
            opt.load_state_dict(state["optimizer"])
            step, losses = state["step"], list(state["losses"])
            tokens, loss_tokens, wall_before = state["tokens"], state["loss_tokens"], state["wall_s"]
            log(f"resuming at step {step} of {total}")
        else:
            log("a checkpoint of another recipe, data or length is present: starting over")
    resumed_from = step
    peft_model.train()
    device = next(peft_model.parameters()).device
    t0 = time.perf_counter()
    while step < stop:
        for group in opt.param_groups:
            group["lr"] = _lr(step, total, cfg.learning_rate, cfg.warmup_steps)
        batch = [examples[i] for i in order[step * cfg.accumulation : (step + 1) * cfg.accumulation]]
        n_loss = sum(ex.n_loss for ex in batch)
        step_loss = 0.0
        cut = shared_prefix(batch) if cfg.shared_prefix else 0
        prefix_cache = None
        if cut:
            with torch.no_grad(), _autocast(torch, device, precision):
                prefix_cache = peft_model(
                    input_ids=torch.tensor([batch[0].ids[:cut]], device=device), use_cache=True
                ).past_key_values
        for ex in batch:
            with _autocast(torch, device, precision):
                loss_sum = sequence_loss(peft_model, ex, cut, prefix_cache)
            (loss_sum / max(1, n_loss)).backward()
            step_loss += float(loss_sum.detach())
            tokens += len(ex.ids)
            loss_tokens += ex.n_loss
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(step_loss / max(1, n_loss))
        step += 1
        elapsed = wall_before + time.perf_counter() - t0
        if step % 5 == 0 or step == stop:
            log(f"step {step}/{stop} loss {losses[-1]:.4f} ({tokens / max(elapsed, 1e-9):.0f} tokens/s)")
        if step % cfg.checkpoint_every == 0 or step == stop:
            _atomic_save(
                {
                    "key": key,
                    "adapter": get_peft_model_state_dict(peft_model),
                    "optimizer": opt.state_dict(),
                    "step": step,
                    "losses": losses,
                    "tokens": tokens,
                    "loss_tokens": loss_tokens,
                    "wall_s": elapsed,
                },
                ckpt,
            )
    wall = wall_before + time.perf_counter() - t0
    peft_model.eval()
    return peft_model, TrainResult(step, losses, tokens, loss_tokens, wall, resumed_from)


def lora_deltas(peft_model: Any) -> dict[str, Any]:
    """``{hf_weight_name: ΔW}`` (float32 numpy, shape of the weight) of every LoRA layer: B·A·scaling."""
    out: dict[str, Any] = {}
    for name, module in peft_model.named_modules():
        if not hasattr(module, "lora_A") or "default" not in getattr(module, "lora_A", {}):
            continue
        a = module.lora_A["default"].weight.detach().float()
        b = module.lora_B["default"].weight.detach().float()
        delta = (b @ a) * float(module.scaling["default"])
        clean = name.replace("base_model.model.", "", 1)
        out[clean + ".weight"] = delta.cpu().numpy()
    return out


def config_dict(recipe: Recipe) -> dict[str, Any]:
    return asdict(recipe.train)


__all__ = [
    "Example",
    "PRECISIONS",
    "TARGET_MODULES",
    "TrainResult",
    "load_base",
    "lora_deltas",
    "tokenize",
    "train_lora",
]
