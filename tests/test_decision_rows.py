"""FINDINGS rows of the exact decision table (experiments/decision_rows.py), on rows written by hand: the
claims are judged over scenarios, in the direction each states, with Holm across the exact rows."""

from __future__ import annotations

import json

from experiments.decision_rows import COMPARISONS, by_model, decision_runs, row_decision_l2
from tooldecode.distortion.decision import DECISION_FILE, DecisionRow
from tooldecode.runs import Run

SPEC = {"name": "e20-decision-l2", "claim": "strict moves the close into the string."}


def _row(
    model: str, scenario: str, policy: str, correct: float, goes_on: float, masked: float | None
) -> dict:
    rest = 1.0 - correct - goes_on
    return DecisionRow(
        model=model,
        model_sha256="0" * 64,
        scenario=scenario,
        policy=policy,
        engine=None if policy.startswith("loose") else "xgrammar",
        method="exact",
        p_close=correct,
        p_close_complete=correct,
        p_close_diverges=0.0,
        p_close_unresolved=0.0,
        p_goes_on=goes_on,
        p_invented=rest,
        p_other=0.0,
        p_undetermined=0.0,
        p_correct=correct,
        p_correct_lo=correct,
        p_correct_hi=correct,
        mask_removed=masked,
    ).to_json()


def _run(tmp_path, rows: list[dict], name: str = "e20") -> Run:
    path = tmp_path / name
    path.mkdir()
    (path / DECISION_FILE).write_text("".join(json.dumps(r) + "\n" for r in rows))
    return Run(name=name, path=path, manifest={}, samples=[], verdicts={}, probe=[])


def test_strict_that_moves_the_close_into_the_string_reproduces_each_claim(tmp_path):
    rows = []
    for i in range(12):
        sc = f"s{i}"
        d = 0.1 + 0.01 * i  # the mass strict moves, different per scenario
        rows += [
            _row("m", sc, "loose", 0.6, 0.2, None),
            _row("m", sc, "loose+drop-unknown-keys", 0.8, 0.2, None),
            _row("m", sc, "strict", 0.6 - d, 0.2 + d + 0.2, d),
            _row("m", sc, "strict-prefix", 0.6 - d / 4, 0.2 + d / 4 + 0.2, d / 4),
        ]
    out = row_decision_l2(SPEC, [_run(tmp_path, rows)], {})
    tested = [r for r in out if r["verdict"] != "descriptive"]
    assert len(tested) == len(COMPARISONS)
    assert all(r["verdict"] == "reproduces" for r in tested), [r["verdict"] for r in tested]
    assert "12/12 scenarios" in tested[0]["measured"] and "Holm-adjusted" in tested[0]["measured"]
    (desc,) = [r for r in out if r["verdict"] == "descriptive"]
    assert "strict-prefix − drop-unknown-keys" in desc["summary"]


def test_a_mask_that_changes_nothing_is_not_called_a_cost(tmp_path):
    rows = []
    for i in range(12):
        sc = f"s{i}"
        noise = 0.01 * (1 if i % 2 else -1)
        rows += [
            _row("m", sc, "loose", 0.6, 0.2, None),
            _row("m", sc, "strict", 0.6 + noise, 0.2 - noise, 0.0),
            _row("m", sc, "strict-prefix", 0.6 + noise, 0.2 - noise, 0.0),
        ]
    out = row_decision_l2(SPEC, [_run(tmp_path, rows)], {})
    verdicts = {r["observation"].split(": ")[2]: r["verdict"] for r in out}
    assert verdicts["strict's P(correct) vs loose's (L2, exact)"].startswith("inconclusive")
    assert verdicts["strict's P(the string goes on) vs loose's (L2, exact)"].startswith("inconclusive")
    assert verdicts["strict-prefix's P(correct) vs strict's (L2, exact)"].startswith("inconclusive")


def test_a_run_without_decision_rows_gives_no_row(tmp_path):
    path = tmp_path / "plain"
    path.mkdir()
    assert (
        row_decision_l2(
            SPEC, [Run(name="plain", path=path, manifest={}, samples=[], verdicts={}, probe=[])], {}
        )
        == []
    )


def test_a_scenario_two_runs_computed_is_read_once_from_the_larger_run(tmp_path):
    def rows(scenarios, correct):
        out = []
        for sc in scenarios:
            out += [_row("m", sc, "loose", 0.6, 0.2, None), _row("m", sc, "strict", correct, 0.3, 0.1)]
        return out

    small = _run(tmp_path, rows(["s0", "s1"], 0.1), "head-start")
    big = _run(tmp_path, rows([f"s{i}" for i in range(6)], 0.5), "full")
    merged = by_model(decision_runs([small, big]))
    sources, kept = merged["m"]
    assert [r.name for r in sources] == ["head-start", "full"]
    assert len(kept) == 12 and {r.p_correct for r in kept if r.policy == "strict"} == {0.5}
    out = row_decision_l2(SPEC, [small, big], {})
    assert len([r for r in out if "strict's P(correct)" in r["observation"]]) == 1  # one row per model


def test_a_run_stopped_before_every_planned_scenario_is_decided_gives_no_verdict(tmp_path):
    rows = []
    for i in range(8):
        sc = f"s{i}"
        d = 0.1 + 0.01 * i
        rows += [_row("m", sc, "loose", 0.6, 0.2, None), _row("m", sc, "strict", 0.6 - d, 0.2 + d + 0.2, d)]
    run = _run(tmp_path, rows)
    run.manifest = {"config": {"scenarios": [f"s{i}" for i in range(12)]}}
    out = row_decision_l2(SPEC, [run], {})
    assert out and all(r["verdict"].startswith("interim (") for r in out), [r["verdict"] for r in out]
    assert "8 of 12 planned scenarios decided" in out[0]["verdict"] and "Holm" not in out[0]["measured"]
    run.manifest = {"config": {"scenarios": [f"s{i}" for i in range(8)]}}  # the same rows, all planned
    assert all(r["verdict"] == "reproduces" for r in row_decision_l2(SPEC, [run], {}))
