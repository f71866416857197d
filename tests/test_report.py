"""``tooldecode report``: a hand-built run scored by the real scorer; numbers checked against the raw samples."""

from __future__ import annotations

import html
import json
import re
from collections import Counter
from pathlib import Path

import pytest
from conftest import make_probe_row, make_sample

from tooldecode import report as rp
from tooldecode.cli import main
from tooldecode.errors import RunError, ToolDecodeError
from tooldecode.report import page as report_page
from tooldecode.runs import RunStore, build_manifest, rescore, score_stored
from tooldecode.scenarios import load_scenarios
from tooldecode.scoring import SCORER_VERSION
from tooldecode.stats import newcombe_diff, wilson

MODEL = "qwen2.5-coder-0.5b-instruct"
PREFILL = '<tool_call>\n{"name": "edit", "arguments": {'
COMMAND = "tooldecode run experiments/e1.toml --quick"
RATE = re.compile(r"\d+/\d+ = (?:\d+\.\d%|n/a) \[\d+\.\d, \d+\.\d\]")

# (mode, level) -> the kinds of sample written for each scenario, in order; seeds alternate 0, 1.
ARMS = {
    ("loose", "L0"): ["valid", "invented", "no_call", "truncated", "valid", "valid"],
    ("loose", "L1"): ["valid", "invented", "invented", "truncated", "valid", "invented"],
    ("strict", "L1"): ["valid", "valid", "valid", "truncated", "valid", "valid"],
}
VERDICT_OF = {"valid": "valid", "invented": "invented_key", "no_call": "no_call", "truncated": "truncated"}


def _scenarios() -> list:
    scenarios = sorted(load_scenarios(), key=lambda s: s.id)
    assert len(scenarios) >= 2, "the built-in scenario corpus needs at least two scenarios"
    return scenarios[:2]


def _call(scenario, extra: dict | None = None) -> str:
    edits = [{"oldText": e.old_text, "newText": e.new_text} for e in scenario.edits]
    if extra:
        edits[0] = {**edits[0], **extra}
    body = json.dumps(
        {"name": "edit", "arguments": {"path": scenario.path, "edits": edits}}, ensure_ascii=False
    )
    return f"<tool_call>\n{body}\n</tool_call>"


def _record(mode: str, level: str, scenario, i: int, kind: str) -> dict:
    full = {
        "valid": _call(scenario),
        "invented": _call(scenario, {"requireUnique": True}),
        "no_call": "I'll fix the off-by-one in the loop bound and keep the rest of the function as it is.",
    }.get(kind)
    if kind == "truncated":
        whole = _call(scenario)
        full = whole[: whole.index('"newText": "') + len('"newText": "') + 12]
    assert full is not None
    prefill = PREFILL if level == "L1" else ""
    assert full.startswith(prefill)
    arm = {
        "model": MODEL,
        "backend": "llamacpp",
        "mode": mode,
        "level": level,
        "history": "agentic",
        "toolset": "nested",
        "wire": "hermes",
        "temperature": 1.0,
        "conditioning": "free" if level == "L0" else "forced-tool",
    }
    if mode == "strict":
        arm["engine"] = "xgrammar"  # derived fields, as the experiment runner writes them
    seed = i % 2
    return make_sample(
        full[len(prefill) :],
        arm=arm,
        key=f"{mode}-{level}/{scenario.id}/{seed}/{i}",
        scenario=scenario.id,
        seed=seed,
        index=i,
        prefill=prefill,
        token_ids=[1, 2, 3],
        logprobs=[-0.1, -0.2, -0.3],
        top=[None, None, None],
        finish_reason="length" if kind == "truncated" else "stop",
        timing={"prefill_s": 0.1, "decode_s": 0.2, "tokens": 3},
    )


def _build(path: Path, arms: dict = ARMS, *, with_error: bool = True) -> tuple[RunStore, dict[str, str]]:
    """A run with hand-written samples; returns the store and each key's intended verdict."""
    manifest = build_manifest(
        {"experiment": "e1-test", "arms": [list(a) for a in arms]},
        model={"id": MODEL, "sha256": "0" * 64, "path": "-"},
    )
    manifest["command"] = COMMAND
    records, intended = [], {}
    for (mode, level), kinds in arms.items():
        for scenario in _scenarios():
            for i, kind in enumerate(kinds):
                rec = _record(mode, level, scenario, i, kind)
                records.append(rec)
                intended[rec["key"]] = VERDICT_OF[kind]
    if with_error:
        bad = _record("strict", "L1", _scenarios()[0], 99, "valid")
        bad.update(text="", finish_reason="error", error="mask engine failed at token 3")
        records.append(bad)
    store = RunStore.create(path, manifest)
    store.append(records)
    store.close()
    return store, intended


def _md_tables(md: str) -> dict[str, list[dict[str, str]]]:
    """Markdown tables by the ``##`` heading above them, each row as {header: cell}."""
    tables: dict[str, list[dict[str, str]]] = {}
    heading = ""
    lines = md.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("## "):
            heading = line[3:].strip()
        if line.startswith("|") and i + 1 < len(lines) and lines[i + 1].startswith("|---"):
            header = [c.strip() for c in line.strip("|").split("|")]
            rows = []
            i += 2
            while i < len(lines) and lines[i].startswith("|"):
                cells = [c.strip() for c in lines[i].strip("|").split(" | ")]
                rows.append(dict(zip(header, cells, strict=True)))
                i += 1
            tables.setdefault(heading, rows)
            continue
        i += 1
    return tables


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    path = tmp_path_factory.mktemp("runs") / "e1"
    _, intended = _build(path)
    written = rp.report([path])
    return path, intended, written


def test_writes_into_the_run_and_scores_with_the_real_scorer(built):
    path, intended, written = built
    assert written["summary"] == path / "summary.md"
    assert written["html"] == path / "report.html"
    vfile = path / f"verdicts-{SCORER_VERSION}.jsonl"
    assert written["verdicts:e1"] == vfile
    verdicts = {r["key"]: r for r in map(json.loads, vfile.read_text().splitlines())}
    # The hand-written samples get the verdicts they were written to get.
    assert {k: verdicts[k]["verdict"] for k in intended} == intended
    invented = [v for v in verdicts.values() if v["verdict"] == "invented_key"]
    assert invented and all(v["invented_keys"][0]["path"] == "edits[0].requireUnique" for v in invented)
    assert all(v["payload"]["file_correct"] for v in invented)  # payload correct, schema-invalid
    # The report's verdict file is exactly what `tooldecode rescore` writes.
    before = vfile.read_bytes()
    rescore(RunStore.open(path), score_stored, SCORER_VERSION)
    assert vfile.read_bytes() == before


def _recount(path: Path) -> dict[tuple[str, str], Counter]:
    """Outcome counts per (mode, level), recomputed from samples.jsonl with the scorer."""
    manifest = json.loads((path / "manifest.json").read_text())
    counts: dict[tuple[str, str], Counter] = {}
    for line in (path / "samples.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if rec["error"]:
            continue
        v = score_stored(rec, manifest)
        c = counts.setdefault((rec["arm"]["mode"], rec["arm"]["level"]), Counter())
        c["n"] += 1
        c[v["verdict"]] += 1
        ok = bool(v["payload"] and v["payload"]["file_correct"])
        c["payload_correct"] += ok
        c["payload_correct_schema_invalid"] += ok and v["verdict"] != "valid"
    return counts


def test_summary_numbers_equal_a_recount_from_raw_samples(built):
    path, intended, _ = built
    md = (path / "summary.md").read_text()
    tables = _md_tables(md)
    counts = _recount(path)
    rows = {(r["mode"], r["level"]): r for r in tables["Arms"]}
    assert set(rows) == set(ARMS)
    n_scen = len(_scenarios())
    for arm, kinds in ARMS.items():
        c, row = counts[arm], rows[arm]
        assert c["n"] == len(kinds) * n_scen  # the sampling-error record is not scored
        assert row["n"] == str(c["n"])
        assert row["invented key"] == str(wilson(c["invented_key"], c["n"]))
        assert row["invented key"] == str(wilson(kinds.count("invented") * n_scen, c["n"]))
        assert row["valid"] == str(wilson(c["valid"], c["n"]))
        assert row["payload correct"] == str(wilson(c["payload_correct"], c["n"]))
        assert row["payload correct, schema-invalid"] == str(
            wilson(c["payload_correct_schema_invalid"], c["n"])
        )
    all_verdicts = {(r["mode"], r["level"]): r for r in tables["All verdicts"]}
    for arm, c in counts.items():
        for verdict in ("no_call", "truncated", "valid", "invented_key", "json_syntax"):
            assert all_verdicts[arm][verdict.replace("_", " ")] == str(wilson(c[verdict], c["n"]))
    # Common fields are stated once; the varying ones are the columns.
    common = md.split("## Arms")[1].split("|")[0]
    assert f"model={MODEL}" in common and "wire=hermes" in common
    assert "mode=" not in common and "conditioning=" not in common and "engine=" not in common
    assert f"`{COMMAND}`" in md


def test_differences_between_arms_one_field_apart(built):
    path, _, _ = built
    counts = _recount(path)
    diffs = _md_tables((path / "summary.md").read_text())["Differences between arms that differ in one field"]
    pairs = {(d["field"], d["a"], d["b"], d["metric"]): d for d in diffs}
    # loose L0 vs strict L1 differ in two fields: no row for them.
    assert {(f, a, b) for f, a, b, _ in pairs} == {
        ("mode", "mode=loose, level=L1", "mode=strict, level=L1"),
        ("level", "mode=loose, level=L0", "mode=loose, level=L1"),
    }
    a, b = counts[("loose", "L1")], counts[("strict", "L1")]
    row = pairs[("mode", "mode=loose, level=L1", "mode=strict, level=L1", "invented key")]
    expect = newcombe_diff(a["invented_key"], a["n"], b["invented_key"], b["n"])
    assert row["a − b [Newcombe 95%], Fisher p"] == str(expect)
    assert row["cluster bootstrap 95%"].startswith(f"{100 * expect.diff:+.1f} pts [")
    assert "(2 scenarios, paired) †" in row["cluster bootstrap 95%"]


def test_noise_floor_and_zoo(built):
    path, _, _ = built
    tables = _md_tables((path / "summary.md").read_text())
    noise = {(r["arm"], r["metric"]): r for r in tables["Noise floor"]}
    row = noise[("mode=loose, level=L1", "invented key")]
    # kinds at even indices (seed 0): valid, invented, truncated -> 1 of 3 per scenario; odd (seed 1): 2 of 3.
    assert row["rate per repeat"] == f"seed 0: {wilson(2, 6)}; seed 1: {wilson(4, 6)}"
    assert row["max gap"] == "33.3 pts"
    zoo = tables["Invented keys"]
    assert [z["key"] for z in zoo] == ["requireUnique"]
    n_inv = sum(k.count("invented") for k in ARMS.values()) * 2
    assert zoo[0]["samples with it (of all scored samples)"] == str(wilson(n_inv, 36))
    assert zoo[0]["where (object holding it)"] == f"edits[] ({n_inv})"


def test_html_is_self_contained_and_shows_the_summary_numbers(built):
    path, _, _ = built
    page = (path / "report.html").read_text()
    md = (path / "summary.md").read_text()
    refs = re.findall(r"""\b(?:src|href)\s*=\s*["']([^"']*)""", page, flags=re.I)
    assert refs, "plots are inline images"
    assert all(r.startswith("data:image/png;base64,") or r.startswith("#") for r in refs)
    assert not any("http" in r for r in refs)
    assert not re.search(r"<link\b|@import|url\(", page)
    for label in ("mode=loose, level=L0", "mode=loose, level=L1", "mode=strict, level=L1"):
        assert html.escape(label) in page
    rates = RATE.findall(md)
    assert len(rates) > 30
    for rate in rates:
        assert rate in page
    # The raw output of an invented-key sample, with the key marked and the prefill set apart.
    assert "<mark>&quot;requireUnique&quot;</mark>" in page
    assert '<span class="pf" title="prefill">&lt;tool_call&gt;' in page
    assert "mask engine failed at token 3" in page  # the unscored sample is listed, not hidden


def test_existing_verdicts_are_used_and_stale_ones_replaced(tmp_path):
    path = tmp_path / "run"
    arms = {("loose", "L1"): ["valid", "invented"], ("strict", "L1"): ["valid", "valid"]}
    store, _ = _build(path, arms, with_error=False)
    vfile = rescore(RunStore.open(path), score_stored, SCORER_VERSION)
    # A current verdict file is read, not rewritten: doctor it and the report follows it.
    lines = [json.loads(x) for x in vfile.read_text().splitlines()]
    for v in lines:
        v["verdict"] = "wrong_tool"
    vfile.write_text("".join(json.dumps(v) + "\n" for v in lines))
    written = rp.report([path], tmp_path / "out")
    assert not any(k.startswith("verdicts:") for k in written)
    assert (
        "| 4 | 0/4 = 0.0% [0.0, 49.0] | 0/4 = 0.0% [0.0, 49.0] |" in (tmp_path / "out/summary.md").read_text()
    )
    # One more raw sample: the verdict file no longer covers the run and is written again.
    with RunStore.open(path) as run:
        run.append([_record("strict", "L1", _scenarios()[0], 7, "valid")])
    written = rp.report([path], tmp_path / "out")
    assert written["verdicts:run"] == vfile
    assert {json.loads(x)["verdict"] for x in vfile.read_text().splitlines()} == {"valid", "invented_key"}


def test_several_runs_probe_rows_and_the_cli(tmp_path, monkeypatch, capsys):
    loose, _ = _build(
        tmp_path / "e1-loose", {("loose", "L1"): ["valid", "invented", "valid"]}, with_error=False
    )
    strict, _ = _build(
        tmp_path / "e1-strict", {("strict", "L1"): ["valid", "valid", "valid"]}, with_error=False
    )
    probe = [
        make_probe_row(
            **{
                "scenario": sc.id,
                "arm": {"mode": "loose"},
                "position": 40 + k,
                "path": f"edits[{k}]",
                "after": "newText",
                "p_close": 0.9 - 0.1 * k,
                "p_continue": 0.05 + 0.1 * k,
                "p_other": 0.05,
                "p_undetermined": 0.0,
                "entropy": 0.5,
                "top": [["}", 0.9, "close"], [",", 0.05, "continue"]],
                "newtext_lines": 3 + 10 * k,
                "newtext_chars": 80 + 300 * k,
                "newtext_escapes": 4,
                "item_index": k,
                "n_items": 2,
            }
        ).to_json()
        for sc in _scenarios()
        for k in range(2)
    ]
    RunStore.open(loose.path).write_derived("probe.jsonl", probe)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(report_page, "MAX_SAMPLE_ROWS", 4)
    assert main(["report", "e1-loose", "e1-strict"]) == 0
    out = capsys.readouterr().out
    assert "summary: report/summary.md" in out and "html: report/report.html" in out
    md = (tmp_path / "report/summary.md").read_text()
    tables = _md_tables(md)
    assert [(r["run"], r["mode"]) for r in tables["Arms"]] == [("e1-loose", "loose"), ("e1-strict", "strict")]
    diff = tables["Differences between arms that differ in one field"][0]
    assert (diff["field"], diff["a"], diff["b"]) == ("mode", "e1-loose: mode=loose", "e1-strict: mode=strict")
    probe_row = tables["Close-brace probe"][0]
    assert probe_row["decision points"] == "4" and probe_row["scenarios"] == "2"
    assert probe_row["mean P(continue) [95%]"].startswith("10% [")  # mean of 0.05, 0.15, 0.05, 0.15
    page = (tmp_path / "report/report.html").read_text()
    assert page.count('alt="P(continue) against newText length"') == 1
    assert "Showing 4 of 6 samples: invented-key samples first" in page


def test_errors_a_user_can_cause(tmp_path):
    with pytest.raises(rp.ReportError, match="no runs given"):
        rp.report([])
    with pytest.raises(RunError, match="does not exist"):
        rp.report([tmp_path / "nope"])
    store, _ = _build(tmp_path / "run", {("loose", "L1"): ["valid"]}, with_error=False)
    (tmp_path / "file").write_text("x")
    with pytest.raises(ToolDecodeError, match="not a directory"):
        rp.report([store.path], tmp_path / "file")
    assert main(["report", str(tmp_path / "nope")]) == 2


def test_highlight_escapes_and_marks_only_quoted_keys():
    text = '{"id": 1, "notes": "<b>id</b>", "idx": 2}'
    out = rp.highlight(text, ["id"])
    assert out.count("<mark>") == 1
    assert "<mark>&quot;id&quot;</mark>: 1" in out
    assert "&lt;b&gt;id&lt;/b&gt;" in out
    assert rp.highlight("a\ud800b", []) == "a\ufffdb"
    two = rp.highlight('{"content": "x", "position": 0, "pos": 1}', ["position", "content", "pos"])
    assert two.count("<mark>") == 3 and "<mark>&quot;position&quot;</mark>" in two


def test_probe_only_run_uses_the_points_after_new_text(tmp_path):
    """A probe-only run (no samples): rows as the experiment runner writes them, one per decision point."""
    store = RunStore.create(tmp_path / "e5", build_manifest({"spec": "e5"}))
    store.close()
    rows = []
    for j, sc in enumerate(_scenarios()):
        for after, p_cont, lines in (
            ("path", 0.99, 1),
            ("oldText", 0.98, 4),
            ("newText", 0.01 + 0.02 * j, 12),
        ):
            rows.append(
                make_probe_row(
                    **{
                        "index": len(rows),
                        "path": "edits[0]" if after != "path" else "",
                        "after": after,
                        "container": "object",
                        "actual": "close" if after == "newText" else "continue",
                        "p_close": 1 - p_cont,
                        "p_continue": p_cont,
                        "p_other": 0.0,
                        "p_undetermined": 0.0,
                        "entropy": 0.2,
                        "top": [],
                        "value_lines": lines,
                        "value_chars": 40 * lines,
                        "model": MODEL,
                        "variant": {"history": "agentic", "toolset": "nested"},
                        "variant_label": "history=agentic,toolset=nested",
                        "scenario": sc.id,
                        "newtext_lines": lines,
                        "newtext_chars": 40 * lines,
                        "item_index": 0,
                        "n_items": 1,
                    }
                ).to_json()
            )
    RunStore.open(tmp_path / "e5").write_derived("probe.jsonl", rows)
    rp.report([tmp_path / "e5"])
    md = (tmp_path / "e5/summary.md").read_text()
    tables = _md_tables(md)
    assert "Arms" not in tables and md.split("## Arms")[1].split("##")[0].strip() == "_no scored samples_"
    (row,) = tables["Close-brace probe"]
    assert row["arm"] == f"model={MODEL}, history=agentic, toolset=nested"
    assert row["decision points"] == "2"  # only the points after newText
    assert row["mean P(continue) [95%]"].startswith("2% [") and row["max P(continue)"] == "3%"
    page = (tmp_path / "e5/report.html").read_text()
    assert 'alt="P(continue) against newText length"' in page and 'alt="rates per arm' not in page
