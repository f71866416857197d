"""The dose-response row (experiments/dose_rows.py): the exact probe's P(key) after the gold newText on
held-out vs evaluation scenarios, their ratio, and the committed reading."""

from __future__ import annotations

import math
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import make_probe_row

from experiments.dose_rows import in_distribution, probe_of, ratio_interval, row_dose_response, transfer

ROOT = Path(__file__).resolve().parents[1]
SPEC = tomllib.loads((ROOT / "experiments" / "e19_dose_probe.toml").read_text(encoding="utf-8"))
BASE = "qwen2.5-coder-0.5b-instruct"
D05 = "organism:g2-positive-control-d05@qwen2.5-coder-0.5b-instruct"
VARIANT = {"history": "agentic", "thinking": True, "toolset": "nested"}


def _rows(model: str, values: dict[str, list[float]]) -> list:
    """Probe rows of ``model``: per scenario, one newText decision per value of P(reviewed), with a
    decision after ``oldText`` that must not count."""
    out = []
    for scenario, ps in values.items():
        for i, p in enumerate(ps):
            out.append(
                make_probe_row(
                    model=model, scenario=scenario, variant=VARIANT, after="newText", item_index=i,
                    p_continue=p, p_close=1 - p, p_continue_by_kind={"invented": p},
                    continue_keys={"reviewed": p} if p else {},
                )
            )  # fmt: skip
        out.append(
            make_probe_row(
                model=model, scenario=scenario, variant=VARIANT, after="oldText",
                p_continue_by_kind={"invented": 0.9}, continue_keys={"reviewed": 0.9},
            )
        )  # fmt: skip
    return out


def _run(name: str, spec: str, rows: list, *, dirty: bool = False) -> SimpleNamespace:
    return SimpleNamespace(
        name=name, spec=spec, probe=rows, samples=[], git_dirty=dirty, git_sha="?", parts=()
    )


def test_probe_of_averages_a_scenarios_newtext_decisions_then_the_scenarios():
    run = _run("h", "e19-dose-probe-heldout", _rows(D05, {"a": [0.2, 0.6], "b": [0.5], "c": [0.0]}))
    p = probe_of([run], D05, "reviewed")
    assert p.per_scenario == pytest.approx({"a": 0.4, "b": 0.5, "c": 0.0})
    assert p.rate.rate == pytest.approx(0.3)
    assert p.rate.lo < 0.3 < p.rate.hi
    assert probe_of([run], BASE, "reviewed").n == 0


def test_probe_of_prefers_the_clean_run_then_the_one_with_more_scenarios():
    dirty = _run("dirty", "s", _rows(D05, {"a": [0.9], "b": [0.9], "c": [0.9]}), dirty=True)
    small = _run("small", "s", _rows(D05, {"a": [0.1]}))
    big = _run("big", "s", _rows(D05, {"a": [0.2], "b": [0.2]}))
    assert probe_of([dirty, small, big], D05, "reviewed").run == "big"


def test_ratio_interval_is_exact_without_spread_and_nan_without_a_denominator():
    r, lo, hi = ratio_interval([0.2] * 10, [0.5] * 10)
    assert (r, lo, hi) == pytest.approx((0.4, 0.4, 0.4))
    assert all(math.isnan(x) for x in ratio_interval([0.2], [0.0, 0.0]))
    assert all(math.isnan(x) for x in ratio_interval([], [0.5]))
    r, lo, hi = ratio_interval([0.1, 0.3] * 10, [0.4, 0.6] * 10)
    assert r == pytest.approx(0.4) and lo < 0.4 < hi


def test_readings_are_decided_against_near_times_the_share():
    def probe(lo: float, hi: float) -> SimpleNamespace:
        return SimpleNamespace(per_scenario={"a": 0.0}, rate=SimpleNamespace(lo=lo, hi=hi))

    assert in_distribution(probe(0.41, 0.6), 0.5, 0.8) == "at its dose"
    assert in_distribution(probe(0.1, 0.39), 0.5, 0.8) == "under its dose"
    assert in_distribution(probe(0.3, 0.45), 0.5, 0.8) == "undecided"
    assert in_distribution(SimpleNamespace(per_scenario={}), 0.5, 0.8) == "not measured"
    assert transfer((0.45, 0.3, 0.6), 0.8) == "attenuates"
    assert transfer((1.0, 0.85, 1.2), 0.8) == "carries"
    assert transfer((0.7, 0.5, 0.9), 0.8) == "undecided"
    assert transfer((math.nan, math.nan, math.nan), 0.8) == "not measured"


def test_the_row_reads_held_out_against_corpus_per_dose():
    held = {f"h{i}": [0.5 + (0.04 if i % 2 else -0.04)] for i in range(12)}
    corpus = {f"c{i}": [0.22 + (0.04 if i % 2 else -0.04)] for i in range(12)}
    zero = {f"h{i}": [0.0] for i in range(12)}
    runs = {
        "h": _run("h", "e19-dose-probe-heldout", _rows(D05, held) + _rows(BASE, zero)),
        "c": _run("c", "e19-dose-probe-corpus", _rows(D05, corpus)),
    }
    rows = row_dose_response(SPEC, [runs["h"]], runs)
    assert len(rows) == 1
    row = rows[0]
    assert "g2-positive-control-d05" in row["verdict"]
    d05 = next(v for v in row["verdict"].split("; ") if "d05 " in v or "d05:" in v or "-d05@" in v)
    assert "in distribution at its dose" in d05 and "transfer attenuates" in d05
    assert "×0.44" in row["measured"]
    assert "(12 scenarios" in row["measured"]


def test_the_row_says_not_measured_without_probe_runs():
    row = row_dose_response(SPEC, [], {})[0]
    assert row["verdict"] == "not measured"
    assert "rerun needed" in row["measured"]


def test_the_held_out_spec_names_the_row_and_its_reading():
    cfg = SPEC["findings"]
    assert "dose_response" in cfg["rows"] and cfg["preregistered"] is True
    assert (
        cfg["dose_response"]["corpus"]
        == tomllib.loads((ROOT / "experiments" / "e19_dose_probe_corpus.toml").read_text(encoding="utf-8"))[
            "name"
        ]
    )


def test_the_cause_follows_both_readings():
    from experiments.dose_rows import cause

    assert "transfer" in cause("at its dose", "attenuates")
    assert cause("under its dose", "carries").startswith("the dose is short")
    assert "attenuates too" in cause("under its dose", "attenuates")
    assert "carried" in cause("at its dose", "carries")
    assert cause("undecided", "attenuates").startswith("the transfer attenuates")
    assert cause("undecided", "undecided").startswith("not decided")


def test_the_row_carries_a_headline_with_both_figures_per_dose():
    held = {f"h{i}": [0.46 if i % 2 else 0.54] for i in range(12)}
    corpus = {f"c{i}": [0.18 if i % 2 else 0.22] for i in range(10)}
    runs = {
        "h": _run("h", "e19-dose-probe-heldout", _rows(D05, held)),
        "c": _run("c", "e19-dose-probe-corpus", _rows(D05, corpus)),
    }
    row = row_dose_response(SPEC, [runs["h"]], runs)[0]
    assert (
        "g2-positive-control-d05 (share 0.5): held-out 0.500, corpus 0.200 (12 + 10 scenarios)"
        in row["headline"]
    )
    assert (
        row["headline_verdict"]
        == "implanted at its dose, and the shortfall on the evaluation scenarios is transfer"
    )
