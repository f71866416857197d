"""tooldecode.records: every committed run's records read into the types and back unchanged; one label,
one draw identity; a leaf module."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from tooldecode.records import (
    MODES,
    STRICT_MODES,
    Condition,
    OfferedTool,
    ProbeRow,
    RecordError,
    SampleRecord,
    VerdictRecord,
    draw_key,
    label,
)

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "runs"
FILES = (("samples.jsonl", SampleRecord), ("verdicts-*.jsonl", VerdictRecord), ("probe.jsonl", ProbeRow))


def _lines(pattern: str):
    for path in sorted(RUNS.glob(f"*/{pattern}")):
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if line.strip():
                yield f"{path.relative_to(ROOT)}:{n}", line


@pytest.mark.parametrize(("pattern", "cls"), FILES, ids=[p for p, _ in FILES])
def test_every_committed_record_round_trips(pattern, cls):
    """Each line reads into its type and ``to_json`` gives the same dict back, keys in the same order."""
    count, levels = 0, set()
    for where, line in _lines(pattern):
        stored = json.loads(line)
        rec = cls.from_json(stored)
        back = rec.to_json()
        assert back == stored, where
        assert list(back) == list(stored), where
        assert cls.from_json(back) == rec, where
        if cls is SampleRecord:  # ``label`` rebuilds the arm part of every stored key from the arm alone
            assert label(rec.arm) == rec.label == rec.key.rsplit("/", 3)[0], where
            assert rec.arm.mode in MODES, where
            levels.add(rec.arm.level)
        count += 1
    assert count > 0, f"no committed {pattern} under runs/"
    assert cls is not SampleRecord or levels >= {"L0", "L2"}


def test_every_committed_run_loads_through_the_one_loader():
    """``tooldecode.runs.load_run`` reads every committed run and hands on typed records: each sample a
    ``SampleRecord`` with the tools its prompt showed, each verdict a ``VerdictRecord`` (the committed
    verdict files are current, so nothing is rewritten), each probe row a ``ProbeRow``."""
    from tooldecode.runs import load_runs

    runs = load_runs(RUNS)
    committed = {p.parent.name for p in RUNS.glob("*/manifest.json")}
    assert set(runs) == committed and committed
    sampled = 0
    for name, run in runs.items():
        assert not run.verdicts_written, name
        assert all(isinstance(r, SampleRecord) and r.tools for r in run.samples), name
        assert all(isinstance(v, VerdictRecord) for v in run.verdicts.values()), name
        assert set(run.verdicts) == {r.key for r in run.samples}, name
        assert all(run.verdicts[r.key].arm == r.arm for r in run.samples), name
        assert all(isinstance(p, ProbeRow) for p in run.probe)
        # streams are the run's: a sample has a stream exactly when its run drew per-scenario streams
        assert all((r.stream is None) == run.shared_streams for r in run.samples), name
        sampled += bool(run.samples)
        if run.samples:
            assert run.verdict_file is not None and run.verdict_file.is_file(), name
    assert sampled and sampled < len(runs)  # sampled runs and probe-only runs alike


def test_every_committed_verdict_is_what_the_current_scorer_gives():
    """Each committed ``verdicts-<SCORER_VERSION>.jsonl`` line equals a scoring of its raw sample now: a
    change to the verdict logic that leaves ``SCORER_VERSION`` alone fails here (the loader trusts a
    verdict file that covers the run's keys, so a stale one would go on being read)."""
    from tooldecode.runs import RunStore, score_stored
    from tooldecode.scoring import SCORER_VERSION

    files = sorted(RUNS.glob(f"*/verdicts-{SCORER_VERSION}.jsonl"))
    assert files and sorted(RUNS.glob("*/verdicts-*.jsonl")) == files, "a verdict file of another scorer"
    for path in files:
        store = RunStore.open(path.parent)
        stored = {v["key"]: v for v in map(json.loads, path.read_text(encoding="utf-8").splitlines())}
        for smp in store.sample_records():
            now = {"key": smp["key"], **score_stored(smp, store.manifest)}
            assert now == stored[smp["key"]], f"{path.relative_to(ROOT)}: {smp['key']}"
            assert list(now) == list(stored[smp["key"]]), f"{path.relative_to(ROOT)}: key order"


def _sample(**over):
    arm = {"model": "qwen2.5-coder-0.5b-instruct", "backend": "llamacpp", "mode": "strict"}
    arm.update(temperature=1.0, history="agentic", level="L2", engine="xgrammar", wire="call-json")
    arm.update(over.pop("arm", {}))
    rec = {
        "key": f"{label(arm)}/sc/0/{over.get('index', 0)}",
        "arm": arm,
        "scenario": "sc",
        "seed": 0,
        "stream": 7,
        "index": 0,
        "prompt_sha256": "ab" * 32,
        "prefill": '{"name": "edit", "arguments": {',
        "text": '"path": "a"}}',
        "token_ids": [1, 2],
        "logprobs": [-0.1, -0.2],
        "top": None,
        "entropy": None,
        "entropy_masked": None,
        "mask_removed": None,
        "finish_reason": "stop",
        "error": None,
        "timing": {},
    }
    rec.update(over)
    return rec


def test_draw_key_separates_draws_and_joins_copies():
    base = draw_key(_sample())
    # an arm that differs only in a label field with the same prompt bytes draws the same samples
    assert draw_key(_sample(arm={"history": "fresh"})) == base
    assert draw_key(_sample(arm={"duplicates": "forbid"})) == base  # the default, spelled out
    for change in ({"seed": 1}, {"index": 1}, {"stream": 8}, {"prompt_sha256": "cd" * 32}):
        assert draw_key(_sample(**change)) != base, change
    for arm in ({"mode": "loose"}, {"engine": "llguidance"}, {"duplicates": "admit"}, {"temperature": 0.7}):
        assert draw_key(_sample(arm=arm)) != base, arm
    # at temperature 0 the tokens decide: other seeds with the same output are one draw
    greedy = {"temperature": 0.0}
    assert draw_key(_sample(arm=greedy, seed=3)) == draw_key(_sample(arm=greedy, seed=4))
    assert draw_key(_sample(arm=greedy, token_ids=[9])) != draw_key(_sample(arm=greedy))


def test_offered_tools_and_new_fields_round_trip():
    tools = [{"name": "edit", "parameters": {"type": "object"}, "description": "Edit a file"}]
    stored = _sample(tools=tools, copy_of="x/sc/0/0", future_field={"a": 1})
    rec = SampleRecord.from_json(stored)
    assert rec.tools == (OfferedTool("edit", {"type": "object"}, "Edit a file"),)
    assert rec.extra == {"future_field": {"a": 1}} and rec.copy_of == "x/sc/0/0"
    assert rec.to_json() == stored and rec.call_text.endswith('"a"}}')
    assert rec.arm.strict and rec.arm.mode in STRICT_MODES
    bare = _sample()
    assert "tools" not in SampleRecord.from_json(bare).to_json()


def test_skipped_and_scored_verdicts():
    head = {"key": "k", "scorer": "s1", "arm": _sample()["arm"], "scenario": "sc"}
    skipped = {**head, "verdict": None, "skipped": "MaskError: dead end"}
    assert VerdictRecord.from_json(skipped).to_json() == skipped
    scored = dict(head, verdict="no_call", flags=[], tool=None, wrapping=None, invented_keys=[], errors=[])
    scored.update(payload=None, arguments=None, shape=None, n_calls=0, duplicate_keys=[])
    v = VerdictRecord.from_json(scored)
    assert v.tool is None and v.n_calls == 0 and v.extra == {}
    assert v.to_json() == scored
    with pytest.raises(RecordError, match="missing field"):
        VerdictRecord.from_json({k: x for k, x in scored.items() if k != "n_calls"})


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"seed": "0"}, "field 'seed' is str"),
        ({"arm": {"model": "m", "backend": "b", "mode": "loose", "temperature": True}}, "temperature"),
        ({"text": None}, "field 'text' is NoneType"),
    ],
)
def test_a_malformed_record_is_a_one_line_error(change, match):
    with pytest.raises(RecordError, match=match) as err:
        SampleRecord.from_json(_sample(**change))
    assert "\n" not in str(err.value)
    stored = _sample()
    del stored["prefill"]
    with pytest.raises(RecordError, match="missing field.*prefill"):
        SampleRecord.from_json(stored)
    with pytest.raises(RecordError, match="not JSON"):
        SampleRecord.from_line('{"key": ')


def test_condition_label_defaults_stay_out():
    arm = Condition("gemma-3-270m", "llamacpp", "strict-spec", 1.0, level="L0", duplicates="admit")
    assert arm.label() == "gemma-3-270m,L0,strict-spec,temperature=1.0,duplicates=admit"
    extra = Condition("m", "llamacpp", "loose", 1.0, schema_extra={"b": 1, "a": 2})
    assert extra.label() == 'm,loose,temperature=1.0,extra={"a":2,"b":1}'


def test_records_is_a_leaf():
    """tooldecode.records imports the standard library and tooldecode.errors only."""
    tree = ast.parse((ROOT / "tooldecode" / "records.py").read_text(encoding="utf-8"))
    mods = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    mods |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    ours = {m for m in mods if m.split(".")[0] == "tooldecode"}
    assert ours == {"tooldecode.errors"}, ours
    import sys

    stdlib = sys.stdlib_module_names | {"__future__"}
    assert {m.split(".")[0] for m in mods - ours} <= stdlib, mods - ours


def test_a_run_made_by_the_retired_suite_script_reads_as_todays_command():
    from tooldecode.runs import load_run

    run = load_run(Path(__file__).resolve().parents[1] / "runs" / "p2-transcript-variants-qwen0.5b")
    assert run.manifest["command"].startswith("python scripts/probe_suite.py ")  # the raw manifest is kept
    assert run.command() == run.manifest["command"].replace(
        "python scripts/probe_suite.py", "tooldecode probe-suite"
    )
