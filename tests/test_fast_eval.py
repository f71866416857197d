"""Fast evaluation: draws of many prompts on one decode stream (``sample_queue``), the run-time LoRA
adapter on both backends, and the runner's ``fill_slots`` queue, on SmolLM2 through llama.cpp."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from tooldecode.masking import compile_mask
from tooldecode.sampling import DrawRequest, SamplingParams, sample, sample_queue

pytestmark = pytest.mark.model

PROMPTS = [
    "<|im_start|>user\nWrite a short python function that adds two numbers.<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>user\nWrite a short python function that reverses a string.<|im_end|>\n<|im_start|>assistant\n",
    '<|im_start|>user\nGive me a JSON object with a key "a" holding a small number.<|im_end|>\n'
    "<|im_start|>assistant\n",
]
GBNF = r'''root ::= "{\"a\": " [1-9] [0-9]? "}"'''


def _requests(be, n: int, sink: dict, masked: bool = True) -> list[DrawRequest]:
    mask = compile_mask("xgrammar", GBNF, be) if masked else None
    reqs = []
    for k, p in enumerate(PROMPTS):
        params = SamplingParams(temperature=1.0, max_new_tokens=24, seed=0, stream=k)
        m = mask if k == 2 else None

        def keep(batch, k=k):
            for s in batch:
                assert (k, s.index) not in sink  # each draw once
                sink[(k, s.index)] = s

        reqs.append(DrawRequest(be.tokenize(p), n, params, mask=m, on_batch=keep))
    return reqs


def _job_by_job(be, n: int) -> dict:
    ref: dict = {}
    for k, req in enumerate(_requests(be, n, {})):
        for s in sample(be, req.prompt_ids, n, req.params, mask=req.mask, batch_size=n):
            ref[(k, s.index)] = s
    return ref


def _agreement(ref: dict, got: dict, first_tol: float) -> tuple[int, list[float]]:
    """Draws that flip a token, and |Δ log p| before the flip; the first token's log-probability agrees
    within ``first_tol``, and the masked request's draws follow the grammar whatever shares their steps."""
    assert set(got) == set(ref)
    flips, before = 0, []
    for key, a in ref.items():
        b = got[key]
        assert b.logprobs[0] == pytest.approx(a.logprobs[0], abs=first_tol)
        for ta, tb, la, lb in zip(a.token_ids, b.token_ids, a.logprobs, b.logprobs, strict=False):
            if ta != tb:
                flips += 1
                break
            before.append(abs(la - lb))
        if key[0] == 2:
            assert b.finish_reason == "stop" and json.loads(b.text)["a"] >= 1
    return flips, before


def test_one_prompt_in_one_stream_is_the_job_by_job_sampler_exactly(llama_smol):
    """With as many slots as draws and one prompt nothing is refilled: the same cells, the same numbers."""
    got: dict = {}
    req = _requests(llama_smol, 6, got, masked=False)[0]
    sample_queue(llama_smol, [req], slots=6)
    ref = sample(llama_smol, PROMPTS[0], 6, req.params, batch_size=6)
    assert [s.token_ids for s in ref] == [got[(0, i)].token_ids for i in range(6)]
    assert [s.logprobs for s in ref] == [got[(0, i)].logprobs for i in range(6)]


def test_a_draw_does_not_depend_on_which_draws_share_its_steps(llama_smol):
    """Three prompts (one masked), 8 draws each: job by job with a slot per draw (no refill) vs one stream
    of 5 slots refilled across prompts. Each draw keeps its own random stream and matcher, so it is the
    same draw up to the floating-point order of the attention over the cache's cells (a refilled slot's
    cells lie elsewhere): the first token's log-probability is identical, later ones agree to the stated
    tolerance until a token flips, and the flip rate is bounded (measured 3 of 24 on this machine; the
    job-by-job sampler's own refills flip about as often)."""
    n = 8
    ref = _job_by_job(llama_smol, n)
    got: dict = {}
    sample_queue(llama_smol, _requests(llama_smol, n, got), slots=5)
    flips, before = _agreement(ref, got, 1e-5)
    print(
        f"queue vs job by job: {flips} of {len(ref)} draws flip a token; max |Δ log p| before a flip "
        f"{max(before):.4f}"
    )
    assert flips <= len(ref) // 2
    assert float(np.median(before)) < 1e-3 and max(before) < 1.0


def test_a_cache_in_streams_draws_what_the_unified_cache_draws(llama_smol, smol_ref):
    """A filled-slot context keeps each sequence in a stream of its own (``kv_unified`` false: a token
    attends over its own sequence's cells only). The same check against job by job on the unified cache:
    every draw once, the first token's log-probability the same, later ones close until a token flips;
    prefixes shared across streams (whole-sequence copies cut back) and slots restarted to their prompt."""
    from tooldecode.backends import load_backend

    n = 8
    ref = _job_by_job(llama_smol, n)
    streams = load_backend("llamacpp", smol_ref, n_ctx=6 * 1024, max_seqs=6, kv_unified=False)
    try:
        assert streams.info()["kv_unified"] is False and streams.n_ctx_seq == 1024
        got: dict = {}
        sample_queue(streams, _requests(streams, n, got), slots=5)
        flips, before = _agreement(ref, got, 1e-5)
        print(
            f"streams vs job by job: {flips} of {len(ref)} draws flip a token; max |Δ log p| {max(before):.4f}"
        )
        assert flips <= len(ref) // 2
        assert float(np.median(before)) < 1e-3 and max(before) < 1.0
        # a slot given a prompt another slot holds shares it, and a restart keeps only the prompt
        ids = streams.tokenize(PROMPTS[1])
        streams.open_slots(2)
        first = streams.assign(0, ids)
        assert streams.assign(1, ids, have_logits=True) is None  # the whole prompt copied from slot 0
        a = np.array(streams.step_slots([ids[-1] % 100 + 10, ids[-1] % 100 + 10], [0, 1]))
        assert np.allclose(a[0], a[1], atol=1e-4)
        streams.restart_slot(1)
        b = np.array(streams.step_slots([ids[-1] % 100 + 10], [1]))
        assert np.allclose(a[1], b[0], atol=1e-4) and first is not None
        streams.close_slots()
        # a prompt longer than a stream is a one-line error
        with pytest.raises(Exception, match="exceeds the context of 1024 a sequence has"):
            streams.open_slots(1)
            streams.assign(0, list(ids) * 200)
    finally:
        streams.close()


def test_the_transformers_backend_fills_slots_across_prompts_as_llama_cpp_does(hf_smol):
    """The same check on transformers + torch (the GPU queue's backend): one left-padded batch cache, a
    refilled row's prompt written right-aligned with its own positions, and (here at every step) the
    columns no live row uses cut from the left. Three prompts (one masked), 4 draws each, job by job vs
    one stream of 3 slots refilled across prompts: every draw comes back once, the first token's
    log-probability is the same, and later ones agree until a token flips (measured: no flip in 24 draws
    of 8 a prompt on this machine, |Δ log p| at most 3e-5)."""
    n = 4
    ref = _job_by_job(hf_smol, n)
    got: dict = {}
    assert hf_smol.can_assign
    widths: list[int] = []
    step = hf_smol.step_slots

    def watched(tokens, slots):
        out = step(tokens, slots)
        widths.append(hf_smol.slot_columns)
        return out

    hf_smol.TRIM_COLUMNS, hf_smol.step_slots = 1, watched
    try:
        sample_queue(hf_smol, _requests(hf_smol, n, got), slots=3)
    finally:
        del hf_smol.TRIM_COLUMNS, hf_smol.step_slots
    assert any(b < a for a, b in zip(widths, widths[1:], strict=False))  # the cache was cut as rows ended
    flips, before = _agreement(ref, got, 1e-4)
    print(
        f"hf queue vs job by job: {flips} of {len(ref)} draws flip a token; max |Δ log p| {max(before):.2e}"
    )
    assert flips <= len(ref) // 4
    assert float(np.median(before)) < 1e-4 and max(before) < 0.1


def test_the_queue_draws_each_index_once_with_its_own_stream(llama_smol):
    got: dict = {}
    reqs = _requests(llama_smol, 4, got)
    reqs[1] = dataclasses.replace(reqs[1], start_index=10)
    sample_queue(llama_smol, reqs, slots=3)
    assert sorted(got) == sorted(
        [(0, i) for i in range(4)] + [(1, i) for i in range(10, 14)] + [(2, i) for i in range(4)]
    )
    assert len({tuple(got[(0, i)].token_ids) for i in range(4)}) > 1  # other streams, other draws


def test_a_fill_slots_run_has_every_draw_and_copies_identical_arms(tmp_path):
    from tooldecode.experiments import load_spec, run_spec

    spec_path = tmp_path / "spec.toml"
    spec_path.write_text(
        'name = "filled"\nmodels = ["smollm2-135m-instruct"]\nn = 3\nmax_new_tokens = 6\n'
        # two scenarios with among the corpus's shortest prompts: the slots are filled across them
        'scenarios = ["json-tsconfig-path-aliases", "py-mutable-default-cart"]\n'
        'modes = ["loose", "strict"]\nbatch_size = 4\nfill_slots = true\n'
        '[variant]\nconditioning = ["forced-tool"]\ngold_cut = ["after-newtext", "before-edits"]\n'
    )
    out = tmp_path / "run"
    # the cheap arms first (`tooldecode run --modes`): only loose is drawn, under the whole spec's manifest
    run_spec(load_spec(spec_path), out, progress=False, only_modes=["loose"])
    first = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    assert first and {r["arm"]["mode"] for r in first} == {"loose"}
    assert {a["mode"] for a in json.loads((out / "manifest.json").read_text())["config"]["arms"]} == {
        "loose",
        "strict",
    }
    run_spec(load_spec(spec_path), out, progress=False)
    recs = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    assert recs[: len(first)] == first  # the rest appended, nothing drawn twice
    keys = [r["key"] for r in recs]
    assert len(keys) == len(set(keys))
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["fill_slots"] is True
    n_arms = len(manifest["config"]["arms"])
    assert len(recs) == n_arms * 2 * 3
    # gold_cut does not shape a forced-tool prompt: half the arms are copies of the other half's draws
    drawn = {r["key"]: r for r in recs if "copy_of" not in r}
    copies = [r for r in recs if "copy_of" in r]
    assert len(copies) == len(drawn) == len(recs) // 2
    for c in copies:
        assert c["arm"]["gold_cut"] == "before-edits" and drawn[c["copy_of"]]["token_ids"] == c["token_ids"]
    # resume after a loss: exactly the missing draws come back, with the same tokens
    lines = (out / "samples.jsonl").read_text().splitlines()
    (out / "samples.jsonl").write_text("\n".join(lines[:-3]) + "\n")
    run_spec(load_spec(spec_path), out, progress=False)
    again = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    assert sorted(r["key"] for r in again) == sorted(keys)


def test_levels_draw_one_level_first_and_the_rest_later(tmp_path):
    """`--levels L2` (run_spec's only_levels), with --modes: only the L2 loose arm is drawn, under the
    whole spec's manifest; a later call draws the rest, and the first draws stay as they were."""
    from tooldecode.experiments import load_spec, run_spec

    spec_path = tmp_path / "spec.toml"
    spec_path.write_text(
        'name = "levels"\nmodels = ["smollm2-135m-instruct"]\nn = 2\nmax_new_tokens = 4\n'
        'scenarios = ["json-tsconfig-path-aliases"]\nmodes = ["loose", "strict"]\nbatch_size = 2\n'
        'fill_slots = true\n[variant]\nconditioning = ["forced-tool", "gold-prefix"]\n'
    )
    out = tmp_path / "run"
    run_spec(load_spec(spec_path), out, progress=False, only_modes=["loose"], only_levels=["L2"])
    first = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    assert len(first) == 2 and {(r["arm"]["mode"], r["arm"]["level"]) for r in first} == {("loose", "L2")}
    arms = json.loads((out / "manifest.json").read_text())["config"]["arms"]
    assert {(a["mode"], a["level"]) for a in arms} == {
        ("loose", "L1"),
        ("loose", "L2"),
        ("strict", "L1"),
        ("strict", "L2"),
    }
    run_spec(load_spec(spec_path), out, progress=False)
    recs = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    assert recs[: len(first)] == first and len(recs) == 4 * 2
    assert len({r["key"] for r in recs}) == len(recs)


# --- the run-time adapter --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def synthetic_organism(smol_ref, tmp_path_factory):
    """SmolLM2 with a random r=16 adapter on every projection (no training): a ModelRef as
    ``organism:…`` resolves to."""
    from tooldecode.backends.lora import synthetic_adapter
    from tooldecode.models import Adapter, cached_sha256

    folder = synthetic_adapter(smol_ref.path, tmp_path_factory.mktemp("adapter") / "adapter", std=0.03)
    sha = cached_sha256(folder / "adapter_model.safetensors")
    return dataclasses.replace(smol_ref, id="organism:synthetic", adapter=Adapter(folder, sha))


def test_llama_cpp_with_the_adapter_matches_transformers_with_peft(synthetic_organism, smol_ref, llama_smol):
    """Greedy tokens and first-token probabilities of llama.cpp (quantized base + LoRA at run time) vs
    transformers + peft (dequantized base, adapter merged), as close as the two are on the base."""
    from tooldecode.backends import load_backend
    from tooldecode.sampling.kernels import log_softmax

    hf = load_backend("hf", synthetic_organism)
    llama = load_backend("llamacpp", synthetic_organism, n_ctx=1024, max_seqs=2)
    try:
        ids = llama.tokenize(PROMPTS[0])
        assert ids == hf.tokenize(PROMPTS[0])
        pos = list(range(len(ids) - 6, len(ids)))
        a, b = log_softmax(llama.forward(ids, pos)), log_softmax(hf.forward(ids, pos))
        base = log_softmax(llama_smol.forward(ids, pos))
        assert np.abs(a - base).max() > 0.5  # the adapter is applied
        assert (a.argmax(1) == b.argmax(1)).all()
        assert np.abs(np.exp(a) - np.exp(b)).max() < 0.1
        greedy = SamplingParams(temperature=0.0, max_new_tokens=12, seed=0)
        assert (
            sample(llama, PROMPTS[0], 1, greedy)[0].token_ids
            == sample(hf, PROMPTS[0], 1, greedy)[0].token_ids
        )
        assert llama.info()["adapter"] == "lora at run time"
    finally:
        llama.close()


def test_the_adapter_gguf_is_what_llama_cpp_expects(synthetic_organism, tmp_path):
    import gguf

    from tooldecode.backends.lora import lora_pairs, write_lora_gguf

    out = write_lora_gguf(synthetic_organism.adapter.folder, synthetic_organism.path, tmp_path / "a.gguf")
    reader = gguf.GGUFReader(str(out))
    assert reader.fields["general.type"].contents() == "adapter"
    assert reader.fields["adapter.type"].contents() == "lora"
    assert reader.fields["adapter.lora.alpha"].contents() == 32.0
    pairs = lora_pairs(synthetic_organism.adapter.folder)
    names = {t.name for t in reader.tensors}
    assert len(names) == 2 * len(pairs)
    q = next(t for t in reader.tensors if t.name == "blk.0.attn_q.weight.lora_a")
    assert q.tensor_type == gguf.GGMLQuantizationType.F16


def test_an_organism_resolves_to_its_base_and_adapter_and_refuses_a_changed_one(
    synthetic_organism, monkeypatch, tmp_path
):
    import shutil

    from tooldecode.errors import ModelError
    from tooldecode.models import ORGANISMS_PATH_ENV, resolve

    folder = tmp_path / "syn@smollm2-135m-instruct"
    shutil.copytree(synthetic_organism.adapter.folder, folder / "adapter")
    manifest = {
        "organism": "syn@smollm2-135m-instruct",
        "adapter": {"folder": "adapter", "sha256": synthetic_organism.adapter.sha256},
        "base_model": {"id": "smollm2-135m-instruct", "sha256": resolve("smollm2-135m-instruct").digest()},
    }
    (folder / "manifest.json").write_text(json.dumps(manifest))
    monkeypatch.setenv(ORGANISMS_PATH_ENV, str(tmp_path))
    ref = resolve("organism:syn@smollm2-135m-instruct")
    assert ref.path == resolve("smollm2-135m-instruct").path and ref.adapter is not None
    weights = folder / "adapter" / "adapter_model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    with pytest.raises(ModelError, match="its manifest says"):
        resolve("organism:syn@smollm2-135m-instruct")
    manifest["adapter"]["folder"] = "../.."
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ModelError, match="leaves"):
        resolve("organism:syn@smollm2-135m-instruct")


def test_every_committed_organism_loads_on_a_fresh_clone():
    """The adapters FINDINGS cites are committed beside the recipes and resolve without training."""
    from tooldecode.models import resolve

    root = Path(__file__).resolve().parents[1] / "experiments" / "organisms"
    for folder in sorted(p for p in root.iterdir() if (p / "manifest.json").is_file()):
        manifest = json.loads((folder / "manifest.json").read_text())
        assert (folder / "adapter" / "adapter_model.safetensors").stat().st_size <= 40 * 2**20
        assert set(p.name for p in folder.iterdir()) <= {"adapter", "manifest.json", "channel.json"}
        ref = resolve(f"organism:{folder.name}", fetch=True)
        assert ref.adapter is not None and ref.adapter.sha256 == manifest["adapter"]["sha256"]


def test_the_gguf_header_reader_agrees_with_the_gguf_package(smol_ref, synthetic_organism, tmp_path):
    """``gguf_layout`` (the header alone, arrays stepped over) gives GGUFReader's scalars and tensor
    dimensions, on the base and on an adapter file; a file that is not a GGUF is a one-line error."""
    import gguf

    from tooldecode.backends.lora import gguf_layout, write_lora_gguf
    from tooldecode.errors import ModelError

    adapter = write_lora_gguf(synthetic_organism.adapter.folder, synthetic_organism.path, tmp_path / "a.gguf")
    for path in (smol_ref.path, adapter):
        reader = gguf.GGUFReader(str(path))
        fields, dims = gguf_layout(path)
        scalars = {
            k: f.contents()
            for k, f in reader.fields.items()
            if not k.startswith("GGUF.") and f.types and f.types[0] != gguf.GGUFValueType.ARRAY
        }
        assert fields.keys() == scalars.keys() and len(fields) >= 3
        for k, v in scalars.items():
            assert fields[k] == pytest.approx(v) if isinstance(v, float) else fields[k] == v, k
        assert dims == {t.name: tuple(int(x) for x in t.shape.tolist()) for t in reader.tensors}
    bad = tmp_path / "x.gguf"
    bad.write_bytes(b"PK\x03\x04 not a model")
    with pytest.raises(ModelError, match="not a GGUF") as err:
        gguf_layout(bad)
    assert "\n" not in str(err.value)


def test_a_fill_slots_run_draws_strict_aligned_through_the_shared_adaptive_queue(tmp_path):
    """strict-aligned (adaptive, one walk at a time) in a fill_slots run: its draws come from the shared
    adaptive queue (their timing names the slots), each with its walks, and a resume adds only what is
    missing."""
    from tooldecode.experiments import load_spec, run_spec

    spec_path = tmp_path / "spec.toml"
    spec_path.write_text(
        'name = "aligned-filled"\nmodels = ["smollm2-135m-instruct"]\nn = 2\nmax_new_tokens = 6\n'
        'scenarios = ["json-tsconfig-path-aliases", "py-mutable-default-cart"]\n'
        'modes = ["strict-aligned"]\nbatch_size = 3\nfill_slots = true\n'
        '[variant]\nconditioning = ["gold-prefix"]\n'
        '[aligned]\nmethod = "adaptive"\ntarget = "prefix"\nparticles = 4\nmax_rounds = 2\n'
    )
    out = tmp_path / "run"
    run_spec(load_spec(spec_path), out, progress=False)
    recs = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    assert len(recs) == 2 * 2 and {r["arm"]["mode"] for r in recs} == {"strict-aligned"}
    assert all(r["timing"]["slots"] == 2 and r["particles"]["method"] == "adaptive" for r in recs)
    assert all(1 <= r["particles"]["drawn"] <= 8 and r["particles"]["walks"] == 1 for r in recs)
    lines = (out / "samples.jsonl").read_text().splitlines()
    (out / "samples.jsonl").write_text("\n".join(lines[:-1]) + "\n")
    run_spec(load_spec(spec_path), out, progress=False)
    again = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    assert sorted(r["key"] for r in again) == sorted(r["key"] for r in recs)
