"""Distortion figures on a stored run (E13: loose, strict-spec and strict arms of Qwen2.5-Coder 0.5B),
the grammar replay of its loose samples, and the `tooldecode distortion` command."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import make_sample

from tooldecode.cli import main
from tooldecode.distortion import (
    DistortionError,
    analyse_run,
    boot_counts,
    closing_quote,
    continuation,
    mixture_weights,
    reference_validity,
    sample_log_weight,
)
from tooldecode.sampling import log_weight

E13 = Path(__file__).resolve().parent.parent / "runs" / "e13-open-grammar"


@pytest.fixture()
def e13_copy(tmp_path: Path) -> Path:
    """The E13 raw files in a scratch directory (no derived files: nothing cached)."""
    out = tmp_path / "e13"
    out.mkdir()
    for name in ("manifest.json", "samples.jsonl"):
        shutil.copy(E13 / name, out / name)
    return out


def test_log_weight():
    assert log_weight([0.0, 0.0]) == 0.0
    assert log_weight([0.5, 0.75]) == pytest.approx(math.log(0.5) + math.log(0.25))
    assert log_weight([1.0]) == -math.inf
    assert log_weight([1.0], floor=1e-5) == pytest.approx(math.log(1e-5))
    lw, censored = sample_log_weight({"key": "k", "mask_removed": [0.1, 1.0, 0.99999]})
    assert censored == 1 and lw == pytest.approx(math.log(0.9) + math.log(5e-6) + math.log(1e-5))
    with pytest.raises(DistortionError, match="no mask_removed"):
        sample_log_weight({"key": "k", "mask_removed": None})


def test_continuation_classes():
    assert continuation('"}]}}') == "close"
    assert continuation('", "x": 1}') == "continue"
    assert continuation('\\nmore"}]}}') == "string goes on"
    assert closing_quote('ab\\"c"d') == 5 and closing_quote("abc") is None


def test_analyse_stored_run_without_reference(e13_copy: Path):
    res = {r.mode: r for r in analyse_run(e13_copy, validity=None, n_boot=400)}
    assert set(res) == {"strict", "strict-spec"}
    r = res["strict"]
    assert r.n == 96 and r.n_scenarios == 12
    assert 0.0 < r.p_valid.lo <= r.p_valid.point <= r.p_valid.hi < 1.0
    assert r.kl_q_pl.point > 0 and r.kl_pl_q.point > 0
    assert 1.0 <= r.ess <= r.n
    # E13's stored weights are censored (a kept mass below the rounding resolution): KL is a lower bound
    assert r.n_censored > 0 and r.kl_q_pl.bound == "lower bound"
    assert r.rates_q["invented key"].point == 0.0  # the closed grammar never lets one through
    total = sum(r.rates_pl[k].point for k in ("close", "string goes on"))
    assert 0.0 < total <= 1.0 + 1e-9
    assert not r.checks and any("not replayed" in n for n in r.notes)


def test_refuses_other_temperatures(e13_copy: Path):
    lines = (e13_copy / "samples.jsonl").read_text().splitlines()
    out = []
    for line in lines:
        rec = json.loads(line)
        rec["arm"]["temperature"] = 0.7
        out.append(json.dumps(rec))
    (e13_copy / "samples.jsonl").write_text("\n".join(out) + "\n")
    with pytest.raises(DistortionError, match="temperature 0.7"):
        analyse_run(e13_copy, n_boot=100)


@pytest.mark.slow
@pytest.mark.model
def test_reference_replay_and_instrument_check(e13_copy: Path, llama_qwen):
    """Loose samples replayed through each masked arm's grammar; E_Q[w] of the strict arm agrees with
    the loose grammar-valid rate (the first instrument check)."""
    validity = reference_validity(e13_copy, backend=llama_qwen)
    assert set(validity) == {"strict", "spec"}
    strict = validity["strict"]
    assert len(strict) == 96
    assert all(
        s in ("valid", "valid-prefix", "stop-string") or s.startswith("invalid@") for s in strict.values()
    )
    # a closed grammar accepts no more than the open one
    assert sum(s.startswith("valid") for s in strict.values()) <= sum(
        s.startswith("valid") for s in validity["spec"].values()
    )
    assert (e13_copy / "reference-validity.json").exists()
    res = {r.mode: r for r in analyse_run(e13_copy, validity=validity, n_boot=1000)}
    check = next(c for c in res["strict"].checks if c.name == "p_valid")
    assert check.n_reference == 96 and check.agree, check


def test_cli_text_and_json(e13_copy: Path, capsys):
    assert main(["distortion", str(e13_copy), "--no-reference", "--n-boot", "200"]) == 0
    out = capsys.readouterr().out
    for word in ("p_valid:", "kl_q_pl:", "ess:", "mode=strict,"):
        assert word in out
    assert main(["distortion", str(e13_copy), "--no-reference", "--n-boot", "200", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {d["mode"] for d in data} == {"strict", "strict-spec"}
    assert all(d["p_valid"]["lo"] <= d["p_valid"]["point"] <= d["p_valid"]["hi"] for d in data)


def test_cli_bad_directory(tmp_path: Path, capsys):
    assert main(["distortion", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert "not a run directory" in err and len(err.strip().splitlines()) == 1


def test_mixture_weights_weight_each_scenario_by_its_p_valid():
    """Aligned samples are exact draws of their own scenario's P_L; the run's P_L is the mixture that
    weights scenario s by P_s(valid): scenario a (p̂ 0.5, two samples) against b (p̂ 0.1, one sample)."""
    log_w = np.log(np.array([0.4, 0.6, 0.05, 0.15]))  # first-round particle weights: means 0.5 and 0.1
    w_clusters = ["a", "a", "b", "b"]
    clusters = ["a", "a", "b"]  # the aligned samples' scenarios
    names, counts = boot_counts(clusters, 50, 0)
    stats = mixture_weights(log_w, w_clusters, clusters, names, counts)
    f = np.array([1.0, 0.0, 1.0])  # a: half its samples; b: all
    point, reps = stats.self_normalised(f)
    assert point == pytest.approx((0.5 * 0.5 + 0.1 * 1.0) / 0.6)
    # a replicate that draws only scenario b gives b's rate; only a, a's
    only_b = counts[:, names.index("a")] == 0
    if only_b.any():
        assert reps[only_b] == pytest.approx(1.0)
    # a scenario whose particles all have weight 0 gets no mass
    dead = mixture_weights(np.log(np.array([0.5, 0.5, 1e-300, 1e-300])), w_clusters, clusters, names, counts)
    assert dead.self_normalised(f)[0] == pytest.approx(0.5, abs=1e-6)


def test_cap_rule_and_length_profile():
    from tooldecode.distortion.caps import cap_rule, length_profile

    # the 99th percentile of 1..100 is 99.01; ×1.5 = 148.5 → 256 (the smallest power of two above)
    assert cap_rule(list(range(1, 101))) == 256
    assert cap_rule([10] * 50) == 16  # 15 → 16
    assert cap_rule([64]) == 128 and cap_rule([1]) == 2
    with pytest.raises(ValueError, match="pilot"):
        cap_rule([])
    recs = [{"token_ids": [0] * k, "finish_reason": "stop", "error": None} for k in (5, 7, 9)]
    recs += [{"token_ids": [0] * 16, "finish_reason": "length", "error": None}]
    recs += [{"token_ids": [], "finish_reason": "error", "error": "grammar dead end"}]
    p = length_profile(recs, cap=16)
    assert (p.n, p.n_cut, p.n_error, p.longest, p.cap) == (5, 1, 1, 9, 16)
    assert p.ended == 0.75 and p.p50 == 7.0


def test_remedy_rows_retry_repair_and_masked_arms(tmp_path):
    """loose+retry uses the next loose samples of the scenario while the call fails validation (counting
    retries), loose+repair drops the invented key, masked arms are their own remedy; all are scored by
    whether the edit works."""
    from tooldecode.distortion.remedies import format_remedies, remedy_rows, remedy_table
    from tooldecode.runs import RunStore, build_manifest

    d = tmp_path / "scenarios"
    d.mkdir()
    doc = {
        "id": "t-two",
        "language": "ini",
        "title": "t",
        "path": "a.ini",
        "content": "a = 1\nb = 2\n",
        "task": "t",
        "diagnosis": "d",
        "edits": [{"oldText": "a = 1", "newText": "a = 10"}],
        "expected": "a = 10\nb = 2\n",
    }
    (d / "t-two.json").write_text(json.dumps(doc))

    def rec(mode, i, item, finish="stop", timing=None, **arm):
        args = {"path": "a.ini", "edits": [item]}
        text = "<tool_call>\n" + json.dumps({"name": "edit", "arguments": args}) + "\n</tool_call>"
        return make_sample(
            text,
            arm={"mode": mode, "level": "L1", "model": "m", "toolset": "nested", "wire": "hermes", **arm},
            key=f"{mode}/t-two/0/{i}",
            scenario="t-two",
            index=i,
            token_ids=[1] * 10,
            finish_reason=finish,
            timing=timing or {"end_s": 1.0},
        )

    good = {"oldText": "a = 1", "newText": "a = 10"}
    invented = {**good, "replaceAll": False}
    wrong = {"oldText": "a = 1", "newText": "a = 11"}
    loose = [rec("loose", i, it) for i, it in enumerate([invented, invented, good, invented, wrong, good])]
    masked = [
        rec("strict", 0, wrong),
        rec("strict-prefix", 0, good),
        rec("strict", 1, good, engine="llguidance-json"),
    ]
    store = RunStore.create(tmp_path / "run", build_manifest({"scenario_dirs": [str(d)]}))
    store.append(loose + masked)
    store.close()
    rows = remedy_rows(tmp_path / "run")
    by = {}
    for r in rows:
        by.setdefault(r["remedy"], []).append(r)
    assert [r["valid"] for r in by["loose"]] == [False, False, True, False, True, True]
    assert all(r["valid"] and r["works"] for i, r in enumerate(by["loose+repair"]) if i != 4)
    assert not by["loose+repair"][4]["correct"]  # repair cannot fix a wrong newText
    # calls: [0 -> 1 -> 2] (2 retries, works), [3 -> 4] (1 retry, valid but wrong), [5] (works)
    assert [(r["retries"], r["works"], r["wrong_but_valid"]) for r in by["loose+retry"]] == [
        (2, True, False),
        (1, False, True),
        (0, True, False),
    ]
    assert by["loose+retry"][0]["tokens"] == 30
    assert by["strict"][0]["wrong_but_valid"] and by["strict-prefix"][0]["works"]
    assert by["strict[llguidance-json]"][0]["works"]
    table = remedy_table(rows)
    retry = next(t for t in table if t["remedy"] == "loose+retry")
    assert retry["n"] == 3 and retry["retries_per_call"] == 1.0 and retry["all"]["works"].k == 2
    assert "| m | L1 | loose+retry | 3 |" in format_remedies(table)
    # 6 loose calls of one call at end_s 1.0: 1/6 s each, 6 calls/s; a draw of 8 filled slots that held
    # its slot 3 s after a 1 s prefill counts 0.5 s
    assert next(t for t in table if t["remedy"] == "loose")["calls_per_s"] == pytest.approx(6.0)
    filled = rec("strict", 2, good, timing={"prefill_s": 1.0, "start_s": 10.0, "end_s": 13.0, "slots": 8})
    store = RunStore.create(tmp_path / "filled", build_manifest({"scenario_dirs": [str(d)]}))
    store.append([filled])
    store.close()
    (one,) = remedy_rows(tmp_path / "filled")
    assert one["wall"] == pytest.approx(0.5)
    # strict-aligned: walks per call and acceptance (accepted samples over walks); an error record whose
    # walks ran out counts its walks and no acceptance
    aligned = [
        make_sample(
            r["text"],
            arm=r["arm"],
            key=f"strict-aligned/t-two/0/{i}",
            scenario="t-two",
            index=i,
            token_ids=[1] * 10,
            timing={"end_s": 1.0},
            particles={"method": "adaptive", "drawn": drawn},
            error=error,
            finish_reason="error" if error else "stop",
        )  # fmt: skip
        for i, (drawn, error) in enumerate([(3, None), (1, None), (8, "no walk accepted within 8")])
        for r in [rec("strict-aligned", i, good)]
    ]
    store = RunStore.create(tmp_path / "aligned", build_manifest({"scenario_dirs": [str(d)]}))
    store.append(aligned)
    store.close()
    (t,) = remedy_table(remedy_rows(tmp_path / "aligned"))
    assert t["walks_per_call"] == pytest.approx(4.0) and t["acceptance"] == pytest.approx(2 / 12)
    # the abandoned call is no call: cut by the sampler's budget, never valid, out of the completed rates
    assert t["abandoned"] == 1 and t["n"] == 3
    assert t["all"]["cut"].k == 1 and t["all"]["valid"].k == 2 and t["completed"]["correct"].n == 2
    assert "| 4.0 (16.7%; 1 abandoned at the budget) |" in format_remedies([t])
    assert format_remedies(table).count("| — |") == len(table)


def test_no_reference_says_the_reference_was_not_replayed(capsys):
    """--no-reference replays nothing, so it must not print a count of valid reference samples."""
    from tooldecode.cli import main

    run = Path(__file__).resolve().parents[1] / "runs" / "e14-distortion-qwen0.5b-streams"
    assert main(["distortion", str(run), "--no-reference", "--n-boot", "50"]) == 0
    out = capsys.readouterr().out
    assert "not replayed (--no-reference)" in out and "loose samples valid" not in out
