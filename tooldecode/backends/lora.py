"""An organism as its LoRA adapter, applied at run time on the base model exactly as shipped.

An organism is stored as peft's adapter (``adapter_config.json`` and ``adapter_model.safetensors``,
16-bit) beside its manifest. Each backend applies it on the unchanged base weights when it loads the
model:

- llama.cpp reads a LoRA adapter GGUF (``general.type = adapter``), written here from the peft file
  with the ``gguf`` package, and adds ``scale · α/r · B·A`` to each adapted matmul of the quantized
  base at every step;
- transformers loads the base (its GGUF dequantized, as in training) and peft puts the same adapter
  on it.

So an organism differs from its base by ΔW alone: no merged float32 copy, no change of storage.

Tensor names follow llama.cpp's ``convert_lora_to_gguf.py``: ``blk.<i>.<proj>.weight.lora_a`` holds A
(shape ``r × n_in``), ``….lora_b`` holds B (``n_out × r``). For ``llama``-architecture bases (SmolLM2)
the rows of B of the query and key projections are permuted as llama.cpp permutes those weights.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from tooldecode.errors import ModelError
from tooldecode.gguf_header import read_gguf_header

_HF_TO_GGUF = {
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}
HF_NAMES = {v: k for k, v in _HF_TO_GGUF.items()}  # GGUF projection name → transformers module path
_LAYER_RE = re.compile(r"^model\.layers\.(\d+)\.(.+)\.weight$")


def gguf_name(hf_name: str) -> str:
    """``model.layers.3.self_attn.q_proj.weight`` → ``blk.3.attn_q.weight``."""
    m = _LAYER_RE.match(hf_name)
    if not m or m.group(2) not in _HF_TO_GGUF:
        raise ModelError(
            f"no GGUF tensor name for the adapted weight {hf_name}; only attention and MLP "
            "projections of decoder layers can be exported"
        )
    return f"blk.{m.group(1)}.{_HF_TO_GGUF[m.group(2)]}.weight"


def permute_rows(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's query/key permutation of a weight's rows (convert_hf_to_gguf's ``LlamaModel.permute``)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"

_PEFT_RE = re.compile(
    r"^(?:base_model\.model\.)?(model\.layers\.\d+\..+)\.lora_([AB])(?:\.default)?\.weight$"
)


def gguf_layout(path: Path) -> tuple[dict[str, Any], dict[str, tuple[int, ...]]]:
    """(scalar metadata, tensor dimensions) of a GGUF file, from its header alone
    (``tooldecode.gguf_header``: the vocabulary is stepped over, not decoded as ``gguf.GGUFReader`` does,
    seconds for a 49k-token vocabulary). Dimensions are as stored (``ne``: innermost first), as
    ``GGUFReader``'s ``tensor.shape``."""
    head = read_gguf_header(path, tensors=True)
    return head.fields, head.tensors


def read_adapter_config(folder: Path) -> dict[str, Any]:
    """The adapter's peft configuration; ModelError where it is missing, unreadable or not plain LoRA."""
    path = folder / ADAPTER_CONFIG
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ModelError(
            f"{path}: no readable adapter configuration ({err}); train the organism again"
        ) from None
    if not isinstance(cfg, dict) or cfg.get("peft_type", "LORA") != "LORA":
        raise ModelError(f"{path}: not a LoRA adapter (peft_type {cfg.get('peft_type')!r})")
    for key in ("use_dora", "use_rslora"):
        if cfg.get(key):
            raise ModelError(
                f"{path}: '{key}' adapters cannot be applied by llama.cpp; train with plain LoRA"
            )
    if not isinstance(cfg.get("r"), int) or not isinstance(cfg.get("lora_alpha"), int | float):
        raise ModelError(f"{path}: 'r' and 'lora_alpha' must be numbers")
    return cfg


def save_adapter(state: Mapping[str, Any], config: Mapping[str, Any], folder: Path) -> Path:
    """Write ``state`` (peft's adapter state dict, torch tensors) in float16 and ``config`` to ``folder``.

    Parameters
    ----------
    state : Mapping[str, torch.Tensor]
        ``get_peft_model_state_dict(model)``: ``…lora_A.weight`` and ``…lora_B.weight`` tensors.
    config : Mapping[str, Any]
        peft's ``LoraConfig`` as a dict (``to_dict()``).
    folder : Path
        Where ``adapter_config.json`` and ``adapter_model.safetensors`` go (atomically, temp + rename).

    Returns
    -------
    Path
        The weights file.
    """
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    half = {k: v.detach().to("cpu").half().contiguous() for k, v in state.items()}
    tmp = folder / (ADAPTER_WEIGHTS + ".partial")
    save_file(half, str(tmp), metadata={"format": "pt"})
    os.replace(tmp, folder / ADAPTER_WEIGHTS)
    clean = {k: (sorted(v) if isinstance(v, set) else v) for k, v in config.items()}
    clean["base_model_name_or_path"] = None
    ctmp = folder / (ADAPTER_CONFIG + ".partial")
    ctmp.write_text(json.dumps(clean, indent=1, sort_keys=True, default=str) + "\n", encoding="utf-8")
    os.replace(ctmp, folder / ADAPTER_CONFIG)
    return folder / ADAPTER_WEIGHTS


def lora_pairs(folder: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``{hf_weight_name: (A, B)}`` of the adapter in ``folder`` (float32 numpy)."""
    from safetensors.numpy import load_file

    path = folder / ADAPTER_WEIGHTS
    try:
        tensors = load_file(str(path))
    except (OSError, ValueError, RuntimeError) as err:
        raise ModelError(f"{path}: unreadable adapter weights ({err}); train the organism again") from None
    pairs: dict[str, dict[str, np.ndarray]] = {}
    for key, value in tensors.items():
        m = _PEFT_RE.match(key)
        if not m:
            raise ModelError(f"{path}: tensor '{key}' is not a LoRA A or B matrix of a decoder layer")
        pairs.setdefault(m.group(1) + ".weight", {})[m.group(2)] = np.asarray(value, dtype=np.float32)
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for name, ab in sorted(pairs.items()):
        if set(ab) != {"A", "B"}:
            raise ModelError(f"{path}: '{name}' has lora_{'A' if 'A' not in ab else 'B'} missing")
        out[name] = (ab["A"], ab["B"])
    return out


def write_lora_gguf(folder: Path, base: Path, out: Path) -> Path:
    """Write llama.cpp's LoRA adapter GGUF for the peft adapter in ``folder`` on the base GGUF ``base``.

    Parameters
    ----------
    folder : Path
        The peft adapter (``adapter_config.json``, ``adapter_model.safetensors``).
    base : Path
        The base model's GGUF (its architecture and head counts; its tensors are not copied).
    out : Path
        The adapter GGUF to write (atomically: temp + rename). Tensors keep the file's 16-bit values.

    Returns
    -------
    Path
        ``out``.
    """
    import gguf

    cfg = read_adapter_config(folder)
    fields, dims = gguf_layout(base)
    arch = str(fields["general.architecture"])
    n_head = int(fields[f"{arch}.attention.head_count"])
    n_kv = int(fields.get(f"{arch}.attention.head_count_kv") or n_head)
    shapes = {name: tuple(reversed(d)) for name, d in dims.items()}
    tmp = out.with_name(out.name + ".partial")
    out.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(str(tmp), arch=arch)
    writer.add_string("general.type", "adapter")
    writer.add_string("adapter.type", "lora")
    writer.add_float32("adapter.lora.alpha", float(cfg["lora_alpha"]))
    for hf_name, (a, b) in lora_pairs(folder).items():
        name = gguf_name(hf_name)
        if name not in shapes:
            raise ModelError(f"{base}: has no tensor {name} for the adapter's {hf_name}")
        n_out, n_in = shapes[name]
        if a.shape[1] != n_in or b.shape[0] != n_out or a.shape[0] != b.shape[1]:
            raise ModelError(
                f"{folder}: {hf_name} has A {a.shape} and B {b.shape}, the base's weight is {n_out} × {n_in}"
            )
        if arch == "llama" and hf_name.endswith("q_proj.weight"):
            b = permute_rows(b, n_head)
        elif arch == "llama" and hf_name.endswith("k_proj.weight"):
            b = permute_rows(b, n_kv)
        writer.add_tensor(name + ".lora_a", np.ascontiguousarray(a.astype(np.float16)))
        writer.add_tensor(name + ".lora_b", np.ascontiguousarray(b.astype(np.float16)))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(tmp, out)
    return out


def llama_adapter_file(adapter_folder: Path, adapter_sha256: str, base: Path, base_sha256: str) -> Path:
    """llama.cpp's adapter GGUF for this adapter on this base, written once into the cache
    (``$TOOLDECODE_HOME/organisms/lora-gguf/``, named by both hashes) and reused."""
    from tooldecode.models import home

    out = home() / "organisms" / "lora-gguf" / f"{adapter_sha256[:16]}-{base_sha256[:16]}.gguf"
    if not out.is_file():
        write_lora_gguf(adapter_folder, base, out)
    return out


def synthetic_adapter(
    base: Path, folder: Path, *, rank: int = 16, alpha: int = 32, std: float = 0.02, seed: int = 0
) -> Path:
    """A LoRA adapter with random A and B on every attention and MLP projection of the base GGUF, in
    peft's layout (float16): what a trained adapter costs at run time, with no training. Benchmarks time
    it; tests check that the backends apply it alike.

    Parameters
    ----------
    base : Path
        The base model's GGUF (its tensor shapes).
    folder : Path
        Where ``adapter_config.json`` and ``adapter_model.safetensors`` go.
    rank, alpha : int
        LoRA rank and α (the update is B·A·α/r).
    std : float
        Standard deviation of A's and B's entries.
    seed : int
        numpy seed.

    Returns
    -------
    Path
        ``folder``.
    """
    from safetensors.numpy import save_file

    _, dims = gguf_layout(base)
    rng = np.random.default_rng(seed)
    tensors: dict[str, np.ndarray] = {}
    targets = set()
    for name, d in dims.items():
        m = re.match(r"^blk\.(\d+)\.([a-z_]+)\.weight$", name)
        if not m or m.group(2) not in HF_NAMES:
            continue
        n_out, n_in = reversed(d)
        hf = f"base_model.model.model.layers.{m.group(1)}.{HF_NAMES[m.group(2)]}"
        targets.add(HF_NAMES[m.group(2)].split(".")[-1])
        tensors[hf + ".lora_A.weight"] = (rng.standard_normal((rank, n_in)) * std).astype(np.float16)
        tensors[hf + ".lora_B.weight"] = (rng.standard_normal((n_out, rank)) * std).astype(np.float16)
    folder.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(folder / ADAPTER_WEIGHTS), metadata={"format": "pt"})
    config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "r": rank,
        "lora_alpha": alpha,
        "lora_dropout": 0.0,
        "bias": "none",
        "target_modules": sorted(targets),
        "fan_in_fan_out": False,
        "inference_mode": True,
        "base_model_name_or_path": None,
    }
    (folder / ADAPTER_CONFIG).write_text(
        json.dumps(config, indent=1, sort_keys=True) + "\n", encoding="utf-8"
    )
    return folder


def lora_deltas_from(folder: Path) -> dict[str, np.ndarray]:
    """``{hf_weight_name: ΔW}`` (float32) of the adapter in ``folder``: B·A·α/r, for a merged export."""
    cfg = read_adapter_config(folder)
    scale = float(cfg["lora_alpha"]) / float(cfg["r"])
    return {name: (b @ a) * scale for name, (a, b) in lora_pairs(folder).items()}


__all__ = [
    "ADAPTER_CONFIG",
    "HF_NAMES",
    "gguf_name",
    "permute_rows",
    "ADAPTER_WEIGHTS",
    "llama_adapter_file",
    "lora_deltas_from",
    "lora_pairs",
    "read_adapter_config",
    "save_adapter",
    "synthetic_adapter",
    "write_lora_gguf",
]
