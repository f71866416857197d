"""tooldecode.trial: the channel dispatch, the sizing rule, the model cache and a Trial's prompt, draw,
probe refusal, replay and score (no model weights: a backend here is a stand-in)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from tooldecode.engines import EngineError
from tooldecode.records import MODES, Condition
from tooldecode.scenarios import get_scenario
from tooldecode.trial import (
    CHANNELS,
    ModelCache,
    Trial,
    TrialError,
    backend_kwargs,
    channel_of,
    llamacpp_size,
    replay_status,
)

SCENARIO = "c-config-trim-crlf"
ARM = {"model": "qwen2.5-coder-0.5b-instruct", "backend": "llamacpp", "mode": "loose", "temperature": 1.0}


# --- the channel dispatch ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "backend", "engine", "channel"),
    [
        ("loose", "llamacpp", None, "loose"),
        ("loose", "hf", None, "loose"),
        ("loose", "openai", None, "server"),
        ("strict", "llamacpp", "xgrammar", "mask"),
        ("strict-spec", "llamacpp", "llguidance", "mask"),
        ("strict", "llamacpp", "xgrammar-json", "mask"),
        ("strict", "hf", "outlines-transformers", "sampler"),
        ("strict-aligned", "llamacpp", "xgrammar", "aligned"),
        ("strict-prefix", "llamacpp", "xgrammar", "prefix"),
        ("strict", "openai", "xgrammar", "server-grammar"),
        ("strict-spec", "openai", "outlines-transformers", "server-grammar"),  # the server takes the GBNF
        ("tools-strict", "openai", None, "tools"),
        ("tools-loose", "openai", None, "tools"),
    ],
)
def test_each_mode_and_backend_has_one_channel(mode, backend, engine, channel):
    assert channel_of(mode, backend, engine) == channel
    assert channel in CHANNELS


def test_every_mode_of_a_run_has_a_channel():
    drawn = {channel_of(m, "openai" if m.startswith("tools") else "llamacpp") for m in MODES}
    assert drawn == {"loose", "mask", "aligned", "prefix", "tools"}  # strict and strict-spec share "mask"


@pytest.mark.parametrize(
    ("mode", "backend", "kw", "message"),
    [
        ("tools-strict", "llamacpp", {}, "sends chat requests to a server; run it with --backend openai"),
        ("tools-loose", "openai", {"conditioning": "gold-prefix"}, "cannot carry conditioning 'gold-prefix'"),
        ("strict-aligned", "openai", {}, "'strict-aligned' needs the full logits"),
        ("strict-prefix", "openai", {}, "'strict-prefix' needs the full logits"),
        ("greedy", "llamacpp", {}, "unknown mode 'greedy'"),
        ("strict", "llamacpp", {"duplicates": "admit"}, "applies to the open grammar of mode 'strict-spec'"),
        ("strict-spec", "llamacpp", {"duplicates": "twice"}, "unknown duplicates 'twice'"),
    ],
)
def test_a_mode_the_backend_cannot_draw_is_one_line(mode, backend, kw, message):
    with pytest.raises(TrialError, match=message) as err:
        channel_of(mode, backend, "xgrammar", **kw)
    assert "\n" not in str(err.value)


def test_engine_limits_come_from_the_engine_registry():
    with pytest.raises(EngineError, match="draws in mode strict"):
        channel_of("strict-spec", "llamacpp", "xgrammar-json")
    with pytest.raises(EngineError, match="runs on the"):
        channel_of("strict", "hf", "llama-grammar")
    with pytest.raises(TrialError, match="compiles the schema itself"):
        channel_of("strict-spec", "llamacpp", "llguidance-json", duplicates="admit")
    assert channel_of("strict-spec", "llamacpp", "tooldecode-spec", duplicates="admit") == "mask"


# --- one sizing rule, one model cache -----------------------------------------------------------------


def test_the_sizing_rule_holds_the_draws_or_branches_and_the_prompt():
    assert llamacpp_size() == {"n_ctx": 8192, "max_seqs": 17}  # 16 draws + sequence 0
    assert llamacpp_size(batch_size=8) == llamacpp_size()  # the sampler's own 16 still fit
    assert llamacpp_size(batch_size=32) == {"n_ctx": 8192, "max_seqs": 33}
    assert llamacpp_size(branches=32)["max_seqs"] == 33  # a probe level evaluated in one group
    assert llamacpp_size(batch_size=24, branches=20)["max_seqs"] == 25
    assert llamacpp_size(evaluates=False) == {"n_ctx": 512, "max_seqs": 1}  # vocabulary only
    # filled slots: a stream of 8192 tokens for each slot and sequence 0, no shared (unified) cache
    assert llamacpp_size(batch_size=8, fill_slots=True) == {
        "n_ctx": 9 * 8192,
        "max_seqs": 9,
        "kv_unified": False,
    }
    assert llamacpp_size(fill_slots=True)["max_seqs"] == 17  # the sampler's default slots
    assert backend_kwargs("hf", batch_size=64) == {}
    server = {"base_url": "http://127.0.0.1:8000/v1", "api_key_env": None, "kind": "auto"}
    got = backend_kwargs("openai", server=server)
    assert got == server and got is not server


class _Loaded:
    def __init__(self, name, model, kw):
        self.name, self.model, self.kw, self.closed = name, model, kw, False

    def close(self):
        self.closed = True


@pytest.fixture
def fake_loads(monkeypatch):
    import tooldecode.backends
    import tooldecode.models

    loads: list[_Loaded] = []

    def load_backend(name, ref, **kw):
        loads.append(_Loaded(name, ref, kw))
        return loads[-1]

    monkeypatch.setattr(tooldecode.backends, "load_backend", load_backend)
    monkeypatch.setattr(tooldecode.models, "resolve", lambda model, fetch=False: f"ref:{model}")
    monkeypatch.setattr(tooldecode.models, "verified", lambda ref: ref)  # nothing to hash: no weights
    return loads


def test_the_model_cache_loads_once_sized_by_the_rule(fake_loads):
    with ModelCache(batch_size=8, branches=24) as models:
        a = models.get("llamacpp", "m1")
        assert models.get("llamacpp", "m1") is a and len(fake_loads) == 1
        assert a.kw == {"n_ctx": 8192, "max_seqs": 25} and a.model == "ref:m1"
        b = models.get("llamacpp", "m2")  # one model at a time: the first is closed
        assert a.closed and not b.closed
    assert b.closed


def test_the_model_cache_can_keep_every_model_and_passes_the_server(fake_loads):
    server = {"base_url": "http://127.0.0.1:1/v1"}
    models = ModelCache(evaluates=False, keep_all=True, server=server)
    a, b = models.get("llamacpp", "m1"), models.get("openai", "m2")
    assert not a.closed and a.kw == {"n_ctx": 512, "max_seqs": 1} and b.kw == server
    models.close()
    assert a.closed and b.closed and not models.cache


# --- a Trial ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def scenario():
    return get_scenario(SCENARIO)


def test_a_trial_renders_the_prompt_once_from_an_arm_dict_or_a_condition(qwen_ref, scenario):
    from tooldecode.prompts import TranscriptOptions, render_prompt

    arm = dict(ARM, history="fresh", conditioning="forced-tool", temperature=0.7)
    t = Trial(arm, scenario, ref=qwen_ref)
    want = render_prompt(scenario, qwen_ref, TranscriptOptions(history="fresh", conditioning="forced-tool"))
    assert t.prompt == want and t.text == want.text and t.channel == "loose"
    assert Trial(Condition.from_json(arm), scenario, ref=qwen_ref).prompt == want
    p = t.params(max_new_tokens=5, seed=3)
    assert (p.temperature, p.stop, p.max_new_tokens, p.seed) == (0.7, tuple(want.stop), 5, 3)


def test_a_trial_refuses_a_mode_before_anything_renders(scenario):
    with pytest.raises(TrialError, match="needs the full logits"):
        Trial(dict(ARM, backend="openai", mode="strict-aligned"), scenario, ref=object())


class _Server:
    """A stand-in for the openai backend: records what a draw hands it."""

    name = "openai"

    def __init__(self):
        self.calls = []

    def sample(self, prompt, n, params, *, grammar=None, prefill="", start_index=0, on_batch=None):
        self.calls.append(
            {"prompt": prompt, "n": n, "grammar": grammar, "prefill": prefill, "start": start_index}
        )
        from tooldecode.backends.openai_records import ServerSample

        return [
            ServerSample(start_index + i, params.seed, "", None, None, None, finish_reason="stop")
            for i in range(n)
        ]


@pytest.mark.parametrize("mode", ["loose", "strict", "strict-spec"])
def test_a_server_draw_gets_the_prompt_and_the_grammar_of_the_mode(qwen_ref, scenario, mode):
    t = Trial(dict(ARM, backend="openai", mode=mode), scenario, ref=qwen_ref)
    server = _Server()
    out = t.sample(server, 2, t.params(), start_index=5)
    assert [s.index for s in out] == [5, 6]
    call = server.calls[0]
    assert (call["prompt"], call["prefill"], call["n"], call["start"]) == (t.prompt.text, "", 2, 5)
    assert call["grammar"] == (None if mode == "loose" else t.grammar(mode))


def test_the_open_grammar_follows_the_conditions_duplicates(qwen_ref, scenario):
    arm = dict(ARM, backend="openai", mode="strict-spec")
    forbid = Trial(arm, scenario, ref=qwen_ref).grammar("strict-spec")
    admit = Trial(dict(arm, duplicates="admit"), scenario, ref=qwen_ref).grammar("strict-spec")
    strict = Trial(arm, scenario, ref=qwen_ref).grammar("strict")
    assert len({forbid, admit, strict}) == 3


def test_a_tool_view_changes_the_text_the_model_sees_not_the_prompt(qwen_ref, scenario):
    t = Trial(ARM, scenario, ref=qwen_ref, tool_view="no-required")
    assert t.text != t.prompt.text and '"required"' not in t.text.split("</tools>")[0]
    assert all(isinstance(f, dict) for f in t.key_tools)
    with pytest.raises(TrialError, match="tool_view 'sideways' is not one of"):
        Trial(ARM, scenario, ref=qwen_ref, tool_view="sideways")


def test_the_probe_refuses_a_forced_prefill(qwen_ref, scenario):
    t = Trial(dict(ARM, conditioning="gold-prefix"), scenario, ref=qwen_ref)
    with pytest.raises(TrialError, match="conditioning 'free'"):
        t.probe(None)


def test_score_is_the_verdict_of_the_call_with_its_prefill(qwen_ref, scenario):
    free = Trial(ARM, scenario, ref=qwen_ref)
    assert free.score(free.call, "stop").verdict == "valid"
    forced = Trial(dict(ARM, conditioning="gold-prefix"), scenario, ref=qwen_ref)
    rest = free.call[len(forced.prompt.prefill) :]
    assert free.call.startswith(forced.prompt.prefill) and forced.prompt.prefill
    drawn = SimpleNamespace(text=rest, finish_reason="stop")
    assert forced.score(drawn).verdict == "valid"
    assert free.score('{"name": "edit", "arguments": {"nope": 1}}', "stop").verdict != "valid"


class _TextServer:
    """A stand-in for the openai backend that draws one fixed text."""

    name = "openai"

    def __init__(self, text):
        self.text = text

    def sample(self, prompt, n, params, *, grammar=None, prefill="", start_index=0, on_batch=None):
        from tooldecode.backends.openai_records import ServerSample

        out = [
            ServerSample(start_index + i, params.seed, self.text, None, None, None, finish_reason="stop")
            for i in range(n)
        ]
        if on_batch is not None:
            on_batch(out)
        return out


# e11's schema variant: a minimum (and maximum) length on both strings of an edit
E11_EXTRA = {"oldText": {"minLength": 1, "maxLength": 256}, "newText": {"minLength": 1, "maxLength": 256}}


@pytest.mark.parametrize("extra", [None, E11_EXTRA], ids=["catalog", "e11-schema-extra"])
def test_a_drawn_sample_scores_the_same_through_sample_and_rescore(tmp_path, qwen_ref, scenario, extra):
    """The verdict ``tooldecode sample`` prints (``Trial.score`` of the drawn record) is the one ``run``
    then ``rescore`` store: both read the tools the prompt showed, which the record carries. With
    e11's ``minLength: 1`` on newText an empty newText is ``wrong_type``; a run written before records
    carried their tools gets its arm's at load and scores the same."""
    import re

    from tooldecode.runs import RunStore, build_manifest, load_run

    arm = dict(ARM, backend="openai", level="L1", conditioning="forced-tool")
    if extra:
        arm["schema_extra"] = extra
    trial = Trial(arm, scenario, ref=qwen_ref)
    empty = re.sub(r'("newText":\s*)"(?:[^"\\]|\\.)*"', r'\1""', trial.call)
    assert empty != trial.call and trial.call.startswith(trial.prompt.prefill)
    records = []
    trial.sample(
        _TextServer(empty[len(trial.prompt.prefill) :]), 2, trial.params(seed=3), on_batch=records.extend
    )
    assert [r.key for r in records] == [trial.key(3, 0), trial.key(3, 1)]
    rec = records[0]
    assert rec.tools == trial.tools and rec.arm.wire == trial.prompt.wire and rec.call_text == empty
    assert {t.name for t in rec.tools} == {t.name for t in trial.prompt.tools}
    via_sample = trial.score(rec)
    assert via_sample.verdict == ("wrong_type" if extra else "valid"), via_sample.errors

    def stored_run(name, lines):
        manifest = build_manifest({"spec": "agree", "streams": "scenario"})
        store = RunStore.create(tmp_path / name, manifest)
        store.append(lines)
        store.close()
        return load_run(tmp_path / name, rescore=True)

    run = stored_run("run", [r.to_json() for r in records])
    assert run.samples[0] == rec and run.verdicts[rec.key] == via_sample
    old = [{k: v for k, v in r.to_json().items() if k != "tools"} for r in records]
    before = stored_run("before-tools", old)
    assert before.samples[0].tools == rec.tools and before.verdicts[rec.key] == via_sample


def test_a_users_tool_list_is_what_the_trial_shows_draws_against_and_scores(tmp_path, qwen_ref, scenario):
    """Tools given to the trial (a user's list) replace the catalog's: the prompt shows them, the records
    carry them, and the verdict reads them (``minLength`` on newText: an empty newText is wrong_type)."""
    import dataclasses
    import re

    from tooldecode.grammar import load_tool

    edit = load_tool("edit")
    params = json.loads(json.dumps(edit.parameters))
    params["properties"]["edits"]["items"]["properties"]["newText"]["minLength"] = 1
    mine = dataclasses.replace(edit, parameters=params)
    arm = dict(ARM, backend="openai", level="L1", conditioning="forced-tool")
    trial = Trial(arm, scenario, ref=qwen_ref, tools=[mine])
    assert trial.prompt.tools == (mine,) and '"minLength"' in trial.text
    empty = re.sub(r'("newText":\s*)"(?:[^"\\]|\\.)*"', r'\1""', trial.call)
    (rec,) = trial.sample(_TextServer(empty[len(trial.prompt.prefill) :]), 1, trial.params())
    assert [t.name for t in rec.tools] == ["edit"] and rec.tools[0].parameters == params
    assert trial.score(rec).verdict == "wrong_type"
    assert Trial(arm, scenario, ref=qwen_ref).score(rec).verdict == "wrong_type"  # the record's tools decide


class _Matcher:
    """Allows token 1 and 2, then only the end (``done``) after two tokens."""

    def __init__(self):
        self.n = 0

    def allowed(self):
        a = np.zeros(4, dtype=bool)
        a[[1, 2]] = True
        return a

    def accept(self, tok):
        self.n += 1

    def done(self):
        return self.n >= 2


@pytest.mark.parametrize(
    ("tokens", "finish", "status"),
    [([1, 2, 3], "stop", "valid"), ([1, 0], "stop", "invalid@1"), ([1], "length", "valid-prefix"),
     ([1], "stop", "stop-string"), ([1, 2, 1], "stop", "invalid@2")],
)  # fmt: skip
def test_replay_status(tokens, finish, status):
    assert replay_status(_Matcher(), tokens, frozenset({3}), finish) == status


# --- the commands: `sample` takes every mode of `run`, with run's errors; probe suites load -------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--mode", "strict-aligned", "--backend", "openai", "--base-url", "http://127.0.0.1:9/v1"],
         "'strict-aligned' needs the full logits"),
        (["--mode", "tools-strict"], "sends chat requests to a server"),
        (["--mode", "strict", "--duplicates", "admit"], "applies to the open grammar of mode 'strict-spec'"),
        (["--mode", "strict-spec", "--engine", "xgrammar-json"], "draws in mode strict"),
    ],
)  # fmt: skip
def test_sample_refuses_what_run_refuses_before_any_model_loads(capsys, argv, message):
    from tooldecode.cli import main

    assert main(["sample", "--scenario", SCENARIO, "--model", "no-such-model", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err


def test_sample_offers_every_mode_of_run():
    from tooldecode.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    mode = next(a for a in sub.choices["sample"]._actions if a.dest == "mode")
    assert tuple(mode.choices) == MODES


def test_the_committed_probe_suites_load_and_a_bad_one_is_one_line(tmp_path):
    from pathlib import Path

    from tooldecode.experiments import SpecError
    from tooldecode.experiments.probes import load_suite

    root = Path(__file__).resolve().parents[1] / "experiments"
    views = {v.get("tool_view", "as-written") for v in load_suite(root / "p1_schema_echo.toml")["variants"]}
    assert views == {"as-written", "no-required", "typescript", "required-first"}
    assert load_suite(root / "p2_transcript_variants.toml")["items"] == "first-last"
    bad = tmp_path / "bad.toml"
    for body, message in [
        ('name = "x"\n[[variants]]\nname = "a"\ntool_view = "upside-down"\n', "tool_view must be one of"),
        ('name = "x"\n[[variants]]\nname = "a"\nhistroy = "fresh"\n', "unknown field(s) histroy"),
        ('name = "x"\nitems = "middle"\n[[variants]]\nname = "a"\n', "items must be one of"),
        ('name = "x"\n', "missing field 'variants'"),
    ]:
        bad.write_text(body)
        with pytest.raises(SpecError, match=message.replace("(", r"\(").replace(")", r"\)")):
            load_suite(bad)
