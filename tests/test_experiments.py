"""Experiment specs, arms, resume, and the findings helpers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tooldecode.errors import ModelError
from tooldecode.experiments import SpecError, arm_label, load_spec, run_spec
from tooldecode.experiments.runner import index_runs, scenario_stream
from tooldecode.measures import continuation_class

ROOT = Path(__file__).resolve().parent.parent
# shallow probe bounds for the runs here (the library's defaults expand for minutes on 2 cores): every row
# is still probed, read and copied as with the defaults; two levels tell the histories' p_continue apart
SHALLOW_PROBE = "depth = 2\nkey_depth = 1\nmax_branches = 4\ntail = 1e-2\nmin_mass = 1e-2\n"


def test_every_suite_spec_loads_and_has_arms():
    import tomllib

    specs = sorted((ROOT / "experiments").glob("e*.toml"))
    assert len(specs) >= 10
    for path in specs:
        reads = tomllib.loads(path.read_text(encoding="utf-8")).get("findings", {}).get("reads")
        if reads:  # a findings addendum runs nothing: running it says which spec to run
            with pytest.raises(SpecError, match=f"findings addendum of spec '{reads}'"):
                load_spec(path)
            continue
        spec = load_spec(path)
        quick = load_spec(path, quick=True)
        assert spec.arms() and quick.arms()
        labels = [arm_label(a) for a in spec.arms()]
        assert len(labels) == len(set(labels)), f"{path.name}: two arms share a label"


def test_e1_crosses_levels_and_modes():
    spec = load_spec(ROOT / "experiments" / "e1_strict_vs_loose.toml")
    arms = spec.arms()
    assert {(a["level"], a["mode"]) for a in arms} == {
        (lv, m) for lv in ("L0", "L1", "L2") for m in ("loose", "strict")
    }


def test_spec_errors_are_one_line(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\nmodels = ["m"]\nsamples = 3\n')
    with pytest.raises(SpecError, match="unknown field"):
        load_spec(bad)
    bad.write_text('name = "x"\nmodels = [\n')
    with pytest.raises(SpecError, match="invalid TOML"):
        load_spec(bad)
    with pytest.raises(SpecError, match="not found"):
        load_spec(tmp_path / "missing.toml")
    aligned = 'name = "x"\nmodels = ["m"]\n[aligned]\n'
    for text, match in [
        ('name = "x"\nmodels = ["m"]\nmodes = ["lenient"]\n', "modes"),
        ('name = "x"\nmodels = ["m"]\nstreams = "per-sample"\n', "'streams' must be 'scenario' or 'shared'"),
        (aligned + 'method = "sir"\nwalks = 4\n', "walks applies to method = .adaptive. only"),
        (aligned + 'method = "adaptive"\nwalks = 0\n', "walks must be a whole number"),
        (
            aligned + 'method = "rejection"\nmax_walk_tokens = 4096\n',
            "max_walk_tokens applies to method = .adaptive. only",
        ),
        (aligned + 'method = "adaptive"\nmax_walk_tokens = 0\n', "max_walk_tokens must be a whole number"),
    ]:
        bad.write_text(text)
        with pytest.raises(SpecError, match=match):
            load_spec(bad)
    assert scenario_stream("a") != scenario_stream("b") and scenario_stream("a") == scenario_stream("a")


def test_runs_of_missing_indices():
    assert list(index_runs([0, 1, 2, 5, 6, 9])) == [(0, 3), (5, 2), (9, 1)]
    assert list(index_runs([])) == []


@pytest.mark.parametrize(
    "text,cls,detail",
    [
        ('", "requireUnique": true}]}}', "continue", "requireUnique"),
        ('"}]}}', "close", None),
        ('" }]', "close", None),
        ('", {"oldText": "a"', "continue", "<next item>"),
        ("\\n    return x", "other", None),
        ('"]', "other", None),
    ],
)
def test_continuation_class(text, cls, detail):
    assert continuation_class(text) == (cls, detail)


def test_corrupt_weights_give_a_clear_error(smol_ref, tmp_path):
    from tooldecode.backends import load_backend

    broken = tmp_path / "broken.gguf"
    broken.write_bytes(smol_ref.path.read_bytes()[: 1 << 20])
    with pytest.raises(ModelError, match="could not load"):
        load_backend("llamacpp", str(broken))


# the shortest prompt of the corpus for SmolLM2 (about 1,300 tokens): a prompt's prefill is most of a tiny run
SHORT_SCENARIO = 'scenarios = ["json-tsconfig-path-aliases"]\n'
# one shared run on a user's scenario folder: loose (3 draws, n_by_mode) and strict (2) at L2, and the L3
# probe after newText; the resume, n_by_mode, panel and scenario-folder tests each read their facts off it
SHARED_SPEC = (
    'name = "panel"\nmodels = ["smollm2-135m-instruct"]\nscenario_dirs = ["mine"]\nn = 2\nmax_new_tokens = 10\n'
    'modes = ["loose", "strict"]\nbatch_size = 3\n[n_by_mode]\nloose = 3\n[variant]\nconditioning = ["gold-prefix"]\n'
    '[probe]\nselect = "newText"\n' + SHALLOW_PROBE
)


@pytest.fixture(scope="module")
def shared_run(tmp_path_factory):
    """(the folder the run starts from, the spec's path, the run folder, its records)."""
    base = tmp_path_factory.mktemp("shared")
    _user_scenario_folder(base / "mine")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(base)
        spec_path, out, recs = _tiny_run(base, SHARED_SPEC)
    return base, spec_path, out, recs


@pytest.mark.model
def test_tiny_run_resumes_without_duplicates(shared_run, tmp_path, monkeypatch):
    import shutil

    base, spec_path, first_out, _ = shared_run
    out = tmp_path / "run"
    shutil.copytree(first_out, out)
    lines = (out / "samples.jsonl").read_text().splitlines()
    assert len(lines) == 3 + 2
    # drop the last two samples (as if killed), then resume: exactly those are redone
    (out / "samples.jsonl").write_text("\n".join(lines[:-2]) + "\n")
    monkeypatch.chdir(base)
    run_spec(load_spec(spec_path), out, progress=False)
    again = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    keys = [r["key"] for r in again]
    assert len(keys) == len(set(keys)) == 5
    first = {json.loads(x)["key"]: json.loads(x)["token_ids"] for x in lines}
    assert all(first[r["key"]] == r["token_ids"] for r in again)  # same seeds per index: same samples
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["model"]["sha256"] and manifest["config"]["n"] == 2


def _tiny_run(tmp_path: Path, text: str) -> tuple[Path, Path, list[dict]]:
    """Write a spec, run it into ``tmp_path/run``; the spec's path, the run folder and its records."""
    spec_path = tmp_path / "spec.toml"
    spec_path.write_text(text)
    out = tmp_path / "run"
    run_spec(load_spec(spec_path), out, progress=False)
    return spec_path, out, [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]


@pytest.mark.model
def test_an_arm_that_renders_like_an_earlier_one_is_copied_not_sampled_again(tmp_path):
    # gold_cut only shapes a gold-prefix prompt: under forced-tool the two arms are the same draw
    spec_path, out, recs = _tiny_run(
        tmp_path,
        'name = "same"\nmodels = ["smollm2-135m-instruct"]\n' + SHORT_SCENARIO + "n = 2\nmax_new_tokens = 6\n"
        'modes = ["loose"]\nbatch_size = 2\n[variant]\nconditioning = ["forced-tool"]\n'
        'gold_cut = ["after-newtext", "before-edits"]\n',
    )
    assert len(recs) == 4 and len({r["key"] for r in recs}) == 4
    drawn = [r for r in recs if "copy_of" not in r]
    copies = [r for r in recs if "copy_of" in r]
    assert len(drawn) == len(copies) == 2
    by_key = {r["key"]: r for r in drawn}
    for c in copies:
        assert c["arm"]["gold_cut"] == "before-edits" and c["timing"] == {}
        assert (
            c["token_ids"] == by_key[c["copy_of"]]["token_ids"]
            and c["index"] == by_key[c["copy_of"]]["index"]
        )
    # a resume that lost the copies' original (not in memory) samples them again: the same tokens
    (out / "samples.jsonl").write_text("\n".join(json.dumps(r) for r in drawn) + "\n")
    run_spec(load_spec(spec_path), out, progress=False)
    again = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    redone = [r for r in again if r["arm"]["gold_cut"] == "before-edits"]
    assert len(redone) == 2 and all("copy_of" not in r for r in redone)
    assert sorted(r["token_ids"] for r in redone) == sorted(r["token_ids"] for r in drawn)


@pytest.mark.model
def test_a_probe_variant_that_renders_like_an_earlier_one_is_copied_not_probed_again(tmp_path):
    # the probe always renders the free prompt: variants that differ only in the gold cut are one probe
    spec_path = tmp_path / "spec.toml"
    spec_path.write_text(
        'name = "same-probe"\nmodels = ["smollm2-135m-instruct"]\n' + SHORT_SCENARIO + "n = 0\n"
        'modes = ["loose"]\n[probe]\nonly = true\nselect = ["newText", "new_string"]\n'
        'fields = ["gold_cut", "history"]\ngold_cut = ["after-newtext", "before-edits"]\n'
        'history = ["agentic", "fresh"]\n' + SHALLOW_PROBE
    )
    out = tmp_path / "run"
    run_spec(load_spec(spec_path), out, progress=False)
    rows = [json.loads(x) for x in (out / "probe.jsonl").read_text().splitlines()]
    assert rows and all(r["after"] == "newText" for r in rows)
    by_label: dict[str, list[dict]] = {}
    for r in rows:
        by_label.setdefault(r["variant_label"], []).append(r)
    assert len(by_label) == 4
    copies = {k: v for k, v in by_label.items() if "same_prompt_as" in v[0]}
    assert sorted(copies) == ["gold_cut=before-edits,history=agentic", "gold_cut=before-edits,history=fresh"]
    for label, rs in copies.items():
        first = by_label[rs[0]["same_prompt_as"]]
        assert rs[0]["same_prompt_as"].replace("after-newtext", "before-edits") == label
        strip = ("variant", "variant_label", "same_prompt_as", "seconds")
        assert [{k: v for k, v in r.items() if k not in strip} for r in rs] == [
            {k: v for k, v in r.items() if k not in strip} for r in first
        ]
    # history changes the prompt: both histories were probed, and they differ
    a, f = (
        by_label["gold_cut=after-newtext,history=agentic"],
        by_label["gold_cut=after-newtext,history=fresh"],
    )
    assert "same_prompt_as" not in f[0] and a[0]["p_continue"] != f[0]["p_continue"]
    # a resume probes nothing and copies nothing again
    run_spec(load_spec(spec_path), out, progress=False)
    assert [json.loads(x) for x in (out / "probe.jsonl").read_text().splitlines()] == rows


@pytest.mark.model
def test_n_by_mode_sets_the_sample_count_of_one_mode(shared_run):
    _, spec_path, out, recs = shared_run
    spec = load_spec(spec_path)
    assert (spec.n_for("loose"), spec.n_for("strict")) == (3, 2)
    assert sorted(r["arm"]["mode"] for r in recs) == ["loose"] * 3 + ["strict"] * 2
    config = json.loads((out / "manifest.json").read_text())["config"]
    assert config["n_by_mode"] == {"loose": 3} and config["streams"] == "scenario"
    # each scenario draws from its own random streams, recorded on every sample
    assert {r["stream"] for r in recs} == {scenario_stream(recs[0]["scenario"])}
    bad = spec_path.parent / "bad.toml"
    bad.write_text(spec_path.read_text().replace("loose = 3", "strict-aligned = 3"))
    with pytest.raises(SpecError, match="n_by_mode.*does not list"):
        load_spec(bad)


@pytest.mark.model
def test_strict_smollm2_panel_run_scores_and_reports(shared_run, monkeypatch):
    """SmolLM2 writes its calls as a <tool_call>[...] list: the call-list grammar makes strict L2 work,
    and the panel rows of FINDINGS read the run."""
    from experiments.sampled_rows import row_panel
    from tooldecode.runs import load_run

    base, _, out, recs = shared_run
    strict = [r for r in recs if r["arm"]["mode"] == "strict"]
    assert len(strict) == 2 and all(r["arm"]["wire"] == "call-list" for r in strict)
    assert all(r["error"] is None for r in strict), [r["error"] for r in strict]
    assert all(r["mask_removed"] and len(r["mask_removed"]) == len(r["token_ids"]) for r in strict)
    monkeypatch.chdir(base)  # the run's scenarios are the user's folder, relative to where it started
    run = load_run(out)
    rows = row_panel({"claim": ""}, [run], {run.name: run})
    assert len(rows) == 1 and "smollm2-135m-instruct" in rows[0]["observation"]
    assert "strict:" in rows[0]["measured"] and "loose:" in rows[0]["measured"]
    assert "over 1 scenarios" in rows[0]["measured"]  # the L3 probe after newText was read


def test_strict_spec_mode_masks_with_the_open_grammar(tmp_path):
    from types import SimpleNamespace

    from tooldecode.grammar import check, load_tool
    from tooldecode.trial import strict_grammar

    spec = load_spec(ROOT / "experiments" / "e13_open_grammar.toml")
    assert {a["mode"]: a.get("engine") for a in spec.arms()} == {
        "loose": None,
        "strict-spec": "xgrammar",
        "strict": "xgrammar",
    }
    prompt = SimpleNamespace(tools=[load_tool("edit")], wire="call-json")
    extra = '{"name": "edit", "arguments": {"path": "a", "edits": [{"oldText": "x", "newText": "y", "required": 1}]}}'
    assert check.accepts("xgrammar", strict_grammar(prompt, "bounded", "strict-spec"), extra)
    assert not check.accepts("xgrammar", strict_grammar(prompt, "bounded", "strict"), extra)
    # E13 runs the open grammar both ways: a present key again is refused (forbid) or admitted (admit)
    dups = [(a.get("duplicates", "forbid"), arm_label(a)) for a in spec.arms() if a["mode"] == "strict-spec"]
    assert [d for d, _ in dups] == ["forbid", "admit"]
    assert "duplicates" not in dups[0][1] and dups[1][1].endswith("duplicates=admit")
    again = '{"name": "edit", "arguments": {"path": "a", "edits": [{"oldText": "x", "newText": "y", "newText": "z"}]}}'
    assert not check.accepts(
        "xgrammar", strict_grammar(prompt, "bounded", "strict-spec", "xgrammar", "forbid"), again
    )
    assert check.accepts(
        "xgrammar", strict_grammar(prompt, "bounded", "strict-spec", "xgrammar", "admit"), again
    )


@pytest.mark.parametrize(
    "lines,message",
    [
        (
            'modes = ["loose", "strict"]\nduplicates = "admit"',
            "applies to the open grammar of mode 'strict-spec'",
        ),
        ('modes = ["strict-spec"]\nduplicates = ["forbid", "sometimes"]', "unknown duplicates 'sometimes'"),
        ('modes = ["strict-spec"]\nduplicates = ["admit", "admit"]', "lists 'admit' twice"),
        ('modes = ["strict-spec"]\nduplicates = []', "'duplicates' is empty"),
        (
            'modes = ["strict-spec"]\nengine = "tooldecode-strict"\nduplicates = "admit"',
            "needs tooldecode's own grammar",
        ),
        ('modes = ["strict-spec"]\nduplicates = 1', "'duplicates' must be 'forbid', 'admit' or a list"),
    ],
)
def test_duplicates_option_errors_are_one_line(tmp_path, lines, message):
    _one_line_spec_error(tmp_path, lines, message)


@pytest.mark.parametrize(
    "lines,message",
    [
        ('[probe]\ntail = "small"', r"\[probe\] tail = 'small': give a number ≥ 0"),
        ("[probe]\nmax_branches = -1", r"\[probe\] max_branches = -1"),
        ("[probe]\nselect = []", r"\[probe\] select = \[\]: give a key name or a list"),
        ("[probe]\nwidth = 3", r"unknown \[probe\] field\(s\) width"),
    ],
)
def test_probe_table_errors_are_one_line(tmp_path, lines, message):
    _one_line_spec_error(tmp_path, "n = 1\n" + lines, message)


def _one_line_spec_error(tmp_path, lines, message):
    bad = tmp_path / "bad.toml"
    bad.write_text(f'name = "x"\nmodels = ["qwen2.5-coder-0.5b-instruct"]\n{lines}\n')
    with pytest.raises(SpecError, match=message) as err:
        load_spec(bad)
    assert "\n" not in str(err.value)


def _user_scenario_folder(folder: Path) -> None:
    """A user's folder with one scenario file: a built-in one under another id (``my-cart-bug``)."""
    import yaml

    from tooldecode.scenarios import builtin_dir

    folder.mkdir()
    data = yaml.safe_load((builtin_dir() / "py-mutable-default-cart.yaml").read_text())
    data["id"] = "my-cart-bug"
    (folder / "my-cart-bug.yaml").write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))


def test_a_spec_runs_the_scenarios_of_a_users_folder(tmp_path, monkeypatch):
    """`scenario_dirs` names folders of the user's own scenario files: the spec runs those, not the corpus,
    and a folder that is not there is a one-line error."""
    from tooldecode.experiments.arms import select_scenarios

    _user_scenario_folder(tmp_path / "my-scenarios")
    monkeypatch.chdir(tmp_path)
    spec_path = tmp_path / "mine.toml"
    spec_path.write_text(
        'name = "mine"\nmodels = ["smollm2-135m-instruct"]\nscenario_dirs = ["my-scenarios"]\n'
    )
    assert [s.id for s in select_scenarios(load_spec(spec_path))] == ["my-cart-bug"]
    spec_path.write_text('name = "mine"\nmodels = ["smollm2-135m-instruct"]\nscenario_dirs = ["nowhere"]\n')
    with pytest.raises(SpecError) as err:
        select_scenarios(load_spec(spec_path))
    assert "nowhere" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.model
def test_a_run_on_a_users_scenario_folder_scores_them(shared_run, monkeypatch):
    from tooldecode.runs import score_stored

    base, _, out, records = shared_run
    monkeypatch.chdir(base)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["scenario_dirs"] == ["mine"] and {r["scenario"] for r in records} == {
        "my-cart-bug"
    }
    assert all(score_stored(r, manifest)["scenario"] == "my-cart-bug" for r in records)


def test_a_run_off_a_terminal_reports_progress_as_log_lines(caplog):
    """Off a terminal (a log file, CI) the run's progress is a log line with count, rate and ETA."""
    import logging

    from tooldecode.experiments.runner import LineProgress

    bar = LineProgress(every_s=0.0)
    with caplog.at_level(logging.INFO, logger="tooldecode.progress"), bar:
        task = bar.add_task("e1", total=4)
        bar.advance(task, 1)  # a resumed run's samples already there
        bar.advance(task, 2)
        bar.advance(task, 1)
    lines = [r.getMessage() for r in caplog.records if r.name == "tooldecode.progress"]
    assert lines[-1].startswith("e1: 4/4 done") and "ETA" in lines[-1]


def test_n_by_mode_can_set_one_level_of_a_mode(tmp_path):
    """``"MODE@LEVEL"`` keys size one level's arms of a mode (before ``"MODE"`` and ``n``); a level the
    spec's conditionings do not give is a one-line error; a run's config counts its samples the same way."""
    from tooldecode.runs.load import Run

    text = (
        'name = "lv"\ndescription = "d"\nmodels = ["smollm2-135m-instruct"]\nn = 8\nmodes = ["loose", "strict"]\n'
        '[n_by_mode]\nloose = 12\n"loose@L2" = 6\n"strict@L2" = 4\n'
        '[variant]\nconditioning = ["forced-tool", "gold-prefix"]\n'
    )
    path = tmp_path / "lv.toml"
    path.write_text(text)
    spec = load_spec(path)
    got = {(m, lv): spec.n_for(m, lv) for m in ("loose", "strict") for lv in ("L1", "L2")}
    assert got == {("loose", "L1"): 12, ("loose", "L2"): 6, ("strict", "L1"): 8, ("strict", "L2"): 4}
    assert spec.n_for("loose") == 12
    config = {
        "n": spec.n,
        "n_by_mode": spec.n_by_mode,
        "arms": spec.arms(),
        "scenarios": ["a", "b"],
        "seeds": [0],
    }
    assert Run("lv", Path("x"), {"config": config}, [], {}, []).expected_samples == 2 * (12 + 6 + 8 + 4)
    for bad, match in (('"loose@L0" = 2', "names level 'L0'"), ('"aligned@L2" = 2', "does not list")):
        path.write_text(text.replace('"strict@L2" = 4', bad))
        with pytest.raises(SpecError, match=match):
            load_spec(path)
