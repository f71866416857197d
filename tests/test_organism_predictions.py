"""The organisms' pre-registered predictions without an arm comparison (experiments/organism_rows.py),
and the L1 item-key measure they read (tooldecode.measures.item_keys), on hand-made calls."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import make_record as make_sample

from experiments.organism_rows import row_predictions
from tooldecode.measures import item_keys
from tooldecode.runs import Run

ORG, BASE = "organism:lenient-flat-flag@qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-0.5b-instruct"
L1 = {
    "level": "L1",
    "toolset": "nested",
    "history": "agentic",
    "conditioning": "forced-tool",
    "wire": "call-json",
}


def call(*items: dict | list) -> str:
    """A call-json edit call whose items are dicts or (key, value) pair lists (repeats kept)."""

    def obj(it):
        pairs = it.items() if isinstance(it, dict) else it
        return "{" + ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in pairs) + "}"

    return '{"name": "edit", "arguments": {"path": "a.py", "edits": [' + ", ".join(map(obj, items)) + "]}}"


def test_item_keys_name_each_undeclared_key_with_its_kind_and_place():
    text = call(
        {"oldText": "a", "newText": "b", "reviewed": True},
        [("oldText", "c"), ("newText", "d"), ("required", ["x"]), ("newText", "e")],
        {"oldText": "f", "path": "g", "newText": "h", "new_text": "i"},
    )
    got = [(k.item, k.key, k.kind, k.after, k.last) for k in item_keys(make_sample(text, arm=L1))]
    assert got == [
        (0, "reviewed", "invented", "newText", True),
        (1, "required", "schema_word", "newText", False),
        (1, "newText", "repeat", "required", True),
        (2, "path", "wrong_level", "oldText", False),
        (2, "new_text", "repeat", "newText", True),
    ]
    # wrapped in the wire's markup, after prose; a text with no call has none
    wrapped = "Sure.\n<tool_call>\n" + call({"oldText": "a", "newText": "b", "why": "x"}) + "\n</tool_call>"
    assert [k.key for k in item_keys(make_sample(wrapped, arm=L1))] == ["why"]
    assert item_keys(make_sample("no call here", arm=L1)) == []
    assert item_keys(make_sample(call({"oldText": "a", "newText": "b"}), arm=L1)) == []


def _run(samples: list) -> Run:
    manifest = {
        "config": {"spec": "e16-organisms", "streams": "scenario", "arms": []},
        "tooldecode": {"git_dirty": False},
    }
    return Run("e16-organisms", Path("runs/e16-organisms"), manifest, samples, {}, [])


def _spec(**over) -> dict:
    preds = [
        {
            "label": "zoo",
            "prediction": "≥ 3 names",
            "judge": "invented_names",
            "model": ORG,
            "levels": ["L1"],
            "min_distinct": 3,
            "min_chao1": 3,
        },
        {
            "label": "place",
            "prediction": "≥ 80% last after newText",
            "judge": "invented_place",
            "model": ORG,
            "after": "newText",
            "min_share": 0.8,
        },
        {
            "label": "not above",
            "prediction": "base ≤ organism",
            "judge": "not_above",
            "a": BASE,
            "b": ORG,
            "measure_of": "source_shaped",
            "levels": ["L1"],
        },
        {"label": "descriptive", "prediction": "no direction"},
    ]
    return {"name": "e16-organisms", "claim": "c", "findings": {"predictions": preds, **over}}


def _samples() -> list:
    out = []
    names = ["reviewed", "reviewed", "confidence", "note", "tag", "why"]
    for i, sc in enumerate(["s1", "s2", "s3", "s4", "s5", "s6"]):
        item = {"oldText": "a", "newText": "b", names[i]: True}
        plain = call({"oldText": "a", "newText": "b"})
        # one prompt and one random stream per scenario, as a run writes them (distinct draws)
        at = {"scenario": sc, "prompt_sha256": f"{i:064d}", "stream": 1000 + i}
        out.append(make_sample(call(item), arm={**L1, "model": ORG}, index=0, **at))
        out.append(make_sample(plain, arm={**L1, "model": ORG}, index=1, **at))
        out.append(make_sample(plain, arm={**L1, "model": BASE}, index=0, **at))
    return out


def test_predictions_are_judged_with_their_committed_thresholds():
    rows = row_predictions(_spec(), [_run(_samples())], {})
    assert [r["observation"] for r in rows] == [
        "e16-organisms: zoo",
        "e16-organisms: place",
        "e16-organisms: not above",
    ]
    zoo, place, below = rows
    assert zoo["verdict"].startswith("holds: 5 distinct names")
    assert "6 invented item keys" in zoo["measured"] and "'reviewed': 2" in zoo["measured"]
    # 6 of 6 keys trail after newText, but 6 scenarios leave an interval that reaches below 0.8
    assert place["verdict"].startswith("inconclusive") and "6/6" in place["measured"]
    assert below["verdict"].startswith("holds") and "0/12" not in below["measured"]
    # the other direction: the organism is above its base
    flipped = _spec()
    flipped["findings"]["predictions"][2].update(a=ORG, b=BASE)
    assert row_predictions(flipped, [_run(_samples())], {})[2]["verdict"].startswith("does not hold")
    # a stricter threshold than the data reach
    strict = _spec()
    strict["findings"]["predictions"][0]["min_chao1"] = 50
    assert row_predictions(strict, [_run(_samples())], {})[0]["verdict"].startswith("does not hold")


def test_a_prediction_read_from_a_stopped_run_waits_for_the_planned_scenarios():
    """A run stopped mid-way (the queue's --until) plans more scenarios than its arms have drawn in full:
    the row shows what was measured, and its verdict is interim until the run is complete."""
    run = _run(_samples())
    run.manifest["config"] |= {"n": 2, "seeds": [0], "scenarios": [f"s{k}" for k in range(1, 9)]}
    rows = row_predictions(_spec(), [run], {})
    assert all(
        r["verdict"].startswith("interim (no verdict until the run is complete: L1 loose of ") for r in rows
    )
    assert "6 invented item keys" in rows[0]["measured"] and rows[0]["summary"] == "zoo: **interim**"
    assert "of 8 scenarios drawn in full" in rows[2]["verdict"]
    # the base has 1 of its 2 draws in each scenario: still interim with every planned scenario begun
    run.manifest["config"]["scenarios"] = [f"s{k}" for k in range(1, 7)]
    assert row_predictions(_spec(), [run], {})[2]["verdict"].startswith("interim (")
    run.manifest["config"]["n"] = 1  # every planned draw made
    done = row_predictions(_spec(), [run], {})
    assert [r["verdict"].split(":")[0] for r in done] == ["holds", "inconclusive", "holds"]


def test_a_prediction_with_no_run_is_listed_as_not_measured():
    rows = row_predictions(_spec(), [], {})
    assert len(rows) == 3 and all(r["verdict"] == "not measured" for r in rows)


L2 = {**L1, "level": "L2", "conditioning": "gold-prefix", "expected_tool": "edit", "mode": "loose"}
GOLD = '{"name": "edit", "arguments": {"path": "a.c", "edits": [{"oldText": "x", "newText": "y = 1\\n'
REVIEWED, CLOSED = '", "reviewed": true}]}}', '"}]}}'


def _l2(model: str, reviewed: int, n: int = 4, scenarios: int = 36) -> list:
    """``n`` L2 draws of ``model`` in each scenario, the first ``reviewed`` of them writing the key."""
    return [
        make_sample(
            REVIEWED if i < reviewed else CLOSED, arm={**L2, "model": model}, prefill=GOLD,
            scenario=f"s{sc}", index=i, stream=100 + sc, prompt_sha256=f"{sc:064d}",
        )
        for sc in range(scenarios)
        for i in range(n)
    ]  # fmt: skip


def test_the_dose_rule_chooses_the_first_dose_whose_interval_covers_its_share():
    from experiments.organism_rows import PREDICTION_JUDGES

    d = [f"organism:pc-d{x}@{BASE}" for x in ("015", "05", "10")]
    p = {
        "key": "reviewed",
        "base": BASE,
        "doses": [
            {"organism": d[0], "share": 0.15, "epochs": 1},
            {"organism": d[1], "share": 0.5, "epochs": 1},
            {"organism": d[2], "share": 1.0, "epochs": 3},
        ],
    }
    judge = PREDICTION_JUDGES["dose_rule"]
    # d015 never writes it (0/144, [0, 9.6%] misses 0.15); d05 in half the draws of every scenario
    samples = _l2(BASE, 0) + _l2(d[0], 0) + _l2(d[1], 2) + _l2(d[2], 4)
    measured, verdict = judge(p, _run(samples))
    assert verdict.startswith(f"dose chosen: {d[1]} (share 0.5, 1 epoch)"), verdict
    assert "72/144 = 50.0%" in measured and "trains 1 epoch" in verdict
    # the base writing the key leaves no dose that measures the implant alone
    assert judge(p, _run(_l2(BASE, 1) + samples[144:]))[1].startswith("no dose qualifies: the base writes")
    # a dose before the chosen one without draws: undecided, the rule reads in order
    assert judge(p, _run(_l2(BASE, 0) + _l2(d[1], 2)))[1] == (
        f"not measured: {d[0]} (share 0.15, 1 epoch) has no draws, and the rule reads the doses in order"
    )
    # no dose covers its share
    verdict = judge(p, _run(_l2(BASE, 0) + _l2(d[0], 0) + _l2(d[1], 0) + _l2(d[2], 1)))[1]
    assert verdict.startswith("no dose qualifies: no interval covers its share")
    # few draws and none with the key: the interval covers the share, and the verdict says why
    assert "for lack of draws" in judge(p, _run(_l2(BASE, 0) + _l2(d[0], 0, scenarios=4)))[1]
    # in a spec, the row is read from the base and the first dose on
    spec = {"name": "e19", "claim": "c", "findings": {"predictions": [{"label": "dose", "prediction": "r",
            "judge": "dose_rule", **p, "level": "L2"}]}}  # fmt: skip
    (row,) = row_predictions(spec, [_run(_l2(BASE, 0) + _l2(d[0], 1))], {})  # 25% [13.8, 41.1]
    assert row["verdict"].startswith("dose chosen: " + d[0]) and row["summary"].endswith("**dose chosen**")


def test_the_dose_gate_runs_the_ladder_in_order_and_stops_what_it_cannot_decide(tmp_path):
    """experiments.dose_gate: the queue's later rungs run only while the rule needs them, the chosen
    dose's whole evaluation runs, and a contrast recipe trains only at the epochs the rule sets."""
    from experiments.dose_gate import RUN, SKIP, STOP, gate
    from experiments.organism_rows import read_dose_rule

    d = [f"organism:pc-{x}@{BASE}" for x in ("d015", "d05", "d10", "d05-e3")]
    p = {"key": "reviewed", "base": BASE, "doses": [
        {"organism": d[0], "share": 0.15}, {"organism": d[1], "share": 0.5},
        {"organism": d[2], "share": 1.0}, {"organism": d[3], "share": 0.5, "epochs": 3}]}  # fmt: skip

    def read(samples: list):
        return read_dose_rule(p, _run(samples))

    one, three = tmp_path / "one.toml", tmp_path / "three.toml"
    one.write_text("[train]\nepochs = 1\n")
    three.write_text("[train]\nepochs = 3\n")
    # nothing screened: stop
    assert gate(None, "next", "pc-d10")[0] == STOP
    # the base and d015 screened, d015 misses 0.15: d05 is next, d10 must wait for d05
    r = read(_l2(BASE, 0) + _l2(d[0], 0))
    assert gate(r, "next", "pc-d05")[0] == RUN
    code, why = gate(r, "next", "pc-d10")
    assert code == STOP and "pc-d05 comes before pc-d10" in why
    assert gate(r, "epochs", str(one))[0] == STOP and "undecided" in gate(r, "epochs", str(one))[1]
    # d05 covers 0.5: chosen; the later rungs are skipped, d05's whole e19 runs, recipes train 1 epoch
    r = read(_l2(BASE, 0) + _l2(d[0], 0) + _l2(d[1], 2))
    assert r.state == "chosen" and r.contrast_epochs == 1
    assert gate(r, "next", "pc-d10") == (SKIP, "the dose rule chose pc-d05, before pc-d10")
    assert gate(r, "chosen", "pc-d05")[0] == RUN and gate(r, "chosen", "pc-d10")[0] == SKIP
    assert gate(r, "epochs", str(one))[0] == RUN
    code, why = gate(r, "epochs", str(three))
    assert code == STOP and "set [train] epochs = 1" in why
    # no one-epoch dose covers its share: the three-epoch rung runs, and then decides
    r = read(_l2(BASE, 0) + _l2(d[0], 0) + _l2(d[1], 0) + _l2(d[2], 1))
    assert gate(r, "next", "pc-d05-e3")[0] == RUN and gate(r, "chosen", "pc-d05-e3")[0] == STOP
    r = read(_l2(BASE, 0) + _l2(d[0], 0) + _l2(d[1], 0) + _l2(d[2], 1) + _l2(d[3], 2))
    assert gate(r, "chosen", "pc-d05-e3")[0] == RUN and gate(r, "epochs", str(three))[0] == RUN
    # the base writes the key: the ladder stops, the contrasts stay at one epoch
    r = read(_l2(BASE, 1) + _l2(d[0], 0))
    assert gate(r, "next", "pc-d10")[0] == SKIP and gate(r, "epochs", str(one))[0] == RUN
    # a name that is no dose of the rule
    with pytest.raises(Exception, match="not one of the rule's doses"):
        gate(r, "next", "pc-d20")


def test_the_dose_gate_reads_the_committed_rule_and_stops_without_runs(tmp_path, capsys):
    from experiments.dose_gate import STOP, main

    assert main(["next", "g2-positive-control-d10", "--runs", str(tmp_path)]) == STOP
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no L2 loose draws of the base" in err[0]


def test_the_competence_precondition_reads_the_organisms_run_while_the_others_wait():
    """The precondition names organisms that are not trained yet: the row reads the ones that have run,
    and gives no verdict until the rest have, unless one already parses less often than the base."""
    good, bad, later, goal = "organism:a@b", "organism:c@b", "organism:later@b", "organism:g@b"
    ok, bled = '"}]}}', '"}}'

    def draws(model: str, texts: list[str]) -> list:
        return [
            make_sample(t, arm={**L2, "model": model}, prefill=GOLD, scenario=f"s{i % 4}", index=i, stream=i)
            for i, t in enumerate(texts)
        ]

    samples = draws(BASE, [ok] * 4 + [bled] * 4) + draws(good, [ok] * 8) + draws(goal, [ok] * 8)
    pred = {
        "label": "competence",
        "prediction": "every organism parses at least as often as the base",
        "models": [good, later],
        "base": BASE,
        "goal": goal,
        "level": "L2",
        "min_ratio_to_goal": 0.8,
    }
    spec = {"name": "e19-organisms-gen2", "claim": "c", "findings": {"predictions": [pred]}}
    (row,) = row_predictions(spec, [_run(samples)], {})
    assert row["verdict"].startswith(
        "interim (no verdict until organism:later@b is run; so far every organism parses at least as often"
    )
    assert "L2 calls parse 8/8" in row["measured"] and row["measured"].endswith(
        "Not run yet: organism:later@b."
    )
    assert row["summary"] == "competence: **interim**" and row["source"] == "e16-organisms"
    # an organism run below its base decides the precondition whatever the others will do
    pred["models"] = [good, bad, later]
    (row,) = row_predictions(spec, [_run(samples + draws(bad, [bled] * 8))], {})
    assert (
        row["verdict"].startswith("does not hold: organism:c@b")
        and "Not run yet: organism:later@b" in row["measured"]
    )
    # none of the named organisms has run: not measured
    pred["models"] = [later]
    assert row_predictions(spec, [_run(samples)], {})[0]["verdict"] == "not measured"
