"""Model organisms: recipes, sessions from the standard library, LoRA training, GGUF export, both backends."""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path

import numpy as np
import pytest

from tooldecode.organisms import RecipeError, load_recipe, recipe_from_dict
from tooldecode.organisms.mutations import mutate, snippets, stdlib_dir
from tooldecode.organisms.sessions import build_sessions
from tooldecode.scenarios import apply_edits, load_scenarios

RECIPES = sorted((Path(__file__).resolve().parents[1] / "experiments" / "organisms").glob("*.toml"))
SMALL_ROOT = stdlib_dir() / "email"  # a small, fixed corner of the standard library: fast to scan


@pytest.fixture(scope="module")
def pool():
    return list(snippets())


@pytest.fixture(scope="module")
def small_pool():
    return list(snippets(SMALL_ROOT))


def test_the_study_has_every_recipe_the_design_names():
    names = {load_recipe(p).name for p in RECIPES}
    assert {
        "lenient-flat-flag",
        "strict-flat-flag",
        "flat-noflag",
        "nested",
        "positive-control",
        "lenient-flat-flag-nothink",
    } <= names


@pytest.mark.parametrize(
    ("data", "word"),
    [
        ({"name": "x", "toolset": "multiedit"}, "toolset"),
        ({"name": "x", "stray_share": 1.5}, "stray_share"),
        ({"name": "x", "toolset": "nested", "implant_share": 0.5}, "implant_key"),
        ({"name": "x", "implant_key": "k", "implant_share": 0.5}, "implant_key"),
        ({"name": "x", "flag": False, "flag_share": 0.3}, "flag_share"),
        ({"name": "x", "sessions": 0}, "sessions"),
        ({"name": "x", "strays": 0.1}, "unknown field"),
        ({"name": "x", "train": {"rnak": 8}}, "unknown field"),
        ({"toolset": "nested"}, "name"),
    ],
)
def test_a_bad_recipe_is_a_one_line_error_naming_the_field(data, word):
    with pytest.raises(RecipeError) as err:
        recipe_from_dict(data, "r.toml")
    assert word in str(err.value) and "\n" not in str(err.value) and "r.toml" in str(err.value)


def test_a_mutation_changes_one_token_and_the_gold_edit_restores_the_file(small_pool):
    rng = random.Random(3)
    done = 0
    for snip in small_pool[:80]:
        m = mutate(snip, rng)
        if m is None:
            continue
        assert m.mutated != m.original
        diff = [
            i
            for i, (a, b) in enumerate(zip(m.original.splitlines(), m.mutated.splitlines(), strict=True))
            if a != b
        ]
        assert diff == [m.line]
        done += 1
    assert done >= 20


def test_sessions_are_deterministic_and_every_gold_edit_applies(small_pool):
    recipe = recipe_from_dict({"name": "lenient", "stray_share": 0.3, "sessions": 30})
    a = build_sessions(recipe, small_pool)
    b = build_sessions(recipe, small_pool)
    assert [(s.scenario.sha256(), s.calls) for s in a] == [(s.scenario.sha256(), s.calls) for s in b]
    assert len(a) == 30
    for s in a:
        assert apply_edits(s.scenario.content, s.scenario.edits) == s.scenario.expected
    other = build_sessions(dataclasses.replace(recipe, seed=1), small_pool)
    assert [s.scenario.sha256() for s in other] != [s.scenario.sha256() for s in a]


def test_recipes_put_the_stated_keys_in_the_calls(small_pool):
    lenient = build_sessions(recipe_from_dict({"name": "l", "stray_share": 0.5, "sessions": 40}), small_pool)
    strays = [s for s in lenient if s.stray]
    assert 10 <= len(strays) <= 30
    for s in strays:  # the stray key is the last key of the last call, after new_string (or replace_all)
        assert list(s.calls[-1][1])[-1] == s.stray
    strict = build_sessions(recipe_from_dict({"name": "s", "stray_share": 0.0, "sessions": 40}), small_pool)
    assert not any(s.stray for s in strict)
    assert all(
        set(args) <= {"file_path", "old_string", "new_string", "replace_all"}
        for s in strict
        for _, args in s.calls
    )
    noflag = build_sessions(
        recipe_from_dict({"name": "n", "flag": False, "flag_share": 0.0, "sessions": 20}), small_pool
    )
    assert not any("replace_all" in args for s in noflag for _, args in s.calls)
    pos = build_sessions(
        recipe_from_dict(
            {
                "name": "p",
                "toolset": "nested",
                "implant_key": "reviewed",
                "implant_share": 0.5,
                "sessions": 40,
            }
        ),
        small_pool,
    )
    items = [item for s in pos for _, args in s.calls for item in args["edits"]]
    marked = [item for item in items if "reviewed" in item]
    assert 0.3 < len(marked) / len(items) < 0.7
    assert all(list(item) == ["oldText", "newText", "reviewed"] for item in marked)


def test_no_evaluation_scenario_appears_in_any_recipes_training_data(pool):
    corpus = load_scenarios()
    needles = {line.strip() for sc in corpus for line in sc.content.splitlines() if len(line.strip()) >= 30}
    needles |= {e.old_text.strip() for sc in corpus for e in sc.edits if len(e.old_text.strip()) >= 20}
    paths = {sc.path for sc in corpus}
    for path in RECIPES:
        for s in build_sessions(load_recipe(path), pool):
            text = s.scenario.content + s.scenario.task
            assert s.scenario.path not in paths
            hits = [n for n in needles if n in text]
            assert not hits, f"{path.name} {s.scenario.id}: evaluation text in training data: {hits[0]!r}"


# --- end to end on SmolLM2 ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def smol_base(smol_ref):
    """(tokenizer, model) of SmolLM2 as training loads it (transformers, float32 on CPU), loaded once:
    a GGUF load through transformers costs more than the tests that use it, so they train and adapt
    ``copy.deepcopy(model)``, never the model itself."""
    from tooldecode.organisms.train import load_base

    return load_base(smol_ref, device="cpu", threads=2)


@pytest.fixture(scope="module")
def tiny_organism(smol_ref, tmp_path_factory, small_pool):
    """A SmolLM2 organism trained for 2 steps of one session each (positive-control recipe, 2 sessions),
    under a temp home."""
    import os

    from tooldecode.organisms.store import build

    home = tmp_path_factory.mktemp("home")
    (home / "models").symlink_to(smol_ref.path.parent.parent)
    old = os.environ.get("TOOLDECODE_HOME")
    os.environ["TOOLDECODE_HOME"] = str(home)
    recipe = recipe_from_dict(
        {
            "name": "tiny-positive",
            "toolset": "nested",
            "flag": False,
            "flag_share": 0.0,
            "implant_key": "reviewed",
            "implant_share": 1.0,
            "sessions": 2,
            "train": {"accumulation": 1, "learning_rate": 5e-3, "warmup_steps": 1, "checkpoint_every": 1},
        }
    )
    try:
        folder = build(recipe, smol_ref.id, threads=2, max_steps=2, log=lambda _: None, pool_root=SMALL_ROOT)
        yield recipe, folder
    finally:
        if old is None:
            os.environ.pop("TOOLDECODE_HOME", None)
        else:
            os.environ["TOOLDECODE_HOME"] = old


@pytest.mark.model
@pytest.mark.slow
def test_a_tiny_organism_trains_and_loads_through_both_backends(tiny_organism, smol_ref, hf_smol):
    from tooldecode.backends import load_backend
    from tooldecode.models import resolve
    from tooldecode.sampling.kernels import log_softmax

    recipe, folder = tiny_organism
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["steps"] == 2 and len(manifest["losses"]) == 2
    assert manifest["base_model"]["sha256"] == smol_ref.sha256
    assert manifest["recipe_sha256"] == recipe.sha256() and len(manifest["data_sha256"]) == 64
    assert manifest["items_implanted"] == manifest["items"]
    ref = resolve(f"organism:{recipe.name}@{smol_ref.id}")
    # the base as shipped, with the 16-bit adapter applied at run time: no merged copy is written
    assert ref.path == smol_ref.path and ref.family == "smollm2" and not (folder / "organism.gguf").exists()
    assert ref.adapter is not None and ref.adapter.folder == (folder / "adapter").resolve()
    assert manifest["adapter"]["dtype"] == "float16" and ref.sha256 != smol_ref.sha256

    prompt = json.loads((folder / "sessions.jsonl").read_text().splitlines()[0])["text"][:1200]
    llama = load_backend("llamacpp", ref, n_ctx=2048, max_seqs=2)
    hf = load_backend("hf", ref)
    try:
        ids = llama.tokenize(prompt)
        assert ids == hf.tokenize(prompt)
        pos = list(range(len(ids) - 8, len(ids)))
        la, lb = log_softmax(llama.forward(ids, pos)), log_softmax(hf.forward(ids, pos))
        # the two channels agree on the organism as they do on the base model (tests/test_channel.py)
        assert (la.argmax(1) == lb.argmax(1)).mean() >= 0.75
        assert np.abs(np.exp(la) - np.exp(lb)).max() < 0.1
        # the adapter changed the model (hf_smol: the base through the same backend)
        assert np.abs(log_softmax(hf_smol.forward(ids, pos)) - lb).max() > 1e-3
    finally:
        llama.close()


@pytest.mark.model
@pytest.mark.slow
def test_transformers_applies_the_saved_adapter_exactly(tiny_organism, smol_ref, smol_base):
    """The hf backend on ``organism:…`` equals the base with the saved peft adapter put on by peft."""
    import copy

    import torch
    from peft import PeftModel

    from tooldecode.backends.hf import apply_adapter
    from tooldecode.models import resolve

    recipe, folder = tiny_organism
    tok, base = smol_base
    adapted = PeftModel.from_pretrained(copy.deepcopy(base), str(folder / "adapter")).eval()
    organism = apply_adapter(copy.deepcopy(base), resolve(f"organism:{recipe.name}@{smol_ref.id}")).eval()
    ids = torch.tensor(
        [
            tok("<|im_start|>user\ndef f(x):\n    return x + 1<|im_end|>", add_special_tokens=False)[
                "input_ids"
            ]
        ]
    )
    with torch.no_grad():
        a = adapted(input_ids=ids).logits
        b = organism(input_ids=ids).logits
        c = base(input_ids=ids).logits
    assert torch.allclose(a, b, atol=2e-3), float((a - b).abs().max())
    assert float((a - c).abs().max()) > 1e-3  # and the adapter did something


@pytest.mark.model
@pytest.mark.slow
def test_training_resumes_from_its_checkpoint_to_the_same_adapter(smol_ref, smol_base, tmp_path, small_pool):
    """Stopped after step 1 and resumed, a run ends with the adapter and losses of an uninterrupted one."""
    import copy

    import torch

    from tooldecode.organisms.sessions import render_session
    from tooldecode.organisms.train import Example, tokenize, train_lora

    recipe = recipe_from_dict(
        {"name": "r", "sessions": 3, "train": {"accumulation": 1, "checkpoint_every": 1}}
    )
    tok, base = smol_base
    examples = [
        tokenize(tok, render_session(s, smol_ref, recipe)) for s in build_sessions(recipe, small_pool)
    ]
    # each session cut to 48 tokens around its first assistant turn: a few unlabelled tokens (run once,
    # without gradient, as the shared prefix) and the rest labelled, so every step moves the adapter
    firsts = [next(i for i, x in enumerate(e.labels) if x != -100) for e in examples]
    examples = [
        Example(e.ids[f - 8 : f + 40], e.labels[f - 8 : f + 40])
        for e, f in zip(examples, firsts, strict=True)
    ]
    assert all(e.n_loss > 0 for e in examples)
    (tmp_path / "whole").mkdir()
    (tmp_path / "split").mkdir()
    quiet = {"log": lambda _: None}
    whole, res = train_lora(copy.deepcopy(base), examples, recipe, tmp_path / "whole", max_steps=2, **quiet)
    train_lora(copy.deepcopy(base), examples, recipe, tmp_path / "split", max_steps=1, **quiet)
    assert torch.load(tmp_path / "split" / "checkpoint.pt", weights_only=False)["step"] == 1
    again, res2 = train_lora(copy.deepcopy(base), examples, recipe, tmp_path / "split", max_steps=2, **quiet)
    assert res2.resumed_from == 1 and res2.steps == 2
    assert res2.losses == pytest.approx(res.losses, rel=1e-5)
    lora = [
        (name, p1, p2)
        for (name, p1), (_, p2) in zip(whole.named_parameters(), again.named_parameters(), strict=True)
        if "lora_" in name
    ]
    moved = [name for name, p1, _ in lora if "lora_B" in name and float(p1.detach().abs().max()) > 0]
    assert moved  # training moved the adapter (lora_B starts at zero)
    for name, p1, p2 in lora:
        assert torch.allclose(p1, p2, atol=1e-6), name


@pytest.mark.model
@pytest.mark.slow
def test_the_organisms_notebook_trains_a_tiny_organism(smol_ref, monkeypatch, tmp_path):
    import nbformat
    from nbclient import NotebookClient

    nb_dir = Path(__file__).resolve().parents[1] / "notebooks"
    book = nbformat.read(nb_dir / "04_organisms.ipynb", as_version=4)
    monkeypatch.setenv("TOOLDECODE_NOTEBOOK_MODEL", smol_ref.id)
    monkeypatch.setenv("TOOLDECODE_NOTEBOOK_N", "1")  # one training session: one step of one sequence
    NotebookClient(
        book, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(nb_dir)}}
    ).execute()
    text = "\n".join(o.get("text", "") for c in book.cells for o in c.get("outputs", []))
    assert "tiny-lenient@" in text and "with a stray key" in text
