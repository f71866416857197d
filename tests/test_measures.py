"""tooldecode.measures: one table of measures, each one function with its name and levels."""

from __future__ import annotations

import pytest
from conftest import make_probe_row, make_record

from tooldecode.measures import (
    MEASURES,
    MeasureError,
    known_measures,
    measure,
    measure_of,
    row_measure,
    sample_event,
)

PREFILL = '{"name": "edit", "arguments": {"path": "a.py", "edits": [{"oldText": "x", "newText": "y = 1\\n'
L2 = {"level": "L2", "wire": "call-json", "expected_tool": "edit", "toolset": "nested"}


def _l2(text: str):
    return make_record(text, arm=L2, prefill=PREFILL)


def test_every_measure_is_one_registered_function():
    assert set(known_measures("L2")) >= {
        "continue",
        "close",
        "extra_key",
        "kind:K[+K...]",
        "outcome:O[+O...]",
        "parses",
        "flat_closer",
        "array_closed_by_brace",
    }
    assert known_measures("L1") == ["parses", "source_shaped"]
    assert set(known_measures("L3")) >= {"p_continue", "p_close", "extra_key", "key:NAME"}
    for (name, level), m in MEASURES.items():
        assert m.name == name and level in m.levels and callable(m.fn)
    m, arg = measure_of("kind:repeat+invented", "L2")
    assert (m.name, arg) == ("kind", "repeat+invented")
    assert measure_of("goes_on", "L2")[1] == "string_goes_on"  # an alias spells a measure with its argument


@pytest.mark.parametrize(
    ("spelled", "level"), [("nope", "L2"), ("p_continue", "L2"), ("continue", "L1"), ("kind", "L3")]
)
def test_an_unknown_measure_lists_the_known_ones(spelled, level):
    with pytest.raises(MeasureError) as err:
        measure_of(spelled, level)
    assert f"unknown {level} measure" in str(err.value) and ", ".join(known_measures(level)) in str(err.value)
    assert "\n" not in str(err.value)


def test_samples_and_rows_are_measured_through_the_table():
    extra = _l2('", "matchCase": true}]}}')
    assert sample_event(extra, "extra_key") and sample_event(extra, "kind:invented")
    assert sample_event(extra, "key:matchCase") and not sample_event(extra, "close")
    assert sample_event(_l2('"}]}}'), "close")
    with pytest.raises(MeasureError, match="known at L1: parses, source_shaped"):
        sample_event(make_record("{}", arm={**L2, "level": "L1"}), "extra_key")
    row = make_probe_row(p_continue=0.4, p_continue_by_kind={"invented": 0.1, "declared": 0.3})
    assert row_measure(row, "p_continue") == 0.4 and row_measure(row, "extra_key") == pytest.approx(0.1)
    assert row_measure(make_probe_row(), "extra_key") is None  # no key-resolved mass in the row


def test_a_new_measure_is_one_function_in_the_table():
    try:

        @measure("long_text", ("L2",))
        def _long(s, _):
            return len(s.text) > 10

        assert "long_text" in known_measures("L2") and sample_event(_l2("x" * 11), "long_text")
        with pytest.raises(ValueError, match="registered twice"):
            measure("long_text", ("L2",))(_long)
    finally:
        MEASURES.pop(("long_text", "L2"), None)
