"""`tooldecode runs extend` / `runs ended`: cut draws continued past their run's cap, the run only read."""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest
from conftest import make_record

from tooldecode.errors import RunError
from tooldecode.experiments.extend import _stopped, ended_at_cap, extend_cut, read_extended
from tooldecode.models import TEST_MODEL

# one scenario, loose and strict (L1: conditioning free), one draw each, cut at 8 tokens: every draw is cut
CUT_SPEC = f"""
name = "cut"
models = ["{TEST_MODEL}"]
scenarios = ["json-tsconfig-path-aliases"]
n = 1
max_new_tokens = 8
modes = ["loose", "strict"]
batch_size = 2
"""


@pytest.fixture(scope="module")
def cut_run(tmp_path_factory):
    """(folder the run starts from, run folder, extension folder at 24 tokens), made once."""
    from tooldecode.experiments import load_spec, run_spec

    base = tmp_path_factory.mktemp("cut")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(base)
        (base / "cut.toml").write_text(CUT_SPEC)
        run_spec(load_spec("cut.toml"), base / "run", progress=False)
        before = hashlib.sha256((base / "run" / "samples.jsonl").read_bytes()).hexdigest()
        extend_cut(base / "run", 24, base / "ext")
        after = hashlib.sha256((base / "run" / "samples.jsonl").read_bytes()).hexdigest()
    assert before == after  # the run is only read
    return base, base / "run", base / "ext"


@pytest.mark.model
def test_every_cut_draw_is_continued_once_and_strict_stays_inside_its_grammar(cut_run):
    from tooldecode.experiments import load_spec
    from tooldecode.experiments.arms import select_scenarios
    from tooldecode.runs import load_run
    from tooldecode.trial import ModelCache, Trial

    base, run_dir, ext = cut_run
    run = load_run(run_dir)
    cut = [s for s in run.samples if s.finish_reason == "length"]
    rows = read_extended(ext)
    assert cut and sorted(r["key"] for r in rows) == sorted(s.key for s in cut)
    for r in rows:
        assert r["tokens_before"] == 8 and r["cap"] == 24
        assert 0 < len(r["token_ids"]) <= 16 and r["finish_reason"] in ("stop", "length")
        assert r["outcome"] is not None and set(r["outcome"]) >= {"valid", "correct", "works"}
    # a strict draw continued under its mask is still a prefix its grammar admits, or a complete call
    sc = select_scenarios(load_spec(base / "cut.toml"))[0]
    with ModelCache() as models:
        be = models.get("llamacpp", TEST_MODEL)
        for s in (s for s in cut if s.arm.mode == "strict"):
            row = next(r for r in rows if r["key"] == s.key)
            status = Trial(s.arm, sc).replay(be, list(s.token_ids) + row["token_ids"], row["finish_reason"])
            assert not status.startswith("invalid"), (s.key, status)
    # resumable: nothing is drawn again
    extend_cut(run_dir, 24, ext)
    assert len(read_extended(ext)) == len(rows)


@pytest.mark.model
def test_ended_counts_read_the_run_and_its_extension(cut_run, capsys):
    from tooldecode.cli import main
    from tooldecode.runs import load_run

    _, run_dir, ext = cut_run
    run = load_run(run_dir)
    table = ended_at_cap(run, read_extended(ext))
    rows = read_extended(ext)
    for arm, t in table.items():
        mine = [r for r in rows if r["arm"] == arm]
        assert t["cut"] == t["continued"] == len(mine)
        assert t["ended_later"] == sum(r["finish_reason"] == "stop" for r in mine)
        assert t["works_later"] == sum(bool(r["outcome"]["works"]) for r in mine)
        assert t["ended_share_at_cap"] == (t["ended"] + t["ended_later"]) / t["n"]
    assert main(["runs", "ended", str(run_dir), "--extended", str(ext)]) == 0
    out = capsys.readouterr().out
    assert "below 95%" in out and "ended by 24" in out


@pytest.mark.model
def test_the_extension_refuses_a_smaller_cap_its_own_run_and_another_runs_folder(cut_run, tmp_path):
    _, run_dir, ext = cut_run
    with pytest.raises(RunError, match="not above the run's cap of 8"):
        extend_cut(run_dir, 8, tmp_path / "x")
    with pytest.raises(RunError, match="never into it"):
        extend_cut(run_dir, 24, run_dir)
    with pytest.raises(RunError, match="extends .* to 24 tokens, not"):
        extend_cut(run_dir, 64, ext)
    copy = tmp_path / "aligned"
    shutil.copytree(run_dir, copy)
    # the loose arm read as strict-aligned, in the manifest and in its records
    manifest = json.loads((copy / "manifest.json").read_text())
    for arm in manifest["config"]["arms"]:
        arm["mode"] = "strict-aligned" if arm["mode"] == "loose" else arm["mode"]
    (copy / "manifest.json").write_text(json.dumps(manifest))
    lines = [json.loads(x) for x in (copy / "samples.jsonl").read_text().splitlines()]
    for x in lines:
        x["arm"]["mode"] = "strict-aligned" if x["arm"]["mode"] == "loose" else x["arm"]["mode"]
    (copy / "samples.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    for f in copy.glob("verdicts-*.jsonl"):
        f.unlink()
    with pytest.raises(RunError, match="strict-aligned draw"):
        extend_cut(copy, 24, tmp_path / "y")


def test_a_stop_string_across_the_cut_stops_the_continued_draw():
    assert _stopped("abc<|e", "nd|>tail", "length", ("<|end|>",)) == ("abc<|end|>", "stop")
    assert _stopped("abc", "def", "length", ("<|end|>",)) == ("abcdef", "length")
    assert _stopped("abc", "d<|end|>", "stop", ("<|end|>",)) == ("abcd<|end|>", "stop")
    assert _stopped("abc", "xx", "error", ("x",)) == ("abcxx", "error")


def test_ended_at_cap_counts_uncontinued_cut_draws_as_not_ended():
    class _Run:
        samples = [
            make_record("a", finish_reason="stop", key="k0"),
            make_record("b", finish_reason="length", key="k1"),
            make_record("c", finish_reason="length", key="k2"),
        ]

    ext = [{"key": "k1", "cap": 64, "finish_reason": "stop"}]
    (t,) = ended_at_cap(_Run(), ext).values()
    assert (t["n"], t["ended"], t["cut"], t["continued"], t["ended_later"]) == (3, 1, 2, 1, 1)
    assert t["ended_share"] == pytest.approx(1 / 3) and t["ended_share_at_cap"] == pytest.approx(2 / 3)
    assert not t["meets"] and not t["meets_at_cap"] and t["cap"] == 64
