"""The decision after the gold newText under each policy (``tooldecode.distortion.decision``): the rules
on their own, and on SmolLM2-135M the rows against a brute-force pass over the vocabulary at the decision
(every token: its bucket, and its mass under P, strict's Q and the prefix-keeping Q⁺), each policy summing
to 1, strict writing no key, and loose agreeing with the close-brace probe's own figures."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tooldecode.classify import Continuation, KeyContext
from tooldecode.distortion.decision import (
    BUCKETS,
    DecisionConfig,
    DecisionRow,
    aligned_row,
    bucket_of,
)

SCENARIO = "py-pagination-off-by-one"
VARIANT = {"history": "agentic", "toolset": "nested"}
ENGINES = ("xgrammar", "llguidance")
CTX = KeyContext(
    present=frozenset({"oldText", "newText"}),
    declared=frozenset({"oldText", "newText"}),
    elsewhere=frozenset({"path", "edits"}),
    schema_words=frozenset({"required"}),
)


def test_an_undeclared_key_is_invented_and_an_exact_repeat_is_not():
    assert bucket_of(Continuation("continue", "invented", "note"), CTX) == ("invented", "invented")
    assert bucket_of(Continuation("continue", "schema_word", "required"), CTX) == ("invented", "schema_word")
    assert bucket_of(Continuation("continue", "wrong_level", "path"), CTX) == ("invented", "wrong_level")
    assert bucket_of(Continuation("continue", "repeat", "newText1"), CTX) == ("invented", "mangled_repeat")
    assert bucket_of(Continuation("continue", "repeat", "newText"), CTX) == ("other", "duplicate")
    assert bucket_of(Continuation("other", "string_goes_on"), CTX) == ("goes_on", "string_goes_on")
    assert bucket_of(Continuation("continue", "other"), CTX) == ("other", "continue_other")
    assert bucket_of(Continuation("other", "wrong_closer"), CTX) == ("other", "wrong_closer")


def test_strict_aligned_renormalises_the_live_mass_by_the_stated_rule():
    live = dict.fromkeys(BUCKETS, 0.0)
    live.update(close_complete=0.2, close_diverges=0.05, goes_on=0.3, undetermined=0.05)
    row = aligned_row(live, "xgrammar", {"model": "m", "model_sha256": "", "scenario": "s"})
    assert row.total == pytest.approx(1.0)
    assert row.p_invented == 0.0
    assert row.p_correct == pytest.approx(0.2 / 0.6) == row.p_correct_lo  # g = 1: the lower bound
    assert row.p_correct_hi == pytest.approx((0.2 + 0.05) / 0.3)  # g = 0, the open mass correct
    half = aligned_row(
        live, "xgrammar", {"model": "m", "model_sha256": "", "scenario": "s"}, goes_on_valid=0.5
    )
    assert half.p_correct == pytest.approx(0.2 / 0.45)
    assert row.p_correct_lo <= half.p_correct <= row.p_correct_hi
    assert half.p_goes_on == pytest.approx(0.15 / 0.45)


def _draw(model: str, bucket: str, valid: bool, correct: bool = False, remedy: str = "loose") -> dict:
    flags = {b: b == bucket for b in ("close", "goes_on", "invented", "other")}
    return {"model": model, "scenario": "s", "remedy": remedy, **flags, "valid": valid, "correct": correct}


def test_strict_aligned_from_loose_draws_weighs_each_bucket_by_its_valid_share():
    """P_A(b) = P(b)·V(b) / Σ: loose's exact masses, V from the loose draws of each bucket (close_complete
    ends valid, V = 1); the range comes from the shares' Wilson bounds and never falls below the live
    bound; masked draws and other models do not count."""
    from tooldecode.distortion.decision_table import (
        aligned_from_draws,
        validity_by_bucket,
        with_draw_validity,
    )

    draws = [_draw("m", "close", True, True)] * 3 + [_draw("m", "close", False)] * 4
    draws += [_draw("m", "goes_on", True)] + [_draw("m", "goes_on", False)] * 3
    draws += [_draw("m", "invented", False)] * 2 + [_draw("m", "other", False)] * 2
    draws += [_draw("m", "goes_on", True, remedy="strict")] * 5 + [_draw("other-model", "close", True)]
    v = validity_by_bucket(draws)["m"]
    assert v["close_complete"] == (3, 3) and v["close_diverges"] == (0, 4) and v["goes_on"] == (1, 4)
    assert v["invented"] == (0, 2) and v["other"] == (0, 2) and v["all"] == (1, 12)
    loose = DecisionRow(
        model="m", model_sha256="x", scenario="s", policy="loose", engine=None, method="exact",
        p_close=0.4, p_close_complete=0.1, p_close_diverges=0.3, p_close_unresolved=0.0, p_goes_on=0.4,
        p_invented=0.1, p_other=0.1, p_undetermined=0.0, p_correct=0.1, p_correct_lo=0.1, p_correct_hi=0.1,
    )  # fmt: skip
    est = aligned_from_draws(loose, v, live_bound=0.15)
    assert est.policy == "strict-aligned" and est.total == pytest.approx(1.0)
    # Jeffreys' points (k + 1/2) / (n + 1): close_diverges 0.1, goes_on 0.3, other 1/6; invented 0
    z = 0.1 + 0.3 * 0.1 + 0.4 * 0.3 + 0.1 / 6
    assert est.p_correct == pytest.approx(0.1 / z) and est.p_goes_on == pytest.approx(0.12 / z)
    assert est.p_invented == 0.0 and est.p_close_diverges == pytest.approx(0.03 / z)
    assert 0.15 <= est.p_correct_lo < est.p_correct < est.p_correct_hi <= 1.0
    assert "goes on 1/4" in est.method and "close diverges 0/4" in est.method
    live = aligned_row(
        {**dict.fromkeys(BUCKETS, 0.0), "close_complete": 0.1, "close_diverges": 0.3, "goes_on": 0.4},
        "xgrammar",
        {"model": "m", "model_sha256": "x", "scenario": "s"},
    )
    other = DecisionRow(**{**live.to_json(), "model": "n"})
    out = with_draw_validity([loose, live, other], [])
    assert out == [loose, live, other]  # no draws: as they are


def _row(scenario: str, policy: str, correct: float, engine: str | None = None) -> DecisionRow:
    return DecisionRow(
        model="m",
        model_sha256="x",
        scenario=scenario,
        policy=policy,
        engine=engine,
        method="exact",
        p_close=correct,
        p_close_complete=correct,
        p_close_diverges=0.0,
        p_close_unresolved=0.0,
        p_goes_on=1.0 - correct,
        p_invented=0.0,
        p_other=0.0,
        p_undetermined=0.0,
        p_correct=correct,
        p_correct_lo=correct,
        p_correct_hi=correct,
    )


def test_the_table_averages_over_scenarios_and_pairs_with_loose():
    from tooldecode.distortion.decision_table import decision_table, format_decision_table

    rows = []
    for k, s in enumerate(("a", "b", "c", "d")):
        rows += [_row(s, "loose", 0.5 + 0.1 * k), _row(s, "strict", 0.3 + 0.1 * k, "xgrammar")]
        rows.append(_row(s, "strict", 0.2 + 0.1 * k, "llguidance"))
    again = [DecisionRow.from_json(json.loads(json.dumps(r.to_json()))) for r in rows]
    assert again == rows
    table = decision_table(again)
    assert [t["policy"] for t in table] == ["loose", "strict", "strict[llguidance]"]
    loose, strict, llg = table
    assert loose["p_correct"].rate == pytest.approx(0.65) and loose["vs_loose"] is None
    assert loose["p_correct"].lo < 0.65 < loose["p_correct"].hi
    assert strict["vs_loose"].diff == pytest.approx(-0.2) and llg["vs_loose"].diff == pytest.approx(-0.3)
    text = format_decision_table(table)
    assert "| strict[llguidance] | 35.0 [" in text and "| loose | 65.0 [" in text


def test_a_decision_table_is_a_spec_kind_that_samples_nothing(tmp_path):
    from pathlib import Path

    from tooldecode.experiments import SpecError, load_spec

    root = Path(__file__).resolve().parents[1]
    spec = load_spec(root / "experiments" / "e20_decision_l2.toml")
    assert spec.samples_nothing and spec.n == 0 and spec.decision["engines"] == ["xgrammar", "llguidance"]
    bad = tmp_path / "bad.toml"
    for table, needle in (
        ("only = true\ndepth = -1", "depth"),
        ("only = true\ngoes_on_valid = 2", "goes_on_valid"),
        ("only = true\nengines = []", "engines"),
        ("only = true\nsamples = 3", r"unknown \[decision\] field"),
    ):
        bad.write_text(f'name = "x"\nmodels = ["m"]\nn = 0\n[decision]\n{table}\n')
        with pytest.raises(SpecError, match=needle):
            load_spec(bad)
    bad.write_text('name = "x"\nmodels = ["m"]\nn = 0\n[decision]\nengines = ["xgrammar"]\n')
    with pytest.raises(SpecError, match="'n' must be"):
        load_spec(bad)


# ------------------------------------------------------------------------------------- SmolLM2 decision


def _strip(b: bytes) -> bytes:
    return bytes(c for c in b if c not in b" \t\r\n")


@pytest.fixture(scope="module")
def first_step(llama_smol, smol_ref):
    """Rows with no expansion (every token decided by its own bytes or left open), and the brute force's
    ingredients: the L2 prompt's ids and prefill, the model's P there, each engine's allowed set."""
    from tooldecode.distortion.decision import decision_rows
    from tooldecode.scenarios import get_scenario
    from tooldecode.trial import Trial

    sc = get_scenario(SCENARIO)
    cfg = DecisionConfig(depth=1, key_depth=0, tail_depth=0, min_mass=0.0, max_branches=1, tail=0.0)
    rows = decision_rows(
        llama_smol, sc, model=smol_ref.id, ref=smol_ref, variant=VARIANT, engines=ENGINES, config=cfg
    )
    arm = {"model": smol_ref.id, "backend": "llamacpp", "temperature": 1.0, **VARIANT}
    l2 = Trial({**arm, "mode": "loose", "conditioning": "gold-prefix"}, sc, ref=smol_ref)
    ids = llama_smol.tokenize(l2.text)
    x = llama_smol.forward(ids, [len(ids) - 1])[0].astype(np.float64)
    p = np.exp(x - x.max())
    p /= p.sum()
    allowed = {
        e: Trial({**arm, "mode": "strict", "engine": e, "conditioning": "gold-prefix"}, sc, ref=smol_ref)
        .constraint(llama_smol)
        .matcher(l2.prompt.prefill)
        .allowed()
        for e in ENGINES
    }
    free = Trial({**arm, "mode": "loose", "conditioning": "free"}, sc, ref=smol_ref)
    return rows, l2, free, p, allowed


@pytest.mark.model
def test_first_step_rows_match_a_brute_force_pass_over_the_vocabulary(llama_smol, first_step):
    from test_prefix_mask import _brute_force

    from tooldecode.classify import CLOSE, classify_continuation, key_context
    from tooldecode.masking import special_token_ids

    rows, l2, free, p, allowed = first_step
    by = {r.name: r for r in rows}
    assert all(r.pending == '"' and r.prefix_as_sampled for r in rows)  # forced exactly to the quote
    call = free.call
    want = _strip(call[call.rindex('"}') + 1 : call.rindex("]") + 1].encode())
    ctx = key_context(l2.prompt.prefill, free.key_tools, expected_tool=free.prompt.expected_tool)
    vocab = llama_smol.vocab_bytes[: llama_smol.n_vocab]
    bucket = []
    for t, tb in enumerate(vocab):
        tb = tb if t not in llama_smol.eog_ids else b"\x00<eog>"
        c = classify_continuation(tb, context=ctx, pending='"')
        if c.group == CLOSE:
            got = _strip(tb[1:])
            bucket.append(
                "close_complete"
                if got.startswith(want)
                else "close_unresolved"
                if want.startswith(got)
                else "close_diverges"
            )
        elif c.determined:
            bucket.append(bucket_of(c, ctx)[0])
        else:
            bucket.append("undetermined")
    bucket_ids = np.array([BUCKETS.index(b) for b in bucket])

    def sums(q: np.ndarray) -> dict[str, float]:
        s = np.bincount(bucket_ids, weights=q, minlength=len(BUCKETS))
        return {b: float(s[i]) for i, b in enumerate(BUCKETS)}

    special = special_token_ids(llama_smol)
    want_rows = {"loose": (sums(p), None)}
    for e in ENGINES:
        a = allowed[e]
        name = "strict" if e == "xgrammar" else f"strict[{e}]"
        want_rows[name] = (sums(np.where(a, p, 0.0) / p[a].sum()), 1.0 - p[a].sum())
        pname = "strict-prefix" if e == "xgrammar" else f"strict-prefix[{e}]"
        want_rows[pname] = (sums(_brute_force(vocab, special, a, p)), None)
    for name, (expect, removed) in want_rows.items():
        got = by[name]
        for b in BUCKETS:
            assert getattr(got, f"p_{b}") == pytest.approx(expect[b], abs=1e-6), (name, b)
        assert got.total == pytest.approx(1.0, abs=1e-9)
        if removed is not None:
            assert got.mask_removed == pytest.approx(removed, abs=1e-6)
    # strict-aligned: the live masses are P on the allowed tokens, unrenormalised
    live = sums(np.where(allowed["xgrammar"], p, 0.0))
    aligned = by["strict-aligned"]
    assert all(aligned.kinds[f"live_{b}"] == pytest.approx(live[b], abs=1e-6) for b in BUCKETS)
    # the informative part: the mask removes a comma's mass here, and strict writes no key
    assert by["loose"].p_invented + by["loose"].p_other + by["loose"].p_undetermined > 1e-3
    assert by["strict"].p_invented == 0.0 and by["strict-prefix"].p_invented == 0.0
    assert by["strict-prefix"].p_close > by["strict"].p_close  # the quote keeps the masked ',' mass


@pytest.mark.model
def test_deciding_by_first_byte_is_exact(llama_smol, first_step):
    """The expansion's shortcut (a token whose first byte decides its class takes that class) gives the
    token-by-token tally over the whole vocabulary at the decision."""
    from tooldecode.classify import classify_continuation
    from tooldecode.sampling.expand import expand_decision

    _rows, l2, free, p, _allowed = first_step
    ids = llama_smol.tokenize(l2.text)
    logits = llama_smol.forward(ids, [len(ids) - 1])[0]
    cfg = DecisionConfig(min_mass=0.0, tail=0.0).probe()

    def tally(by_first_byte: bool) -> dict:
        out: dict = {}

        def classify(written: bytes):
            c = classify_continuation(written, pending='"')
            return (c.group, c.kind), (None if c.determined else 1)

        def add(label, m):
            out[label] = out.get(label, 0.0) + m["p"]

        expand_decision(
            llama_smol, ids, logits, classify=classify, leaf=add, unresolved=add, config=cfg, levels=1,
            by_first_byte=by_first_byte,
        )  # fmt: skip
        return out

    fast, slow = tally(True), tally(False)
    assert set(fast) == set(slow) and len(fast) >= 4
    assert all(fast[k] == pytest.approx(slow[k], abs=1e-9) for k in slow), (fast, slow)
    assert sum(fast.values()) == pytest.approx(1.0, abs=1e-9)


@pytest.mark.model
def test_the_array_pass_expands_what_the_token_loop_expands(llama_smol, first_step):
    """Over several levels, two policies and tight bounds (a mass floor, two branches a level), the
    shortcut's array pass (prefix classification, open tokens it cannot expand sent to unresolved at once)
    tallies every label as the token-by-token loop does and expands the same nodes. No tail: the loop
    without the shortcut would leave a decided token past the tail unresolved, where the shortcut tallies
    it by its first byte."""
    from tooldecode.classify import classify_continuation
    from tooldecode.sampling.expand import expand_decision

    _rows, l2, _free, _p, _allowed = first_step
    ids = llama_smol.tokenize(l2.text)
    logits = llama_smol.forward(ids, [len(ids) - 1])[0]
    cfg = DecisionConfig(min_mass=1e-3, max_branches=2, tail=0.0).probe()

    def weigh(path, p, masses):
        sharp = p**2
        return {"p": (p, 1.0), "sharp": (sharp / sharp.sum(), 1.0)}

    def tally(by_first_byte: bool) -> tuple[dict, list]:
        out: dict = {}
        branched: list = []
        real = llama_smol.branch_logits

        def classify(written: bytes):
            c = classify_continuation(written, pending='"')
            return (c.group, c.kind), (None if c.determined else 4)

        def add(label, m):
            for k, x in m.items():
                out[(label, k)] = out.get((label, k), 0.0) + x

        def branch(prefix, paths):
            branched.append(sorted(map(tuple, paths)))
            return real(prefix, paths)

        llama_smol.branch_logits = branch
        try:
            expand_decision(
                llama_smol, ids, logits, classify=classify, leaf=add, unresolved=add, config=cfg, levels=3,
                masses={"p": 1.0, "sharp": 1.0}, weigh=weigh, by_first_byte=by_first_byte,
            )  # fmt: skip
        finally:
            del llama_smol.branch_logits
        return out, branched

    (fast, fast_nodes), (slow, slow_nodes) = tally(True), tally(False)
    assert fast_nodes == slow_nodes and len(fast_nodes) >= 2, (fast_nodes, slow_nodes)
    assert set(fast) == set(slow) and len(fast) >= 6
    assert all(fast[k] == pytest.approx(slow[k], abs=1e-9) for k in slow), (fast, slow)
    for k in ("p", "sharp"):
        assert sum(x for (_, kk), x in fast.items() if kk == k) == pytest.approx(1.0, abs=1e-9)


@pytest.fixture(scope="module")
def expanded(llama_smol, smol_ref):
    """Rows under small bounds (every policy expanded past the quote, the key and the closers)."""
    from tooldecode.distortion.decision import decision_rows
    from tooldecode.scenarios import get_scenario

    cfg = DecisionConfig(depth=3, key_depth=2, tail_depth=3, min_mass=2e-3, max_branches=6, tail=1e-4)
    sc = get_scenario(SCENARIO)
    rows = decision_rows(
        llama_smol, sc, model=smol_ref.id, ref=smol_ref, variant=VARIANT, engines=ENGINES, config=cfg
    )
    return rows, cfg, sc


@pytest.mark.model
def test_each_policy_sums_to_one_and_strict_writes_no_key(expanded):
    rows, _cfg, _sc = expanded
    by = {r.name: r for r in rows}
    assert set(by) == {
        "loose",
        "loose+drop-unknown-keys",
        "strict",
        "strict[llguidance]",
        "strict-prefix",
        "strict-prefix[llguidance]",
        "strict-aligned",
    }
    for r in rows:
        assert r.total == pytest.approx(1.0, abs=1e-6), r.name
        assert r.p_close == pytest.approx(r.p_close_complete + r.p_close_diverges + r.p_close_unresolved)
        assert r.p_correct_lo <= r.p_correct + 1e-12 <= r.p_correct_hi + 2e-12
        assert r.p_undetermined < 0.2, r.name  # the bounds leave the comparison informative
    # the mask forbids every continuation of the closed item but the close: no key, no repeat, no stray
    # closer, while loose writes some of them here
    assert by["loose"].p_invented + by["loose"].p_other > 1e-3
    masked = ("strict", "strict[llguidance]", "strict-prefix", "strict-prefix[llguidance]", "strict-aligned")
    for name in masked:
        assert by[name].p_invented == 0.0 and by[name].p_other == 0.0, name
    # the two engines mask the same grammar: the same numbers
    for b in BUCKETS:
        assert getattr(by["strict"], f"p_{b}") == pytest.approx(
            getattr(by["strict[llguidance]"], f"p_{b}"), abs=1e-6
        )
    loose, drop = by["loose"], by["loose+drop-unknown-keys"]
    assert drop.p_correct == pytest.approx(loose.p_correct + loose.p_invented)


@pytest.mark.model
def test_loose_agrees_with_the_probe(llama_smol, smol_ref, expanded):
    """loose's buckets regroup into the probe's close / continue / other at the same decision point, up
    to the mass either leaves undetermined."""
    from tooldecode.trial import Trial

    rows, cfg, sc = expanded
    loose = next(r for r in rows if r.name == "loose")
    arm = {"model": smol_ref.id, "backend": "llamacpp", "mode": "loose", "temperature": 1.0, **VARIANT}
    trial = Trial({**arm, "conditioning": "free"}, sc, ref=smol_ref)
    dp = trial.probe(llama_smol, select="newText", config=cfg.probe())[-1]
    assert dp.boundary == loose.boundary and dp.pending == loose.pending
    k = loose.kinds
    other = k.get("string_goes_on", 0.0) + k.get("stray", 0.0) + k.get("wrong_closer", 0.0)
    slack = loose.p_undetermined + dp.p_undetermined + dp.p_continue_undetermined + 1e-3
    assert loose.p_close == pytest.approx(dp.p_close, abs=slack)
    assert other == pytest.approx(dp.p_other, abs=slack)
    assert 1.0 - loose.p_close - other == pytest.approx(dp.p_continue + dp.p_undetermined, abs=slack)
    assert slack < 0.1


RUN_SPEC = f"""
name = "decision-tiny"
models = ["smollm2-135m-instruct"]
scenarios = ["{SCENARIO}"]
n = 2
max_new_tokens = 12
modes = ["loose", "strict"]
batch_size = 2

[variant]
history = ["agentic"]
toolset = ["nested"]
conditioning = ["gold-prefix"]

[decision]
engines = ["xgrammar"]
variant = {{ history = "agentic", toolset = "nested" }}
depth = 2
key_depth = 1
tail_depth = 2
min_mass = 1e-2
max_branches = 4
tail = 1e-3
"""


@pytest.mark.model
def test_a_spec_runs_the_decision_into_its_run_and_sets_it_against_the_draws(tmp_path, smol_ref):
    """``tooldecode run`` on a spec with a [decision] table writes decision.jsonl (resumed, not recomputed),
    and the comparison reads the same run's L2 draws."""
    from tooldecode.distortion.decision import read_decision_rows
    from tooldecode.distortion.decision_table import (
        compare_sampled,
        format_comparison,
        sampled_decisions,
        with_draw_validity,
    )
    from tooldecode.experiments import load_spec, run_spec

    (tmp_path / "s.toml").write_text(RUN_SPEC)
    out = tmp_path / "run"
    run_spec(load_spec(tmp_path / "s.toml"), out, progress=False)
    rows = read_decision_rows(out)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["decision"]["engines"] == ["xgrammar"]
    assert {r.name for r in rows} == {
        "loose",
        "loose+drop-unknown-keys",
        "strict",
        "strict-prefix",
        "strict-aligned",
    }
    assert all(r.scenario == SCENARIO and r.model_sha256 == manifest["model"]["sha256"] for r in rows)
    before = (out / "decision.jsonl").read_text()
    run_spec(load_spec(tmp_path / "s.toml"), out, progress=False)  # resumed: nothing to add
    assert (out / "decision.jsonl").read_text() == before
    drawn = sampled_decisions(out)
    assert len(drawn) == 4 and {d["remedy"] for d in drawn} == {"loose", "strict"}
    assert all(sum(d[b] for b in ("close", "goes_on", "invented", "other")) == 1 for d in drawn)
    assert not any(d["invented"] for d in drawn if d["remedy"] == "strict")
    comparison = compare_sampled(rows, [out])
    got = {(c["policy"], c["measure"]) for c in comparison}
    assert {("loose", "p_correct"), ("strict", "p_close"), ("loose+drop-unknown-keys", "p_correct")} <= got
    assert all(c["sampled"].n in (2, 4) and c["exact"].g == 1 for c in comparison)
    assert "| strict | strict | goes on |" in format_comparison(comparison)
    assert all(isinstance(d["valid"], bool) and isinstance(d["correct"], bool) for d in drawn)
    estimated = with_draw_validity(rows, [out])  # strict-aligned from the run's own loose draws
    aligned = [r for r in estimated if r.policy == "strict-aligned"]
    assert len(aligned) == 1 and aligned[0].method.startswith("estimate: loose's exact masses")
    assert aligned[0].total == pytest.approx(1.0) and aligned[0].p_invented == 0.0
    assert aligned[0].p_correct_lo <= aligned[0].p_correct <= aligned[0].p_correct_hi
    assert [r for r in estimated if r.policy != "strict-aligned"] == [
        r for r in rows if r.policy != "strict-aligned"
    ]


def test_the_decision_command_estimates_strict_aligned_from_a_sampled_run(capsys):
    """`tooldecode decision RUN --valid-from SAMPLED` on the committed runs: the base's strict-aligned row
    becomes the draw-based estimate; a folder without samples, or both validity flags, is one clear line."""
    from pathlib import Path

    from tooldecode.cli import main

    root = Path(__file__).resolve().parents[1] / "runs"
    exact, sampled = root / "e20-decision-l2-base", root / "e17-strict-cost-base"
    if not (exact / "decision.jsonl").is_file() or not (sampled / "samples.jsonl").is_file():
        pytest.skip("the committed E20 and E17 runs of the base are not in this checkout")
    assert main(["decision", str(exact), "--valid-from", str(sampled)]) == 0
    out = capsys.readouterr().out
    aligned = [line for line in out.splitlines() if line.startswith("| strict-aligned |")]
    assert len(aligned) == 1 and "estimate: loose's exact masses" in aligned[0]
    assert main(["decision", str(exact), "--valid-from", str(exact / "nowhere")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no samples.jsonl there" in err
    assert main(["decision", str(exact), "--valid-from", str(sampled), "--goes-on-valid", "0.5"]) == 2
    assert "give one of them" in capsys.readouterr().err


def test_why_outside_gives_the_reason_a_comparison_misses():
    """A stand-in remedy that reads higher, undetermined mass that reaches the sampled interval, an
    estimate whose range reaches it, or no structural reason; none for a comparison inside its interval;
    the table lists each miss."""
    from tooldecode.distortion.decision_table import format_comparison, why_outside
    from tooldecode.stats.clusters import ClusterRate

    def rate(r: float, lo: float, hi: float) -> ClusterRate:
        return ClusterRate(k=r * 10, n=10, g=5, rate=r, lo=lo, hi=hi)

    base = {"model": "m", "policy": "loose", "remedy": "loose", "measure": "p_invented"}
    inside = {**base, "exact": rate(0.2, 0.1, 0.3), "sampled": rate(0.22, 0.1, 0.35)}
    assert why_outside(inside) is None
    open_mass = {**inside, "sampled": rate(0.4, 0.3, 0.5), "undetermined": rate(0.15, 0.1, 0.2)}
    assert why_outside(open_mass).startswith("the exact rows leave 15.0% of the mass undetermined")
    assert "between 20.0% and 35.0%" in why_outside(open_mass)
    closed = {**open_mass, "undetermined": rate(0.05, 0.0, 0.1)}
    assert why_outside(closed).startswith("no structural reason found")
    stand_in = {
        **closed,
        "policy": "loose+drop-unknown-keys",
        "remedy": "loose+repair",
        "measure": "p_correct",
    }
    assert why_outside(stand_in).startswith(
        "loose+repair stands in for loose+drop-unknown-keys and reads higher"
    )
    lower = {**stand_in, "exact": rate(0.6, 0.5, 0.7)}  # reads lower: the stand-in reason does not apply
    assert why_outside(lower).startswith("no structural reason found")
    table = format_comparison([inside, open_mass])
    assert table.count("- outside: ") == 1 and "- outside: m, loose, invented key: the exact rows" in table
    # strict-aligned's exact column is an estimate: its P(correct) range reaching the interval is the reason
    estimate = {
        **closed,
        "policy": "strict-aligned",
        "remedy": "strict-aligned",
        "measure": "p_correct",
        "estimate": "estimate: loose's exact masses × ...",
        "correct_range": (0.08, 0.94),
    }
    assert why_outside(estimate).startswith("the exact column is an estimate, not an exact probability")
    assert "8.0%-94.0%" in why_outside(estimate) and "to place it" in why_outside(estimate)
    other = {**estimate, "measure": "p_close"}
    assert "to place it (close rests on the same shares)" in why_outside(other)
    short = {**estimate, "correct_range": (0.1, 0.2)}  # the range stops below the sampled interval
    assert why_outside(short).startswith("no structural reason found")
