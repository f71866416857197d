"""A call, token by token: the report section draws a strict sample beside its loose twin."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

from tooldecode.report.tokens import decode_piece, pick_pair, pick_pairs, strip_html, token_section

RUN = Path(__file__).resolve().parents[1] / "runs" / "e1-strict-vs-loose-18"


def _records(tmp_path: Path) -> Path:
    base = {"scenario": "s", "seed": 0, "index": 0, "error": None}
    strict = {
        **base,
        "arm": {"model": "m", "mode": "strict"},
        "text": '{"a"}',
        "token_ids": [1, 2],
        "logprobs": [math.log(0.9), math.log(0.02)],
        "top": [[[1, math.log(0.9)], [3, math.log(0.05)]], None],
        "mask_removed": [0.0, 0.4],
    }
    loose = {**strict, "arm": {"model": "m", "mode": "loose"}, "text": '{"b"}', "mask_removed": None}
    other = {**loose, "scenario": "t"}
    run = tmp_path / "run"
    run.mkdir()
    (run / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in (other, strict, loose)))
    return run


def test_the_strip_shows_probability_alternatives_and_mask_mass(tmp_path):
    run = _records(tmp_path)
    strict, loose = pick_pair(run / "samples.jsonl")
    assert strict["arm"]["mode"] == "strict" and loose["arm"]["mode"] == "loose" and loose["scenario"] == "s"
    vocab = {1: "{", 2: '"a"<', 3: "x"}.get
    out = strip_html(strict, vocab)
    spans = re.findall(
        r'<span( class="cut")? style="background:rgba\(220,50,32,([0-9.]+)\)" title="([^"]*)">([^<]*)</span>',
        out,
    )
    assert [s[3] for s in spans] == ["{", "&quot;a&quot;&lt;"]  # escaped text
    assert spans[0][2].startswith(
        "p=0.9000 | top: &#x27;{&#x27; 0.900, &#x27;x&#x27; 0.050 | mask removed 0.0000"
    )
    assert spans[1][0] == ' class="cut"' and "mask removed 0.4000" in spans[1][2]
    assert float(spans[1][1]) > float(spans[0][1])  # the less probable token is shaded deeper


def test_the_section_puts_strict_beside_loose_and_needs_no_network(tmp_path):
    run = _records(tmp_path)
    page = token_section([tmp_path / "missing", run], vocab_of=lambda model: None)
    assert page.startswith("<h2>A call, token by token</h2>")
    assert "<th>strict</th><th>loose</th>" in page and page.count('<div class="tokstrip">') == 2
    assert "tokens show as ids" in page and "#1" in page
    assert "http" not in page and "<script" not in page
    assert token_section([tmp_path / "missing"]) == ""


def test_byte_level_pieces_decode():
    assert decode_piece("Ġhello") == " hello" and decode_piece("Ċ") == "\n" and decode_piece("▁x") == " x"


def test_the_report_page_carries_the_section():
    from tooldecode.report import run_data
    from tooldecode.report.page import summary_html
    from tooldecode.report.summary import summarize

    page = summary_html(summarize([run_data(RUN)]))
    assert "<h2>A call, token by token</h2>" in page
    assert page.index("A call, token by token") < page.index("<h2>Samples</h2>")


def test_the_section_has_a_chooser_over_draws_with_prefix_and_finish_reason(tmp_path):
    run = _records(tmp_path)
    rows = [json.loads(x) for x in (run / "samples.jsonl").read_text().splitlines()]
    more = []
    for i in (1, 2):
        for r in rows[1:]:
            more.append(
                {**r, "index": i, "finish_reason": "length" if i == 2 else "stop", "prefill": "x" * 300}
            )
    (run / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows + more))
    assert len(pick_pairs(run / "samples.jsonl")) == 3
    page = token_section([run], vocab_of=lambda model: None)
    assert page.count("<details") == 3 and page.count("<details open>") == 1
    assert "index 2: strict length, loose length" in page and "finish: length, 2 tokens" in page
    assert "(free: the call starts right after the prompt)" in page  # index 0 has no prefill
    assert '<div class="prefix" title="the forced prefill">…' + "x" * 160 + "</div>" in page
