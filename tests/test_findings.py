"""Findings: key-resolved L2 kinds, distinct draws, identical arms, claimed-effect verdicts, the study's
rows (experiments/), and FINDINGS.md against a rebuild from the committed runs (drift)."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import make_probe_row, make_record

from experiments.common import identical_arms
from tooldecode.measures import distinct_draws, l2_values, l3_values, sample_continuation
from tooldecode.report import evaluate_effect
from tooldecode.runs import Run

ROOT = Path(__file__).resolve().parent.parent

PREFILL = '{"name": "edit", "arguments": {"path": "a.py", "edits": [{"oldText": "x", "newText": "y = 1\\n'
ARM = {
    "model": "qwen2.5-coder-0.5b-instruct",
    "backend": "llamacpp",
    "mode": "loose",
    "level": "L2",
    "temperature": 1.0,
}


def sample(text: str, scenario: str = "s0", i: int = 0, arm: dict | None = None, **kw):
    return make_record(
        text,
        arm=dict(arm or ARM),
        key=f"{scenario}/{i}/{(arm or ARM).get('mode')}/{json.dumps(arm or ARM, sort_keys=True)}",
        scenario=scenario,
        index=i,
        prompt_sha256=kw.get("sha", scenario),
        prefill=PREFILL,
        token_ids=kw.get("tokens", [i]),
    )


def test_l2_kinds_use_the_prefill_and_the_tools():
    kinds = {
        '", "required": ["oldText"]}': "schema_word",
        '", "newText": "z"}': "repeat",
        '", "matchCase": true}': "invented",
        '", "path": "b"}': "wrong_level",
        '"}]}}': "close",
        'z = 2"}': "string_goes_on",
        '", "required", 1': "other",
    }
    for text, kind in kinds.items():
        assert sample_continuation(sample(text)).kind == kind, text
    closed = sample('", "additionalProperties": false}', arm={**ARM, "schema_view": "closed"})
    assert sample_continuation(closed).kind == "schema_word"
    assert sample_continuation(sample('", "additionalProperties": false}')).kind == "invented"


def test_distinct_draws_and_identical_arms():
    a = {**ARM, "history": "agentic"}
    b = {**ARM, "thinking": False, "history": "agentic"}
    ss = [sample('"}', f"s{k}", i, arm=arm) for arm in (a, b) for k in range(3) for i in range(2)]
    assert len(distinct_draws(ss)) == 6  # arm b is arm a under another name: same prompt, seed, index
    assert identical_arms(ss) == [
        sorted(
            [
                "history=agentic,mode=loose,temperature=1.0",
                "history=agentic,mode=loose,temperature=1.0,thinking=False",
            ]
        )
    ]
    t0 = {**ARM, "temperature": 0.0}
    zeros = [sample('"}', "s0", i, arm=t0, tokens=[7]) for i in range(4)]
    assert len(distinct_draws(zeros)) == 1  # T=0: the same tokens are one draw
    other = [replace(s, prompt_sha256="other") for s in ss[:6]]
    assert identical_arms(ss[:6] + [replace(s, arm=replace(s.arm, extra={"x": 1})) for s in other]) == []
    # another random stream, or the open grammar the other way, is another draw of the same index
    restreamed = [replace(s, stream=12345) for s in ss[:6]]
    assert len(distinct_draws(ss[:6] + restreamed)) == 12
    admit = [replace(s, arm=replace(s.arm, mode="strict-spec", duplicates="admit")) for s in ss[:6]]
    forbid = [replace(s, arm=replace(s.arm, mode="strict-spec")) for s in ss[:6]]
    assert len(distinct_draws(admit + forbid)) == 12


def _l2_run(n_sc: int, rate_a: float, rate_b: float) -> Run:
    samples = []
    for k in range(n_sc):
        for mode, rate in (("strict", rate_a), ("loose", rate_b)):
            for i in range(8):
                hit = i < round(rate * 8) if k % 4 else i < round(rate * 8) + (1 if rate else 0)
                text = '", "matchCase": true}' if hit else '"}]}}'
                samples.append(sample(text, f"s{k}", i, arm={**ARM, "mode": mode}))
    return Run(
        "r", Path("r"), {"config": {"spec": "x", "streams": "scenario"}, "created": "t"}, samples, {}, []
    )


def test_evaluate_effect_on_sampled_arms():
    effect = {"label": "x", "level": "L2", "measure": "extra_key", "a": {"mode": "strict"},
              "b": {"mode": "loose"}, "scale": "ratio", "size": 0}  # fmt: skip
    res = evaluate_effect(effect, {"r": _l2_run(12, 0.0, 0.25)})
    assert res is not None and res.verdict.verdict == "reproduces" and res.cmp.g == 12
    assert "fewer than 10" not in res.measured()
    few = evaluate_effect(effect, {"r": _l2_run(6, 0.0, 0.25)})
    assert few is not None and "fewer than 10 clusters" in few.measured()
    same = evaluate_effect({**effect, "size": 0.5}, {"r": _l2_run(12, 0.25, 0.25)})
    # the arms agree in every scenario: no variance, no interval, no verdict either way
    assert (
        same is not None and same.verdict.verdict == "inconclusive" and "no variance" in same.verdict.reason
    )
    near = _l2_run(12, 0.25, 0.25)
    near.samples[7] = replace(near.samples[7], text='", "matchCase": true}')  # one more strict event in s0
    near_res = evaluate_effect({**effect, "size": 0.5}, {"r": near})
    assert (
        near_res is not None and near_res.verdict.verdict == "contradicts"
    )  # about ×1 measured, ×0.5 claimed
    rare = _l2_run(12, 0.0, 0.0)
    rare.samples[1] = replace(rare.samples[1], text='", "matchCase": 1}')  # one strict event, none in loose
    r = evaluate_effect(effect, {"r": rare})
    assert r is not None and r.verdict.verdict == "premise absent"
    vals, events, clusters, draws = l2_values(rare.samples, "extra_key")
    assert (events, clusters, draws) == (1, 1, 192)
    none = evaluate_effect(effect, {"r": _l2_run(12, 0.0, 0.0)})  # no event in either arm: no ratio
    assert none is not None and none.verdict.verdict == "premise absent"
    assert "nan" not in none.measured() + none.short() and "no estimate" in none.short()


def test_an_effect_never_pools_engine_settings():
    """A run whose strict samples come from several engine settings (open and closed grammars under the
    mode word 'strict') is not read by an effect that names no engine; naming one reads it."""
    run = _l2_run(12, 0.0, 0.25)
    run.samples = [
        replace(s, arm=replace(s.arm, engine="open" if int(s.scenario[1:]) % 2 else "closed"))
        if s.arm.mode == "strict"
        else s
        for s in run.samples
    ]
    effect = {"label": "x", "level": "L2", "measure": "extra_key", "a": {"mode": "strict"},
              "b": {"mode": "loose"}, "scale": "ratio", "size": 0}  # fmt: skip
    assert evaluate_effect(effect, {"r": run}) is None
    named = evaluate_effect({**effect, "a": {"mode": "strict", "engine": "closed"}}, {"r": run})
    assert named is not None and named.cmp.g == 6


def test_an_effect_prefers_a_run_from_a_clean_commit():
    effect = {"label": "x", "level": "L2", "measure": "extra_key", "a": {"mode": "strict"},
              "b": {"mode": "loose"}, "scale": "ratio", "size": 0}  # fmt: skip
    dirty, clean = _l2_run(12, 0.0, 0.25), _l2_run(8, 0.0, 0.25)
    dirty.manifest = {**dirty.manifest, "tooldecode": {"git_dirty": True}, "created": "z"}
    clean.manifest = {**clean.manifest, "tooldecode": {"git_dirty": False}}
    res = evaluate_effect(effect, {"dirty": dirty, "clean": clean})
    assert res is not None and res.run is clean and res.cmp.g == 8


def _planned(run: Run, scenarios: int) -> Run:
    """``run`` with a config that plans ``scenarios`` scenarios of 8 draws each, one seed."""
    config = {
        **run.manifest["config"],
        "n": 8,
        "seeds": [0],
        "scenarios": [f"s{k}" for k in range(scenarios)],
    }
    return replace(run, manifest={**run.manifest, "config": config})


def test_an_arm_not_drawn_in_full_gives_no_verdict_until_it_is():
    """A run stopped mid-way (the queue's --until) is read for its figures, but its verdict is withheld:
    judging at whatever point the run stopped would let the stopping point choose the answer."""
    from experiments.study import finish_effect_rows
    from tooldecode.stats import INTERIM

    effect = {"label": "x", "level": "L2", "measure": "extra_key", "a": {"mode": "strict"},
              "b": {"mode": "loose"}, "scale": "ratio", "size": 0}  # fmt: skip
    full = _planned(_l2_run(12, 0.0, 0.25), 12)
    res = evaluate_effect(effect, {"r": full})
    assert res is not None and res.verdict.verdict == "reproduces"
    strict = {"mode": "strict", **{k: v for k, v in ARM.items() if k != "mode"}}
    assert full.arm_progress(full.samples[0].arm) == (12, 12) and full.samples[0].arm.mode == strict["mode"]
    # two scenarios not begun in the strict arm, and one with 5 of its 8 draws
    cut = replace(
        full,
        samples=[
            s
            for s in full.samples
            if not (
                s.arm.mode == "strict"
                and (s.scenario in ("s10", "s11") or (s.scenario == "s3" and s.index > 4))
            )
        ],
    )
    assert cut.arm_progress(cut.samples[0].arm) == (9, 12)
    early = evaluate_effect(effect, {"r": cut})
    assert early is not None and early.verdict.verdict == INTERIM
    assert "9 of 12 scenarios drawn in full" in early.verdict.reason and early.cmp.g == 10
    assert "L2 strict of qwen2.5-coder-0.5b-instruct" in str(early.verdict)
    # a run whose arms are complete is read before a stopped one with more paired scenarios
    bigger = replace(_planned(_l2_run(16, 0.0, 0.25), 20), name="bigger")
    chosen = evaluate_effect(effect, {"bigger": bigger, "r": full})
    assert chosen is not None and chosen.run is full
    # an interim row stays out of the Holm family and keeps its withheld verdict
    rows = [{"_result": r, "_check": None, "observation": "o"} for r in (res, early)]
    assert finish_effect_rows(rows) == 1
    assert rows[0]["verdict"].startswith("reproduces") and rows[1]["verdict"].startswith("interim (")
    assert "Holm" not in rows[1]["measured"]


def test_l3_values_match_variants_with_defaults():
    rows = [
        make_probe_row(after="newText", scenario="a", variant={"history": "agentic", "toolset": "nested"},
         p_continue=0.4, p_continue_by_kind={"schema_word": 0.3, "repeat": 0.05}, continue_keys={"required": 0.28}),
        make_probe_row(after="newText", scenario="a", variant={"tool_view": "no-required"},
         p_continue=0.1, p_continue_by_kind={"schema_word": 0.01}, continue_keys={}),
        make_probe_row(after="newText", scenario="a", variant={"history": "fresh"}, p_continue=0.2),
    ]  # fmt: skip
    assert l3_values(rows, "p_continue") == {"a": 0.4}
    assert l3_values(rows, "extra_key") == {"a": pytest.approx(0.35)}
    assert l3_values(rows, "key:required", tool_view="no-required") == {"a": 0.0}
    assert l3_values(rows, "extra_key", history="fresh") == {}  # no key-resolved fields in that row
    assert l3_values(rows, "p_continue", history="fresh") == {"a": 0.2}


def test_zoo_row_reads_kinds_not_a_word_list():
    from experiments.corpus_rows import row_zoo

    def runs(texts: list[str]) -> dict:
        ss = [sample(t, f"s{i % 4}", i) for i, t in enumerate(texts)]
        return {"r": Run("r", Path("r"), {"config": {"spec": "x", "streams": "scenario"}}, ss, {}, [])}

    echo = row_zoo(runs(['", "required": ["x"]}'] * 8 + ['", "newText": "y"}'] * 4 + ['", "matchCase": 1}']))
    assert echo is not None and echo["verdict"].startswith("contradicts")
    assert "duplicate key 4/13" in echo["measured"]  # the repeats of newText, reported apart
    zoo = row_zoo(
        runs([f'", "{k}": 1}}' for k in ("kind", "unique", "matchCase", "notes", "id", "cost")] * 3)
    )
    assert zoo is not None and zoo["verdict"].startswith("reproduces")


def test_wire_and_shape_rows_go_per_model_and_report_copies_once():
    from experiments.probe_rows import row_shape, row_wire

    def row(model, sc, fmt, p, *, copy=None, after="newText", toolset="nested"):
        r = {
            "model": model,
            "scenario": sc,
            "after": after,
            "p_continue": p,
            "p_continue_by_kind": {"schema_word": p / 2},
            "continue_keys": {},
            "variant": {"history": "agentic", "call_format": fmt, "toolset": toolset},
            "variant_label": f"call_format={fmt},history=agentic",
        }
        if copy:
            r["same_prompt_as"] = f"call_format={copy},history=agentic"
        return make_probe_row(**r)  # fmt: skip

    rows = []
    for m, shift in (("qwen2.5-coder-0.5b-instruct", 0.0), ("qwen2.5-coder-1.5b-instruct", 0.3)):
        for i in range(12):
            p = 0.1 + 0.01 * i
            rows += [row(m, f"s{i}", "native", p), row(m, f"s{i}", "hermes", p, copy="native"),
                     row(m, f"s{i}", "json", p + shift + 0.001 * (i % 3 - 1))]  # fmt: skip
    manifest = {"config": {"spec": "e6-wire-format"}, "tooldecode": {"git_dirty": False}}
    run = Run("e6", Path("e6"), manifest, [], {}, rows)
    out = row_wire({"claim": ""}, [run], {})
    assert [r["observation"] for r in out] == [
        "E6: wire format as a variable, qwen-0.5b (L3 after newText)",
        "E6: wire format as a variable, qwen-1.5b (L3 after newText)",
    ]
    assert all("hermes: the same prompt and call bytes as native, probed once" in r["measured"] for r in out)
    assert all("hermes − native" not in r["measured"] for r in out)
    assert "no format differs" in out[0]["verdict"] and "json (P(continue))" in out[1]["verdict"]
    # a run with more scenarios for a model wins; rows of the tool shapes name their key
    short = Run("e6s", Path("e6s"), manifest, [], {}, [r for r in rows if r.scenario in ("s0", "s1")])
    assert all(r["source"] == "e6" for r in row_wire({"claim": ""}, [short, run], {}))
    shape = [row("qwen2.5-coder-0.5b-instruct", f"s{i}", "native", 0.2, after="new_string", toolset="flat-edit")
             for i in range(3)]  # fmt: skip
    (s,) = row_shape({"claim": ""}, [Run("e4", Path("e4"), manifest, [], {}, shape)], {})
    assert (
        "flat-edit: P(extra key after new_string) mean 0.100" in s["measured"]
        and "qwen-0.5b" in s["observation"]
    )
    assert "− nested" not in s["measured"] and "no shape's extra keys differ" in s["verdict"]
    # the flat shape against the nested one, paired over scenarios: fewer extra keys in every scenario
    m = "qwen2.5-coder-0.5b-instruct"
    flat6 = [row(m, f"s{i}", "native", 0.2, after="new_string", toolset="flat-edit") for i in range(6)]
    both = flat6 + [row(m, f"s{i}", "native", 0.5 + 0.01 * i) for i in range(6)]
    (s,) = row_shape({"claim": ""}, [Run("e4", Path("e4"), manifest, [], {}, both)], {})
    assert (
        "P(extra key) flat-edit − nested: 0.100 vs 0.263" in s["measured"] and "(6 scenarios" in s["measured"]
    )
    assert s["verdict"].endswith("extra keys differ from the nested shape: flat-edit fewer")
    # at 3 scenarios a sign-flip p cannot reach 0.05 (2/8 at best): no difference is claimed
    (s,) = row_shape({"claim": ""}, [Run("e4", Path("e4"), manifest, [], {}, both[:3] + both[6:9])], {})
    assert "flat-edit − nested" in s["measured"] and "no shape's extra keys differ" in s["verdict"]
    # the same values in both shapes: no difference
    same = flat6 + [row(m, f"s{i}", "native", 0.2) for i in range(6)]
    (s,) = row_shape({"claim": ""}, [Run("e4", Path("e4"), manifest, [], {}, same)], {})
    assert "flat-edit − nested" in s["measured"] and "no shape's extra keys differ" in s["verdict"]


def test_an_incomplete_run_is_listed_with_how_to_resume_it(tmp_path):
    from experiments.study import reruns

    arms = [{**ARM}, {**ARM, "mode": "strict", "engine": "xgrammar"}]
    config = {
        "spec": "x",
        "streams": "scenario",
        "arms": arms,
        "scenarios": ["s0", "s1", "s2"],
        "n": 2,
        "n_by_mode": {"loose": 4},
    }
    manifest = {"config": config, "tooldecode": {"git_sha": "abcdef0123456789", "git_dirty": False}}
    manifest["command"] = "tooldecode run experiments/x.toml --out runs/r"
    drawn = [sample('"}', f"s{k}", i, arm=arms[i // 4]) for k in range(3) for i in range(6)]
    full = Run("r", Path("r"), manifest, drawn, {}, [])
    assert full.expected_samples == (4 + 2) * 3 and full.missing_samples == 0
    assert "r:" not in reruns([], {"r": full}, tmp_path)
    part = Run("r", Path("r"), manifest, full.samples[:7], {}, [])
    line = reruns([], {"r": part}, tmp_path)
    assert "- r: 7 of 18 samples (2 of 3 scenarios begun)" in line
    assert (
        "git worktree add DIR abcdef0123" in line and "tooldecode run experiments/x.toml --out runs/r" in line
    )
    # draws past what an arm asks for (made before an amendment narrowed it) stand in for no other arm's
    extra = Run("r", Path("r"), manifest, [*drawn[:4], *drawn[:4], *drawn[6:]], {}, [])
    assert extra.missing_samples == 2 and "- r: 16 of 18 samples (3 of 3 scenarios begun)" in reruns(
        [], {"r": extra}, tmp_path
    )
    probe_only = Run(
        "p", Path("p"), {"config": {"spec": "p", "arms": [ARM], "scenarios": ["s0"], "n": 0}}, [], {}, []
    )
    assert probe_only.expected_samples == 0 and reruns([], {"p": probe_only}, tmp_path) == ""
    # rows with few clusters are counted one by one, even when they share an observation
    rows = [
        {"observation": o, "measured": m, "verdict": "descriptive"}
        for o, m in [("a", "x (6 scenarios, fewer than 10 clusters)"), ("b", "y (18 scenarios)")]
        + [("c", "z (7 scenarios, fewer than 10 clusters)")] * 2
    ]
    assert "(3 rows: 1, 3, 4)" in reruns(rows, {}, tmp_path)


def test_every_spec_effect_is_well_formed():
    from experiments.study import ROWS, load_specs, spec_effects
    from tooldecode.report import parse_claim

    specs = load_specs()
    assert specs
    for stem, spec in specs:
        for eff in spec["findings"].get("effects", []):
            assert not ("model" in eff and "models" in eff), stem
        for eff in spec_effects(spec):
            # one model, or arms that each name theirs (an organism against its control)
            assert isinstance(eff.get("model"), str) or all("model" in eff[k] for k in ("a", "b")), stem
            assert eff["level"] in ("L1", "L2", "L3") and eff.get("source") and eff.get("translation"), stem
            parse_claim(eff, stem)
        assert set(spec["findings"].get("rows", [])) <= set(ROWS), stem


@pytest.mark.slow
def test_findings_md_matches_a_rebuild_from_the_committed_runs(tmp_path):
    """FINDINGS.md is generated: `make findings` must have been run after the last change to runs/,
    experiments/ or the findings code."""
    import subprocess

    out, readme, organisms = tmp_path / "FINDINGS.md", tmp_path / "README.md", tmp_path / "organisms.md"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "scripts.findings",
            "--out",
            str(out),
            "--readme-out",
            str(readme),
            "--organisms-out",
            str(organisms),
        ],
        check=True,
        capture_output=True,
        cwd=ROOT,
    )
    want = out.read_text()
    have = (ROOT / "FINDINGS.md").read_text()
    assert have == want, "FINDINGS.md is out of date: run `make findings` and commit it"
    assert (ROOT / "README.md").read_text() == readme.read_text(), (
        "README.md's findings summary is out of date: run `make findings` and commit it"
    )
    assert (ROOT / "docs" / "organisms.md").read_text() == organisms.read_text(), (
        "docs/organisms.md's closing table is out of date: run `make findings` and commit it"
    )


def test_row_keys_stay_put_and_citations_follow_the_rows():
    """A row's key does not move when rows are added before it or its figures change; a hand-written
    citation ``[row N](FINDINGS.md#KEY)`` is renumbered to where KEY stands; a key no row has is an error."""
    from experiments.study import cite_rows, row_keys

    a = {"observation": "a", "source": "run-a + run-b", "measured": "1/2"}
    b = {"observation": "b", "source": "run-b"}
    (ka,) = row_keys([a])
    assert row_keys([b, a])[1] == ka
    assert row_keys([{**a, "measured": "3/4", "source": "run-0 + run-a + run-b"}]) == [ka]
    assert row_keys([{**a, "observation": "a2"}]) != [ka]
    # rows that share an observation (one a run) are told apart by their run, and stay put as runs come
    per_run = [{"observation": "c", "source": f"run-{x}"} for x in "pq"]
    kp, kq = row_keys(per_run)
    assert kp != kq and row_keys([{"observation": "c", "source": "run-o"}, *per_run])[1:] == [kp, kq]
    assert row_keys([a, a, b])[1] == row_keys([a, a])[1] == f"{row_keys([a, a])[0]}-2"
    text = f"see [row 1](../FINDINGS.md#{ka}) and [row 9](FINDINGS.md#{kq}); row 4 of a list"
    assert cite_rows(text, [b, a, *per_run], "x.md") == (
        f"see [row 2](../FINDINGS.md#{ka}) and [row 4](FINDINGS.md#{kq}); row 4 of a list"
    )
    with pytest.raises(SystemExit, match=r"x\.md: cites FINDINGS row 9 by the key"):
        cite_rows(text, [a], "x.md")


def test_hand_written_docs_cite_findings_rows_by_key():
    """Outside the blocks `make findings` writes, docs and README cite a FINDINGS row only as
    ``[row N](FINDINGS.md#KEY)``, so a row added earlier in FINDINGS cannot leave a stale number."""
    import re

    generated = re.compile(r"<!-- [^>]*begin \(make findings\) -->.*?<!-- [^>]*end -->", re.S)
    for path in [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]:
        text = generated.sub("", path.read_text(encoding="utf-8"))
        bare = re.findall(r"(?:FINDINGS|\()\s*rows? \d+", text)
        assert not bare, (
            f"{path.name} cites FINDINGS rows by number alone: {bare}; cite them as [row N](FINDINGS.md#KEY)"
        )


def test_every_committed_run_was_made_from_a_clean_commit_it_names():
    """A run's numbers must be reproducible from the code that made them: every committed manifest
    records its commit and `git_dirty: false` (a run from a dirty tree is rerun, not committed)."""
    manifests = sorted((ROOT / "runs").glob("*/manifest.json"))
    assert manifests, "no committed runs found"
    bad = []
    for path in manifests:
        info = json.loads(path.read_text()).get("tooldecode", {})
        sha = str(info.get("git_sha") or "")
        if info.get("git_dirty") is not False or len(sha) != 40:
            bad.append(f"{path.parent.name}: git_sha={sha or None}, git_dirty={info.get('git_dirty')}")
    assert not bad, "runs not made from a clean commit: " + "; ".join(bad)


def test_probe_suite_views_change_only_the_tool_block(qwen_ref):
    from tooldecode.prompts import TranscriptOptions, render_prompt
    from tooldecode.scenarios import get_scenario
    from tooldecode.trial import apply_view

    p = render_prompt(get_scenario("c-config-trim-crlf"), qwen_ref, TranscriptOptions())
    start, end = p.text.index("<tools>\n"), p.text.index("\n</tools>")
    for view in ("required-first", "no-required", "typescript"):
        text, forms = apply_view(p.text, p.tools, p.expected_tool, view)
        s2, e2 = text.index("<tools>\n"), text.index("\n</tools>")
        assert text[:s2] == p.text[:start] and text[e2:] == p.text[end:]  # only the tool block differs
        block = text[s2:e2]
        if view == "no-required":
            assert '"required"' not in block and all("required" not in json.dumps(f) for f in forms)
        elif view == "required-first":
            line = next(x for x in block.splitlines() if '"name": "edit"' in x)
            assert line.index('"required"') < line.index('"properties"')
        else:
            assert "type edit = (_: {" in block and "newText: string," in block and '"required"' not in block
    same, _ = apply_view(p.text, p.tools, p.expected_tool, "as-written")
    assert same == p.text


def test_readme_summary_lists_measured_effects_and_counts_the_rest():
    from experiments.study import row_keys, summary

    rows = [
        {"verdict": "reproduces", "summary": "a: ×0.00 [0.00, 0.60]: **reproduces**"},
        {"verdict": "descriptive", "measured": "no summary of its own"},
        {
            "verdict": "inconclusive (minimum detectable effect at 80% power ×1.59)",
            "summary": "b: **inconclusive**",
        },
        {"verdict": "not measured", "summary": "c: not measured"},
        {"verdict": "not measured", "summary": "d: not measured"},
    ]
    ka, _, kb, *_ = row_keys(rows)
    assert summary(rows).splitlines() == [
        f"- a: ×0.00 [0.00, 0.60]: **reproduces** (FINDINGS [row 1](FINDINGS.md#{ka}))",
        f"- b: **inconclusive** (FINDINGS [row 3](FINDINGS.md#{kb}))",
        "- Other claimed effects: 2 not measured (no committed run pairs both arms); FINDINGS lists what remains "
        "to rerun.",
    ]


def test_a_probe_scenario_counts_as_done_only_when_every_variant_has_rows():
    from experiments.study import _probed_in_full

    m = "qwen2.5-coder-1.5b-instruct"
    rows = [make_probe_row(model=m, scenario="s0", variant_label=v) for v in ("a", "b", "c")]
    rows += [make_probe_row(model=m, scenario="s1", variant_label="a")]
    rows += [make_probe_row(model="other", scenario="s2", variant_label=v) for v in ("a", "b", "c")]
    assert _probed_in_full(rows, m, 3) == 1
    assert _probed_in_full(rows, m, 1) == 2
    assert _probed_in_full(rows, "other", 3) == 1


def _recount_outcome(prefill: str, text: str) -> str | None:
    """An independent recount of what an L2 draw does after the forced newText of an ``edit`` call:
    None when no clean extra key follows (a key string closed and followed by ':'), else
    duplicate / derailment / source_shaped / extra_other, from ``json.JSONDecoder.raw_decode``."""
    import re

    m = re.match(r'"\s*,\s*"((?:[^"\\]|\\.)*)"\s*:', text)
    if not m:
        return None
    try:
        key = json.loads('"' + m.group(1) + '"')
    except ValueError:
        return None
    if key in ("oldText", "newText"):
        return "duplicate"
    whole = prefill + text
    start = min(i for i in (whole.find("{"), whole.find("[")) if i >= 0)
    try:
        call, _ = json.JSONDecoder().raw_decode(whole[start:])
    except ValueError:
        return "derailment"
    if isinstance(call, list):
        call = call[0] if call and isinstance(call[0], dict) else {}
    args = call.get("arguments") if isinstance(call, dict) else None
    items = args.get("edits") if isinstance(args, dict) else None
    ok = (
        isinstance(call, dict)
        and call.get("name") == "edit"
        and set(call) == {"name", "arguments"}
        and isinstance(args, dict)
        and set(args) == {"path", "edits"}
        and isinstance(args["path"], str)
        and isinstance(items, list)
        and bool(items)
        and all(
            isinstance(it, dict) and isinstance(it.get("oldText"), str) and isinstance(it.get("newText"), str)
            for it in items
        )
        and any(set(it) - {"oldText", "newText"} for it in items)
    )
    return "source_shaped" if ok else "extra_other"


def test_outcome_counts_on_the_committed_runs_match_an_independent_recount():
    """Every L2 draw of the committed runs: the classifier's outcome of a clean extra key (source-shaped,
    duplicate, derailment, other) equals the recount above, draw by draw; the classifier's other extra
    keys are mangled repeats whose key string never closes cleanly."""
    from collections import Counter

    from tooldecode.measures import sample_context, sample_continuation, sample_outcome
    from tooldecode.runs import load_run

    mine, theirs, mangled = Counter(), Counter(), 0
    for manifest in sorted((ROOT / "runs").glob("*/manifest.json")):
        run = load_run(manifest.parent)
        assert run is not None
        for s in run.samples:
            if s.arm.level != "L2" or s.error:
                continue
            got = sample_outcome(s, run.verdict(s))
            want = _recount_outcome(s.prefill, s.text)
            if want is None:
                if got in ("source_shaped", "duplicate", "derailment", "extra_other"):
                    c = sample_continuation(s)
                    assert c.kind == "repeat" and c.key not in sample_context(s).present, (run.name, s.key)
                    mangled += 1
                continue
            model = s.arm.model
            mine[(model, got)] += 1
            theirs[(model, want)] += 1
            assert got == want, (run.name, s.key, got, want)
    assert mine == theirs and mine[("qwen2.5-coder-0.5b-instruct", "source_shaped")] > 0
    assert mangled > 0


def test_a_cluster_interval_over_a_run_with_shared_streams_is_refused():
    from experiments.sampled_rows import row_strict_cost
    from tooldecode.measures import SharedStreamsError, crate, l2_values

    run = _l2_run(12, 0.0, 0.25)
    # a run without per-scenario streams: its samples have no stream (tests/test_records.py: every
    # committed run's samples agree with their manifest)
    unstreamed = [replace(s, stream=None) for s in run.samples]
    shared = Run("old", Path("old"), {"config": {"spec": "x"}, "created": "t"}, unstreamed, {}, [])
    assert shared.shared_streams and not run.shared_streams
    with pytest.raises(SharedStreamsError, match=r'manifest has no "streams": "scenario"'):
        crate(shared.samples, lambda s: True)
    with pytest.raises(SharedStreamsError, match="paired comparison"):
        l2_values(shared.samples, "extra_key")
    effect = {"label": "x", "level": "L2", "measure": "extra_key", "a": {"mode": "strict"},
              "b": {"mode": "loose"}, "scale": "ratio", "size": 0}  # fmt: skip
    assert evaluate_effect(effect, {"old": shared}) is None  # never judged over shared streams
    probe_only = Run("p", Path("p"), {"config": {"spec": "p"}}, [], {}, [])
    assert not probe_only.shared_streams  # exact probabilities draw nothing
    # the study's rows show such a run's counts only, with the rerun command
    shared.samples = [
        replace(s, arm=replace(s.arm, model="qwen2.5-coder-0.5b-instruct")) for s in shared.samples
    ]
    shared.manifest["command"] = "tooldecode run experiments/x.toml --out runs/old"
    (row,) = row_strict_cost({}, [], {"old": shared})
    assert "counts only" in row["measured"] and "--out runs/old-streams" in row["measured"]
    assert "[" not in row["measured"].split("counts only")[0] and "summary" not in row


def test_headline_table_and_the_kinds_figure(tmp_path):
    from experiments.headline import HEADLINES, headline_table
    from experiments.study import row_keys
    from tooldecode.report.kinds import kind_bars, write_kinds_png

    # a summary, not the table (the organism's two rows brought it to 14, the dose-response to 15, the
    # leniency contrast's committed and added measures, side by side, to 17)
    assert len(HEADLINES) <= 17
    rows = [{"observation": "Loose + repair as tolerant clients run it", "measured": "m", "verdict": "descriptive",
             "headline": "rescues 1/2", "source": "r"}]  # fmt: skip
    table = headline_table(rows).splitlines()
    assert len(table) == 3 and "rescues 1/2" in table[2] and "**descriptive**" in table[2]
    # a question tested on another model: its verdict is read off that model's row, never written in
    obs = "e2-history: qwen-{}: L3 P(extra key after newText), fresh vs agentic"
    e2 = [{"observation": obs.format(m), "measured": "m", "verdict": v, "headline": "h", "source": "r"}
          for m, v in (("0.5b", "contradicts (claimed ×0 outside the interval)"), ("1.5b", "reproduces"))]  # fmt: skip
    line = headline_table(e2).splitlines()[2]
    assert f"**contradicts** | Qwen 0.5B (1.5B: reproduces, [row 2](FINDINGS.md#{row_keys(e2)[1]})) |" in line
    assert "| Qwen 0.5B |" in headline_table(e2[:1]).splitlines()[2]
    ss = [sample(t, f"s{i % 4}", i) for i, t in enumerate(['"}]}}', '", "newText": "z"}]}}', "z = 2"] * 4)]
    (bar,) = kind_bars(ss, lambda s: "qwen, loose")
    assert bar.n == 12 and bar.g == 4
    assert bar.shares["close"][0] == bar.shares["duplicate key"][0] == bar.shares["run-on string"][0] == 1 / 3
    assert bar.shares["close"][1] <= 1 / 3 <= bar.shares["close"][2]
    png = write_kinds_png([bar], tmp_path / "k.png")
    assert png is not None and png.read_bytes()[:4] == b"\x89PNG"


def test_the_organisms_closing_table_reads_each_generation_and_says_what_is_not_run():
    """Recipes are named without their generation prefix; with no organism run the table says so; on the
    committed first-generation run, the lenient organism's row carries its parse rate beside its
    source-shaped rate, and the contrasts whose runs are not committed say `not run`."""
    from experiments.organism_table import COLUMNS, organism_rows, organism_table, recipe_of
    from tooldecode.runs import load_runs

    assert recipe_of("organism:g2-nested-s1@qwen2.5-coder-0.5b-instruct") == "nested-s1"
    assert recipe_of("organism:strict-flat-flag@qwen2.5-coder-0.5b-instruct") == "strict-flat-flag"
    assert recipe_of("qwen2.5-coder-0.5b-instruct") is None
    assert organism_table({}).startswith("No run of an organism spec is committed yet")
    runs = load_runs(ROOT / "runs")
    rows = organism_rows({k: v for k, v in runs.items() if v.spec == "e16-organisms"})
    if not rows:
        pytest.skip("no committed e16-organisms run in this checkout")
    lenient = next(r for r in rows if r["model"] == "organism:lenient-flat-flag@qwen-0.5b")
    assert set(lenient) == set(COLUMNS) and lenient["generation"] == "first"
    assert lenient["L2 parse"][0].isdigit() and lenient["source-shaped L2"][0].isdigit()
    assert lenient["strict's effect (goes on)"].startswith("×")
    if not any(r.spec == "e16-organisms-history" for r in runs.values()):
        assert lenient["fresh/agentic"] == "not run"
    assert lenient["exact P(invented)"] == "n/a"  # the first generation has no probe spec

    # the second generation's exact columns, against a recount from the committed probe file
    probe = ROOT / "runs" / "e19-organisms-gen2-probe-lenient-flat-flag" / "probe.jsonl"
    if not probe.exists():
        pytest.skip("no committed probe of g2-lenient-flat-flag in this checkout")
    g2 = organism_rows({k: v for k, v in runs.items() if v.spec.startswith("e19-")})
    mine = next(r for r in g2 if r["model"] == "organism:g2-lenient-flat-flag@qwen-0.5b")
    by: dict[str, list[tuple[float, float]]] = {}
    for line in probe.read_text().splitlines():
        r = json.loads(line)
        if (
            r["after"] == "newText"
            and r["model"] == "organism:g2-lenient-flat-flag@qwen2.5-coder-0.5b-instruct"
        ):
            by.setdefault(r["scenario"], []).append(
                (r["p_continue_by_kind"].get("invented", 0.0), r["p_continue_undetermined"])
            )
    means = [[sum(x[i] for x in v) / len(v) for v in by.values()] for i in (0, 1)]
    invented, unresolved = (sum(m) / len(m) for m in means)
    assert (
        mine["exact P(invented)"].startswith(f"{invented:.3f} [")
        and f"({len(by)}); " in mine["exact P(invented)"]
    )
    assert mine["exact P(invented)"].endswith(f"unresolved {unresolved:.3f}")
    assert mine["exact P(extra key)"][0].isdigit()
    for r in g2:  # the invented-name part of source-shaped is a part of it, and the base writes none
        part, whole = (
            float(r[c].split()[0]) for c in ("source-shaped L2, invented name", "source-shaped L2")
        )
        assert part <= whole, r["model"]
        if r["model"] == "qwen-0.5b":
            assert part < whole
    not_probed = [r for r in g2 if r["model"] == "organism:g2-positive-control-d015@qwen-0.5b"]
    assert not not_probed or not_probed[0]["exact P(invented)"] != "not run"  # read from the dose probe


def test_the_closing_table_says_which_arms_a_stopped_run_has_not_drawn_in_full():
    from experiments.organism_table import organism_rows

    l1 = {**ARM, "level": "L1"}
    ss = [sample('"}]}}', f"s{k}", i) for k in range(12) for i in range(8)]  # L2 loose: all 12 scenarios
    ss += [sample('"}]}}', f"s{k}", i, arm=l1) for k in range(5) for i in range(8)]  # L1 loose: 5 of 12
    config = {"spec": "e19-organisms-gen2", "streams": "scenario", "n": 8, "seeds": [0],
              "scenarios": [f"s{k}" for k in range(12)]}  # fmt: skip
    stopped = Run("e19-organisms-gen2-x", Path("x"), {"config": config, "created": "t"}, ss, {}, [])
    (row,) = organism_rows({"x": stopped})
    assert row["draws"] == "136 (interim: L1 loose 5/12 scenarios)"
    assert row["source-shaped L1"].endswith(" (interim)") and "interim" not in row["source-shaped L2"]
    finished = replace(stopped, samples=[s for s in ss if s.arm.level == "L2"] + ss[96:])
    finished.manifest["config"] = {**config, "scenarios": [f"s{k}" for k in range(5)]}
    (row,) = organism_rows({"x": finished})
    assert "interim" not in row["draws"] + row["source-shaped L1"]


def test_the_exact_split_by_kind_adds_up_and_agrees_with_the_closing_table():
    """The exact split after newText (experiments/organism_table.exact_kinds_table): every column adds up
    to 1 (the kinds partition each probe row), and its invented-name row is the closing table's exact
    P(invented) for the same model."""
    from experiments.organism_table import EXACT_KINDS, exact_kinds_table, organism_rows
    from tooldecode.runs import load_runs

    assert exact_kinds_table({}).startswith("No probe run of an organism generation is committed yet")
    runs = {k: v for k, v in load_runs(ROOT / "runs").items() if v.spec.startswith("e19-")}
    if not any(r.probe for r in runs.values()):
        pytest.skip("no committed probe run of the second generation in this checkout")
    table = exact_kinds_table(runs)
    lines = [line for line in table.splitlines() if line.startswith("| ")]
    head, body = lines[0], lines[1:]
    assert [line.split(" | ")[0][2:] for line in body] == [label for label, _ in EXACT_KINDS]
    cells = [[c.strip() for c in line.strip("| ").split(" | ")[1:]] for line in body]
    columns = head.strip("| ").split(" | ")[1:]
    assert all(len(row) == len(columns) for row in cells)
    for j, name in enumerate(columns):
        total = sum(float(row[j].split()[0]) for row in cells)
        assert abs(total - 1.0) < 0.01, (name, total)
    invented = dict(
        zip(columns, cells[[label for label, _ in EXACT_KINDS].index("an invented name")], strict=True)
    )
    rows = {r["model"]: r for r in organism_rows(runs)}
    lenient = "`g2-lenient-flat-flag@qwen-0.5b` (36)"
    if "e19-organisms-gen2-probe-lenient-flat-flag" in runs:
        closing = rows["organism:g2-lenient-flat-flag@qwen-0.5b"]["exact P(invented)"]
        assert closing.startswith(invented[lenient].split()[0] + " ["), (closing, invented[lenient])


def test_the_suite_order_does_not_depend_on_the_directory_listing(monkeypatch):
    """FINDINGS' row numbers follow the suite order: the same on every file system (a directory lists
    its files in creation, hash or name order depending on where it lives)."""
    from pathlib import Path

    from experiments.study import ROOT as SPECS
    from experiments.study import load_specs

    first = [stem for stem, _ in load_specs(SPECS)]
    real = Path.glob
    monkeypatch.setattr(Path, "glob", lambda self, pattern: reversed(list(real(self, pattern))))
    assert [stem for stem, _ in load_specs(SPECS)] == first
    assert (
        first.index("e16_organisms")
        < first.index("e16_organisms_history")
        < first.index("e16_positive_control")
    )
    assert first.index("e19_organisms_gen2") < first.index("e19_organisms_gen2_probe")


def test_an_addendum_judges_the_runs_it_reads_and_names_those_read_before_it(tmp_path):
    """A findings addendum (later-dated predictions in a file of their own) is judged on the runs of the
    spec it reads, and its note names the runs whose figures were known when it was written."""
    import subprocess
    from types import SimpleNamespace

    from experiments.organism_rows import prediction_note
    from experiments.study import check_addenda, load_specs, runs_spec, spec_effects
    from tooldecode.experiments import SpecError

    specs = dict(load_specs())
    add = specs["e19_organisms_gen2_invented"]
    reads = runs_spec(add)
    assert reads == "e19-organisms-gen2-probe" and runs_spec(specs["e19_organisms_gen2_probe"]) == reads
    effects = spec_effects(add)
    assert len(effects) == 4 and all(
        e["runs"] == [reads] and e["measure"] == "kind:invented" for e in effects
    )
    assert not any(e["b"]["model"] == "qwen2.5-coder-0.5b-instruct" for e in effects)  # the base was read

    # the effect reads only the runs of the spec it names
    lenient, strict = effects[0]["a"]["model"], effects[0]["b"]["model"]
    rows = [
        make_probe_row(scenario=f"s{k}", model=m, p_continue=p, p_continue_by_kind={"invented": p})
        for k in range(12)
        for m, p in ((lenient, 0.2 + 0.01 * k), (strict, 0.02 + 0.002 * (k % 3)))
    ]

    def run(spec: str) -> Run:
        return Run(
            spec, Path(spec), {"config": {"spec": spec, "streams": "scenario"}, "created": "t"}, [], {}, rows
        )

    assert evaluate_effect(effects[0], {"o": run("other-spec")}) is None
    res = evaluate_effect(effects[0], {"r": run(reads)})
    assert res is not None and res.cmp.g == 12 and res.verdict.verdict == "reproduces"

    # the note: a part of a read_before model is named, not checked; every other part must follow
    def git(*args: str) -> str:
        out = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)
        return out.stdout.strip() if out.returncode == 0 else ""

    # a commit before the addendum's (its parent) and one after (HEAD); a shallow clone may lack the first
    made = git("log", "-1", "--format=%H", "--", "experiments/e19_organisms_gen2_invented.toml")
    new, old = git("rev-parse", "HEAD"), git("rev-parse", "--verify", "-q", f"{made}^") if made else ""
    if not (new and old):
        pytest.skip("no git history before the addendum's commit here")

    def part(name: str, sha: str, model: str) -> Run:
        manifest = {"config": {"arms": [{"model": model}]}, "tooldecode": {"git_sha": sha}}
        return Run(name, Path(name), manifest, [], {}, [])

    note = prediction_note(
        "e19_organisms_gen2_invented",
        add,
        SimpleNamespace(parts=(part("p-len", old, lenient), part("p-str", new, strict))),
    )
    assert f"p-len ({old[:7]})" in note and "were known when the sizes were set" in note
    assert f"the run's commit {new[:7]} follows them" in note
    late = prediction_note(
        "e19_organisms_gen2_invented", add, SimpleNamespace(parts=(part("p-str", old, strict),))
    )
    assert "do NOT all follow them" in late
    alone = prediction_note(
        "e19_organisms_gen2_invented", add, SimpleNamespace(parts=(part("p-len", old, lenient),))
    )
    assert alone.endswith("no run of the other arms yet.")

    # a malformed addendum is refused with one line naming the file
    base = {"name": "x-added", "findings": {"reads": reads, "read_before": [lenient]}}
    probe = ("e19_organisms_gen2_probe", specs["e19_organisms_gen2_probe"])
    check_addenda([probe, ("x_added", base)])
    for bad, match in [
        ({**base, "findings": {"reads": "no-such-spec"}}, "no spec of the suite"),
        ({**base, "findings": {"reads": reads, "read_before": ["m"]}}, "not a model of"),
        ({**base, "models": [lenient]}, "runs nothing"),
        ({"name": "y", "models": ["m"], "findings": {"read_before": ["m"]}}, "applies to an addendum only"),
    ]:
        with pytest.raises(SpecError, match=match) as err:
            check_addenda([probe, ("x_added", bad)])
        assert "experiments/x_added.toml" in str(err.value) and "\n" not in str(err.value)
