"""`tooldecode grammar` on unusual input: one-line errors, deep nesting, regex safety, tool files."""

from __future__ import annotations

import json
import re
import signal

import pytest

from tooldecode.grammar import GrammarError, InvalidSchemaError, build_grammar, compile_schema, render
from tooldecode.grammar.regex import backtracking_safe, deterministic
from tooldecode.grammar.schema import MAX_DEPTH


def _main(argv):
    from tooldecode.cli import main

    return main(argv)


def _nested_objects(levels: int) -> dict:
    s: dict = {"type": "string"}
    for _ in range(levels):
        s = {"type": "object", "properties": {"a": s}, "required": ["a"]}
    return s


@pytest.mark.parametrize("levels", [140, 400])
def test_deeply_nested_schema_is_a_one_line_error(tmp_path, capsys, levels):
    p = tmp_path / "deep.json"
    p.write_text(json.dumps(_nested_objects(levels)))
    assert _main(["grammar", str(p)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nested" in err and "Traceback" not in err


def test_json_nested_beyond_the_parser_is_a_one_line_error(tmp_path, capsys):
    p = tmp_path / "deeper.json"
    p.write_text("[" * 100000 + "]" * 100000)
    assert _main(["grammar", str(p)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nested too deeply" in err


@pytest.mark.parametrize("fmt", ["gbnf", "lark", "regex"])
def test_schema_at_the_depth_limit_renders(fmt):
    s = _nested_objects(MAX_DEPTH // 2 - 1)
    text = render(s, format=fmt, wire="hermes", name="t", ws="bounded")
    assert text
    with pytest.raises(GrammarError, match="nested"):
        render(_nested_objects(MAX_DEPTH // 2 + 1), format=fmt)


def test_directory_is_named_as_a_directory(tmp_path, capsys):
    assert _main(["grammar", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is a directory" in err and "no such file" not in err


def test_invalid_type_does_not_suggest_lenient(tmp_path, capsys):
    p = tmp_path / "s.json"
    p.write_text(json.dumps({"type": "object", "properties": {"a": {"type": "str"}}}))
    for extra in ([], ["--lenient"]):
        assert _main(["grammar", str(p), *extra]) == 2
        err = capsys.readouterr().err
        assert "'type'" in err and "/properties/a/type" in err and "lenient" not in err and "string" in err
    with pytest.raises(InvalidSchemaError):
        compile_schema({"type": "str"}, lenient=True)


def test_tool_file_without_parameters_is_refused_not_read_as_schema(tmp_path, capsys):
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"name": "search", "description": "Search the web"}))
    assert _main(["grammar", str(p)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'parameters'" in err and "search" in err


@pytest.mark.parametrize("key", ["parameters", "input_schema", "inputSchema", "openai"])
def test_tool_file_spellings(tmp_path, capsys, key):
    params = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
    data = (
        {"type": "function", "function": {"name": "search", "parameters": params}}
        if key == "openai"
        else {"name": "search", key: params}
    )
    p = tmp_path / "t.json"
    p.write_text(json.dumps(data))
    assert _main(["grammar", str(p), "--wire", "call-json"]) == 0
    assert '\\"search\\"' in capsys.readouterr().out


def _alarm(seconds: int):
    def handler(signum, frame):
        raise TimeoutError("regex match did not finish")

    signal.signal(signal.SIGALRM, handler)
    signal.alarm(seconds)


@pytest.mark.parametrize("pattern", ["^(a|aa)+$", "^(a+)+b$", "^([a-z]+ ?)*$", "^(\\w+\\s?)*$"])
def test_regex_format_does_not_backtrack_exponentially(pattern):
    rx = re.compile(render({"type": "string", "pattern": pattern}, format="regex"))
    assert rx.fullmatch('"aaaa"') or pattern.endswith("b$")
    _alarm(20)
    try:
        for n in (24, 32, 40):
            assert not rx.fullmatch('"' + "a" * n + '!"')
    finally:
        signal.alarm(0)


def test_regex_determinism_is_reported():
    from tooldecode.grammar import automata as A

    assert not deterministic(A.rep(A.alt(A.lit("a"), A.lit("aa")), 1, None))
    assert deterministic(A.rep(A.lit("ab"), 0, None))
    single = build_grammar([("", compile_schema({"type": "string", "pattern": "^(a|aa)+$"}))])
    assert backtracking_safe(single)
    overlap = {"type": "array", "items": {"anyOf": [{"type": "integer"}, {"type": "number"}]}}
    assert not backtracking_safe(build_grammar([("", compile_schema(overlap))]))


def test_cli_notes_regexes_meant_for_automaton_engines(tmp_path, capsys):
    p = tmp_path / "s.json"
    p.write_text(json.dumps({"type": "array", "items": {"anyOf": [{"type": "integer"}, {"type": "number"}]}}))
    assert _main(["grammar", str(p), "--format", "regex"]) == 0
    assert "automaton-based engine" in capsys.readouterr().err
    q = tmp_path / "t.json"
    q.write_text(json.dumps({"type": "string", "pattern": "^(a|aa)+$"}))
    assert _main(["grammar", str(q), "--format", "regex"]) == 0
    assert "automaton" not in capsys.readouterr().err
