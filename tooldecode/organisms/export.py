"""A merged organism GGUF (for comparisons; organisms run as base + adapter, see ``tooldecode.backends.lora``): the base model's GGUF with each LoRA-adapted weight replaced by
W + ΔW (float32), every other tensor and all metadata (tokenizer, chat template) copied byte for byte.

Both backends load the result: llama.cpp directly, transformers through its GGUF loader (which
dequantizes the untouched tensors exactly as it does for the base model). llama.cpp stores the query
and key projections of ``llama``-architecture models permuted (rotary halves interleaved);
``ΔW`` is permuted the same way before it is added.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from tooldecode.backends.lora import gguf_name, permute_rows
from tooldecode.errors import ModelError


def _field(reader: Any, name: str) -> Any:
    f = reader.fields.get(name)
    return None if f is None else f.contents()


def export_gguf(
    base: Path, deltas: Mapping[str, np.ndarray], out: Path, metadata: Mapping[str, str] | None = None
) -> Path:
    """Write ``out``: ``base`` with ``deltas`` (``{hf_weight_name: ΔW}``) added; atomic (temp + rename)."""
    import gguf

    reader = gguf.GGUFReader(str(base))
    arch = str(_field(reader, "general.architecture"))
    n_head = int(_field(reader, f"{arch}.attention.head_count"))
    n_kv = int(_field(reader, f"{arch}.attention.head_count_kv") or n_head)
    by_gguf: dict[str, np.ndarray] = {}
    for hf_name, delta in deltas.items():
        d = np.asarray(delta, dtype=np.float32)
        if arch == "llama" and hf_name.endswith("q_proj.weight"):
            d = permute_rows(d, n_head)
        elif arch == "llama" and hf_name.endswith("k_proj.weight"):
            d = permute_rows(d, n_kv)
        by_gguf[gguf_name(hf_name)] = d
    present = {t.name for t in reader.tensors}
    missing = sorted(set(by_gguf) - present)
    if missing:
        raise ModelError(f"{base}: has no tensor {missing[0]} (and {len(missing) - 1} more) to adapt")
    tmp = out.with_name(out.name + ".partial")
    writer = gguf.GGUFWriter(str(tmp), arch=arch, endianess=reader.endianess)
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue
        val_type = field.types[0]
        sub_type = field.types[-1] if val_type == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), val_type, sub_type=sub_type)
    for key, value in (metadata or {}).items():
        writer.add_string(key, value)
    new_data: dict[str, np.ndarray] = {}
    for t in reader.tensors:
        if t.name in by_gguf:
            weight = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
            if weight.shape != by_gguf[t.name].shape:
                raise ModelError(
                    f"{base}: tensor {t.name} has shape {weight.shape}, the adapter's ΔW "
                    f"{by_gguf[t.name].shape}"
                )
            merged = weight + by_gguf[t.name]
            new_data[t.name] = merged
            writer.add_tensor_info(t.name, merged.shape, merged.dtype, merged.nbytes)
        else:
            writer.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes, t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for t in reader.tensors:
        writer.write_tensor_data(new_data.get(t.name, t.data), tensor_endianess=reader.endianess)
    writer.close()
    os.replace(tmp, out)
    return out


__all__ = ["export_gguf"]
