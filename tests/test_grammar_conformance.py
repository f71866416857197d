"""JSON-Schema-Test-Suite (draft 2020-12) in spec mode: no false accepts, by engines we did not write."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SUITE = ROOT.parent / "shared" / "data" / "json-schema-test-suite" / "tests" / "draft2020-12"
if not SUITE.is_dir():
    SUITE = Path("/work/shared/data/json-schema-test-suite/tests/draft2020-12")

pytestmark = pytest.mark.skipif(not SUITE.is_dir(), reason="JSON-Schema-Test-Suite not available")


def _conformance():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import conformance
    finally:
        sys.path.pop(0)
    return conformance


FAST_FILES = [
    "properties.json",
    "required.json",
    "additionalProperties.json",
    "enum.json",
    "const.json",
    "anyOf.json",
    "oneOf.json",
    "items.json",
    "prefixItems.json",
    "minLength.json",
    "maxLength.json",
    "pattern.json",
    "minimum.json",
    "exclusiveMinimum.json",
    "type.json",
    "not.json",
]


def test_fast_subset_has_no_false_accepts():
    c = _conformance()
    results = c.run(SUITE, FAST_FILES, c.ENGINES)
    assert {r.name for r in results} == set(FAST_FILES)
    tests = sum(r.tests for r in results)
    passed = sum(r.passed for r in results)
    assert sum(r.false_accept for r in results) == 0, [n for r in results for n in r.notes if "FALSE" in n]
    assert sum(r.disagreements for r in results) == 0
    assert passed / tests >= 0.9, (passed, tests)


@pytest.mark.slow
def test_full_suite_meets_targets():
    c = _conformance()
    results = c.run(SUITE, None, c.ENGINES)
    tests = sum(r.tests for r in results)
    passed = sum(r.passed for r in results)
    assert sum(r.false_accept for r in results) == 0, [n for r in results for n in r.notes if "FALSE" in n]
    assert sum(r.disagreements for r in results) == 0
    assert passed / tests >= 0.60, (passed, tests)
    assert c.COMMAND in c.table([("draft2020-12", results)], 0.0, c.ENGINES)


def test_published_table_is_present():
    text = (ROOT / "docs" / "conformance.md").read_text()
    assert _conformance().COMMAND in text and "0 false accepts" in text
