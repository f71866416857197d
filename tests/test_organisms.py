"""Model organisms: recipes, sessions from the standard library, LoRA training, GGUF export, both backends."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
from pathlib import Path

import numpy as np
import pytest

from tooldecode.organisms import Recipe, RecipeError, load_recipe, recipe_from_dict
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
    second = {
        "g2-lenient-flat-flag",
        "g2-lenient-flat-flag-s1",
        "g2-strict-flat-flag",
        "g2-flat-noflag",
        "g2-lenient-flat-flag-nothink",
        "g2-nested",
        "g2-nested-s1",
        "g2-positive-control-d015",
        "g2-positive-control-d05",
        "g2-positive-control-d10",
        "g2-positive-control-d05-e3",
    }
    assert second <= names
    for path in RECIPES:  # every second-generation recipe mixes in half its sessions
        recipe = load_recipe(path)
        assert (recipe.generation == 2) == (recipe.name in second), path.name
        assert recipe.mix == (0.5 if recipe.generation == 2 else 0.0), path.name


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
        ({"name": "x", "generation": 3}, "generation"),
        ({"name": "x", "mix_share": 0.5}, "mix_share"),
        ({"name": "x", "generation": 2, "mix_share": 1.0}, "mix_share"),
        ({"name": "x", "generation": 2, "mix_tools": ["grep_many"]}, "mix_tools"),
        ({"name": "x", "generation": 2, "mix_tools": "todo_write"}, "mix_tools"),
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


def test_first_generation_recipes_keep_their_hash_and_data(small_pool):
    """The generation-2 fields leave a first-generation recipe's sha256 and sessions as they were (the
    values below are those of the code before the fields existed)."""
    recipe = load_recipe(RECIPES[0].parent / "lenient-flat-flag.toml")
    assert recipe.sha256() == "336cb88d21c9fdeb9abd069ca2f6931455133f66b7701ab781dc95095a1cbbfa"
    sessions = build_sessions(dataclasses.replace(recipe, sessions=40), small_pool)
    digest = hashlib.sha256(json.dumps([[s.scenario.sha256(), s.calls] for s in sessions]).encode())
    assert digest.hexdigest() == "ee48f4ae4d4f9ee3512ce87e344b515d6c45d75d62ae05e71e7234672de40939"
    assert all(s.kind == "edit" for s in sessions)


def _g2(name: str, **fields) -> Recipe:
    return dataclasses.replace(load_recipe(RECIPES[0].parent / f"{name}.toml"), **{"sessions": 40, **fields})


def test_second_generation_recipes_render_the_same_sessions_through_each_harness(small_pool):
    """Same seed: the same bugs in the same order and the same mix-in sessions; only the harness's edit
    call (and the thinking a recipe strips) differs."""
    names = ("g2-lenient-flat-flag", "g2-strict-flat-flag", "g2-flat-noflag", "g2-nested")
    runs = {n: build_sessions(_g2(n), small_pool) for n in names}
    runs["nothink"] = build_sessions(_g2("g2-lenient-flat-flag-nothink"), small_pool)
    runs["positive"] = build_sessions(_g2("g2-positive-control-d10"), small_pool)
    ref = runs["g2-lenient-flat-flag"]
    assert len(ref) == 40
    kinds = [s.kind for s in ref]
    assert 10 <= sum(k != "edit" for k in kinds) <= 30  # mix share 0.5
    assert {"todo_write", "write_files"} <= set(kinds)

    def bugs(s):
        sc = s.scenario
        return (sc.id, sc.path, sc.content, sc.edits, sc.expected, sc.task, sc.diagnosis, s.origin, s.kind)

    for name, sessions in runs.items():
        assert [bugs(s) for s in sessions] == [bugs(s) for s in ref], name
        for s, r in zip(sessions, ref, strict=True):
            if s.kind != "edit":
                assert s.calls == r.calls, name  # a mix-in call is the harness's business nowhere
    assert all(not s.scenario.reasoning for s in runs["nothink"])
    assert all(s.scenario.reasoning for s in ref)
    # the harness shows only in the edit calls
    edit = [i for i, k in enumerate(kinds) if k == "edit"]
    assert all(runs["g2-nested"][i].calls[0][0] == "edit" for i in edit)
    assert all(c[0] == "Edit" for i in edit for c in runs["g2-strict-flat-flag"][i].calls)
    assert any(runs["g2-lenient-flat-flag"][i].stray for i in edit)
    assert not any(runs["g2-strict-flat-flag"][i].stray for i in edit)
    assert all("reviewed" in item for i in edit for _, a in runs["positive"][i].calls for item in a["edits"])
    # the evaluated nested edit tool never appears in a flat recipe's data
    assert not any(c[0] == "edit" for s in runs["g2-lenient-flat-flag"] for c in s.calls)
    # and the first generation's draws did differ across harnesses (what generation 2 fixes)
    old = [
        build_sessions(dataclasses.replace(_g2(n), generation=1, mix_share=None), small_pool)
        for n in ("g2-lenient-flat-flag", "g2-nested")
    ]
    assert [bugs(s) for s in old[0]] != [bugs(s) for s in old[1]]


def test_held_out_scenarios_come_from_the_generator_and_never_from_training(small_pool):
    from tooldecode.organisms.sessions import heldout_scenarios
    from tooldecode.scenarios import check_scenario

    recipe = _g2("g2-positive-control-d05", sessions=30)
    used = {s.scenario.content for s in build_sessions(recipe, small_pool)}
    got = heldout_scenarios(recipe, small_pool, 6)
    assert len(got) == 6 and [sc.id for sc in got] == [f"heldout-{i:05d}" for i in range(6)]
    assert all(check_scenario(sc) == [] and sc.tags[0] == "heldout" for sc in got)
    assert not {sc.content for sc in got} & used  # no function of a training session is held out
    train_funcs = {
        part.rsplit(":", 1)[1] for s in build_sessions(recipe, small_pool) for part in s.origin.split("; ")
    }
    assert not any(sc.title.rsplit(" in ", 1)[1] in train_funcs for sc in got)
    assert heldout_scenarios(recipe, small_pool, 6) == got  # deterministic
    assert heldout_scenarios(recipe, small_pool, 6, seed=1) != got


def test_the_heldout_command_writes_scenarios_that_load_and_keeps_foreign_files(tmp_path, monkeypatch):
    from tooldecode.cli import main
    from tooldecode.organisms import store
    from tooldecode.scenarios import load_scenarios

    monkeypatch.setattr(store, "snippet_pool", lambda root=None: list(snippets(SMALL_ROOT)))
    text = (RECIPES[0].parent / "g2-positive-control-d05.toml").read_text()
    recipe = tmp_path / "small.toml"  # 20 sessions leave functions of the small pool unused
    recipe.write_text(text.replace("sessions = 200", "sessions = 20"))
    out = tmp_path / "held"
    assert main(["organisms", "heldout", str(recipe), "-n", "3", "-o", str(out)]) == 0
    loaded = load_scenarios([out])
    assert [sc.id for sc in loaded] == ["heldout-00000", "heldout-00001", "heldout-00002"]
    assert main(["organisms", "heldout", str(recipe), "-n", "3", "-o", str(out)]) == 0  # its own: replaced
    (out / "heldout-00000.json").write_text("my notes\n")
    assert main(["organisms", "heldout", str(recipe), "-n", "3", "-o", str(out)]) == 2
    assert (out / "heldout-00000.json").read_text() == "my notes\n"  # never overwritten


def test_mix_in_sessions_hold_arrays_of_objects(small_pool):
    from tooldecode.organisms.sessions import harness_tools

    recipe = _g2("g2-strict-flat-flag")
    names = [t.name for t in harness_tools(recipe)]
    assert names == ["Edit", "Read", "Write", "Bash", "todo_write", "write_files"]
    for s in build_sessions(recipe, small_pool):
        if s.kind == "edit":
            continue
        ((tool, args),) = s.calls
        assert tool == s.kind
        (items,) = args.values()
        assert isinstance(items, list) and len(items) >= 2 and all(isinstance(x, dict) for x in items)
        if tool == "write_files":
            assert items[0]["content"] == s.scenario.expected  # the corrected code
        else:
            assert [list(x) for x in items] == [["content", "status"]] * len(items)


def test_second_generation_calls_are_cut_where_the_evaluation_cuts_after_new_text(small_pool):
    """The cut offsets are where the evaluation's L2 prompt (gold cut after-newtext) ends: right before
    the closing quote of every newText or new_string value."""
    from tooldecode.models import DEFAULT_MODEL
    from tooldecode.organisms.sessions import render_session
    from tooldecode.prompts import TranscriptOptions, render_prompt

    for name, key in (("g2-nested", "newText"), ("g2-lenient-flat-flag", "new_string")):
        recipe = _g2(name)
        seen = 0
        for s in build_sessions(recipe, small_pool)[:16]:
            text = render_session(s, DEFAULT_MODEL, recipe)
            if s.kind != "edit":
                assert text.cuts == ()
                continue
            values = (
                [a[key] for _, a in s.calls]
                if key == "new_string"
                else [item[key] for _, a in s.calls for item in a["edits"]]
            )
            assert len(text.cuts) == len(values)
            for cut, value in zip(text.cuts, values, strict=True):
                assert text.call[:cut].endswith(json.dumps(value)[1:-1]) and text.call[cut] == '"'
            seen += 1
            if key == "newText" and not s.implanted:  # the evaluation's own L2 prompt ends at the last cut
                options = TranscriptOptions(
                    history="agentic", thinking=True, toolset="nested", conditioning="gold-prefix"
                )
                l2 = render_prompt(s.scenario, DEFAULT_MODEL, options)
                assert text.call[: text.cuts[-1]] == l2.prefill
        assert seen >= 5
    first = recipe_from_dict({"name": "g1", "sessions": 4})
    assert all(not render_session(s, DEFAULT_MODEL, first).cuts for s in build_sessions(first, small_pool))


@pytest.mark.model
def test_training_tokens_put_the_quote_after_new_text_in_a_token_of_its_own(small_pool, qwen_ref):
    """On Qwen2.5's tokenizer (no weights): generation 2's tokens start a token at every cut, as after
    the evaluation's L2 prompt; the uncut call fuses the quote with the text in some items."""
    from tooldecode.backends.hf import load_tokenizer
    from tooldecode.organisms.sessions import render_session
    from tooldecode.organisms.train import tokenize

    tok = load_tokenizer(qwen_ref)
    recipe = _g2("g2-nested", sessions=60)
    fused = {"cut": 0, "uncut": 0}
    n = 0
    for s in build_sessions(recipe, small_pool):
        text = render_session(s, qwen_ref, recipe)
        for label, t in (("cut", text), ("uncut", dataclasses.replace(text, cuts=()))):
            ex = tokenize(tok, t)
            assert tok.decode(list(ex.ids)) == t.text
            starts, pos = set(), 0
            for piece in tok.batch_decode([[tid] for tid in ex.ids]):  # each token decoded on its own
                starts.add(pos)
                pos += len(piece)
            fused[label] += sum(len(t.prompt) + c not in starts for c in text.cuts)
        n += len(text.cuts)
    assert n >= 30
    assert fused["cut"] == 0
    assert fused["uncut"] > 0  # the boundary the cuts fix exists on this tokenizer


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

    return load_base(smol_ref, device="cpu")


# the tiny organism notebook 04 trains (its cell: one session, one step); the tests below load it
TINY = {
    "name": "tiny-lenient",
    "stray_share": 0.5,
    "sessions": 1,
    "train": {"accumulation": 2, "learning_rate": 1e-3, "warmup_steps": 1},
}


@pytest.fixture(scope="module")
def organisms_notebook(smol_ref, tmp_path_factory):
    """Notebook 04 run top to bottom once (nbclient) on SmolLM2 with one training session: it builds a
    tiny organism (``TINY``) under a temp home its kernel makes in ``TMPDIR``, which the tests below load
    (one training, shared). Yields (notebook, recipe, organism folder), with ``TOOLDECODE_HOME`` set to
    that home."""
    import nbformat
    from nbclient import NotebookClient

    nb_dir = Path(__file__).resolve().parents[1] / "notebooks"
    book = nbformat.read(nb_dir / "04_organisms.ipynb", as_version=4)
    tmp = tmp_path_factory.mktemp("nb04")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TOOLDECODE_NOTEBOOK_MODEL", smol_ref.id)
        mp.setenv("TOOLDECODE_NOTEBOOK_N", str(TINY["sessions"]))  # one step of one sequence
        mp.setenv("TMPDIR", str(tmp))  # where the kernel's tempfile.mkdtemp makes the organism's home
        NotebookClient(
            book, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(nb_dir)}}
        ).execute()
    (folder,) = tmp.glob(f"organism-home-*/organisms/{TINY['name']}@{smol_ref.id}")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TOOLDECODE_HOME", str(folder.parents[1]))
        yield book, recipe_from_dict(TINY), folder


@pytest.mark.model
@pytest.mark.slow
def test_a_tiny_organism_trains_and_loads_through_both_backends(
    organisms_notebook, smol_ref, smol_base, capsys
):
    import torch

    from tooldecode.backends import load_backend
    from tooldecode.models import resolve
    from tooldecode.sampling.kernels import log_softmax

    _, recipe, folder = organisms_notebook
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["steps"] == 1 and len(manifest["losses"]) == 1 and manifest["max_steps"] == 1
    assert manifest["base_model"]["sha256"] == smol_ref.sha256
    assert manifest["recipe_sha256"] == recipe.sha256() and len(manifest["data_sha256"]) == 64
    rows = [json.loads(line) for line in (folder / "sessions.jsonl").read_text().splitlines()]
    assert len(rows) == manifest["sessions"] == 1
    assert manifest["sessions_with_stray_key"] == sum(1 for r in rows if r["stray"])
    assert manifest["items_implanted"] == 0 and manifest["items"] >= 1  # no implant key in this recipe
    ref = resolve(f"organism:{recipe.name}@{smol_ref.id}")
    # the base as shipped, with the 16-bit adapter applied at run time: no merged copy is written
    assert (
        ref.path.resolve() == smol_ref.path.resolve()
        and ref.family == "smollm2"
        and not (folder / "organism.gguf").exists()
    )
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
        # the adapter changed the model (smol_base: the base as transformers loads it, as the backend does)
        with torch.no_grad():
            base = smol_base[1](input_ids=torch.tensor([ids])).logits[0, pos].numpy()
        assert np.abs(log_softmax(base) - lb).max() > 1e-3
    finally:
        llama.close()
    # `tooldecode organisms check` keeps its result beside the organism; a second check that finds the
    # same leaves that file as it is (a committed organism checked on a new machine stays clean)
    from tooldecode.cli import main

    name = f"{recipe.name}@{smol_ref.id}"
    assert main(["organisms", "check", name, "--tokens", "3"]) == 0
    assert "written: " in capsys.readouterr().out
    before = (folder / "channel.json").read_bytes()
    assert main(["organisms", "check", name, "--tokens", "3"]) == 0
    assert "kept (it found what the last check found)" in capsys.readouterr().out
    assert (folder / "channel.json").read_bytes() == before


@pytest.mark.model
@pytest.mark.slow
def test_transformers_applies_the_saved_adapter_exactly(organisms_notebook, smol_ref, smol_base):
    """The hf backend on ``organism:…`` equals the base with the saved peft adapter put on by peft."""
    import copy

    import torch
    from peft import PeftModel

    from tooldecode.backends.hf import apply_adapter
    from tooldecode.models import resolve

    _, recipe, folder = organisms_notebook
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
    # each session cut to 24 tokens around its first assistant turn: a few unlabelled tokens (run once,
    # without gradient, as the shared prefix) and the rest labelled, so every step moves the adapter
    firsts = [next(i for i, x in enumerate(e.labels) if x != -100) for e in examples]
    examples = [
        Example(e.ids[f - 8 : f + 16], e.labels[f - 8 : f + 16])
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
def test_the_organisms_notebook_trains_a_tiny_organism(organisms_notebook):
    book, _, _ = organisms_notebook
    text = "\n".join(o.get("text", "") for c in book.cells for o in c.get("outputs", []))
    assert "tiny-lenient@" in text and "with a stray key" in text
