"""Runs of one spec made model by model read as one run (tooldecode.runs.combine).

A committed two-model run is split into two one-model folders, as ``tooldecode run SPEC --model M``
writes them; the combined run must hold the same draws and judge a claimed effect between the two
models exactly as the original run does.
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest

from tooldecode.report.claims import evaluate_effect
from tooldecode.runs import load_run, model_split_runs

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "runs" / "e16-positive-control"
ORGANISM = "organism:positive-control@qwen2.5-coder-0.5b-instruct"
BASE = "qwen2.5-coder-0.5b-instruct"
EFFECT = {
    "label": "implanted key, organism vs base",
    "level": "L2",
    "measure": "extra_key",
    "a": {"model": ORGANISM, "mode": "loose"},
    "b": {"model": BASE, "mode": "loose"},
    "scale": "difference",
    "size": 0.1,
    "bound": "at least",
}


def _split(tmp: Path, model: str, name: str, *, sha: str | None = None) -> Path:
    """A one-model folder made from RUN: the model's arms, samples and verdicts."""
    manifest = json.loads((RUN / "manifest.json").read_text(encoding="utf-8"))
    out = tmp / name
    out.mkdir()
    m = copy.deepcopy(manifest)
    m["config"]["arms"] = [a for a in manifest["config"]["arms"] if a["model"] == model]
    m["model"] = manifest["model"][model]
    m["command"] = f"tooldecode run experiments/e16_positive_control.toml --model {model} --out runs/{name}"
    if sha is not None:
        m["tooldecode"]["git_sha"] = sha
    (out / "manifest.json").write_text(json.dumps(m, indent=2) + "\n", encoding="utf-8")
    for file in ["samples.jsonl", *(p.name for p in RUN.glob("verdicts-*.jsonl"))]:
        lines = (RUN / file).read_text(encoding="utf-8").splitlines(keepends=True)
        keep = [ln for ln in lines if json.loads(ln).get("key", "").split(",")[0] == _short(model)]
        (out / file).write_text("".join(keep), encoding="utf-8")
    return out


def _short(model: str) -> str:
    return {BASE: "qwen-0.5b"}.get(model, model.replace("qwen2.5-coder-", "qwen-").replace("-instruct", ""))


@pytest.fixture(scope="module")
def whole():
    if not (RUN / "manifest.json").is_file():
        pytest.skip("runs/e16-positive-control is not in this checkout")
    return load_run(RUN)


def test_split_runs_combine_into_the_same_draws_and_the_same_verdict(tmp_path, whole):
    parts = [load_run(_split(tmp_path, m, n)) for m, n in [(BASE, "pc-base"), (ORGANISM, "pc-organism")]]
    assert all(len(p.samples) == len(whole.samples) // 2 for p in parts)
    [combined] = model_split_runs(parts)
    assert combined.name == "pc-base + pc-organism"
    assert [p.name for p in combined.parts] == ["pc-base", "pc-organism"]
    assert sorted(s.key for s in combined.samples) == sorted(s.key for s in whole.samples)
    assert combined.git_sha == whole.git_sha and combined.git_dirty is False
    # neither part pairs both arms: the effect is judged on the combined run, exactly as on the whole
    alone = evaluate_effect(EFFECT, {p.name: p for p in parts})
    ref = evaluate_effect(EFFECT, {"whole": whole})
    assert alone is not None and ref is not None
    assert alone.run.name == "pc-base + pc-organism"
    assert (alone.cmp, alone.verdict, alone.draws) == (ref.cmp, ref.verdict, ref.draws)


def test_runs_that_differ_in_more_than_their_models_or_share_a_model_stay_apart(tmp_path, whole):
    base = load_run(_split(tmp_path, BASE, "a"))
    org = _split(tmp_path, ORGANISM, "b")
    other = json.loads((org / "manifest.json").read_text(encoding="utf-8"))
    other["config"]["max_new_tokens"] += 1
    (org / "manifest.json").write_text(json.dumps(other), encoding="utf-8")
    assert model_split_runs([base, load_run(org)]) == []
    twice = tmp_path / "c"
    shutil.copytree(tmp_path / "a", twice)
    assert model_split_runs([base, load_run(twice)]) == []  # one model run twice is two measurements
    assert model_split_runs([base]) == []


def test_parts_from_two_commits_name_both(tmp_path, whole):
    parts = [
        load_run(_split(tmp_path, BASE, "a", sha="1" * 40)),
        load_run(_split(tmp_path, ORGANISM, "b", sha="2" * 40)),
    ]
    [combined] = model_split_runs(parts)
    assert combined.git_sha == "1" * 40 + "+" + "2" * 40
    assert [p.git_sha for p in combined.parts] == ["1" * 40, "2" * 40]


# --------------------------------------------------------------------------------------------- probe runs

PROBE = ROOT / "runs" / "e19-dose-probe-corpus"
PROBE_D10 = ROOT / "runs" / "e19-dose-probe-corpus-d10"
HELDOUT = ROOT / "runs" / "e19-dose-probe-heldout"
D015 = "organism:g2-positive-control-d015@qwen2.5-coder-0.5b-instruct"
D05 = "organism:g2-positive-control-d05@qwen2.5-coder-0.5b-instruct"
D10 = "organism:g2-positive-control-d10@qwen2.5-coder-0.5b-instruct"


def _l3_effect(a: str, b: str) -> dict:
    return {
        "label": "P(reviewed) after newText, one dose vs another",
        "level": "L3",
        "measure": "key:reviewed",
        "a": {"model": a},
        "b": {"model": b},
        "scale": "ratio",
        "size": 1,
        "bound": "at least",
    }


@pytest.fixture(scope="module")
def probes():
    if not all((p / "manifest.json").is_file() for p in (PROBE, PROBE_D10, HELDOUT)):
        pytest.skip("the dose probes' runs are not in this checkout")
    return load_run(PROBE), load_run(PROBE_D10), load_run(HELDOUT)


def test_an_exact_effect_between_two_models_reads_each_arms_own_rows(probes):
    from tooldecode.measures import l3_values
    from tooldecode.stats import paired_clusters

    corpus, _, _ = probes
    res = evaluate_effect(_l3_effect(D05, D015), {"corpus": corpus})
    assert res is not None and res.run.name == corpus.name
    va = l3_values(corpus.probe, "key:reviewed", model=D05)
    vb = l3_values(corpus.probe, "key:reviewed", model=D015)
    assert len(va) == len(vb) == 36 and va != vb
    ref = paired_clusters(va, vb)
    assert (res.cmp.mean_a, res.cmp.mean_b, res.cmp.g) == (ref.mean_a, ref.mean_b, 36)
    assert res.draws == sum(1 for r in corpus.probe if r.after == "newText" and r.model in (D05, D015))


def test_probe_only_runs_made_model_by_model_read_as_one(probes):
    corpus, d10, heldout = probes
    assert not corpus.samples and not d10.samples  # probe-only: nothing drawn, no streams to share
    [combined] = model_split_runs([corpus, d10, heldout])  # the held-out run has other scenarios: apart
    assert [p.name for p in combined.parts] == [corpus.name, d10.name]
    assert len(combined.probe) == len(corpus.probe) + len(d10.probe)
    # neither folder has both arms; the combined run judges the effect
    assert evaluate_effect(_l3_effect(D10, D05), {corpus.name: corpus}) is None
    res = evaluate_effect(_l3_effect(D10, D05), {corpus.name: corpus, d10.name: d10})
    assert res is not None and res.run.parts == combined.parts
    assert res.cmp.mean_a > res.cmp.mean_b > 0  # the full implant above the half one, as the dose rows read
