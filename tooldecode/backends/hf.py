"""transformers + torch backend: the same GGUF weights, dequantized to dense tensors.

CPU here (float32 by default, bfloat16 on request); CUDA with bfloat16 when torch sees a GPU.
The prompt's KV cache is computed once, kept for prefix reuse, and expanded to a batch of
sequences; each step runs one forward pass over the whole batch (finished rows are fed a pad
token and ignored).

Slots filled across prompts (``tooldecode.sampling.sample_queue``): one left-padded batch cache, each
row holding one slot's prompt and draw. A refilled slot's prompt (evaluated alone, reusing the longest
prefix among the last few prompts) is written right-aligned into its row and the columns before it are
masked; every row keeps its own positions. Columns no live row uses are cut from the left as the
stream goes on.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tooldecode.backends.base import Backend, byte_level_decoder, common_prefix, cpu_threads
from tooldecode.errors import ModelError
from tooldecode.models import ModelRef


def batch_for_memory(free_bytes: int, per_sequence_bytes: int, *, cap: int) -> int:
    """Sequences that fit in half of ``free_bytes`` (the rest is left for activations and the
    allocator), at least 1 and at most ``cap``."""
    return max(1, min(cap, int(0.5 * free_bytes) // max(1, per_sequence_bytes)))


def _free_bytes(device: str) -> int:
    import torch

    if device.startswith("cuda"):
        return int(torch.cuda.mem_get_info(torch.device(device))[0])
    try:
        for line in open("/proc/meminfo", encoding="ascii"):
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 4 << 30


def default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


class HFBackend(Backend):
    name = "hf"

    def __init__(
        self,
        model: ModelRef,
        *,
        device: str | None = None,
        dtype: str | None = None,
        n_threads: int | None = None,
    ) -> None:
        import torch

        self.model = model
        self.device = device or default_device()
        dtype = dtype or ("bfloat16" if self.device.startswith("cuda") else "float32")
        self.dtype = dtype
        if self.device == "cpu":
            torch.set_num_threads(cpu_threads(n_threads))
        self.tokenizer, self.hf = load_pretrained(model, dtype=dtype, device=self.device)
        if model.adapter is not None:
            self.hf = apply_adapter(self.hf, model)
        self.hf.eval()
        self._torch = torch
        self.n_vocab = int(self.hf.get_output_embeddings().weight.shape[0])
        tok = self.tokenizer
        eog = {tok.eos_token_id} if tok.eos_token_id is not None else set()
        gen_eos = getattr(self.hf.generation_config, "eos_token_id", None)
        if isinstance(gen_eos, int):
            eog.add(gen_eos)
        elif isinstance(gen_eos, list):
            eog.update(gen_eos)
        for t in ("<|im_end|>", "<|endoftext|>", "<end_of_turn>", "<|eot_id|>"):
            tid = tok.convert_tokens_to_ids(t)
            if isinstance(tid, int) and tid != tok.unk_token_id and tid is not None:
                eog.add(tid)
        self.eog_ids = frozenset(i for i in eog if i is not None and i < self.n_vocab)
        self._pad = min(self.eog_ids) if self.eog_ids else 0
        self._byte_decoder = _byte_decoder(tok)
        self._cached_ids: list[int] = []
        self._cached_kv: Any = None
        self._kv: Any = None
        self._n = 0
        self._cur: list[int] = []
        cfg = getattr(self.hf.config, "text_config", self.hf.config)
        # one plain attention cache per layer: a sliding-window layer cannot hold a left-padded row
        self.can_assign = not any("sliding" in str(x) for x in (getattr(cfg, "layer_types", None) or []))
        self._prompts: OrderedDict[tuple[int, ...], tuple[list[tuple[Any, Any]], Any]] = OrderedDict()
        self._slots_kv: Any = None
        self._slots_mask: Any = None
        self._slot_pos: list[int] = []
        self._fresh: set[int] = set()

    def sequence_bytes(self, tokens: int) -> int:
        """Memory one sequence of ``tokens`` needs: its own copy of the KV cache (the prompt's is
        expanded per sequence) plus a row of float32 logits."""
        cfg = self.hf.config
        cfg = getattr(cfg, "text_config", cfg)
        layers = int(cfg.num_hidden_layers)
        heads = int(getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads)
        head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads)
        elem = self._torch.finfo(getattr(self._torch, self.dtype)).bits // 8
        return 2 * layers * heads * head_dim * elem * tokens + 4 * self.n_vocab

    def suggest_batch_size(self, prompt_tokens: int, max_new_tokens: int) -> int:
        """From free memory (CUDA: the device's; CPU: MemAvailable); capped at 256 on CUDA and at 16 on
        the CPU, where a larger batch no longer raises throughput."""
        cap = 256 if self.device.startswith("cuda") else 16
        per = self.sequence_bytes(prompt_tokens + max_new_tokens)
        return batch_for_memory(_free_bytes(self.device), per, cap=cap)

    # --- tokens -------------------------------------------------------------------------------
    def tokenize(self, text: str, *, special: bool = True, add_bos: bool = False) -> list[int]:
        if special:
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        else:
            ids = self.tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]
        if add_bos and self.tokenizer.bos_token_id is not None:
            ids = [self.tokenizer.bos_token_id, *ids]
        return list(ids)

    def token_bytes(self, token_id: int) -> bytes:
        tok = self.tokenizer.convert_ids_to_tokens(int(token_id))
        if tok is None:
            return b""
        if int(token_id) in self.tokenizer.all_special_ids or tok in self.tokenizer.get_added_vocab():
            return tok.encode("utf-8")
        if self._byte_decoder is not None:
            try:
                return bytes(self._byte_decoder[c] for c in tok)
            except KeyError:
                pass
        if tok.startswith("<0x") and tok.endswith(">") and len(tok) == 6:
            return bytes([int(tok[3:5], 16)])
        return tok.replace("\u2581", " ").encode("utf-8")

    # --- evaluation ---------------------------------------------------------------------------
    def _run(self, ids: Sequence[int], past: Any) -> tuple[Any, Any]:
        torch = self._torch
        from transformers import DynamicCache

        if past is None:
            past = DynamicCache()
        with torch.inference_mode():
            out = self.hf(
                input_ids=torch.tensor([list(ids)], device=self.device), past_key_values=past, use_cache=True
            )
        return out.logits[0].float(), out.past_key_values

    def _prefill(self, ids: list[int]) -> Any:
        """Logits after the last id; the prompt cache stays in self._cached_kv."""
        common = min(common_prefix(self._cached_ids, ids), len(ids) - 1)
        if self._cached_kv is not None and common > 0:
            extra = self._cached_kv.get_seq_length() - common
            if extra > 0:
                self._cached_kv.crop(-extra)  # transformers >= 5: a negative count removes that many tokens
            past = self._cached_kv
        else:
            past, common = None, 0
        logits, past = self._run(ids[common:], past)
        self._cached_ids, self._cached_kv = list(ids), past
        return logits[-1]

    def begin(self, prompt_ids: Sequence[int], n_seqs: int) -> np.ndarray:
        ids = list(prompt_ids)
        last = self._prefill(ids)
        kv = copy.deepcopy(self._cached_kv)
        if n_seqs > 1:
            kv.batch_repeat_interleave(n_seqs)
        self._kv, self._n = kv, n_seqs
        row = last.cpu().numpy().astype(np.float32)
        return np.repeat(row[None, :], n_seqs, axis=0)

    def step(self, tokens: Sequence[int], rows: Sequence[int]) -> np.ndarray:
        torch = self._torch
        feed = [self._pad] * self._n
        for tok, row in zip(tokens, rows, strict=True):
            feed[row] = int(tok)
        with torch.inference_mode():
            out = self.hf(
                input_ids=torch.tensor(feed, device=self.device)[:, None],
                past_key_values=self._kv,
                use_cache=True,
            )
        self._kv = out.past_key_values
        logits = out.logits[:, -1, :].float()
        return logits[list(rows)].cpu().numpy()

    def end(self) -> None:
        self._kv, self._n = None, 0

    def forward(self, ids: Sequence[int], positions: Sequence[int]) -> np.ndarray:
        ids = list(ids)
        self._cached_ids, self._cached_kv = [], None
        logits, _ = self._run(ids, None)
        return logits[list(positions)].cpu().numpy()

    # --- slots filled across prompts (``tooldecode.sampling.sample_queue``) -------------------------
    #: prompts whose keys and values stay on the device for prefix reuse by ``assign``
    PROMPTS_KEPT = 4
    #: leading columns that no live row uses, cut from the slots' cache once there are this many
    TRIM_COLUMNS = 64

    def open_slots(self, n_slots: int) -> None:
        """Start a stream of ``n_slots`` rows; each gets its prompt by ``assign``."""
        self.end()
        self._slots_kv = None
        self._slots_mask = self._torch.zeros((n_slots, 0), dtype=self._torch.long, device=self.device)
        self._slot_pos = [0] * n_slots
        self._fresh: set[int] = set()

    def _prompt_kv(self, ids: list[int], have_logits: bool) -> tuple[list[tuple[Any, Any]], Any]:
        """The keys and values of ``ids`` (one per layer, batch 1) and the logits after it (``None`` when
        ``have_logits`` and the prompt is kept whole); evaluated once, reusing the longest kept prefix."""
        key = tuple(ids)
        if key in self._prompts:
            self._prompts.move_to_end(key)
            kv, logits = self._prompts[key]
            return kv, (None if have_logits else logits)
        best, donor = 0, None
        for held, (kv, _) in self._prompts.items():
            common = common_prefix(held, key)
            if common > best:
                best, donor = common, kv
        keep = min(best, len(ids) - 1)
        from transformers import DynamicCache

        past = (
            DynamicCache(ddp_cache_data=[(k[..., :keep, :], v[..., :keep, :]) for k, v in donor])
            if donor is not None and keep > 0
            else None
        )
        logits, past = self._run(ids[keep if past is not None else 0 :], past)
        kv = [(layer.keys, layer.values) for layer in past.layers]
        last = logits[-1]
        self._prompts[key] = (kv, last)
        while len(self._prompts) > self.PROMPTS_KEPT:
            self._prompts.popitem(last=False)
        return kv, last

    def assign(self, slot: int, ids: Sequence[int], *, have_logits: bool = False) -> np.ndarray | None:
        """Give row ``slot`` the prompt ``ids``, right-aligned in the batch cache (the cache grows on the
        left when the prompt is longer than it); returns the logits after the prompt (``None`` when
        ``have_logits`` and the prompt was kept: nothing is evaluated)."""
        with self._torch.inference_mode():
            return self._assign(slot, list(ids), have_logits)

    def _assign(self, slot: int, ids: list[int], have_logits: bool) -> np.ndarray | None:
        torch = self._torch
        kv, logits = self._prompt_kv(ids, have_logits)
        n_p = len(ids)
        mask = self._slots_mask
        width = int(mask.shape[1])
        if self._slots_kv is None or n_p > width:
            grow = n_p - width
            n_rows = int(mask.shape[0])
            layers = []
            for li, (k, _v) in enumerate(kv):
                shape = (n_rows, k.shape[1], grow, k.shape[3])
                pad = torch.zeros(shape, dtype=k.dtype, device=k.device)
                if self._slots_kv is None:
                    layers.append((pad, torch.zeros_like(pad)))
                else:
                    old = self._slots_kv.layers[li]
                    layers.append((torch.cat([pad, old.keys], dim=2), torch.cat([pad, old.values], dim=2)))
            from transformers import DynamicCache

            self._slots_kv = DynamicCache(ddp_cache_data=layers)
            mask = torch.cat([torch.zeros((n_rows, grow), dtype=mask.dtype, device=mask.device), mask], dim=1)
            width = n_p
        for layer, (k, v) in zip(self._slots_kv.layers, kv, strict=True):
            layer.keys[slot, :, width - n_p :] = k[0]
            layer.values[slot, :, width - n_p :] = v[0]
        mask[slot] = 0
        mask[slot, width - n_p :] = 1
        self._slots_mask = mask
        self._slot_pos[slot] = n_p
        self._fresh.add(slot)
        return None if logits is None else logits.cpu().numpy().astype(np.float32)

    def step_slots(self, tokens: Sequence[int], slots: Sequence[int]) -> np.ndarray:
        """One token for each row in ``slots``, one forward pass over every row. A row given its prompt
        since the last step waits (fed a pad it does not see); any other row has ended and is released:
        it attends only to the pads it is fed from then on, and its columns can be cut. Returns the
        logits of ``slots``' rows."""
        with self._torch.inference_mode():
            return self._step_slots(tokens, slots)

    def _step_slots(self, tokens: Sequence[int], slots: Sequence[int]) -> np.ndarray:
        torch = self._torch
        mask = self._slots_mask
        n_rows = int(mask.shape[0])
        stepped = set(slots)
        live = stepped | self._fresh
        feed = [self._pad] * n_rows
        for tok, s in zip(tokens, slots, strict=True):
            feed[s] = int(tok)
        for s in range(n_rows):
            if s not in live:
                mask[s] = 0
        new = torch.tensor([[0 if s in self._fresh and s not in stepped else 1] for s in range(n_rows)])
        mask = torch.cat([mask, new.to(device=mask.device, dtype=mask.dtype)], dim=1)
        used = mask[sorted(live)].any(dim=0).nonzero()
        cut = int(used[0, 0]) if len(used) else 0
        if cut >= self.TRIM_COLUMNS:
            for layer in self._slots_kv.layers:
                layer.keys = layer.keys[:, :, cut:]
                layer.values = layer.values[:, :, cut:]
            mask = mask[:, cut:].clone()
        positions = torch.tensor([[p] for p in self._slot_pos], device=self.device)
        out = self.hf(
            input_ids=torch.tensor(feed, device=self.device)[:, None],
            attention_mask=mask,
            position_ids=positions,
            past_key_values=self._slots_kv,
            use_cache=True,
        )
        self._slots_kv = out.past_key_values
        self._slots_mask = mask
        self._fresh = set()
        for s in slots:
            self._slot_pos[s] += 1
        return out.logits[list(slots), -1, :].float().cpu().numpy()

    @property
    def slot_columns(self) -> int:
        """Columns of the slots' batch cache now (0 outside a stream): what the cutting keeps small."""
        return 0 if self._slots_mask is None else int(self._slots_mask.shape[1])

    def close_slots(self) -> None:
        self._slots_kv, self._slots_mask, self._slot_pos, self._fresh = None, None, [], set()

    def info(self) -> dict:
        import torch
        import transformers

        return {
            "backend": self.name,
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "device": self.device,
            "dtype": self.dtype,
            "threads": torch.get_num_threads(),
            "eval_mode": "prompt in one forward pass; one token per sequence per step (padded batch)",
        }


CONVERTED_ENV = "TOOLDECODE_TRANSFORMERS_COPY"  # "0": load a GGUF through transformers every time
_SOURCE = "source.json"  # in a converted folder: what it was built from, written last


def converted_folder(ref: ModelRef) -> Path:
    """Where transformers' dense copy of ``ref``'s GGUF lives: a hidden folder beside the file (so a
    home whose ``models/`` is a link to another one shares it), or under ``$TOOLDECODE_HOME/transformers``
    where the GGUF's folder is read-only."""
    beside = ref.path.parent / f".{ref.path.name}.transformers"
    if os.access(ref.path.parent, os.W_OK):
        return beside
    from tooldecode.models import cached_sha256, home

    return home() / "transformers" / cached_sha256(ref.path)[:16]


def _source(ref: ModelRef) -> dict[str, str]:
    import torch
    import transformers

    from tooldecode.models import cached_sha256

    return {
        "gguf": ref.path.name,
        "sha256": cached_sha256(ref.path),
        "transformers": transformers.__version__,
        "torch": torch.__version__,
    }


def _from_gguf(ref: ModelRef, dtype: Any) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    quiet_gguf_progress()
    kwargs = {"gguf_file": ref.path.name}
    with one_gguf_parse():
        tok = AutoTokenizer.from_pretrained(str(ref.path.parent), **kwargs)
        model = AutoModelForCausalLM.from_pretrained(str(ref.path.parent), dtype=dtype, **kwargs)
    return tok, model


def _convert(ref: ModelRef, folder: Path, source: dict[str, str]) -> None:
    """Dequantize ``ref``'s GGUF once (float32) and save it, with its tokenizer, as a transformers folder.
    Written under a temporary name and renamed into place, ``source.json`` last: a reader sees a whole
    folder or none, and two processes converting at once both succeed."""
    import shutil
    import tempfile

    import torch

    tok, model = _from_gguf(ref, torch.float32)
    model.hf_quantizer, model.is_quantized = None, False  # dense now: transformers refuses to save
    if hasattr(model.config, "quantization_config"):  # a model it believes is GGUF-quantized
        del model.config.quantization_config
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        tmp.chmod(0o755)  # mkdtemp's 0700 would keep the copy from other users of a shared models folder
        tok.save_pretrained(tmp)
        model.save_pretrained(tmp)
        (tmp / _SOURCE).write_text(json.dumps(source, indent=1) + "\n")
        if folder.exists():  # stale (another GGUF or another transformers): replace it
            shutil.rmtree(folder, ignore_errors=True)
        try:
            os.replace(tmp, folder)
        except OSError:  # another process put a folder there first
            if not (folder / _SOURCE).is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _copy_switch() -> bool:
    value = os.environ.get(CONVERTED_ENV, "1").strip()
    if value not in ("0", "1"):
        raise ModelError(
            f"{CONVERTED_ENV}={value!r} is not 0 or 1; unset it, or set 0 to load GGUFs directly"
        )
    return value == "1"


def _ready_folder(ref: ModelRef) -> Path | None:
    """The converted folder of a GGUF ``ref``, built or rebuilt if it is missing or stale; None when the
    copy is switched off or ``ref`` is a transformers folder already."""
    if not (ref.is_gguf and _copy_switch()):
        return None
    folder = converted_folder(ref)
    source = _source(ref)
    try:
        built = json.loads((folder / _SOURCE).read_text())
    except (OSError, ValueError):
        built = None
    if built != source:
        _convert(ref, folder, source)
    return folder


def _load_error(ref: ModelRef, folder: Path | None, err: Exception) -> ModelError:
    first = (str(err).strip().splitlines() or [type(err).__name__])[0]
    hint = (
        f"delete {folder} (transformers' copy of the GGUF) and it is rebuilt"
        if folder is not None
        else "check the file with `tooldecode models verify`"
    )
    return ModelError(f"transformers could not load '{ref.path}' ({first[:160]}); {hint}")


def load_pretrained(ref: ModelRef, *, dtype: str, device: str) -> tuple[Any, Any]:
    """(tokenizer, model) of ``ref`` through transformers, in ``dtype`` on ``device``; its adapter is
    not applied (``apply_adapter``).

    A GGUF is dequantized once into a transformers folder (``converted_folder``; float32 weights, the
    tokenizer, ``source.json`` naming the GGUF's sha256 and the transformers and torch versions) and
    loaded from there: the same tensors, bit for bit, in a second or two instead of the minute transformers
    takes to parse and dequantize a GGUF (tests/test_backends_hf_copy.py). A folder built from other bytes
    or other versions is rebuilt. ``TOOLDECODE_TRANSFORMERS_COPY=0`` loads the GGUF every time."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    torch_dtype = getattr(torch, dtype)
    folder = None
    try:
        folder = _ready_folder(ref)
        if folder is None and ref.is_gguf:
            tok, model = _from_gguf(ref, torch_dtype)
        else:
            where = str(folder if folder is not None else ref.path)
            tok = AutoTokenizer.from_pretrained(where)
            model = AutoModelForCausalLM.from_pretrained(where, dtype=torch_dtype)
    except (OSError, ValueError, KeyError, RuntimeError) as err:
        raise _load_error(ref, folder, err) from None
    return tok, model.to(device)


def load_tokenizer(ref: ModelRef) -> Any:
    """transformers' tokenizer of ``ref``, from the same converted folder as ``load_pretrained``."""
    import transformers
    from transformers import AutoTokenizer

    transformers.logging.set_verbosity_error()
    folder = None
    try:
        folder = _ready_folder(ref)
        if folder is None and ref.is_gguf:
            quiet_gguf_progress()
            with one_gguf_parse():
                return AutoTokenizer.from_pretrained(str(ref.path.parent), gguf_file=ref.path.name)
        return AutoTokenizer.from_pretrained(str(folder if folder is not None else ref.path))
    except (OSError, ValueError, KeyError, RuntimeError) as err:
        raise _load_error(ref, folder, err) from None


@contextlib.contextmanager
def one_gguf_parse() -> Iterator[None]:
    """Within the block a GGUF file is parsed once, and its tensor-name table built once: transformers
    builds a ``gguf.GGUFReader`` (which reads every metadata field, the whole vocabulary and merges
    included, element by element in Python) for the tokenizer, again for the config and again for the
    weights, and a ``gguf.TensorNameMap`` for every module of the model: most of a small model's load.
    Both are read-only (a view of the file, a lookup table) and are dropped at the end of the block."""
    import gguf

    original_reader, original_names = gguf.GGUFReader, gguf.get_tensor_name_map
    readers: dict[tuple[str, str], Any] = {}
    names: dict[tuple[Any, int], Any] = {}

    def reader(path: Any, mode: str = "r") -> Any:
        key = (os.fspath(path), mode)
        if key not in readers:
            readers[key] = original_reader(path, mode)
        return readers[key]

    def name_map(arch: Any, n_blocks: int) -> Any:
        if (arch, n_blocks) not in names:
            names[arch, n_blocks] = original_names(arch, n_blocks)
        return names[arch, n_blocks]

    gguf.GGUFReader, gguf.get_tensor_name_map = reader, name_map
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = original_reader, original_names


def apply_adapter(hf_model: Any, model: ModelRef) -> Any:
    """``hf_model`` with ``model``'s LoRA adapter (peft) merged into its in-memory weights: the same
    W + B·A·α/r that llama.cpp applies at run time, on the weights transformers loaded for the base."""
    import warnings

    from peft import PeftModel

    adapter = model.adapter
    assert adapter is not None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            peft_model = PeftModel.from_pretrained(hf_model, str(adapter.folder), is_trainable=False)
    except (OSError, ValueError, KeyError, RuntimeError) as err:
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise ModelError(f"peft could not apply the adapter {adapter.folder} ({first[:160]})") from None
    return peft_model.merge_and_unload()


def quiet_gguf_progress() -> None:
    """transformers wraps GGUF dequantization in a bare tqdm bar; keep the terminal clean."""
    from transformers import modeling_gguf_pytorch_utils as gguf_utils

    gguf_utils.tqdm = lambda iterable, **_: iterable


def _byte_decoder(tokenizer: Any) -> dict[str, int] | None:
    """GPT-2 style byte-level BPE: map the printable stand-in characters back to bytes."""
    decoder = byte_level_decoder()
    vocab = tokenizer.get_vocab()
    # byte-level vocabularies use "Ġ" for space; sentencepiece ones use "▁"
    if any("Ġ" in t for t in list(vocab)[:5000]):
        return decoder
    return None
