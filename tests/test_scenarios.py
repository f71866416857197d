"""Scenario files: loading, validation, applying edits, the built-in corpus and the CLI."""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter
from pathlib import Path

import pytest
import yaml

from tooldecode.cli.scenarios import register
from tooldecode.errors import ScenarioError
from tooldecode.scenarios import (
    Edit,
    Scenario,
    apply_edits,
    builtin_dir,
    check_scenario,
    get_scenario,
    line_count,
    load_scenario,
    load_scenarios,
    standard_tags,
)

CONTENT = "def f(x):\n    return x + 1\n\n\ndef g(y):\n    return y * 2\n"


def base(**changes: object) -> dict:
    data: dict = {
        "id": "t-one",
        "title": "f adds instead of subtracting",
        "language": "python",
        "path": "src/t.py",
        "tags": ["single-edit", "mid-file"],
        "task": "f(3) should be 2. Fix src/t.py",
        "content": CONTENT,
        "reasoning": {"read": "Let me read the file.", "edit": "One line to change."},
        "diagnosis": "f adds 1 where it should subtract 1.",
        "edits": [{"oldText": "    return x + 1\n", "newText": "    return x - 1\n"}],
        "expected": CONTENT.replace("x + 1", "x - 1"),
    }
    data.update(changes)
    return data


def write(folder: Path, data: dict | str, name: str | None = None) -> Path:
    if isinstance(data, dict):
        name = name or f"{data.get('id', 'x')}.yaml"
        text = yaml.safe_dump(data, allow_unicode=True, sort_keys=False)
    else:
        text = data
    path = folder / (name or "x.yaml")
    path.write_text(text, encoding="utf-8")
    return path


def make(**changes: object) -> Scenario:
    d = base(**changes)
    edits = tuple(Edit(e["oldText"], e["newText"]) for e in d["edits"])
    return Scenario(
        id=d["id"],
        language=d["language"],
        title=d["title"],
        path=d["path"],
        content=d["content"],
        task=d["task"],
        diagnosis=d["diagnosis"],
        reasoning=d["reasoning"],
        edits=edits,
        expected=d["expected"],
        tags=tuple(d["tags"]),
    )


# ------------------------------------------------------------------------------------------- loading


def test_load_valid_file(tmp_path: Path) -> None:
    s = load_scenario(write(tmp_path, base()))
    assert s.id == "t-one"
    assert s.edits == (Edit("    return x + 1\n", "    return x - 1\n"),)
    assert s.reasoning == {"read": "Let me read the file.", "edit": "One line to change."}
    assert s.tags == ("single-edit", "mid-file")
    assert s.source == tmp_path / "t-one.yaml"
    assert check_scenario(s) == []
    assert s.apply() == s.expected


def test_load_json_file_and_optional_fields(tmp_path: Path) -> None:
    data = base()
    del data["reasoning"], data["tags"]
    path = tmp_path / "t-one.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    s = load_scenario(path)
    assert s.reasoning == {} and s.tags == ()
    assert check_scenario(s) == []


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("id: [unclosed\n", "invalid YAML"),
        ("content: |\n\tfoo\n", "invalid YAML"),
        ("- a\n- b\n", "top level"),
        ("id: a\nid: b\n", "duplicate key"),
    ],
)
def test_malformed_yaml_is_one_line_error(tmp_path: Path, text: str, needle: str) -> None:
    path = write(tmp_path, text, "bad.yaml")
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    message = str(info.value)
    assert "\n" not in message
    assert str(path) in message and needle in message


def test_bad_json_and_bad_encoding(tmp_path: Path) -> None:
    bad_json = tmp_path / "a.json"
    bad_json.write_text('{"id": "a",}', encoding="utf-8")
    with pytest.raises(ScenarioError, match="invalid JSON"):
        load_scenario(bad_json)
    latin1 = tmp_path / "b.yaml"
    latin1.write_bytes("title: caf\xe9\n".encode("latin-1"))
    with pytest.raises(ScenarioError, match="UTF-8"):
        load_scenario(latin1)


@pytest.mark.parametrize(
    ("changes", "removed", "field"),
    [
        ({}, "diagnosis", "'diagnosis': missing"),
        ({}, "expected", "'expected': missing"),
        ({"content": 42}, None, "'content': expected a string, got int"),
        ({"id": None}, None, "'id': expected a string, got null"),
        ({"edits": []}, None, "'edits': expected a non-empty list"),
        ({"edits": "x"}, None, "'edits': expected a non-empty list"),
        ({"edits": [{"oldText": "a"}]}, None, "'edits[0].newText': missing"),
        ({"edits": [{"oldText": "a", "newText": 3}]}, None, "'edits[0].newText': expected a string"),
        ({"edits": [{"oldText": "a", "newText": "b", "kind": "x"}]}, None, "'edits[0].kind': unknown"),
        ({"edits": ["a"]}, None, "'edits[0]': expected a mapping"),
        ({"reasoning": {"plan": "x"}}, None, "'reasoning.plan': unknown"),
        ({"reasoning": "x"}, None, "'reasoning': expected a mapping"),
        ({"tags": "multi-edit"}, None, "'tags': expected a list"),
        ({"tags": [1]}, None, "'tags[0]': expected a string"),
        ({"file": "x"}, None, "'file': unknown field"),
    ],
)
def test_structural_errors_name_the_field(
    tmp_path: Path, changes: dict, removed: str | None, field: str
) -> None:
    data = base(**changes)
    if removed:
        del data[removed]
    path = write(tmp_path, data, "t-one.yaml")
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(str(path)) and field in message


def test_load_scenarios_sorted_unique_and_dirs(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    write(a, base(id="t-zeta"))
    write(b, base(id="t-alpha"))
    (a / "notes.txt").write_text("not a scenario", encoding="utf-8")
    assert [s.id for s in load_scenarios([a, b])] == ["t-alpha", "t-zeta"]
    assert get_scenario("t-zeta", [a, b]).source == a / "t-zeta.yaml"
    write(b, base(id="t-zeta"))
    with pytest.raises(ScenarioError, match="'t-zeta' is also used by"):
        load_scenarios([a, b])
    with pytest.raises(ScenarioError, match="no such scenario folder"):
        load_scenarios([tmp_path / "missing"])


def test_get_scenario_unknown_suggests() -> None:
    with pytest.raises(ScenarioError, match="did you mean py-pagination-off-by-one"):
        get_scenario("py-pagination-off-by-on")


# ------------------------------------------------------------------------------------------- applying


def test_apply_edits_in_order() -> None:
    # the second edit matches text the first one produced
    edits = [Edit("x + 1", "x + 10"), Edit("x + 10", "x + 100")]
    assert apply_edits(CONTENT, edits) == CONTENT.replace("x + 1", "x + 100")
    assert apply_edits("abc", []) == "abc"


@pytest.mark.parametrize(
    ("edits", "needle"),
    [
        ([Edit("nowhere", "x")], "edits[0].oldText: occurs 0 times"),
        ([Edit("return", "x")], "edits[0].oldText: occurs 2 times"),
        ([Edit("", "x")], "edits[0].oldText: is empty"),
        ([Edit("x + 1", "y * 2"), Edit("y * 2", "z")], "edits[1].oldText: occurs 2 times in the file after"),
    ],
)
def test_apply_edits_errors(edits: list[Edit], needle: str) -> None:
    with pytest.raises(ScenarioError) as info:
        apply_edits(CONTENT, edits)
    assert needle in str(info.value)


def test_overlapping_occurrences_count_as_two() -> None:
    with pytest.raises(ScenarioError, match="occurs 2 times"):
        apply_edits("aaa", [Edit("aa", "b")])


def test_scenario_apply_names_the_scenario() -> None:
    s = make()
    assert s.apply([Edit("y * 2", "y * 3")]) == CONTENT.replace("y * 2", "y * 3")
    with pytest.raises(ScenarioError, match=r"^scenario t-one: edits\[0\]\.oldText: occurs 0 times"):
        s.apply([Edit("missing", "x")])


def test_sha256_is_stable_and_content_sensitive(tmp_path: Path) -> None:
    s = make()
    assert s.sha256() == make().sha256()
    # pinned: run manifests record these hashes, so the canonical form must not drift
    assert s.sha256() == "a13b10c842ff60696f2c2e59595f8a473b58141411535dce9cdce2e7253b4111"
    loaded = load_scenario(write(tmp_path, base()))
    assert loaded.sha256() == s.sha256()  # where it was loaded from does not matter
    assert make(diagnosis="other").sha256() != s.sha256()
    assert make(reasoning={"read": "x"}).sha256() != s.sha256()
    assert make(tags=["single-edit"]).sha256() != s.sha256()


# ------------------------------------------------------------------------------------------- checking


@pytest.mark.parametrize(
    ("changes", "needle"),
    [
        ({"edits": [{"oldText": "nowhere\n", "newText": "x"}]}, "t-one: edits[0].oldText: occurs 0 times"),
        ({"edits": [{"oldText": "    return", "newText": "x"}]}, "t-one: edits[0].oldText: occurs 2 times"),
        (
            {
                "edits": [
                    {"oldText": "def f(x):\n    return", "newText": "def f(x):\n    yield"},
                    {"oldText": "return x + 1", "newText": "return x - 1"},
                ]
            },
            "t-one: edits[1].oldText: overlaps edits[0].oldText",
        ),
        ({"expected": CONTENT}, "t-one: expected: differs from content with the gold edits applied: line 2"),
        (
            {"expected": CONTENT.replace("x + 1", "x - 1").rstrip("\n")},
            "t-one: expected: differs from content with the gold edits applied: trailing newlines differ",
        ),
        ({"edits": [{"oldText": "x + 1", "newText": "x + 1"}]}, "t-one: edits[0].newText: equals oldText"),
        ({"id": "T_one"}, "T_one: id: 'T_one' is not kebab-case"),
        ({"path": "/etc/passwd"}, "t-one: path: '/etc/passwd' must be relative"),
        ({"diagnosis": "  "}, "t-one: diagnosis: is empty"),
        ({"tags": ["multi-edit"]}, "t-one: tags: 'multi-edit' does not hold"),
        ({"tags": ["long-newtext"]}, "t-one: tags: 'long-newtext' does not hold"),
        ({"tags": ["escapes"]}, "t-one: tags: 'escapes' does not hold"),
        ({"tags": ["single-edit", "single-edit"]}, "t-one: tags: lists a tag twice"),
    ],
)
def test_check_problems_name_scenario_and_field(changes: dict, needle: str) -> None:
    problems = check_scenario(make(**changes))
    assert any(needle in p for p in problems), problems
    assert all("\n" not in p for p in problems)


def test_check_mid_file_tag_needs_code_after_an_edit() -> None:
    last = "    return y * 2\n"
    s = make(
        edits=[{"oldText": last, "newText": "    return y * 3\n"}], expected=CONTENT.replace("y * 2", "y * 3")
    )
    assert any("'mid-file' does not hold" in p for p in check_scenario(s))


def test_check_id_must_match_file_name(tmp_path: Path) -> None:
    s = load_scenario(write(tmp_path, base(), "other-name.yaml"))
    assert any("t-one: id: differs from the file name 'other-name.yaml'" in p for p in check_scenario(s))


def test_standard_tags_and_line_count() -> None:
    assert line_count("") == 0
    assert line_count("a") == 1
    assert line_count("a\n") == 1
    assert line_count("a\nb") == 2
    assert line_count("a\n\n") == 2
    long_new = "".join(f'    print("\\t{i}")\n' for i in range(40)) + "\tcafé\n"
    s = make(
        edits=[
            {"oldText": "    return y * 2\n", "newText": long_new},
            {"oldText": "x + 1", "newText": "x - 1"},
        ],
        expected="",
    )
    assert standard_tags(s) == {
        "multi-edit",
        "long-newtext",
        "very-long-newtext",
        "escapes",
        "non-ascii",
        "tabs",
    }
    assert standard_tags(make()) == {"single-edit"}


# ------------------------------------------------------------------------------------------- the corpus

MAIN_LANGUAGES = {"python", "typescript", "go", "rust", "c"}
CONFIG_LANGUAGES = {"yaml", "toml", "json"}


@pytest.fixture(scope="module")
def corpus() -> list[Scenario]:
    return load_scenarios()


def test_corpus_loads_and_checks_clean(corpus: list[Scenario]) -> None:
    ids = [s.id for s in corpus]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    for s in corpus:
        assert check_scenario(s) == [], s.id
        assert s.apply() == s.expected
        assert s.source is not None and s.source.parent == builtin_dir()


def test_corpus_files_parse_the_same_with_every_yaml_loader() -> None:
    # libyaml and pure-Python PyYAML disagree on some block scalars (e.g. a first line starting with a tab)
    loaders = [yaml.SafeLoader] + ([yaml.CSafeLoader] if hasattr(yaml, "CSafeLoader") else [])
    for path in sorted(builtin_dir().glob("*.yaml")):
        text = path.read_text(encoding="utf-8")
        parsed = [yaml.load(text, Loader=loader) for loader in loaders]
        assert all(p == parsed[0] for p in parsed), path.name


def test_corpus_meets_its_counts(corpus: list[Scenario]) -> None:
    """The corpus may grow but must not silently shrink below what the experiments rely on."""
    assert len(corpus) >= 32
    languages = Counter(s.language for s in corpus)
    assert all(languages[lang] >= 4 for lang in MAIN_LANGUAGES), languages
    assert sum(languages[lang] for lang in CONFIG_LANGUAGES) >= 3, languages
    assert languages["markdown"] >= 2, languages

    multi = [s for s in corpus if len(s.edits) > 1]
    assert len(multi) >= 10
    assert all(2 <= len(s.edits) <= 4 for s in multi)

    longest = {s.id: max(line_count(e.new_text) for e in s.edits) for s in corpus}
    assert sum(n >= 15 for n in longest.values()) >= 6
    assert sum(n >= 40 for n in longest.values()) >= 3
    assert min(line_count(e.new_text) for s in corpus for e in s.edits) == 1

    def edit_text(s: Scenario) -> str:
        return "".join(e.old_text + e.new_text for e in s.edits)

    assert sum("escapes" in standard_tags(s) for s in corpus) >= 6
    assert sum("\\" in edit_text(s) for s in corpus) >= 6  # regexes, Windows paths, C escapes
    assert sum(bool(re.search(r"[^\x00-\x7f]", edit_text(s))) for s in corpus) >= 4
    assert sum(bool(re.search(r"[\u3040-\u30ff\u4e00-\u9fff]", edit_text(s))) for s in corpus) >= 1  # CJK
    assert sum("\t" in edit_text(s) for s in corpus) >= 3
    assert sum("mid-file" in s.tags for s in corpus) >= 5
    assert sum("end-of-function" in s.tags for s in corpus) >= 5

    for s in corpus:
        assert 30 <= line_count(s.content) <= 150, s.id
        assert standard_tags(s) <= set(s.tags), (s.id, standard_tags(s) - set(s.tags))
        assert set(s.reasoning) == {"read", "edit"}, s.id
        sentences = len(re.findall(r"[.!?](?:\s|$)", s.diagnosis.strip()))
        assert 1 <= sentences <= 4, (s.id, sentences)


def test_docs_example_is_a_valid_scenario(tmp_path: Path) -> None:
    docs = Path(__file__).resolve().parents[1] / "docs" / "scenarios.md"
    example = re.findall(r"```yaml\n(.*?)```", docs.read_text(encoding="utf-8"), re.S)[-1]
    s = load_scenario(write(tmp_path, example, "py-pagination-off-by-one.yaml"))
    assert check_scenario(s) == []


# ------------------------------------------------------------------------------------------- CLI


def run_cli(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="tooldecode")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(list(argv))
    return args.func(args)


def test_cli_check_builtin(capsys: pytest.CaptureFixture[str], corpus: list[Scenario]) -> None:
    assert run_cli("scenarios", "check") == 0
    assert capsys.readouterr().out == f"{len(corpus)} scenarios OK\n"


def test_cli_check_reports_each_problem_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path, base())
    write(tmp_path, "id: [oops\n", "broken.yaml")
    write(tmp_path, base(id="t-two", edits=[{"oldText": "nowhere", "newText": "x"}]))
    bad = base(id="t-three")
    del bad["task"]
    write(tmp_path, bad)
    assert run_cli("scenarios", "check", str(tmp_path)) == 1
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert len(lines) == 3, lines
    assert any("broken.yaml" in line and "invalid YAML" in line for line in lines)
    assert any("t-two.yaml: t-two: edits[0].oldText: occurs 0 times" in line for line in lines)
    assert any("t-three.yaml: field 'task': missing" in line for line in lines)
    assert "Traceback" not in captured.out + captured.err


def test_cli_check_duplicate_ids_and_missing_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    write(a, base())
    write(b, base())
    assert run_cli("scenarios", "check", str(a), str(b)) == 1
    assert "t-one: id: also used by" in capsys.readouterr().out
    assert run_cli("scenarios", "check", str(tmp_path / "nope")) == 1
    assert "no such scenario folder" in capsys.readouterr().out
    assert run_cli("scenarios", "check", str(a / "t-one.yaml")) == 0


def test_cli_list(capsys: pytest.CaptureFixture[str], corpus: list[Scenario]) -> None:
    assert run_cli("scenarios", "list") == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:3] == ["id", "language", "edits"]
    assert len(out) == len(corpus) + 1
    row = next(line for line in out if line.startswith("c-ringbuf-full-empty "))
    assert row.split()[1:4] == ["c", "4", "8,1,2,2"]
    assert run_cli("scenarios", "list", "--tag", "very-long-newtext") == 0
    rows = capsys.readouterr().out.splitlines()[1:]
    assert rows and all("very-long-newtext" in row for row in rows)
