"""The MaskBench script's accounting, on a tiny folder laid out like jsonschemabench's maskbench/data."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _maskbench():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import maskbench
    finally:
        sys.path.pop(0)
    return maskbench


def test_counts_render_refusals_false_accepts_and_valid_accepted(tmp_path):
    mb = _maskbench()
    data = tmp_path / "maskbench" / "data"
    data.mkdir(parents=True)
    schema = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": {"n": {"type": "integer", "minimum": 0}, "when": {"type": "string", "format": "date"}},
        "required": ["n"],
    }
    tests = [
        {"data": {"n": 1}, "valid": True},
        {"data": {"when": "2024-02-29", "n": 2}, "valid": True},
        {"data": {"n": -1}, "valid": False},
        {"data": {"n": 1, "when": "2023-02-29"}, "valid": False},
        {
            "data": {"n": 3},
            "valid": False,
        },  # mislabelled: the grammar accepts it, so it counts as a false accept
    ]
    (data / "Toy---a.json").write_text(json.dumps({"schema": schema, "tests": tests}))
    (data / "Toy---b.json").write_text(json.dumps({"schema": {"$dynamicRef": "#x"}, "tests": []}))
    (data / "Toy---c.json").write_text("{not json")
    res = mb.run(tmp_path, None, 0, 60, ("tooldecode", "xgrammar"))
    ours = res["Toy"]["tooldecode"]
    assert (ours.schemas, ours.rendered) == (2, 1)
    assert ours.refused == {"'$dynamicRef'": 1}
    assert (ours.valid, ours.valid_accepted) == (2, 2)
    assert (ours.invalid, ours.false_accepts) == (3, 1)
    assert "Toy---a.json" in ours.examples[0]
    table = mb.table(res, "cmd")
    assert "| Toy | tooldecode | 2 | 1 (50.0%) | 1 / 3 | 2/2 (100.0%) |" in table


def test_render_only_counts_and_saved_counts_merge(tmp_path):
    mb = _maskbench()
    data = tmp_path / "maskbench" / "data"
    data.mkdir(parents=True)
    doc = {
        "schema": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
        "tests": [{"data": ["a"], "valid": True}],
    }
    (data / "Toy---a.json").write_text(json.dumps(doc))
    res = mb.run(tmp_path, None, 0, 60, ("tooldecode",), render_only=True)
    r = res["Toy"]["tooldecode"]
    assert (r.schemas, r.rendered, r.valid, r.invalid) == (1, 1, 0, 0)
    mb.save_rows(res, tmp_path / "a.json")
    other = {"Toy": {"xgrammar": mb.Row(schemas=1, rendered=0)}}
    other["Toy"]["xgrammar"].refused["RuntimeError"] += 1
    mb.save_rows(other, tmp_path / "b.json")
    merged = mb.load_rows([tmp_path / "a.json", tmp_path / "b.json"])
    assert list(merged["Toy"]) == ["tooldecode", "xgrammar"]
    assert merged["Toy"]["tooldecode"].rendered == 1
    assert merged["Toy"]["xgrammar"].refused == {"RuntimeError": 1}


def test_format_only_instances_and_the_empty_pattern_oracle(tmp_path):
    """An instance labelled invalid only because of a format strict mode leaves unasserted (here 'regex')
    is counted apart from false accepts; an empty patternProperties pattern matches every name (the
    oracle works around jsonschema, which treats a lone "" as matching nothing)."""
    mb = _maskbench()
    data = tmp_path / "maskbench" / "data"
    data.mkdir(parents=True)
    fmt = {"type": "object", "properties": {"r": {"type": "string", "format": "regex"}}, "required": ["r"]}
    tests = [{"data": {"r": "a+"}, "valid": True}, {"data": {"r": "*"}, "valid": False}]
    (data / "Toy---f.json").write_text(json.dumps({"schema": fmt, "tests": tests}))
    links = {
        "type": "object",
        "patternProperties": {"": {"type": "object", "properties": {"h": {"type": "string"}}}},
    }
    tests = [{"data": {"x": {"h": "a"}}, "valid": True}, {"data": {"x": {"h": 1}}, "valid": False}]
    (data / "Toy---p.json").write_text(json.dumps({"schema": links, "tests": tests}))
    res = mb.run(tmp_path, None, 0, 60, ("tooldecode",), save=tmp_path / "s.json")
    r = res["Toy"]["tooldecode"]
    assert (r.false_accepts, r.invalid, r.format_only, r.format_only_accepted) == (0, 1, 1, 1)
    assert (r.valid, r.valid_accepted) == (2, 2)
    assert json.loads((tmp_path / "s.json").read_text())["Toy"]["tooldecode"]["format_only"] == 1
    assert mb.oracle_schema(links)["patternProperties"] == {"(?:)": links["patternProperties"][""]}


def test_an_invalid_instance_is_checked_only_in_texts_of_itself():
    """The canonical serializer writes 12345.0 as 12345; under draft-04 the label says 12345.0 is not an
    integer, so the canonical text is a different instance and must not count as a false accept."""
    mb = _maskbench()
    assert mb.same_text('{"a":1}', {"a": 1}) and not mb.same_text('{"a":1}', {"a": 1.0})
