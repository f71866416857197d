"""`make demo` answers in at most 15 lines, and its report opens with the answer."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _demo():
    spec = importlib.util.spec_from_file_location("demo", ROOT / "scripts" / "demo.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_answer_names_what_was_written_the_invented_keys_and_the_cost(tmp_path):
    demo = _demo()
    rows, verdicts = [], []
    texts = {
        "loose": ['", "replace_all": true}]}}', '"}]}}', '", "replace_all": false}]}}'],
        "strict": ['"}]}}'] * 3,
    }
    for mode, xs in texts.items():
        for i, t in enumerate(xs):
            key = f"{mode}/{i}"
            rows.append(
                {
                    "key": key,
                    "arm": {"mode": mode},
                    "text": t,
                    "mask_removed": [0.0, 0.2] if mode == "strict" else None,
                }
            )
            inv = [{"key": "replace_all", "path": "edits[0]"}] if "replace_all" in t else []
            verdicts.append(
                {
                    "key": key,
                    "verdict": "invented_key" if inv else "valid",
                    "invented_keys": inv,
                    "payload": {"file_correct": True},
                }
            )
    (tmp_path / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "verdicts-s2.jsonl").write_text("".join(json.dumps(v) + "\n" for v in verdicts))
    lines = demo.answer(tmp_path, "m", 90.0)
    assert len(lines) <= 14  # the report's path makes 15
    text = "\n".join(lines)
    assert 'invented key "replace_all" 2/3' in text and "closed the edit 1/3" in text
    assert "an extra key after newText, loose:  2/3 = 67% [" in text and "(2 invented)" in text
    assert "an extra key after newText, strict: 0/3 = 0% [0, " in text
    assert "removed over 1% of the probability at 3/6 tokens (50.0%), 20% on average there" in text
    page = tmp_path / "report.html"
    page.write_text("<html><body><h1>tooldecode report</h1></body></html>")
    demo.lead_report(page, lines)
    body = page.read_text()
    assert body.index("The answer") < body.index("tooldecode report") and "2/3 = 67%" in body
