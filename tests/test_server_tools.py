"""The provider-style tool-calling arms (`tools-strict`, `tools-loose`) against llama-cpp-python's own
server (the `llama_server` fixture, SmolLM2): chat completions with tools=[…] and per-tool `strict`,
records of the sampler's shape, scored by the same classifier as every other sample."""

from __future__ import annotations

import dataclasses
import json

import pytest

from tooldecode.backends.openai import ServerError
from tooldecode.backends.openai_records import PARSED_CALL
from tooldecode.backends.openai_tools import TOOL_MODES, call_text, chat_tools, draw_tools
from tooldecode.prompts import parse_variant, render_prompt
from tooldecode.sampling import Sample, SamplingParams
from tooldecode.scenarios import get_scenario
from tooldecode.scoring import score_text

pytestmark = pytest.mark.model

SCENARIO = "py-mutable-default-cart"


def _prompt(ref, variant: str):
    return render_prompt(get_scenario(SCENARIO), ref, parse_variant(variant))


def _verdict(p, s):
    return score_text(
        s.text,
        list(p.tools),
        wire=p.wire,
        expected_tool=p.expected_tool,
        scenario=get_scenario(SCENARIO),
        finish_reason=s.finish_reason,
    )


def test_call_text_keeps_the_servers_arguments_verbatim():
    calls = [{"function": {"name": "edit", "arguments": '{"path": "a", "path": "b"'}}]
    text = call_text(None, calls)
    assert text == '{"name": "edit", "arguments": {"path": "a", "path": "b"}'
    assert call_text("Sure.", calls).startswith("Sure.\n{")
    fns = chat_tools([{"type": "function", "function": {"name": "x", "parameters": {}}}], strict=True)
    assert fns[0]["function"]["strict"] is True and TOOL_MODES == ("tools-strict", "tools-loose")


def test_forced_tool_arm_record_and_classifier(openai_smol, smol_ref):
    """forced-tool → tool_choice names the tool: the server constrains the arguments to its schema; the
    record has the sampler's fields, token fields None with the reason; the classifier scores it."""
    p = _prompt(smol_ref, "fresh,forced-tool")
    params = SamplingParams(max_new_tokens=48, seed=0)
    got: list = []
    out = draw_tools(
        openai_smol, p, 2, params, strict=True, conditioning="forced-tool", start_index=3, on_batch=got.extend
    )
    assert [s.index for s in out] == [3, 4] and sorted(s.index for s in got) == [3, 4]
    keys = {f.name for f in dataclasses.fields(Sample)}
    for s in out:
        rec = s.to_record()
        assert keys <= set(rec) and set(rec) - keys == {"tokens", "tool_name", "absent"}
        assert s.tool_name == p.expected_tool
        assert s.token_ids is None and s.logprobs is None and s.absent["token_ids"] == PARSED_CALL
        assert {k for k in keys if rec[k] is None and k != "error"} == set(rec["absent"]) - {"tokens"}
        assert s.text.startswith('{"name": "edit", "arguments": {')
        assert s.timing["prompt_tokens"] > 500 and s.timing["tokens"] <= params.max_new_tokens
        v = _verdict(p, s)
        assert v.tool == p.expected_tool
        if s.finish_reason == "stop":  # closed by the grammar: parseable, the schema's keys only
            assert json.loads(s.text)["name"] == "edit" and v.invented_keys == [], (s.text, v)
    # a budget too small for the call: llama-cpp-python still says "tool_calls"; the record says "length"
    cut = draw_tools(openai_smol, p, 1, SamplingParams(max_new_tokens=5, seed=0), strict=True,
                     conditioning="forced-tool")[0]  # fmt: skip
    assert cut.finish_reason == "length" and cut.timing["tokens"] == 5
    assert _verdict(p, cut).verdict == "truncated", cut.text


@pytest.mark.slow
def test_strict_flag_is_ignored_by_llama_cpp_python(openai_smol, smol_ref):
    """Same seed, same prompt, strict true vs false: the same call (the flag changes nothing on this
    server); with a budget that lets the call close, its keys are the schema's (objects closed).

    The user turn is a one-line request instead of the scenario's file: greedy SmolLM2 then closes its
    call within 20 tokens (after the whole file it repeats edits past 160 tokens and never closes), and
    each of the two requests evaluates ~330 fewer prompt tokens."""
    p = _prompt(smol_ref, "fresh,forced-tool")
    messages = list(p.messages)
    assert messages[1]["role"] == "user"
    messages[1] = dict(messages[1], content="In shop/cart.py, change `items=[]` to `items=None`.")
    p = dataclasses.replace(p, messages=messages)
    params = SamplingParams(max_new_tokens=32, seed=1, temperature=0.0)
    # same numerics for both requests: the prompt evaluated whole each time (see ServerProbe.reset_prefix)
    openai_smol.reset_prefix()
    on = draw_tools(openai_smol, p, 1, params, strict=True, conditioning="forced-tool")[0]
    openai_smol.reset_prefix()
    off = draw_tools(openai_smol, p, 1, params, strict=False, conditioning="forced-tool")[0]
    assert on.text == off.text and on.tool_name == off.tool_name == p.expected_tool
    v = _verdict(p, on)
    assert v.invented_keys == []
    if on.finish_reason == "stop":
        args = json.loads(on.text)["arguments"]
        assert set(args) <= set(p.tools[[t.name for t in p.tools].index("edit")].parameters["properties"])


def test_free_arm_is_unconstrained_text_and_gold_prefix_refused(openai_smol, smol_ref):
    """free → tool_choice "auto": llama-cpp-python constrains nothing and returns the model's text as
    content (no tool_calls), scored as text; gold-prefix cannot be sent as a chat request."""
    p = _prompt(smol_ref, "fresh")
    params = SamplingParams(max_new_tokens=24, seed=2)
    out = draw_tools(openai_smol, p, 1, params, strict=True, conditioning="free")
    s = out[0]
    assert s.tool_name is None and s.finish_reason in ("stop", "length") and s.error is None
    assert isinstance(_verdict(p, s).verdict, str)
    g = _prompt(smol_ref, "fresh,gold-prefix")
    with pytest.raises(ServerError, match="conditioning 'free' or 'forced-tool'") as err:
        draw_tools(openai_smol, g, 1, params, strict=True, conditioning="gold-prefix")
    assert "\n" not in str(err.value)


TOOLS_SPEC = """
name = "server-tools"
description = "provider-style tool calling, strict true vs false"
models = ["smollm2-135m-instruct"]
scenarios = ["py-mutable-default-cart"]
n = 2
seeds = [0]
max_new_tokens = 8
modes = ["tools-strict", "tools-loose"]
backend = "openai"

[variant]
history = ["fresh"]
conditioning = ["forced-tool"]
"""


def test_run_with_tool_modes_scored_like_any_run(llama_server, tmp_path):
    """`tooldecode run` with modes tools-strict / tools-loose: records of the usual shape, the arm's mode
    in each, verdicts from the same classifier; the modes refuse a backend that is not a server."""
    from tooldecode.experiments import SpecError, load_spec, run_spec
    from tooldecode.runs import RunStore, score_stored

    path = tmp_path / "spec.toml"
    path.write_text(TOOLS_SPEC)
    spec = load_spec(path)
    out = run_spec(spec, tmp_path / "run", progress=False, server={"base_url": llama_server.base_url})
    with RunStore.open(out) as store:
        manifest, recs = store.manifest, list(store.sample_records())
    assert sorted(r["arm"]["mode"] for r in recs) == ["tools-loose"] * 2 + ["tools-strict"] * 2
    for r in recs:
        assert r["tool_name"] == "edit" and r["token_ids"] is None and r["absent"]["token_ids"] == PARSED_CALL
        v = score_stored(r, manifest)
        assert v["tool"] == "edit" and v["verdict"] == "truncated", (r["text"], v)  # 8 tokens: cut
    spec.backend = "llamacpp"
    with pytest.raises(SpecError, match="--backend openai") as err:
        run_spec(spec, tmp_path / "run2", progress=False)
    assert "\n" not in str(err.value)
