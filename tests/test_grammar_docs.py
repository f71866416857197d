"""The public API of ``tooldecode.grammar`` (what other harnesses import) has numpy-style docstrings, and
their examples run."""

from __future__ import annotations

import doctest
import importlib
import inspect
import re

import pytest

import tooldecode.grammar as grammar

PUBLIC = [(n, getattr(grammar, n)) for n in grammar.__all__]
FUNCTIONS = [(n, o) for n, o in PUBLIC if inspect.isfunction(o)]
CLASSES = [(n, o) for n, o in PUBLIC if inspect.isclass(o)]


def _section(doc: str, title: str) -> str | None:
    """The body of a numpy-style section (``title`` underlined with dashes), up to the next section."""
    m = re.search(rf"^{title}\n-{{{len(title)}}}\n(.*?)(?=^\w[\w ]*\n-{{3,}}\n|\Z)", doc, re.S | re.M)
    return m.group(1) if m else None


@pytest.mark.parametrize(("name", "fn"), FUNCTIONS, ids=[n for n, _ in FUNCTIONS])
def test_every_public_function_documents_its_parameters_and_result(name, fn):
    doc = inspect.getdoc(fn) or ""
    assert doc.split("\n", 1)[0].strip(), f"{name}: no summary line"
    params = [p for p in inspect.signature(fn).parameters if p not in ("self", "cls")]
    if params:
        body = _section(doc, "Parameters")
        assert body is not None, f"{name}: no 'Parameters' section"
        # a line "name : type", or several names sharing one description ("wire, ws, mode" or "a, b : int")
        heads = re.findall(r"^(\w+(?:, \w+)*)(?:\s*:|$)", body, re.M)
        named = {n for h in heads for n in h.split(", ")}
        assert set(params) <= named, f"{name}: parameters {sorted(set(params) - named)} are not described"
    assert _section(doc, "Returns") is not None, f"{name}: no 'Returns' section"


@pytest.mark.parametrize(("name", "cls"), CLASSES, ids=[n for n, _ in CLASSES])
def test_every_public_class_has_a_docstring(name, cls):
    assert (cls.__doc__ or "").strip(), f"{name}: no docstring"


def test_the_documented_examples_run():
    """Every ``Examples`` block of the modules the public API lives in runs as written."""
    modules = sorted({o.__module__ for _, o in FUNCTIONS + CLASSES} | {grammar.__name__})
    attempted = 0
    for mod in modules:
        result = doctest.testmod(importlib.import_module(mod), optionflags=doctest.ELLIPSIS)
        assert result.failed == 0, f"{mod}: {result.failed} failing example(s)"
        attempted += result.attempted
    assert attempted >= len(FUNCTIONS)
