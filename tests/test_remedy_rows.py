"""FINDINGS rows of strict's cost sampled (``experiments/remedy_rows.py``) on hand-made calls: a clear rise
reproduces the claim, no difference does not, completed-only rows drop cut calls, and the descriptive row
gives every remedy's P(correct) with its cut share."""

from __future__ import annotations

from experiments.remedy_rows import remedy_effects

MEASURES = ("invented", "valid", "applies", "correct", "works", "wrong_but_valid", "cut")


def _call(remedy: str, scenario: str, level: str = "L1", **flags: bool) -> dict:
    return {"model": "m", "level": level, "remedy": remedy, "scenario": scenario, "retries": 0,
            **{k: bool(flags.get(k, False)) for k in MEASURES}, "tokens": 10, "wall": 1.0}  # fmt: skip


def _calls(strict_wrong: int, cut_strict: bool = False) -> list[dict]:
    out = []
    for k, s in enumerate(f"s{i}" for i in range(12)):
        for i in range(4):
            slip = i == 1 and k % 3 == 0  # loose is now and then valid and wrong too
            out.append(_call("loose", s, correct=i == 0, valid=i == 0 or slip, wrong_but_valid=slip))
            wrong = i < strict_wrong - (k % 2 if strict_wrong else 0)  # 3 or 2 of 4 per scenario
            out.append(
                _call(
                    "strict",
                    s,
                    valid=True,
                    wrong_but_valid=wrong,
                    correct=not wrong,
                    cut=cut_strict and wrong,
                )
            )
            out.append(_call("strict-prefix", s, valid=True, correct=True))
    return out


def test_a_clear_rise_reproduces_and_no_difference_does_not():
    rows = remedy_effects(
        _calls(strict_wrong=3), {"e17": "Strict costs.", "e18": "Prefix keeps."}, {"m": "src"}
    )
    by = {r["observation"]: r for r in rows}
    all_draws = by["e17-strict-cost: m: strict's P(wrong but valid) vs loose's, all draws (L1, sampled)"]
    assert all_draws["verdict"].startswith("reproduces"), all_draws["verdict"]
    assert all_draws["claim"].startswith("Strict costs.") and all_draws["source"] == "src"
    prefix = by["e18-remedies: m: strict-prefix's P(correct) vs strict's, all draws (L1, sampled)"]
    assert prefix["verdict"].startswith("reproduces")
    described = by["strict's cost sampled: m: P(correct) per remedy (L1)"]
    assert described["verdict"] == "descriptive"
    assert described["measured"].startswith("loose 25.0%") and "strict-prefix 100.0%" in described["measured"]
    none = remedy_effects(_calls(strict_wrong=0), {}, {})
    flat = {r["observation"]: r for r in none}
    row = flat["e17-strict-cost: m: strict's P(wrong but valid) vs loose's, all draws (L1, sampled)"]
    assert not row["verdict"].startswith("reproduces")


def test_completed_rows_drop_the_calls_cut_at_the_cap():
    rows = remedy_effects(_calls(strict_wrong=3, cut_strict=True), {}, {})
    by = {r["observation"]: r for r in rows}
    done = by[
        "e17-strict-cost: m: strict's P(wrong but valid) vs loose's, draws that ended before the cap (L1, sampled)"
    ]
    assert "strict: 18 calls, loose: 48 calls" in done["measured"]
    assert not done["verdict"].startswith("reproduces")  # what ran to the cap was the whole excess
    assert "cut 62.5%" in by["strict's cost sampled: m: P(correct) per remedy (L1)"]["measured"]


def test_row_remedies_reads_e17_and_e18_runs_of_a_model(tmp_path):
    """From run folders: strict comes from the E17 run, loose and strict-prefix from the E18 run (E17's
    loose is not read twice), and each model's rows name both runs."""
    import json

    from conftest import make_sample

    from experiments.remedy_rows import row_remedies
    from tooldecode.runs import RunStore, build_manifest, load_run

    d = tmp_path / "scenarios"
    d.mkdir()
    doc = {"id": "t-two", "language": "ini", "title": "t", "path": "a.ini", "content": "a = 1\nb = 2\n",
           "task": "t", "diagnosis": "d", "edits": [{"oldText": "a = 1", "newText": "a = 10"}],
           "expected": "a = 10\nb = 2\n"}  # fmt: skip
    (d / "t-two.json").write_text(json.dumps(doc))

    def rec(mode, i, new):
        args = {"path": "a.ini", "edits": [{"oldText": "a = 1", "newText": new}]}
        text = "<tool_call>\n" + json.dumps({"name": "edit", "arguments": args}) + "\n</tool_call>"
        arm = {"mode": mode, "level": "L1", "model": "m", "toolset": "nested", "wire": "hermes"}
        return make_sample(text, arm=arm, key=f"{mode}/t-two/0/{i}", scenario="t-two", index=i,
                           token_ids=[1] * 10, finish_reason="stop", timing={"end_s": 1.0})  # fmt: skip

    runs = {}
    for name, recs in (
        ("e17-strict-cost", [rec("loose", 0, "a = 10"), rec("strict", 0, "a = 11")]),
        ("e18-remedies", [rec("loose", i, "a = 10") for i in range(3)] + [rec("strict-prefix", 0, "a = 10")]),
    ):
        store = RunStore.create(tmp_path / name, build_manifest({"spec": name, "scenario_dirs": [str(d)]}))
        store.append(recs)
        store.close()
        runs[name] = load_run(tmp_path / name)
    rows = row_remedies({}, [runs["e17-strict-cost"]], runs)
    described = next(r for r in rows if r["verdict"] == "descriptive")
    assert described["measured"].startswith("loose 100.0%") and "(n=3)" in described["measured"]
    assert "strict 0.0%" in described["measured"] and "strict-prefix 100.0%" in described["measured"]
    assert "e17-strict-cost" in described["source"] and "e18-remedies" in described["source"]


def test_the_comparison_block_says_what_is_missing():
    """No exact rows, or no sampled run: one line naming what to run, never an empty table."""
    from experiments.decision_rows import comparison_block

    assert comparison_block({}).startswith("Exact against sampled: no committed run of `e20-decision-l2`")


def test_the_readme_reading_names_the_remedy_that_works_and_says_when_none_does():
    from experiments.remedy_rows import remedy_reading
    from tooldecode.distortion.remedies import format_remedies, remedy_table

    calls = [dict(c, works=c["correct"] and c["valid"]) for c in _calls(strict_wrong=3)]
    table = remedy_table(calls)
    line = remedy_reading(table)
    assert line.startswith("**m, L1**: the calls that work most often are strict-prefix's (100.0% [")
    assert "48 calls)" in line and "strict's calls work 37.5% against loose's 25.0%" in line
    assert "valid but wrong 62.5% against 8.3%" in line
    assert "| m | L1 | strict-prefix | 48 |" in format_remedies(table)
    none = [dict(c, correct=False, works=False) for c in _calls(strict_wrong=3)]
    assert "no remedy's call works (0 of 144 calls)" in remedy_reading(remedy_table(none))
    # a remedy drawn on 2 of the 12 scenarios so far does not win the cell: it is named apart
    few = [c for c in calls if c["remedy"] != "strict-prefix"] + [
        dict(c, remedy="strict-aligned")
        for c in calls
        if c["remedy"] == "strict-prefix" and c["scenario"] in ("s0", "s1")
    ]
    line = remedy_reading(remedy_table(few))
    assert line.startswith("**m, L1**: the calls that work most often are strict's (37.5% ["), line
    assert "strict-aligned's 8 calls so far (2 of 12 scenarios, its run not complete) work 100.0% [" in line
    assert "abandoned" not in line
    # calls the sampler abandoned at its walk budget are named (they count as cut calls)
    gave_up = [
        dict(c, remedy="strict-aligned", walks=8, accepted=False, abandoned=True, cut=True, valid=False,
             correct=False, works=False)
        for c in calls
        if c["remedy"] == "strict-prefix" and c["scenario"] == "s2"
    ]  # fmt: skip
    line = remedy_reading(remedy_table(few + gave_up))
    assert "strict-aligned's sampler abandoned 4 of its 12 calls at its walk budget (counted as cut" in line


def test_a_wrong_but_valid_row_where_nothing_is_correct_says_it_is_by_construction():
    """Where no call of either arm is correct, wrong-but-valid is validity: the verdict says so; where
    some call is correct it does not."""
    from experiments.remedy_rows import BY_CONSTRUCTION

    none = [dict(c, correct=False) for c in _calls(strict_wrong=3)]
    rows = remedy_effects(none, {"e17": "Strict costs.", "e18": "Prefix keeps."}, {"m": "src"})
    by = {r["observation"]: r for r in rows}
    row = by["e17-strict-cost: m: strict's P(wrong but valid) vs loose's, all draws (L1, sampled)"]
    assert row["verdict"].endswith(BY_CONSTRUCTION)
    some = remedy_effects(
        _calls(strict_wrong=3), {"e17": "Strict costs.", "e18": "Prefix keeps."}, {"m": "src"}
    )
    assert not any(r["verdict"].endswith(BY_CONSTRUCTION) for r in some)


def test_the_ended_line_names_each_arm_short_of_95_percent_and_what_its_continued_draws_did(tmp_path):
    import json

    from conftest import make_record

    from experiments.remedy_rows import ended_line
    from tooldecode.runs import Run

    strict = {"mode": "strict", "level": "L1"}
    samples = [make_record("x", arm=strict, index=i, finish_reason="stop") for i in range(18)]
    samples += [make_record("x", arm=strict, index=18 + i, finish_reason="length") for i in range(2)]
    samples += [
        make_record("x", arm={"level": "L1"}, index=i, finish_reason="stop") for i in range(20)
    ]  # loose
    run = Run("r", tmp_path / "r", {"config": {"max_new_tokens": 8}}, samples, {}, [])
    line = ended_line([run])
    assert "1 of 2 arms meet it" in line and "18/20 = 90.0% at 8 tokens" in line
    assert "not continued yet" in line
    ext = tmp_path / "r-ext64"
    ext.mkdir()
    (ext / "extend.json").write_text(json.dumps({"run": str(tmp_path / "r"), "cap": 64}))
    rows = [{"key": s.key, "cap": 64, "finish_reason": "stop"} for s in samples[18:19]]
    (ext / "extended.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    line = ended_line([run])
    assert (
        "its 2 cut draws continued to 64 tokens" in line
        and "1 ended (0 of them a call that works), so 95.0% at 64" in line
    )
    assert "still below" not in line
    (ext / "extended.jsonl").write_text(json.dumps({**rows[0], "finish_reason": "length"}) + "\n")
    assert "0 ended (0 of them a call that works), so 90.0% at 64, still below 95%" in ended_line([run])
