"""The wire table (tooldecode.grammar.wire): one home for every wire's delimiters, read by every stage."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tooldecode.grammar import WIRE_FORMATS, WIRES, GrammarError, compile_schema, serialize_call, wire_format
from tooldecode.grammar.framing import serialize
from tooldecode.grammar.wire import (
    ANTML_INVOKE,
    ANTML_INVOKE_CLOSE,
    ANTML_PARAMETER,
    ANTML_PARAMETER_CLOSE,
    HARMONY_HEAD,
)
from tooldecode.prompts.wires import stop_strings

PACKAGE = Path(__file__).resolve().parents[1] / "tooldecode"
HOME = PACKAGE / "grammar" / "wire.py"


def _delimiters() -> set[str]:
    """Every delimiter the table spells: each wire's opening and closing text (harmony's head in its
    pieces around the tool name, and each of its special tokens), the antml element tags."""
    out: set[str] = set()
    for text in [w.open for w in WIRE_FORMATS.values()] + [w.close for w in WIRE_FORMATS.values()]:
        out.update(p for p in text.split("{name}") if p)
    out.update(re.findall(r"<\|\w+\|>", HARMONY_HEAD))
    for tag in (ANTML_INVOKE, ANTML_PARAMETER):
        out.add(tag.split("{name}")[0])
    out.update({ANTML_INVOKE_CLOSE, ANTML_PARAMETER_CLOSE})
    return out


def _spellings() -> set[str]:
    """The delimiters as written in text and in regular expressions (``<\\|call\\|>``)."""
    out = set()
    for d in _delimiters():
        out |= {d, re.escape(d), d.replace("|", r"\|")}
    return out


def _spelled(source: str) -> list[str]:
    """The string constants of ``source`` (docstrings aside) that hold a delimiter."""
    tree = ast.parse(source)
    docs = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    spellings = _spellings()
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
        if any(s in node.value for s in spellings)
    ]


def test_no_module_but_the_wire_table_spells_a_delimiter():
    bad = {
        str(p.relative_to(PACKAGE.parent)): hits
        for p in sorted(PACKAGE.rglob("*.py"))
        if p != HOME
        if (hits := _spelled(p.read_text(encoding="utf-8")))
    }
    assert not bad, f"take these delimiters from tooldecode.grammar.wire.WIRE_FORMATS: {bad}"


def test_the_delimiter_scan_sees_what_it_checks():
    assert {"<tool_call>", "</tool_call>", "<function_calls>", "</parameter>", "<|call|>", "<|message|>"} <= (
        _delimiters()
    )
    assert _spelled(HOME.read_text(encoding="utf-8"))  # the table itself spells them
    assert _spelled('x = f"{a}</tool_call>"\nrx = r"<\\|call\\|>"')
    assert not _spelled('"""A docstring may name <tool_call>."""\nx = 1')


def test_every_wire_has_one_row():
    assert tuple(WIRE_FORMATS) == WIRES == ("json", "call-json", "hermes", "antml", "harmony", "call-list")
    assert all(w.name == name for name, w in WIRE_FORMATS.items())
    with pytest.raises(GrammarError, match="unknown wire format 'xml'; use one of json, call-json"):
        wire_format("xml")


@pytest.mark.parametrize("wire", WIRES)
def test_the_canonical_call_is_framed_by_the_table(wire):
    w = wire_format(wire)
    sir = compile_schema({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]})
    text = serialize("read", sir, {"path": "a.py"}, wire=wire, ws="compact", ws_max=None)
    assert text.startswith(w.open.format(name="read") + w.pad)
    assert text.endswith(w.pad + w.close)
    body = text.removeprefix(w.open.format(name="read") + w.pad).removeprefix("[")
    assert w.envelope == body.startswith('{"name"')
    assert serialize_call("read", {"path": "a.py"}, wire=wire, ws="compact").endswith(w.close)


def test_stop_strings_are_the_closing_text():
    assert stop_strings("qwen2.5", "hermes")[:1] == ("</tool_call>",)
    assert stop_strings("qwen2.5", "antml")[:1] == ("</function_calls>",)
    assert stop_strings("qwen2.5", "harmony")[:1] == ("<|call|>",)
    assert stop_strings("smollm2", "call-list")[:1] == ("</tool_call>",)
    assert stop_strings("qwen2.5", "call-json") == ("<|im_end|>", "<|endoftext|>")


@pytest.mark.parametrize("wire", ["hermes", "harmony", "call-list"])
def test_the_forbidden_delimiter_never_occurs_raw_in_a_json_value(wire):
    w = wire_format(wire)
    text = serialize_call("bash", {"command": f"echo {w.forbid}"}, wire=wire)
    assert w.forbid == w.close and text.count(w.forbid) == 1 and text.endswith(w.close)


def test_a_raw_antml_parameter_cannot_hold_its_closing_tag():
    with pytest.raises(GrammarError, match="cannot contain '</parameter>'"):
        serialize_call("bash", {"command": f"echo {ANTML_PARAMETER_CLOSE}"}, wire="antml")
