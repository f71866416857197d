"""Engine settings (tooldecode.engines): names, formats, framing, soundness, records — real engines and models."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tooldecode.engines import (
    COMPARED,
    ENGINES,
    GRAMMAR_FORMATS,
    SAMPLER_UNREPORTED,
    EngineError,
    build_strict,
    call_frame,
    check_engine,
    closed_schema,
    draw,
    engine_info,
    outlines_regex,
    prefix_gbnf_rules,
    soundness,
    soundness_markdown,
)
from tooldecode.grammar import serialize_call, tool_catalog

ROOT = Path(__file__).resolve().parent.parent
MASKS = [n for n in COMPARED if ENGINES[n].kind == "mask"]


def _tools():
    cat = tool_catalog()
    return [cat[n] for n in ("edit", "read", "write", "bash")]


# ---------------------------------------------------------------------------------------------- names


def test_every_setting_declares_what_it_reads():
    for info in ENGINES.values():
        assert info.reads in GRAMMAR_FORMATS, info.name
        assert info.kind in ("mask", "sampler"), info.name
    assert {"outlines-transformers", "outlines-llamacpp"} <= set(ENGINES)
    assert set(COMPARED) <= set(ENGINES)


def test_one_name_and_one_format_per_grammar_engine():
    """The mask engines, the engine settings that feed them and the conformance engines agree on each
    engine's name and the grammar format it reads (grammar.check.FORMAT_OF)."""
    from tooldecode.grammar.check import FORMAT_OF
    from tooldecode.masking import ENGINE_FORMATS
    from tooldecode.masking import ENGINES as MASK_ENGINES

    assert set(MASK_ENGINES) <= set(FORMAT_OF) and set(MASK_ENGINES) <= set(ENGINES)
    assert ENGINE_FORMATS == {e: FORMAT_OF[e] for e in MASK_ENGINES}
    for info in ENGINES.values():
        if info.mask_engine is not None:
            assert info.reads == ENGINE_FORMATS[info.mask_engine], info.name


def test_unknown_engine_is_one_line_naming_the_settings():
    with pytest.raises(EngineError) as err:
        engine_info("xgrammer")
    msg = str(err.value)
    assert "\n" not in msg and "xgrammar-json" in msg and "outlines-llamacpp" in msg


def test_format_backend_and_mode_mismatches_are_one_line_errors():
    with pytest.raises(EngineError, match=r"reads json-schema, not 'gbnf'.*xgrammar, llama-grammar"):
        check_engine("xgrammar-json", grammar_format="gbnf")
    with pytest.raises(EngineError, match="reads lark"):
        check_engine("llguidance", grammar_format="json-schema")
    with pytest.raises(EngineError, match="llamacpp backend"):
        check_engine("llamacpp-json", backend="hf")
    with pytest.raises(EngineError, match="mode strict, not 'strict-spec'"):
        check_engine("llguidance-json", modes=["strict-spec"])
    assert check_engine("xgrammar", grammar_format="gbnf", modes=["strict-spec"]).name == "xgrammar"


def test_sample_help_lists_every_setting():
    out = subprocess.run(
        [sys.executable, "-m", "tooldecode", "sample", "--help"], capture_output=True, text=True, check=True
    ).stdout
    flat = " ".join(out.split()).replace("- ", "-")
    for name in ENGINES:
        assert name in flat, name


def test_sample_unknown_engine_exits_with_the_allowed_values():
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tooldecode",
            "sample",
            "--scenario",
            "x",
            "--mode",
            "strict",
            "--engine",
            "nope",
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert "invalid choice: 'nope'" in last and "outlines-transformers" in last


def test_spec_engine_list_gives_one_strict_arm_per_setting(tmp_path):
    from tooldecode.experiments import SpecError, arm_label, load_spec

    spec = load_spec(ROOT / "experiments" / "e15_engines.toml")
    arms = spec.arms()
    strict = [a for a in arms if a["mode"] == "strict"]
    assert [a["engine"] for a in strict] == spec.engine
    assert len({arm_label(a) for a in arms}) == len(arms)
    assert all(f"engine={a['engine']}" in arm_label(a) for a in strict)
    assert load_spec(ROOT / "experiments" / "e15_engines_outlines.toml").engine[-1] == "outlines-transformers"
    bad = tmp_path / "e_engines.toml"
    bad.write_text(
        'name = "x"\nmodels = ["smollm2-135m-instruct"]\nmodes = ["strict"]\nengine = ["xgrammar-jsn"]\n'
    )
    with pytest.raises(SpecError) as err:
        load_spec(bad)
    assert "\n" not in str(err.value) and "unknown engine 'xgrammar-jsn'" in str(err.value)
    bad.write_text(
        'name = "x"\nmodels = ["smollm2-135m-instruct"]\nmodes = ["strict-spec"]\nengine = "llguidance-json"\n'
    )
    with pytest.raises(SpecError, match="draws in mode strict"):
        load_spec(bad)


# ---------------------------------------------------------------------------------------------- framing


def test_call_frame_splits_each_wire_around_the_arguments():
    args = {"path": "a.py", "edits": [{"oldText": "x", "newText": "y"}]}
    for wire in ("json", "call-json", "hermes", "call-list", "harmony"):
        head, tail = call_frame("edit", wire, "bounded")
        text = serialize_call("edit", args, wire=wire, ws="bounded")
        assert text.startswith(head) and text.endswith(tail), wire
        assert json.loads(text[len(head) : len(text) - len(tail)]) == args
    with pytest.raises(EngineError, match="antml wire writes parameters as XML"):
        call_frame("edit", "antml", "bounded")


def test_prefix_gbnf_rules_renames_rules_only():
    text = (
        'root ::= "{" space kv "x-y" [a-z]{1,3} # root comment\nkv ::= "\\"root\\"" space\nspace ::= " "?\n'
    )
    out = prefix_gbnf_rules(text, "t0-")
    assert out.startswith('t0-root ::= "{" t0-space t0-kv "x-y" [a-z]{1,3} # root comment')
    assert 't0-kv ::= "\\"root\\"" t0-space' in out


def test_closed_schema_closes_only_unsaid_objects():
    schema = {
        "type": "object",
        "properties": {"a": {"type": "object", "properties": {}}},
        "additionalProperties": True,
    }
    out = closed_schema(schema)
    assert out["additionalProperties"] is True and out["properties"]["a"]["additionalProperties"] is False


def test_outlines_regex_is_closed_and_cannot_write_unicode_escapes():
    rx = outlines_regex([tool_catalog()["edit"]], "call-json", "bounded")
    ok = serialize_call(
        "edit", {"path": "a", "edits": [{"oldText": "x", "newText": "y"}]}, wire="call-json", ws="bounded"
    )
    assert re.fullmatch(rx, ok)
    assert not re.fullmatch(rx, ok.replace('"newText": "y"', '"newText": "y", "required": "z"'))
    # outlines-core's JSON string admits the short escapes only: a \u escape is outside its language
    assert not re.fullmatch(rx, ok.replace('"newText": "y"', '"newText": "\\u003c"'))


# ---------------------------------------------------------------------------------------------- models

EXPECTED_INVENTED = {  # what each setting's documentation says its default does with an open item schema
    n: not ENGINES[n].closes_objects for n in COMPARED
}


@pytest.mark.model
def test_soundness_of_mask_settings_matches_their_docs_and_docs_engines_md(llama_smol):
    table = soundness(llama_smol, MASKS)
    assert set(table) == set(MASKS)
    for name, row in table.items():
        assert row["valid"], name
        assert row["invented"] == EXPECTED_INVENTED[name], name
    docs = (ROOT / "docs" / "engines.md").read_text()
    for line in soundness_markdown(table).splitlines()[2:]:
        assert line in docs, line


@pytest.mark.model
@pytest.mark.slow
def test_soundness_of_outlines_llamacpp(llama_smol):
    table = soundness(llama_smol, ["outlines-llamacpp"])
    assert table == {"outlines-llamacpp": {"valid": True, "invented": False}}
    assert soundness_markdown(table).splitlines()[2] in (ROOT / "docs" / "engines.md").read_text()


def _l2_prompt(ref):
    """A rendered gold-prefix prompt whose text is one short user turn, the assistant's turn and the forced
    prefix. The engines build their grammars from ``prompt.tools`` and never read the tool list in the
    system turn or the file the user turn shows; those ~1,900 tokens made the prefill (one llama.cpp thread)
    most of each draw here, and outlines prefills again on every sample."""
    from dataclasses import replace

    from tooldecode.prompts import TranscriptOptions, render_prompt
    from tooldecode.scenarios import load_scenarios

    sc = next(s for s in load_scenarios() if s.id == "toml-entry-point-colon")
    prompt = render_prompt(sc, ref, TranscriptOptions(toolset="nested", conditioning="gold-prefix"))
    turn = prompt.text.rindex("<|im_start|>assistant\n")
    user = "<|im_start|>user\nmdlint fails with ModuleNotFoundError: fix its entry point in pyproject.toml.<|im_end|>\n"
    return sc, replace(prompt, text=user + prompt.text[turn:])


@pytest.mark.model
@pytest.mark.parametrize("name", ["xgrammar-json", "llguidance-json", "llamacpp-json"])
def test_json_settings_sample_after_the_gold_prefix_with_strict_records(llama_smol, smol_ref, name):
    from tooldecode.sampling import SamplingParams
    from tooldecode.scoring import score_text

    sc, prompt = _l2_prompt(smol_ref)
    channel = build_strict(name, prompt.tools, prompt.wire, llama_smol)
    # index 2 closes its call within 20 tokens under every setting (seed 3): the parse check runs
    params = SamplingParams(max_new_tokens=24, stop=tuple(prompt.stop), seed=3)
    out = draw(llama_smol, prompt.text, 3, params, mask=channel, prefill=prompt.prefill, batch_size=3)
    assert [s.index for s in out] == [0, 1, 2]
    for s in out:
        assert s.error is None, s.error
        assert len(s.token_ids) == len(s.logprobs) == len(s.mask_removed) == len(s.entropy_masked)
        assert all(0.0 <= m <= 1.0 for m in s.mask_removed)
        v = score_text(
            prompt.prefill + s.text, list(prompt.tools), wire=prompt.wire, expected_tool="edit", scenario=sc
        )
        if s.finish_reason == "stop":  # a finished strict sample parses as a call of the offered tools
            assert v.verdict != "parse_error", (name, s.text)


@pytest.mark.model
def test_prefix_the_grammar_cannot_continue_is_an_error_not_unconstrained(llama_smol, smol_ref):
    from tooldecode.sampling import SamplingParams

    _, prompt = _l2_prompt(smol_ref)
    channel = build_strict("xgrammar-json", prompt.tools, prompt.wire, llama_smol)
    bad = prompt.prefill.replace('"edits"', '"edit"', 1)
    out = draw(llama_smol, prompt.text, 1, SamplingParams(max_new_tokens=4), mask=channel, prefill=bad)
    assert out[0].finish_reason == "error" and "prefill" in out[0].error


@pytest.mark.model
def test_run_with_an_engine_list_writes_one_arm_per_setting(tmp_path):
    from tooldecode.experiments import load_spec, run_spec
    from tooldecode.runs import RunStore

    spec_path = tmp_path / "e_engines.toml"
    spec_path.write_text(
        'name = "t-engines"\nmodels = ["smollm2-135m-instruct"]\nscenarios = ["toml-entry-point-colon"]\n'
        'n = 2\nmax_new_tokens = 6\nmodes = ["loose", "strict"]\n'
        'engine = ["tooldecode-strict", "llguidance-json-closed"]\n'
        '[variant]\nhistory = ["fresh"]\ntoolset = ["nested"]\nconditioning = ["gold-prefix"]\n'
    )
    out = run_spec(load_spec(spec_path), tmp_path / "run", progress=False)
    recs = list(RunStore.open(out).sample_records())
    engines = sorted({str(r["arm"].get("engine")) for r in recs})
    assert engines == ["None", "llguidance-json-closed", "tooldecode-strict"]
    assert len(recs) == 6
    for r in recs:
        if r["arm"]["mode"] == "strict":
            assert r["error"] is None and len(r["mask_removed"]) == len(r["token_ids"])


@pytest.mark.model
@pytest.mark.slow
@pytest.mark.parametrize("engine", ["outlines-llamacpp", "outlines-transformers"])
def test_outlines_is_the_sampler_and_says_what_it_cannot_report(request, smol_ref, engine):
    """outlines draws with its own loop from the prompt exactly as written (no chat turn wrapped around
    it: the sampler checks the tokens the model saw, and the record would be an error otherwise).
    outlines-transformers wraps the session's transformers model (one load of it per session)."""
    from tooldecode.sampling import SamplingParams

    backend = request.getfixturevalue("llama_smol" if engine == "outlines-llamacpp" else "hf_smol")
    _, prompt = _l2_prompt(smol_ref)
    channel = build_strict(engine, prompt.tools, prompt.wire, backend)
    out = draw(
        backend,
        prompt.text,
        2,
        SamplingParams(max_new_tokens=8, stop=tuple(prompt.stop)),
        mask=channel,
        prefill=prompt.prefill,
    )
    assert [s.index for s in out] == [0, 1]
    for s in out:
        assert s.error is None, s.error
        rec = s.to_record()
        for key in SAMPLER_UNREPORTED:
            assert rec[key] is None
        assert rec["timing"]["unreported"] == list(SAMPLER_UNREPORTED)
        # outlines continues after the prefix: the text never re-writes the call's opening
        assert not s.text.startswith(prompt.prefill[:20])
    # a prompt outlines re-templates as a chat turn is caught, not sampled from
    assert channel._prompt_changed(prompt.text, None) is not None
    wrapped = channel._prompt_ids("<|im_start|>user\n" + prompt.text + "<|im_end|>\n<|im_start|>assistant\n")
    assert "changed the prompt" in (channel._prompt_changed(prompt.text, wrapped) or "")
    assert channel._prompt_changed(prompt.text, channel._prompt_ids(prompt.text)) is None


@pytest.mark.model
@pytest.mark.slow
def test_outlines_llamacpp_failure_inside_the_callback_is_an_error_record(llama_smol, smol_ref):
    """llama-cpp-python calls outlines' processor from a ctypes callback that prints and ignores its
    exceptions, then goes on sampling without the mask: a prefix outlines' guide rejects must give error
    records, never text recorded as strict samples."""
    from tooldecode.sampling import SamplingParams

    _, prompt = _l2_prompt(smol_ref)
    channel = build_strict("outlines-llamacpp", prompt.tools, prompt.wire, llama_smol)
    bad = "@@ not a call @@"
    out = draw(
        llama_smol,
        prompt.text[: len(prompt.text) - len(prompt.prefill)] + bad,
        1,
        SamplingParams(max_new_tokens=4, stop=tuple(prompt.stop)),
        mask=channel,
        prefill=bad,
    )
    assert len(out) == 1 and out[0].finish_reason == "error"
    assert "rejects the forced prefix" in (out[0].error or "")


@pytest.mark.model
@pytest.mark.slow
def test_outlines_llamacpp_lacks_partial_utf8_tokens_and_says_so(llama_smol, smol_ref):
    """outlines' llama.cpp tokenizer keys its vocabulary by each piece decoded with replacement, so the
    byte-level tokens that are not whole UTF-8 sequences drop out: CJK text inside a string (valid JSON)
    cannot be written, and a forced prefix holding it is an error naming the missing token."""
    from tooldecode.sampling import SamplingParams

    _, prompt = _l2_prompt(smol_ref)
    channel = build_strict("outlines-llamacpp", prompt.tools, prompt.wire, llama_smol)
    prefill = prompt.prefill + "创建一个 API 密钥"  # still inside the newText string
    out = draw(
        llama_smol,
        prompt.text + "创建一个 API 密钥",
        1,
        SamplingParams(max_new_tokens=4, stop=tuple(prompt.stop)),
        mask=channel,
        prefill=prefill,
    )
    assert len(out) == 1 and out[0].finish_reason == "error"
    assert "missing from outlines' vocabulary" in (out[0].error or "")


# ---------------------------------------------------------------------------------------------- the run


def _run_rows(name: str):
    path = ROOT / "runs" / name
    if not (path / "samples.jsonl").exists():
        pytest.skip(f"runs/{name} is not in this checkout")
    from tooldecode.runs import RunStore, score_stored

    store = RunStore.open(path)
    return [(r, score_stored(r, store.manifest)) for r in store.sample_records()]


# every committed E15 run (the first four always: a missing one skips with its name, never vanishes)
E15_RUNS = sorted(
    {"e15-engines-qwen0.5b", "e15-engines-qwen1.5b", "e15-engines-outlines", "e15-engines-l1-qwen0.5b"}
    | {p.name for p in (ROOT / "runs").glob("e15-engines*") if (p / "samples.jsonl").exists()}
)


@pytest.mark.parametrize("name", E15_RUNS)
def test_sampled_results_agree_with_the_soundness_table(name):
    """A setting that rejects an invented item key never produced one in the committed E15 runs."""
    seen: dict[str, int] = {}
    rows = _run_rows(name)
    for rec, verdict in rows:
        engine = rec["arm"].get("engine")
        if engine is None or rec.get("error"):
            continue
        items = [k for k in verdict["invented_keys"] if re.match(r"edits\[\d+\]\.", k["path"])]
        seen[engine] = seen.get(engine, 0) + len(items)
        if not EXPECTED_INVENTED[engine]:
            assert not items, (engine, rec["key"], items)
    ran = {rec["arm"]["engine"] for rec, _ in rows if rec["arm"].get("engine")}
    assert set(seen) == ran  # every setting of the run drew samples that were checked


@pytest.mark.model
def test_llamacpp_json_admits_raw_control_characters_in_strings(llama_smol):
    """llama-cpp-python's json_schema_to_gbnf writes the string character class as [^"\\]: a raw newline
    inside a string (invalid JSON) passes its grammar; xgrammar's JSON schema does not admit it."""
    from tooldecode.engines import accepts

    valid = serialize_call("edit", {"path": "a", "edits": [{"oldText": "x", "newText": "y"}]}, ws="bounded")
    valid = serialize_call("edit", json.loads(valid), wire="call-json", ws="bounded")
    raw = valid.replace('"newText": "y"', '"newText": "a\nb"')
    assert raw != valid
    with pytest.raises(ValueError):
        json.loads(raw)
    tools = _tools()
    assert accepts(build_strict("llamacpp-json", tools, "call-json", llama_smol), llama_smol, raw)
    assert not accepts(build_strict("xgrammar-json", tools, "call-json", llama_smol), llama_smol, raw)
