"""llama.cpp backend through llama-cpp-python's low-level bindings.

One context holds a unified KV cache shared by up to ``max_seqs`` sequences. The prompt lives in
sequence 0 and stays cached between calls (only the part after the common prefix is evaluated);
``begin`` copies it to sequences 1..n-1 (a metadata copy in a unified cache), and each ``step``
decodes one token for every active sequence in a single batch.

Evaluation mode: prompts are evaluated in chunks of ``n_batch`` tokens aligned to absolute
position 0 (a cached prefix is cut back to a chunk boundary), generated tokens one per sequence per
step. ``forward`` (teacher forcing, used by the probe) uses the same aligned chunks.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tooldecode.backends.base import (
    Backend,
    common_prefix,
    cpu_threads,
    feed_branches,
    llama_piece,
    llama_tokenize,
)
from tooldecode.backends.prefix_store import ENV as PREFIX_ENV
from tooldecode.backends.prefix_store import PrefixStore
from tooldecode.errors import ModelError
from tooldecode.models import ModelRef

# ggml's OpenMP threads spin while they wait. With libgomp's default spin count, a decode step on a
# shared 2-core machine went from 38 ms to ~870 ms whenever other processes wanted the CPU. A short
# spin keeps the idle speed (qwen 0.5B, batch 1: 37.8 ms vs 36.4 ms always spinning, 53.5 ms passive)
# and bounds the loss under load. Must be set before libgomp is loaded, i.e. before llama_cpp is
# imported; OMP_WAIT_POLICY / GOMP_SPINCOUNT set by the user win.
os.environ.setdefault("GOMP_SPINCOUNT", "20000")


def llama_cpp_module() -> Any:
    """llama-cpp-python, its log quiet unless ``TOOLDECODE_LLAMA_VERBOSE`` is set; ModelError where it is
    not installed."""
    try:
        import llama_cpp
        from llama_cpp import _logger
    except ImportError as err:  # pragma: no cover - depends on the install
        raise ModelError(
            f"llama-cpp-python is not installed ({err}); run `make setup` to build and install it"
        ) from None
    _logger.set_verbose(bool(os.environ.get("TOOLDECODE_LLAMA_VERBOSE")))
    return llama_cpp


def read_gguf(llama_cpp: Any, path: Path, **params: Any) -> Any:
    """A llama.cpp model read from the ``.gguf`` file at ``path`` with the model parameters ``params``
    (``n_gpu_layers``, ``vocab_only``, ...) set; ValueError where llama.cpp cannot read the file."""
    from llama_cpp._internals import LlamaModel

    llama_cpp.llama_backend_init()
    mparams = llama_cpp.llama_model_default_params()
    for name, value in params.items():
        setattr(mparams, name, value)
    return LlamaModel(path_model=str(path), params=mparams, verbose=False)


# Tokens this process evaluated, over every llama.cpp context (benchmarks/bench_eval.py reads them):
# prompt tokens decoded (after any reuse of a cached prefix), decode steps and tokens decoded in them.
COUNTERS = {"prompt_tokens": 0, "decode_steps": 0, "decode_tokens": 0}


def _store_setting(llama_cpp: Any, model: ModelRef, cparams: Any, n_gpu_layers: int) -> str:
    """What the stored KV depends on besides the tokens: the weights (the base's sha256 and the
    adapter's, with its scale), llama.cpp's version and the context settings that shape the cache."""
    adapter = model.adapter
    return "|".join(
        str(x)
        for x in (
            model.digest(),
            adapter.scale if adapter is not None else "-",
            getattr(llama_cpp, "__version__", "?"),
            cparams.n_batch,
            cparams.n_ubatch,
            cparams.type_k,
            cparams.type_v,
            getattr(cparams, "flash_attn_type", getattr(cparams, "flash_attn", "?")),
            n_gpu_layers,
        )
    )


class LlamaCppBackend(Backend):
    name = "llamacpp"

    def __init__(
        self,
        model: ModelRef,
        *,
        n_ctx: int = 8192,
        max_seqs: int = 64,
        n_batch: int = 512,
        n_threads: int | None = None,
        n_gpu_layers: int = 0,
        kv_unified: bool = True,
    ) -> None:
        if not model.is_gguf:
            raise ModelError(f"llama.cpp needs a .gguf file; '{model.path}' is a folder (use --backend hf)")
        llama_cpp = llama_cpp_module()
        from llama_cpp._internals import LlamaBatch, LlamaContext

        self._lc = llama_cpp
        self.model = model
        self.n_threads = cpu_threads(n_threads)
        self.n_batch = n_batch
        self.max_seqs = max_seqs
        try:
            self._model = read_gguf(llama_cpp, model.path, n_gpu_layers=n_gpu_layers)
        except ValueError:
            from tooldecode.models import REGISTRY

            fix = (
                f"run `tooldecode models fetch {model.id} --force`"
                if model.id in REGISTRY
                else "download or convert the file again"
            )
            raise ModelError(
                f"llama.cpp could not load '{model.path}' (corrupt or unsupported GGUF); {fix}"
            ) from None
        cparams = llama_cpp.llama_context_default_params()
        cparams.n_ctx = n_ctx
        cparams.n_batch = max(n_batch, max_seqs)
        cparams.n_ubatch = max(n_batch, max_seqs)
        cparams.n_seq_max = max_seqs
        cparams.n_threads = self.n_threads
        cparams.n_threads_batch = self.n_threads
        cparams.kv_unified = kv_unified
        cparams.no_perf = True
        try:
            self._ctx = LlamaContext(model=self._model, params=cparams, verbose=False)
        except ValueError:
            raise ModelError(
                f"llama.cpp could not create a context of {n_ctx} tokens for '{model.id}'"
            ) from None
        self._lora = None
        if model.adapter is not None:
            self._apply_adapter(model)
        self.kv_unified = kv_unified
        self.n_ctx = llama_cpp.llama_n_ctx(self._ctx.ctx)
        # the tokens one sequence can hold: the whole cache when it is unified, its own stream otherwise
        self.n_ctx_seq = self.n_ctx if kv_unified else llama_cpp.llama_n_ctx_seq(self._ctx.ctx)
        self._vocab = self._model.vocab
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(self._vocab)
        self.eog_ids = frozenset(
            i for i in range(self.n_vocab) if llama_cpp.llama_vocab_is_eog(self._vocab, i)
        )
        self._add_bos = bool(llama_cpp.llama_vocab_get_add_bos(self._vocab))
        self._batch = LlamaBatch(n_tokens=max(n_batch, max_seqs), embd=0, n_seq_max=1, verbose=False)
        self._cached: list[int] = []  # tokens held by sequence 0
        self._n_branches = 0
        self._pos: list[int] = []
        self._prompt_len = 0
        # prompt KV on disk, when asked for (the setting hashes the model: only then)
        self._store = (
            PrefixStore.from_env(
                _store_setting(llama_cpp, model, cparams, n_gpu_layers) + ("" if kv_unified else "|streams"),
                n_batch,
            )
            if os.environ.get(PREFIX_ENV, "").strip()
            else None
        )

    def _apply_adapter(self, model: ModelRef) -> None:
        """Load the organism's LoRA adapter (llama.cpp's adapter GGUF, written from the peft file on first
        use) and apply it to the context: the base weights stay as shipped."""
        from tooldecode.backends.lora import llama_adapter_file

        adapter = model.adapter
        assert adapter is not None
        from tooldecode.models import cached_sha256

        path = llama_adapter_file(adapter.folder, adapter.sha256, model.path, cached_sha256(model.path))
        lc = self._lc
        handle = lc.llama_adapter_lora_init(self._model.model, str(path).encode())
        if not handle:
            raise ModelError(f"llama.cpp could not load the LoRA adapter {path} on {model.path}")
        self._lora = handle
        if hasattr(lc, "llama_set_adapter_lora"):
            rc = lc.llama_set_adapter_lora(self._ctx.ctx, handle, float(adapter.scale))
        else:  # newer llama.cpp: one call sets the context's whole list of adapters
            import ctypes

            handles = (ctypes.c_void_p * 1)(ctypes.cast(handle, ctypes.c_void_p).value)
            scales = (ctypes.c_float * 1)(float(adapter.scale))
            rc = lc.llama_set_adapters_lora(self._ctx.ctx, handles, 1, scales)
        if rc != 0:
            raise ModelError(f"llama.cpp could not apply the LoRA adapter {path} (code {rc})")

    # --- tokens -------------------------------------------------------------------------------
    def tokenize(self, text: str, *, special: bool = True, add_bos: bool = False) -> list[int]:
        return llama_tokenize(self._lc, self._vocab, text, add_bos=add_bos and self._add_bos, special=special)

    def token_bytes(self, token_id: int) -> bytes:
        return llama_piece(self._lc, self._vocab, token_id, special=True)

    @property
    def bos_id(self) -> int | None:
        bos = self._lc.llama_vocab_bos(self._vocab)
        return bos if bos >= 0 and self._add_bos else None

    # --- evaluation ---------------------------------------------------------------------------
    def _mem(self):
        return self._ctx.memory

    def _decode_chunk(self, tokens: Sequence[int], start: int, want: Sequence[int], seq: int = 0) -> None:
        """Decode tokens[...] for sequence ``seq`` at absolute positions start.. ; logits for indices in want."""
        b = self._batch.batch
        b.n_tokens = len(tokens)
        wanted = set(want)
        for i, tok in enumerate(tokens):
            b.token[i] = tok
            b.pos[i] = start + i
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = seq
            b.logits[i] = i in wanted
        rc = self._lc.llama_decode(self._ctx.ctx, b)
        if rc != 0:
            raise ModelError(
                f"llama_decode failed (code {rc}); the prompt may exceed the context of {self.n_ctx}"
            )
        COUNTERS["prompt_tokens"] += len(tokens)

    def _logits_row(self, i: int) -> np.ndarray:
        ptr = self._lc.llama_get_logits_ith(self._ctx.ctx, i)
        return np.ctypeslib.as_array(ptr, shape=(self.n_vocab,)).copy()

    def _restore(self, seq: int, ids: Sequence[int], upto: int, keep: int) -> int:
        """Where ``seq`` stands after giving it the longest stored aligned prefix of ``ids`` (at most
        ``upto`` tokens) when that is longer than ``keep``: the prefix's length, ``keep`` when nothing
        longer is stored (``seq`` untouched), 0 when a stored entry would not restore (``seq`` cleared)."""
        if self._store is None:
            return keep
        end = self._store.longest(ids, upto)
        data = self._store.read(ids, end) if end > keep else None
        if data is None:
            return keep
        self._lc.llama_memory_seq_rm(self._mem(), seq, -1, -1)
        buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
        if self._lc.llama_state_seq_set_data(self._ctx.ctx, buf, len(data), seq) != len(data):
            self._lc.llama_memory_seq_rm(self._mem(), seq, -1, -1)
            return 0
        self._store.hits += 1
        return end

    def _keep(self, seq: int, ids: Sequence[int], end: int) -> None:
        """Store ``seq``'s KV, which holds exactly ``ids[:end]``, when ``end`` closes an aligned chunk."""
        if self._store is None or end % self.n_batch or self._store.has(ids, end):
            return
        size = self._lc.llama_state_seq_get_size(self._ctx.ctx, seq)
        buf = (ctypes.c_uint8 * size)()
        n = self._lc.llama_state_seq_get_data(self._ctx.ctx, buf, size, seq)
        if n:
            self._store.write(ids, end, bytes(memoryview(buf)[:n]))

    def _eval_seq0(self, ids: Sequence[int], want_positions: Sequence[int]) -> np.ndarray:
        """Bring sequence 0 to ``ids`` (aligned chunks, prefix reuse) and return logits at want_positions."""
        if len(ids) > self.n_ctx_seq:
            raise ModelError(
                f"prompt of {len(ids)} tokens exceeds the context of {self.n_ctx_seq} a sequence has; raise n_ctx"
            )
        common = common_prefix(self._cached, ids)
        first_want = min(want_positions) if want_positions else len(ids) - 1
        keep = min(common, first_want, len(ids) - 1)
        keep -= keep % self.n_batch  # chunks stay aligned to absolute positions
        self._lc.llama_memory_seq_rm(self._mem(), 0, keep, -1)
        keep = self._restore(0, ids, min(first_want, len(ids) - 1), keep)
        self._cached = list(ids[:keep])
        out = np.empty((len(want_positions), self.n_vocab), dtype=np.float32)
        index = {p: k for k, p in enumerate(want_positions)}
        for start in range(keep, len(ids), self.n_batch):
            chunk = ids[start : start + self.n_batch]
            local = [p - start for p in want_positions if start <= p < start + len(chunk)]
            self._decode_chunk(chunk, start, local)
            for j in local:
                out[index[start + j]] = self._logits_row(j)
            self._cached.extend(chunk)
            self._keep(0, ids, start + len(chunk))
        return out

    def begin(self, prompt_ids: Sequence[int], n_seqs: int) -> np.ndarray:
        if n_seqs > self.max_seqs:
            raise ValueError(f"n_seqs {n_seqs} > max_seqs {self.max_seqs}")
        if self._n_branches:
            self.end()
        ids = list(prompt_ids)
        logits = self._eval_seq0(ids, [len(ids) - 1])
        for s in range(1, n_seqs):
            self._share(0, s, None)
        self._n_branches = n_seqs
        self._prompt_len = len(ids)
        self._pos = [len(ids)] * n_seqs
        return np.repeat(logits, n_seqs, axis=0)

    def step(self, tokens: Sequence[int], rows: Sequence[int]) -> np.ndarray:
        positions = [self._pos[row] for row in rows]
        for row in rows:
            self._pos[row] += 1
        return self._decode_each(tokens, rows, positions)

    can_restart = True

    def suggest_batch_size(self, prompt_tokens: int, max_new_tokens: int) -> int:
        """16 parallel sequences (past that, a step on 2 CPU cores costs as much per token), fewer when
        the unified KV cache cannot hold every sequence's new tokens next to the shared prompt (each
        sequence of a cache in streams holds its own copy of the prompt in its own stream)."""
        if not self.kv_unified:
            return max(1, min(16, self.max_seqs))
        room = (self.n_ctx - prompt_tokens) // max(1, max_new_tokens)
        return max(1, min(16, self.max_seqs, room))

    def restart(self, row: int) -> None:
        if not 0 <= row < self._n_branches:
            raise ValueError(f"row {row} is not a sequence of the current begin ({self._n_branches})")
        mem = self._mem()
        n_prompt = self._prompt_len
        if row == 0:  # sequence 0 holds the prompt: drop only what it generated
            self._lc.llama_memory_seq_rm(mem, 0, n_prompt, -1)
        else:
            self._share(0, row, n_prompt)
        self._pos[row] = n_prompt

    def end(self) -> None:
        mem = self._mem()
        for s in range(1, self._n_branches):
            self._lc.llama_memory_seq_rm(mem, s, -1, -1)
        self._lc.llama_memory_seq_rm(mem, 0, len(self._cached), -1)
        self._n_branches = 0

    # --- slots filled across prompts (``tooldecode.sampling.sample_queue``) -------------------------
    can_assign = True

    def open_slots(self, n_slots: int) -> None:
        """Start a stream of ``n_slots`` slots (sequences 1..n_slots); each gets its prompt by ``assign``.
        Sequence 0 keeps its cached prompt and serves as a donor of prefixes."""
        if n_slots + 1 > self.max_seqs:
            raise ValueError(f"{n_slots} slots need {n_slots + 1} sequences; the context has {self.max_seqs}")
        if self._n_branches:
            self.end()
        self._slot_prompts: list[list[int]] = [[] for _ in range(n_slots)]
        self._slot_pos = [0] * n_slots
        self._n_slots = n_slots

    def assign(self, slot: int, ids: Sequence[int], *, have_logits: bool = False) -> np.ndarray | None:
        """Give slot ``slot`` the prompt ``ids``: its longest prefix held by another slot or by sequence 0 is
        shared (a metadata copy in the unified cache), cut back to a multiple of ``n_batch`` so the rest
        is evaluated in the same aligned chunks whatever the donor; returns the logits after the prompt
        (``None`` when ``have_logits`` and a donor holds the whole prompt: nothing is evaluated)."""
        ids = list(ids)
        if len(ids) + 1 > self.n_ctx_seq:
            raise ModelError(
                f"prompt of {len(ids)} tokens exceeds the context of {self.n_ctx_seq} a sequence has; raise n_ctx"
            )
        seq = slot + 1
        self._lc.llama_memory_seq_rm(self._mem(), seq, -1, -1)
        self._slot_prompts[slot] = []
        best, donor = 0, -1
        for other, held in [(0, self._cached)] + [
            (k + 1, p) for k, p in enumerate(self._slot_prompts) if k != slot and p
        ]:
            common = common_prefix(held, ids)
            if common > best:
                best, donor = common, other
        if have_logits and best == len(ids):
            self._share(donor, seq, len(ids))
            self._slot_prompts[slot], self._slot_pos[slot] = ids, len(ids)
            return None
        keep = min(best, len(ids) - 1)
        keep -= keep % self.n_batch
        stored = self._restore(seq, ids, len(ids) - 1, keep)
        if stored != keep:
            keep = stored
        elif keep:
            self._share(donor, seq, keep)
        out = None
        for start in range(keep, len(ids), self.n_batch):
            chunk = ids[start : start + self.n_batch]
            last = start + len(chunk) == len(ids)
            self._decode_chunk(chunk, start, [len(chunk) - 1] if last else [], seq=seq)
            if last:
                out = self._logits_row(len(chunk) - 1)
            self._keep(seq, ids, start + len(chunk))
        self._slot_prompts[slot], self._slot_pos[slot] = ids, len(ids)
        return out

    def restart_slot(self, slot: int) -> None:
        """Slot ``slot`` back to its bare prompt: what it generated is dropped, its prompt's cells are kept
        (the logits after the prompt are the caller's, from ``assign``)."""
        held = self._slot_prompts[slot]
        if not held:
            raise ValueError(f"slot {slot} holds no prompt; give it one with assign")
        self._lc.llama_memory_seq_rm(self._mem(), slot + 1, len(held), -1)
        self._slot_pos[slot] = len(held)

    def step_slots(self, tokens: Sequence[int], slots: Sequence[int]) -> np.ndarray:
        """One token for each slot in ``slots``, one batch; a view of their logits (valid until the next
        decode)."""
        positions = [self._slot_pos[s] for s in slots]
        for s in slots:
            self._slot_pos[s] += 1
        return self._decode_each(tokens, [s + 1 for s in slots], positions)

    def close_slots(self) -> None:
        mem = self._mem()
        for s in range(getattr(self, "_n_slots", 0)):
            self._lc.llama_memory_seq_rm(mem, s + 1, -1, -1)
        self._slot_prompts, self._n_slots = [], 0

    def branch_logits(self, prefix_ids: Sequence[int], continuations: Sequence[Sequence[int]]) -> np.ndarray:
        """Logits after ``prefix + c`` for each continuation ``c`` (``Backend.branch_logits``).

        When sequence 0 already holds ``prefix_ids`` (e.g. the probe's teacher-forced pass over the whole
        call), the branches share its cached prefix (``llama_memory_seq_cp`` of positions ``[0, len(prefix))``)
        and sequence 0 keeps its longer text, so the next decision point of the same call reuses it too.
        Otherwise the prefix is evaluated as ``begin`` does. Either way every continuation token is
        evaluated one token per sequence per step, as in sampling.
        """
        prefix = list(prefix_ids)
        n = len(prefix)
        if self._n_branches:
            self.end()
        if not continuations or n == 0 or self.max_seqs < 2 or self._cached[:n] != prefix:
            return super().branch_logits(prefix_ids, continuations)
        out = np.empty((len(continuations), self.n_vocab), dtype=np.float32)
        mem = self._mem()
        group = self.max_seqs - 1  # sequence 0 keeps the cached text; branches are sequences 1..group
        for g in range(0, len(continuations), group):
            conts = continuations[g : g + group]
            for s in range(1, len(conts) + 1):
                self._share(0, s, n)
            try:
                feed_branches(
                    conts,
                    lambda toks, rows, k: self._decode_each(toks, [r + 1 for r in rows], [n + k] * len(rows)),
                    out,
                    g,
                )
            finally:
                for s in range(1, len(conts) + 1):
                    self._lc.llama_memory_seq_rm(mem, s, -1, -1)
        return out

    def _share(self, src: int, dst: int, n: int | None) -> None:
        """Sequence ``dst`` holds the first ``n`` positions of ``src`` (all of them for None), and nothing
        else. In a unified cache the cells are shared (a metadata copy); across streams llama.cpp copies
        whole sequences only, so the whole of ``src`` is copied and what lies past ``n`` dropped."""
        mem = self._mem()
        self._lc.llama_memory_seq_rm(mem, dst, -1, -1)
        if self.kv_unified:
            p0, p1 = (-1, -1) if n is None else (0, n)
            self._lc.llama_memory_seq_cp(mem, src, dst, p0, p1)
            return
        self._lc.llama_memory_seq_cp(mem, src, dst, -1, -1)
        if n is not None:
            self._lc.llama_memory_seq_rm(mem, dst, n, -1)

    def _decode_each(
        self, tokens: Sequence[int], seqs: Sequence[int], positions: Sequence[int]
    ) -> np.ndarray:
        """One token for each sequence in ``seqs`` at its position; a view of their logits (valid until the
        next decode: no per-step copy)."""
        b = self._batch.batch
        b.n_tokens = len(tokens)
        for i, (tok, seq, pos) in enumerate(zip(tokens, seqs, positions, strict=True)):
            b.token[i] = int(tok)
            b.pos[i] = pos
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = seq
            b.logits[i] = True
        rc = self._lc.llama_decode(self._ctx.ctx, b)
        if rc != 0:
            raise ModelError(
                f"llama_decode failed (code {rc}) at batch {len(tokens)}; the KV cache of {self.n_ctx} tokens "
                "is full: lower the batch size, max_new_tokens or max_branches, or raise n_ctx"
            )
        COUNTERS["decode_steps"] += 1
        COUNTERS["decode_tokens"] += len(tokens)
        ptr = self._lc.llama_get_logits(self._ctx.ctx)
        return np.ctypeslib.as_array(ptr, shape=(len(tokens), self.n_vocab))

    def forward(self, ids: Sequence[int], positions: Sequence[int]) -> np.ndarray:
        if self._n_branches:
            self.end()
        return self._eval_seq0(list(ids), list(positions))

    def info(self) -> dict:
        import llama_cpp

        return {
            "backend": self.name,
            "llama_cpp_python": llama_cpp.__version__,
            "adapter": "lora at run time" if self._lora is not None else None,
            "device": "cpu",
            "threads": self.n_threads,
            "n_ctx": self.n_ctx,
            "n_batch": self.n_batch,
            "kv_unified": self.kv_unified,
            "eval_mode": f"prompt in aligned chunks of {self.n_batch}; one token per sequence per step",
        }

    def close(self) -> None:
        for obj in ("_batch", "_ctx", "_model"):
            thing = getattr(self, obj, None)
            if thing is not None:
                thing.close()
                setattr(self, obj, None)
