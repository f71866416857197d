"""The close-brace probe: scanning, byte attribution, and agreement with brute-force enumeration."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tooldecode.probe import ProbeConfig, _classify, find_value_ends, probe_call

ARGS = {"path": "src/a.py", "edits": [{"oldText": "x = 1", "newText": "for i in range(3):\n    print(i)"}]}
CALL = json.dumps({"name": "edit", "arguments": ARGS})
PROMPT = (
    "<|im_start|>system\nYou edit files by writing one JSON tool call: "
    '{"name": "edit", "arguments": {"path": ..., "edits": [{"oldText": ..., "newText": ...}]}}<|im_end|>\n'
    "<|im_start|>user\nIn src/a.py replace `x = 1` with a loop printing 0..2.<|im_end|>\n<|im_start|>assistant\n"
)


def test_scanner_finds_every_value_with_its_path():
    ends = [(v.path, v.key, v.next_char) for v in find_value_ends("<tool_call>\n" + CALL + "\n</tool_call>")]
    assert ends == [
        ("$", "name", ","),
        ("arguments", "path", ","),
        ("arguments.edits[0]", "oldText", ","),
        ("arguments.edits[0]", "newText", "}"),
        ("arguments.edits", "[0]", "]"),
        ("arguments", "edits", "}"),
        ("$", "arguments", "}"),
    ]


def test_scanner_handles_escapes_and_pretty_json():
    text = json.dumps({"a": 'q"\\', "b": [1, {"c": None}]}, indent=2)
    ends = find_value_ends(text)
    assert [(v.key, v.next_char) for v in ends] == [
        ("a", ","),
        ("[0]", ","),
        ("c", "}"),
        ("[1]", "]"),
        ("b", "}"),
    ]
    a = ends[0]
    assert text.encode()[a.start : a.end] == b'"q\\"\\\\"'


@pytest.mark.parametrize(
    "generated,expected",
    [
        (b'",', "continue"),
        (b'"}', "close"),
        (b'" }', "close"),
        (b'"\n  }', "close"),
        (b'"', "more"),
        (b'"  ', "more"),
        (b"", "more"),
        (b'"]', "other"),
        (b"x", "other"),
        (b'"x', "other"),
    ],
)
def test_classify_by_bytes(generated, expected):
    assert _classify(generated, b'"', b"}")[0] == expected


@pytest.mark.model
def test_probe_agrees_with_brute_force(llama_smol):
    be = llama_smol
    cfg = ProbeConfig(depth=2, key_depth=0, min_mass=0.0, max_branches=10_000, tail=0.0)
    points = probe_call(be, PROMPT, CALL, select="newText", config=cfg)
    assert len(points) == 1
    dp = points[0]
    total = dp.p_close + dp.p_continue + dp.p_other + dp.p_undetermined
    assert total == pytest.approx(1.0, abs=1e-6)
    # brute force: classify every token of the vocabulary, then every token after each undetermined one,
    # each level computed with a plain teacher-forced forward pass (no branching, no thresholds)
    prompt_ids = be.tokenize(PROMPT)
    call_ids = be.tokenize(CALL, special=True)
    data = CALL.encode()
    bounds = np.cumsum([0] + [len(be.token_bytes(t)) for t in call_ids])
    k = int(np.searchsorted(bounds, dp.boundary))
    assert bounds[k] == dp.boundary
    prefix = prompt_ids + call_ids[:k]
    pending = data[dp.boundary : dp.boundary + len(dp.pending.encode())]

    def dist(ids):
        x = be.forward(ids, [len(ids) - 1])[0].astype(np.float64)
        p = np.exp(x - x.max())
        return p / p.sum()

    sums = {"close": 0.0, "continue": 0.0, "other": 0.0, "more": 0.0}
    p1 = dist(prefix)
    for t in range(be.n_vocab):
        tb = be.token_bytes(t) if t not in be.eog_ids else b"\x00<eog>"
        cls, _ = _classify(tb, pending, b"}")
        if cls != "more":
            sums[cls] += p1[t]
            continue
        p2 = dist(prefix + [t])
        for u in range(be.n_vocab):
            ub = be.token_bytes(u) if u not in be.eog_ids else b"\x00<eog>"
            cls2, _ = _classify(tb + ub, pending, b"}")
            sums[cls2 if cls2 != "more" else "more"] += p1[t] * p2[u]
    # Tolerance: the probe's expansions run as branched single-token steps, brute force as chunked
    # forward passes; llama.cpp's numerics differ slightly between the two evaluation modes.
    assert dp.p_close == pytest.approx(sums["close"], abs=0.02)
    assert dp.p_continue == pytest.approx(sums["continue"], abs=0.02)
    assert dp.p_other == pytest.approx(sums["other"], abs=0.02)
    assert dp.p_undetermined == pytest.approx(sums["more"], abs=0.02)


# --- key-resolved continuation ------------------------------------------------------------------------

TOOL_PROMPT_PREV = json.dumps(
    [
        {
            "name": "edit",
            "arguments": {"path": "b.py", "edits": [{"oldText": "a", "newText": "b", "note": "x"}]},
        }
    ]
)


def _tool_prompt() -> tuple[str, list]:
    from tooldecode.grammar import load_tool

    tool = load_tool("edit")
    line = json.dumps(
        {
            "type": "function",
            "function": {"name": "edit", "description": tool.description, "parameters": tool.parameters},
        }
    )
    prompt = (
        "<|im_start|>system\nYou call tools. Tools:\n" + line + "<|im_end|>\n"
        "<|im_start|>user\nIn b.py replace a with b.<|im_end|>\n<|im_start|>assistant\n<tool_call>"
        + TOOL_PROMPT_PREV
        + "</tool_call><|im_end|>\n<|im_start|>user\nIn src/a.py replace `x = 1` with a loop printing 0..2."
        "<|im_end|>\n<|im_start|>assistant\n<tool_call>"
    )
    return prompt, [tool]


@pytest.mark.model
@pytest.mark.slow
def test_probe_kinds_agree_with_brute_force_enumeration(llama_smol):
    """Every continuation of probability >= EPS, enumerated level by level and classified as a whole
    string, gives the same mass per kind as the probe's pruned, incremental expansion (within the
    mass either leaves undetermined)."""
    from tooldecode.classify import CONTINUE, CONTINUE_KINDS, classify_continuation, key_context

    be = llama_smol
    prompt, tools = _tool_prompt()
    call = json.dumps([{"name": "edit", "arguments": ARGS}])
    cfg = ProbeConfig(depth=3, key_depth=4, min_mass=2e-3, max_branches=12, tail=1e-3)
    (dp,) = probe_call(be, prompt, call, select="oldText", config=cfg, tools=tools)
    by_kind = dp.p_continue_by_kind
    assert set(CONTINUE_KINDS) <= set(by_kind)
    assert sum(by_kind.values()) + dp.p_continue_undetermined == pytest.approx(dp.p_continue, abs=1e-9)
    assert dp.p_close + dp.p_continue + dp.p_other + dp.p_undetermined == pytest.approx(1.0, abs=1e-6)
    assert dp.p_continue > 0.3 and by_kind["declared"] > 0.2  # after oldText the item goes on to newText

    # brute force: every path of probability >= EPS, each level evaluated for all nodes at once
    EPS, LEVELS = 1e-3, 7
    data = call.encode()
    prompt_ids = be.tokenize(prompt)
    call_ids = be.tokenize(call, special=True)
    bounds = np.cumsum([0] + [len(be.token_bytes(t)) for t in call_ids])
    k = int(np.searchsorted(bounds, dp.boundary))
    prefix = prompt_ids + call_ids[:k]
    pending = dp.pending.encode()
    v = next(x for x in find_value_ends(call) if x.key == "oldText")
    ctx = key_context(data[: v.start], tools)
    mass = {kind: 0.0 for kind in CONTINUE_KINDS}
    unresolved = 0.0
    frontier = [([], b"", 1.0)]
    for level in range(LEVELS):
        if not frontier:
            break
        if level == 0:
            rows = be.forward(prefix, [len(prefix) - 1])
        else:
            rows = be.branch_logits(prefix, [f[0] for f in frontier])
        nxt = []
        for (path, written, m), lg in zip(frontier, rows, strict=True):
            x = lg.astype(np.float64)
            p = np.exp(x - x.max())
            p /= p.sum()
            big = np.flatnonzero(m * p >= EPS)
            unresolved += m * (1.0 - float(p[big].sum()))
            for t in big:
                tb = be.token_bytes(int(t)) if int(t) not in be.eog_ids else b"\x00<eog>"
                c = classify_continuation(written + tb, context=ctx, pending=pending)
                if c.determined:
                    if c.group == CONTINUE:
                        mass[c.kind] += m * float(p[t])
                else:
                    nxt.append((path + [int(t)], written + tb, m * float(p[t])))
        frontier = nxt
    unresolved += sum(f[2] for f in frontier)
    slack = dp.p_undetermined + dp.p_continue_undetermined + unresolved + 0.02
    for kind in CONTINUE_KINDS:
        assert by_kind[kind] == pytest.approx(mass[kind], abs=slack), (kind, by_kind, mass, slack)
    assert slack < 0.2  # the comparison is informative


def test_classification_of_keys_is_one_definition_for_samples_and_probe():
    from tooldecode.classify import KeyContext, classify_continuation

    ctx = KeyContext(
        present=frozenset({"oldText", "newText"}),
        declared=frozenset({"oldText", "newText"}),
        elsewhere=frozenset({"path", "edits"}),
        schema_words=frozenset({"required", "properties"}),
    )
    whole = '", "required": ["x"]}'
    # byte by byte, the probe's incremental view never contradicts the whole string's kind
    seen = {classify_continuation(whole[:i], context=ctx).kind for i in range(1, len(whole) + 1)}
    assert seen <= {"undetermined", "schema_word"} and "schema_word" in seen
    assert classify_continuation(whole, context=ctx).kind == "schema_word"


@pytest.mark.model
def test_branches_from_a_cached_text_match_the_prefix_evaluated_again(llama_smol):
    """llama.cpp's ``branch_logits`` shares sequence 0's cache when it already holds the prefix (the probe's
    pass over the whole call, over several 512-token chunks here); its logits equal those of the cold path
    (the prefix evaluated again, then one token per step), and sequence 0 keeps its longer text."""
    be = llama_smol
    full = be.tokenize(PROMPT * 14) + be.tokenize(CALL, special=True)
    assert len(full) > 2 * be.n_batch
    prefix = full[: len(full) - 12]
    conts = [[full[len(prefix)]], [be.tokenize(" }")[0]], full[len(prefix) : len(prefix) + 3], [5, 6]]
    be.forward(full, [len(full) - 1])
    warm = be.branch_logits(prefix, conts)
    assert be._cached == full
    be.forward(be.tokenize("unrelated text"), [0])
    cold = be.branch_logits(prefix, conts)
    assert np.abs(warm - cold).max() < 1e-3
