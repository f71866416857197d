"""Prompt rendering: golden files per family, special tokens, every variant, cuts, variant parsing.

Regenerate the golden files with ``TOOLDECODE_UPDATE_GOLDEN=1 pytest tests/test_prompts.py`` and
review the diff: a changed golden file is a changed experiment input.
"""

from __future__ import annotations

import dataclasses
import difflib
import itertools
import json
import os
import re
from pathlib import Path

import pytest

from tooldecode.errors import ToolDecodeError
from tooldecode.models import ModelRef
from tooldecode.prompts import (
    CALL_FORMATS,
    CALL_STYLES,
    CONDITIONINGS,
    SCHEMA_VIEWS,
    TOOLSETS,
    Prompt,
    PromptError,
    TranscriptOptions,
    chat_template,
    format_variant,
    gold_call_text,
    parse_variant,
    render_prompt,
)
from tooldecode.scenarios import Edit, Scenario, apply_edits

GOLDEN = Path(__file__).parent / "golden" / "prompts"
UPDATE = os.environ.get("TOOLDECODE_UPDATE_GOLDEN") == "1"

CONTENT = (
    "import re\n"
    "\n"
    'KEY = re.compile(r"^[a-z_]+$")\n'
    "\n"
    "\n"
    "def parse_line(line):\n"
    '    """Split one "key = value" line; the value keeps inner spaces."""\n'
    '    key, value = line.split("=")\n'
    "    return key.strip(), value.strip()\n"
    "\n"
    "\n"
    "def parse(text):\n"
    "    out = {}\n"
    "    for line in text.splitlines():\n"
    "        key, value = parse_line(line)\n"
    "        out[key] = value\n"
    "    return out\n"
)
EDITS = (
    Edit('    key, value = line.split("=")\n', '    key, value = line.split("=", 1)\n'),
    Edit(
        "    for line in text.splitlines():\n        key, value = parse_line(line)\n",
        "    for n, line in enumerate(text.splitlines(), 1):\n"
        '        if not line.strip() or line.lstrip().startswith("#"):\n'
        "            continue  # blank line or comment\n"
        '        if "=" not in line:\n'
        '            raise ValueError(f"line {n}: expected \\"key = value\\" → got {line!r}")\n'
        "        key, value = parse_line(line)\n"
        "        if not KEY.match(key):\n"
        '\t\t\traise ValueError(f"line {n}: bad key {key!r} (é)")\n',
    ),
)
SCENARIO = Scenario(
    id="test-parse-config",
    language="python",
    title="parse() breaks on comments and on values containing '='",
    path="app/config.py",
    content=CONTENT,
    task="parse() in app/config.py fails on files with comments or blank lines, and cuts values that "
    'contain "=". Make it skip blank lines and # comments, keep everything after the first "=", '
    "and raise a clear error for other bad lines.",
    diagnosis='parse_line() splits on every "=", so a value with "=" breaks the unpacking, and parse() '
    "passes blank and comment lines to it. I'll split once and filter lines in parse().",
    reasoning={"read": "I need to see the parser first.", "edit": "Two edits: split once; filter lines."},
    edits=EDITS,
    expected=apply_edits(CONTENT, EDITS),
    tags=("multi-edit",),
)
ONE_EDIT = dataclasses.replace(
    SCENARIO, id="test-one-edit", edits=EDITS[:1], expected=apply_edits(CONTENT, EDITS[:1]), reasoning={}
)

GEMMA = ModelRef("gemma-3-270m", Path("not-needed.gguf"), "gemma3-base", False)

GOLDEN_CASES = {
    "qwen2.5": [
        "agentic",
        "agentic,thinking,forced-tool",
        "fresh,gold-prefix",
        "agentic,hermes,forced-tool",
        "agentic,prior,thinking,closed,antml,after-oldtext:0",
        "agentic,flat-edit,prior,json,tight,gold-prefix",
        "agentic,multiedit,strictified,harmony,pretty,forced-tool",
    ],
    "smollm2": [
        "agentic",
        "agentic,thinking,prior,forced-tool",
        "fresh,flat-edit,before-edits",
        "agentic,json,after-newtext:0",
    ],
    "gemma3-base": [
        "agentic",
        "fresh,thinking,forced-tool",
        "agentic,prior,antml,gold-prefix",
    ],
    "generic-qwen": ["agentic,forced-tool"],
    "generic-smollm2": ["agentic,thinking,gold-prefix"],
}


@pytest.fixture(scope="module")
def models(smol_ref, qwen_ref):
    return {
        "qwen2.5": qwen_ref,
        "smollm2": smol_ref,
        "gemma3-base": GEMMA,
        "generic-qwen": dataclasses.replace(qwen_ref, id="generic-qwen", family="generic"),
        "generic-smollm2": dataclasses.replace(smol_ref, id="generic-smollm2", family="generic"),
    }


def _slug(spec: str) -> str:
    return re.sub(r"[^a-z0-9.-]+", "_", spec.replace(":", "-"))


def _golden_params():
    for family, specs in GOLDEN_CASES.items():
        marks = () if family == "gemma3-base" else (pytest.mark.model,)  # gemma needs no weights
        for spec in specs:
            yield pytest.param(family, spec, marks=marks, id=f"{family}-{_slug(spec)}")


@pytest.mark.parametrize("family,spec", list(_golden_params()))
def test_golden(request, family, spec):
    model = GEMMA if family == "gemma3-base" else request.getfixturevalue("models")[family]
    prompt = render_prompt(SCENARIO, model, parse_variant(spec))
    path = GOLDEN / f"{family}__{_slug(spec)}.txt"
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(prompt.text.encode("utf-8"))
    assert path.exists(), f"missing golden file {path}; run with TOOLDECODE_UPDATE_GOLDEN=1"
    want = path.read_bytes().decode("utf-8")
    if prompt.text != want:
        diff = "".join(
            itertools.islice(
                difflib.unified_diff(
                    want.splitlines(keepends=True),
                    prompt.text.splitlines(keepends=True),
                    "golden",
                    "rendered",
                ),
                60,
            )
        )
        pytest.fail(f"{path.name} differs (TOOLDECODE_UPDATE_GOLDEN=1 regenerates):\n{diff}")


# ---------------------------------------------------------------------------------------------- templates


def _vocab(ref: ModelRef):
    llama_cpp = pytest.importorskip("llama_cpp")
    return llama_cpp.Llama(model_path=str(ref.path), vocab_only=True, verbose=False)


@pytest.mark.model
@pytest.mark.parametrize(
    "family,specials",
    [
        ("qwen2.5", ["<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"]),
        ("smollm2", ["<|im_start|>", "<|im_end|>"]),
    ],
)
def test_special_tokens_are_single_tokens(models, family, specials):
    ref = models[family]
    vocab = _vocab(ref)
    prompt = render_prompt(SCENARIO, ref, parse_variant("agentic,hermes,thinking"))
    ids = vocab.tokenize(prompt.text.encode(), add_bos=False, special=True)
    for marker in specials:
        (token,) = vocab.tokenize(marker.encode(), add_bos=False, special=True)
        assert prompt.text.count(marker) > 0
        assert ids.count(token) == prompt.text.count(marker), marker
    if family == "smollm2":  # SmolLM2 has no tool tokens: its <tool_call> is plain text
        assert len(vocab.tokenize(b"<tool_call>", add_bos=False, special=True)) > 1


@pytest.mark.model
@pytest.mark.parametrize("family", ["qwen2.5", "smollm2"])
def test_cut_is_where_generation_starts(models, family):
    """The prompt before the call equals the template's generation prompt plus the turn's text."""
    from tooldecode.chat_templates import apply_template as _apply_template
    from tooldecode.chat_templates import template_info as _template_info
    from tooldecode.prompts.tools import tool_json

    ref = models[family]
    template, bos, eos = _template_info(ref)
    for spec in ["agentic", "agentic,thinking", "fresh", "agentic,prior,json", "agentic,antml,pretty"]:
        options = parse_variant(spec)
        prompt = render_prompt(SCENARIO, ref, options)
        *history, turn = prompt.messages
        structured = "tool_calls" in turn  # Qwen2.5 native: the template writes tools and calls
        tools = [tool_json(t) for t in prompt.tools] if structured else None
        head = _apply_template(template, history, tools, bos, eos, add_generation_prompt=True)
        if structured:
            before_call = turn["content"] + "\n" if turn["content"] else ""
        else:  # the call is the end of the turn's content, in the same wire as the model's call
            gold = gold_call_text(SCENARIO, options, family)
            assert turn["content"].endswith(gold)
            before_call = turn["content"][: -len(gold)]
        assert prompt.text == head + before_call


@pytest.mark.model
def test_rendering_matches_transformers(models):
    """Our jinja rendering equals transformers' apply_chat_template on the GGUF's template."""
    pytest.importorskip("transformers")
    from tooldecode.backends.hf import load_tokenizer
    from tooldecode.prompts.tools import tool_json

    ref = models["qwen2.5"]
    tok = load_tokenizer(ref)  # the GGUF's tokenizer and template, as transformers reads them
    for spec in ["agentic,thinking", "fresh", "agentic,antml,flat-edit"]:
        options = parse_variant(spec)
        prompt = render_prompt(SCENARIO, ref, options)
        tools = [tool_json(t) for t in prompt.tools] if options.call_format == "native" else None
        full = tok.apply_chat_template(prompt.messages, tools=tools, tokenize=False)
        assert full.startswith(prompt.text)
        history_call = full[len(prompt.text) :]
        assert history_call.startswith(
            "<tool_call>\n" if options.call_format == "native" else "<function_calls>"
        )


@pytest.mark.model
def test_gguf_reader_matches_gguf_package(smol_ref):
    gguf = pytest.importorskip("gguf")
    field = gguf.GGUFReader(smol_ref.path).fields["tokenizer.chat_template"]
    assert chat_template(smol_ref) == field.contents()


# ---------------------------------------------------------------------------------------------- qwen's format


@pytest.mark.model
def test_qwen_expects_bare_json_after_its_template_history(models):
    """Qwen2.5 native: history calls in <tool_call> (template), the model's own call as bare JSON."""
    prompt = render_prompt(SCENARIO, models["qwen2.5"], parse_variant("agentic,forced-tool"))
    assert prompt.wire == "call-json"
    assert prompt.prefill == '{"name": "edit", "arguments": {"'
    assert (
        '<tool_call>\n{"name": "read", "arguments": {"path": "app/config.py"}}\n</tool_call>' in prompt.text
    )
    assert prompt.text.endswith("<|im_start|>assistant\n" + SCENARIO.diagnosis + "\n" + prompt.prefill)
    hermes = render_prompt(SCENARIO, models["qwen2.5"], parse_variant("agentic,hermes,forced-tool"))
    assert hermes.wire == "hermes" and hermes.prefill == '<tool_call>\n{"name": "edit", "arguments": {"'
    assert hermes.text[: -len(hermes.prefill)] == prompt.text[: -len(prompt.prefill)]


@pytest.mark.model
@pytest.mark.parametrize("family", ["qwen2.5", "smollm2"])
@pytest.mark.parametrize(
    "spec",
    [
        "forced-tool",
        "forced-tool,tight",
        "forced-tool,pretty",
        "before-edits",
        "forced-tool,antml",
        "after-newtext:0",
        "after-newtext",
    ],
)
def test_prefill_ends_on_a_token_boundary(models, family, spec):
    """Tokenizing the prompt gives a prefix of the tokens of the prompt continued by the gold call."""
    ref = models[family]
    vocab = _vocab(ref)
    options = parse_variant(spec)
    prompt = render_prompt(SCENARIO, ref, options)
    rest = gold_call_text(SCENARIO, options, family)[len(prompt.prefill) :]
    ids = vocab.tokenize(prompt.text.encode(), add_bos=False, special=True)
    full = vocab.tokenize((prompt.text + rest).encode(), add_bos=False, special=True)
    assert full[: len(ids)] == ids


# ---------------------------------------------------------------------------------------------- every variant


def _all_options():
    """Every value of every option, in many combinations: the full product of the call-shaping options
    (tool set × call format × style × conditioning), the transcript options cycled through it, plus the
    full product of the transcript options."""
    cycle = itertools.cycle
    cuts = cycle(["after-newtext", "after-newtext:0", "after-oldtext", "after-oldtext:1", "before-edits"])
    history, thinking, prior, view = (
        cycle(("fresh", "agentic")),
        cycle((False, True, True)),
        cycle((False, False, True)),
        cycle(SCHEMA_VIEWS * 2 + ("closed",)),
    )
    for toolset, fmt, style, conditioning in itertools.product(
        TOOLSETS, CALL_FORMATS, CALL_STYLES, CONDITIONINGS
    ):
        yield TranscriptOptions(
            history=next(history),
            thinking=next(thinking),
            prior=next(prior),
            toolset=toolset,
            schema_view=next(view),
            call_format=fmt,
            call_style=style,
            conditioning=conditioning,
            gold_cut=next(cuts),
        )
    for h, t, p, v in itertools.product(("fresh", "agentic"), (False, True), (False, True), SCHEMA_VIEWS):
        yield TranscriptOptions(history=h, thinking=t, prior=p, schema_view=v, conditioning="gold-prefix")


def _check_invariants(prompt: Prompt, options: TranscriptOptions, family: str | ModelRef) -> None:
    gold = gold_call_text(SCENARIO, options, family)
    assert prompt.text.endswith(prompt.prefill)
    assert gold.startswith(prompt.prefill)
    assert (
        prompt.expected_tool
        == {"nested": "edit", "flat-edit": "Edit", "multiedit": "MultiEdit"}[options.toolset]
    )
    assert prompt.stop and all(prompt.stop)
    if options.conditioning == "free":
        assert prompt.prefill == ""
    elif options.conditioning == "forced-tool":
        assert prompt.expected_tool in prompt.prefill
        assert SCENARIO.path not in prompt.prefill
    else:
        assert 0 < len(prompt.prefill) < len(gold)
    assert ("<think>" in prompt.text) == options.thinking
    shown = json.dumps(prompt.tools[0].parameters, ensure_ascii=False)
    if options.schema_view != "as-written":
        assert '"additionalProperties": false' in shown
    else:
        assert "additionalProperties" not in shown


@pytest.mark.model
def test_every_variant_renders(models):
    for family in ("smollm2", "gemma3-base", "qwen2.5", "generic-qwen", "generic-smollm2"):
        for options in _all_options():
            _check_invariants(render_prompt(SCENARIO, models[family], options), options, models[family])


def _unescaped_tail(prefill: str, value: str, wire: str, toolset: str) -> bool:
    if wire == "antml" and toolset == "flat-edit":
        return prefill.endswith(value)  # top-level strings are written as they are
    return prefill.endswith(json.dumps(value, ensure_ascii=False)[1:-1])


@pytest.mark.parametrize("toolset", list(TOOLSETS))
@pytest.mark.parametrize("fmt", ["json", "antml", "harmony", "native"])
@pytest.mark.parametrize("style", list(CALL_STYLES))
def test_gold_cuts(toolset, fmt, style):
    base = dict(toolset=toolset, call_format=fmt, call_style=style, conditioning="gold-prefix")
    gold = gold_call_text(SCENARIO, TranscriptOptions(**base), "gemma3-base")
    for cut, value in [
        ("after-newtext", EDITS[1].new_text),
        ("after-newtext:0", EDITS[0].new_text),
        ("after-newtext:1", EDITS[1].new_text),
        ("after-oldtext", EDITS[1].old_text),
        ("after-oldtext:0", EDITS[0].old_text),
    ]:
        options = TranscriptOptions(**base, gold_cut=cut)
        prefill = render_prompt(SCENARIO, GEMMA, options).prefill
        assert _unescaped_tail(prefill, value, options.call_format if fmt != "native" else "", toolset), cut
        after = gold[len(prefill) :]
        closing = "</parameter>" if fmt == "antml" and toolset == "flat-edit" else '"'
        assert after.startswith(closing), (cut, after[:20])
    before = render_prompt(SCENARIO, GEMMA, TranscriptOptions(**base, gold_cut="before-edits")).prefill
    key = "oldText" if toolset == "nested" else "old_string"
    rest = gold[len(before) :]
    assert rest.startswith(f'{key}"') or rest.startswith(f'<parameter name="{key}">'), rest[:30]
    assert EDITS[0].old_text[:10] not in before


def test_gold_cut_item_out_of_range():
    with pytest.raises(PromptError, match="has 1 edit"):
        render_prompt(ONE_EDIT, GEMMA, parse_variant("after-newtext:1"))


def test_flat_edit_gold_is_one_call_per_edit():
    gold = gold_call_text(SCENARIO, parse_variant("flat-edit,json"), "gemma3-base")
    lines = gold.split("\n")
    assert [json.loads(line)["arguments"]["new_string"] for line in lines] == [e.new_text for e in EDITS]
    smol = gold_call_text(SCENARIO, parse_variant("flat-edit"), "smollm2")
    assert smol.startswith("<tool_call>[") and smol.endswith("]</tool_call>")
    assert len(json.loads(smol[len("<tool_call>") : -len("</tool_call>")])) == 2


# ---------------------------------------------------------------------------------------------- variant contents


def test_prior_episode_and_tool_switch():
    nested = render_prompt(SCENARIO, GEMMA, parse_variant("agentic,prior"))
    assert '"replace_all": true' in nested.text and '"replace_all": false' in nested.text
    assert nested.text.count("The tool set has changed") == 1
    assert nested.text.index('"name": "Edit"') < nested.text.index("The tool set has changed")
    assert nested.text.index("The tool set has changed") < nested.text.index('"name": "edit"')
    flat = render_prompt(SCENARIO, GEMMA, parse_variant("agentic,prior,flat-edit"))
    assert "The tool set has changed" not in flat.text and '"replace_all": true' in flat.text
    plain = render_prompt(SCENARIO, GEMMA, parse_variant("agentic"))
    assert 'replace_all": true' not in plain.text and "colour" not in plain.text


def test_thinking_and_history():
    thinking = render_prompt(SCENARIO, GEMMA, parse_variant("agentic,thinking"))
    assert "<think>\nI need to see the parser first.\n</think>" in thinking.text
    assert thinking.text.endswith(
        "<think>\nTwo edits: split once; filter lines.\n</think>\n\n" + SCENARIO.diagnosis + "\n"
    )
    stripped = render_prompt(SCENARIO, GEMMA, parse_variant("agentic,stripped"))
    assert "<think>" not in stripped.text and "I need to see the parser" not in stripped.text
    no_reasoning = render_prompt(ONE_EDIT, GEMMA, parse_variant("agentic,thinking"))
    assert "<think>" not in no_reasoning.text
    fresh = render_prompt(SCENARIO, GEMMA, parse_variant("fresh"))
    assert "```python\n" + CONTENT + "```" in fresh.text
    assert '"name": "read"' not in fresh.text.split("</tools>")[-1]
    assert SCENARIO.diagnosis not in fresh.text
    assert fresh.text.endswith("Assistant: ")


def test_schema_views_and_extra():
    def edit_schema(spec, **kw):
        options = dataclasses.replace(parse_variant(spec), **kw)
        prompt = render_prompt(SCENARIO, GEMMA, options)
        assert json.dumps(prompt.tools[0].parameters, ensure_ascii=False) in prompt.text
        return prompt.tools[0].parameters

    written = edit_schema("as-written")
    assert "additionalProperties" not in json.dumps(written)
    closed = edit_schema("closed")
    assert (
        closed["additionalProperties"] is False
        and closed["properties"]["edits"]["items"]["additionalProperties"] is False
    )
    read = render_prompt(SCENARIO, GEMMA, parse_variant("closed")).tools[1].parameters
    assert read["additionalProperties"] is False and "offset" not in read["required"]
    strict = render_prompt(SCENARIO, GEMMA, parse_variant("strictified")).tools[1].parameters
    assert set(strict["required"]) == {"path", "offset", "limit"}
    extra = edit_schema("as-written", schema_extra={"oldText": {"minLength": 1, "maxLength": 256}})
    assert extra["properties"]["edits"]["items"]["properties"]["oldText"]["maxLength"] == 256
    with pytest.raises(PromptError, match="old_string"):
        edit_schema("as-written", schema_extra={"old_string": {"minLength": 1}})


# ---------------------------------------------------------------------------------------------- parse_variant


def test_parse_variant_round_trip():
    options = parse_variant("agentic, thinking,prior,flat-edit,closed,antml,gold-prefix")
    assert options == TranscriptOptions(
        thinking=True,
        prior=True,
        toolset="flat-edit",
        schema_view="closed",
        call_format="antml",
        conditioning="gold-prefix",
    )
    assert parse_variant("after-oldtext:2").conditioning == "gold-prefix"
    assert parse_variant("") == TranscriptOptions()
    for options in _all_options():
        if options.conditioning != "gold-prefix":  # the cut only matters for gold-prefix
            options = dataclasses.replace(options, gold_cut="after-newtext")
        assert parse_variant(format_variant(options)) == options


@pytest.mark.parametrize(
    "spec,message",
    [
        ("agentic,bogus", "unknown word 'bogus'"),
        ("fresh,agentic", "both set history"),
        ("forced-tool,after-newtext", "both set conditioning"),
        ("after-newtext:x", "unknown word"),
    ],
)
def test_parse_variant_errors(spec, message):
    with pytest.raises(ToolDecodeError, match=message) as err:
        parse_variant(spec)
    text = str(err.value)
    assert "\n" not in text
    if "unknown" in message:
        assert "flat-edit" in text and "after-newtext[:K]" in text


def test_options_are_validated():
    with pytest.raises(PromptError, match="toolset"):
        TranscriptOptions(toolset="nested-edit")
    with pytest.raises(PromptError, match="gold_cut"):
        TranscriptOptions(gold_cut="after-path")


# ---------------------------------------------------------------------------------------------- CLI


@pytest.mark.model
def test_cli_show(smol_ref, capsys):
    import argparse

    from tooldecode.cli.prompts import register_show
    from tooldecode.scenarios import load_scenarios

    scenario = load_scenarios()[0]
    parser = argparse.ArgumentParser()
    register_show(parser.add_subparsers())
    args = parser.parse_args(
        ["show", scenario.id, "--variant", "agentic,forced-tool", "--model", smol_ref.id]
    )
    assert args.func(args) == 0
    out, err = capsys.readouterr()
    expected = render_prompt(scenario, smol_ref, parse_variant("agentic,forced-tool"))
    assert out == expected.text
    vocab = _vocab(smol_ref)
    n = len(vocab.tokenize(expected.text.encode(), add_bos=False, special=True))
    assert f"--- {n} tokens" in err


@pytest.mark.parametrize("family", ["qwen2.5", "smollm2", "gemma3-base"])
@pytest.mark.parametrize("style", ["compact", "tight", "pretty"])
def test_strict_grammar_of_the_native_wire_accepts_the_gold_call(models, family, style):
    """Strict decoding needs a grammar for every family's native wire (SmolLM2: its call list)."""
    from tooldecode.grammar import check, render_toolset

    ws = {"compact": "bounded", "tight": "compact", "pretty": "pretty"}[style]
    opts = parse_variant(f"agentic,{style}")
    prompt = render_prompt(SCENARIO, models[family], opts)
    gold = gold_call_text(SCENARIO, opts, models[family])
    grammar = render_toolset(list(prompt.tools), format="gbnf", wire=prompt.wire, mode="strict", ws=ws)
    assert check.accepts("xgrammar", grammar, gold), gold[:120]
