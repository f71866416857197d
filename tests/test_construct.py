"""The construct, extended: the lenient item scan, the undeclared item keys and the kind of each name,
chains, the competence measures (the call parses, the flat-closer bleed), the richness estimate, and
the figures of the committed lenient organism run."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import pytest
from conftest import make_record

from tooldecode.construct import (
    DECLARED_VARIANT,
    NAME_KINDS,
    NEVER_SEEN,
    PROMPT_WORD,
    STRAY_POOL,
    TRAINING_TEXT,
    NameSources,
    chains,
    declared_variant,
    kind_counts,
    name_kinds,
    name_richness,
    occurs,
    organism_recipe,
    prompt_words,
    scan_items,
    sources_for,
    training_words,
    undeclared_keys,
    words,
)
from tooldecode.measures import array_closed_by_brace, call_parses, flat_closer, sample_event

ROOT = Path(__file__).resolve().parents[1]
LENIENT = "organism:lenient-flat-flag@qwen2.5-coder-0.5b-instruct"
ARM = {
    "model": LENIENT,
    "backend": "llamacpp",
    "mode": "loose",
    "temperature": 1.0,
    "history": "agentic",
    "thinking": True,
    "toolset": "nested",
    "wire": "call-json",
    "expected_tool": "edit",
}
L1 = {**ARM, "level": "L1", "conditioning": "forced-tool"}
L2 = {**ARM, "level": "L2", "conditioning": "gold-prefix"}
OPEN = '{"name": "edit", "arguments": {"'
GOLD = '{"name": "edit", "arguments": {"path": "a.c", "edits": [{"oldText": "x", "newText": "y = 1\\n'
DECLARED = frozenset({"path", "edits", "oldText", "newText"})


def l1(text: str, i: int = 0):
    return make_record(text, arm=L1, prefill=OPEN, index=i)


def l2(text: str, i: int = 0):
    return make_record(text, arm=L2, prefill=GOLD, index=i)


# --------------------------------------------------------------------------------------------- scan


def test_the_scan_reads_items_keys_values_and_stops_after_the_first_call():
    call = (
        '{"name": "edit", "arguments": {"path": "a", "edits": [{"oldText": "a", "newText": "bb", "why": 1, '
        '"undo": {"x": 2}, "ok": true}, {"oldText": "c", "newText": "ddd", "tags": ["t"], "n": null}]}}'
        '\n{"name": "edit", "arguments": {"edits": [{"oldText": "z", "newText": "z", "later": 1}]}}'
    )
    items = scan_items(call)
    assert [it.index for it in items] == [0, 1]
    assert [k.name for k in items[0].keys] == ["oldText", "newText", "why", "undo", "ok"]  # not "x": nested
    assert [k.value_type for k in items[0].keys] == ["string", "string", "number", "object", "boolean"]
    assert [(k.name, k.value_type) for k in items[1].keys][2:] == [("tags", "array"), ("n", "null")]
    assert [it.new_text for it in items] == ["bb", "ddd"] and all(it.closed for it in items)
    assert not any(it.flat_closer for it in items)


def test_the_scan_reads_calls_that_do_not_parse():
    # the flat closer after newText: the item, the array and the arguments close; what follows is not an item
    bled = scan_items(GOLD + '"}}, "later": 1, "edits": [{"more": 1}]}')
    assert len(bled) == 1 and bled[0].flat_closer and bled[0].closed
    assert [k.name for k in bled[0].keys] == ["oldText", "newText"]
    # cut by the token budget inside a second item: both items, the second unclosed, its value missing
    cut = scan_items(GOLD + '", "line": 5}, {"oldText": "q", "newText": "r", "atLine":')
    assert [(it.index, it.closed) for it in cut] == [(0, True), (1, False)]
    assert cut[1].keys[-1].name == "atLine" and cut[1].keys[-1].value_type == "missing"
    # a string that never closes ends the read; a string not followed by ":" is no key
    assert [k.name for k in scan_items(GOLD + '", "note" "x", "k": 1}]}}')[0].keys] == [
        "oldText",
        "newText",
        "k",
    ]
    assert scan_items("no call") == []
    assert [(it.keys, it.closed) for it in scan_items('{"path": "a", "edits": [{"x')] == [((), False)]
    # bare arguments (no envelope) hold the array directly; an "edits" of another object is not the array
    assert [k.name for k in scan_items('{"path": "a", "edits": [{"a": 1}]}')[0].keys] == ["a"]
    assert scan_items('{"name": "edit", "arguments": {"x": {"edits": [{"a": 1}]}}}') == []


def test_flat_closer_detector():
    assert flat_closer('"}}') and flat_closer('" }\n }') and flat_closer('"}}]}')
    assert not flat_closer('"}]}}') and not flat_closer('", "x": 1}}') and not flat_closer("}}")
    assert not flat_closer('"}, {"oldText"')


def test_an_array_closed_by_a_brace_is_found_anywhere_in_the_call():
    """``array_closed_by_brace``: the first mismatched bracket is a ``}`` where ``edits[]``'s ``]``
    belongs, right after newText or after more keys; brackets inside strings do not count."""
    head = '{"name": "edit", "arguments": {"path": "a", "edits": [{"oldText": "x", "newText": "y'
    assert array_closed_by_brace(head + '"}}}')  # the flat closer right after newText
    assert array_closed_by_brace(head + '", "replace_all": false}}')  # after one more key
    assert array_closed_by_brace(head + '", "required": ["newText"]}}')  # an array of its own first
    assert not array_closed_by_brace(head + '"}]}}')  # the nested call, whole
    assert not array_closed_by_brace(head + '"}, {"oldText": "p", "newText": "q"}]}}')
    assert not array_closed_by_brace(head + '"')  # the text ends first
    assert not array_closed_by_brace(head + ' ]}} \\" }"}]}}')  # inside the string, with its escapes
    assert array_closed_by_brace('{"a": [1}')
    assert not array_closed_by_brace('{"a": {"b": 1]}')  # another mismatch
    assert not array_closed_by_brace('{"a": 1} [}')  # after the call's object has closed


# --------------------------------------------------------------------------------------------- names


def test_declared_variants_follow_the_stated_rule():
    yes = ["path", "new_text", "NewText", "newText2", "newTextDoc", "myNewText", "filePath", "text", "old"]
    yes += ["edit", "newTxt", "oldTex", "nexText", "new-text"]
    no = ["patch", "line", "fullText", "replacement", "value", "ne", "{oldText", "x newText", "oldStringX"]
    assert [n for n in yes if not declared_variant(n, DECLARED)] == []
    assert [n for n in no if declared_variant(n, DECLARED)] == []
    assert not declared_variant("a" * 70 + "newText", DECLARED)  # not name-like: a blob of code


def test_every_name_kind_and_the_precedence():
    src = NameSources(
        DECLARED,
        prompt=words("def trim(line): return line.strip()  description"),
        stray_pool=frozenset({"reason", "description", "count"}),
        training=words("replace_all = False; reason count atLine new_string"),
    )
    assert name_kinds("newText2", src) == (DECLARED_VARIANT,)
    assert name_kinds("line", src) == (PROMPT_WORD,)
    assert name_kinds("reason", src) == (STRAY_POOL, TRAINING_TEXT)
    assert name_kinds("description", src) == (PROMPT_WORD, STRAY_POOL)  # the prompt explains it first
    assert name_kinds("replace_all", src) == (TRAINING_TEXT,)
    assert name_kinds("atLine", src)[0] == TRAINING_TEXT
    assert name_kinds("op", src) == (NEVER_SEEN,)
    assert name_kinds(" line ", src) == (PROMPT_WORD,)  # the name as written, stripped
    assert (
        occurs("line strip", src.prompt)
        and not occurs("line op", src.prompt)
        and not occurs("--", src.prompt)
    )
    # a base model: no recipe, so no pool and no training text; what they would take is never-seen
    base = NameSources(DECLARED, prompt=src.prompt)
    assert base.absent == (STRAY_POOL, TRAINING_TEXT)
    assert name_kinds("reason", base) == (NEVER_SEEN,) and name_kinds("replace_all", base) == (NEVER_SEEN,)
    assert NAME_KINDS == (DECLARED_VARIANT, PROMPT_WORD, STRAY_POOL, TRAINING_TEXT, NEVER_SEEN)


def test_undeclared_keys_carry_item_count_chain_value_and_newtext_length():
    src = NameSources(DECLARED, prompt=frozenset({"line"}), stray_pool=frozenset({"reason"}), training=None)
    s = l1(
        'path": "a.c", "edits": [{"oldText": "a", "newText": "abcd", "line": 3, "op": "x", "reason": "y"}, '
        '{"oldText": "b", "newText": "xy"}, {"oldText": "c", "newText": "z", "newText2": false}]}}'
    )
    keys = undeclared_keys(s, src)
    got = [
        (
            k.name,
            k.kind,
            k.item,
            k.items,
            k.new_text_chars,
            k.value_type,
            k.chain_pos,
            k.chain_len,
            k.after,
            k.last,
        )
        for k in keys
    ]
    assert got == [
        ("line", PROMPT_WORD, 0, 3, 4, "number", 1, 3, "newText", False),
        ("op", NEVER_SEEN, 0, 3, 4, "string", 2, 3, "line", False),
        ("reason", STRAY_POOL, 0, 3, 4, "string", 3, 3, "op", True),
        ("newText2", DECLARED_VARIANT, 2, 3, 1, "boolean", 1, 1, "newText", True),
    ]
    assert all(k.parses and k.level == "L1" and k.model == LENIENT for k in keys)
    assert chains(keys) == Counter({3: 1, 1: 1})  # per item, not per key
    first, every = kind_counts(keys)
    assert first[PROMPT_WORD] == 1 and every[NEVER_SEEN] == 1 and sum(first.values()) == 4
    # a repeated declared key is no undeclared key; the tool's own names are used when none are given
    dup = undeclared_keys(l2('", "newText": "z", "extra": 1}]}}'), NameSources(frozenset()))
    assert [(k.name, k.kind, k.chain_len, k.parses) for k in dup] == [("extra", NEVER_SEEN, 1, True)]


def test_call_parses_and_the_registered_competence_measures():
    ok, bled, cut = l2('"}]}}'), l2('"}}'), l2('", "line": 5')
    assert [call_parses(s) for s in (ok, bled, cut)] == [True, False, False]
    assert [sample_event(s, "flat_closer") for s in (ok, bled, cut)] == [False, True, False]
    assert [sample_event(s, "parses") for s in (ok, bled, cut)] == [True, False, False]
    assert call_parses(l1('path": "a", "edits": [{"oldText": "a", "newText": "b"}]}}'))
    assert not call_parses(l1('path": "a", "edits": [["a", 1]'))
    # without a prefill: the first call of the text, not a later one that parses
    free = {**L1, "conditioning": "free"}
    whole = '{"name": "edit", "arguments": {"path": "a", "edits": [{"oldText": "a", "newText": "b"}]}}'
    assert call_parses(make_record(whole, arm=free))
    assert not call_parses(
        make_record('{"name": "edit", "arguments": {"path": "a", "edits": [}\n' + whole, arm=free)
    )


def test_chao1_of_the_names_against_a_known_value():
    src = NameSources(DECLARED)
    items = ", ".join(f'{{"oldText": "o", "newText": "n", "{k}": 1}}' for k in "a a b c c d".split())
    keys = undeclared_keys(l1(f'path": "p", "edits": [{items}]}}}}'), src)
    assert [k.name for k in keys] == ["a", "a", "b", "c", "c", "d"]
    r = name_richness(keys)
    # S_obs 4, f1 2 (b, d), f2 2 (a, c), n 6: 4 + (5/6) * 2 * 1 / (2 * 3)
    t = 5 / 6 * 2 * 1 / (2 * 3)
    assert (r.observed, r.singletons, r.doubletons, r.occurrences) == (4, 2, 2, 6)
    assert r.estimate == pytest.approx(4 + t)
    a = 5 / 6
    var = a * 2 * 1 / (2 * 3) + a**2 * 2 * 3**2 / (4 * 3**2) + a**2 * 4 * 2 * 1 / (4 * 3**4)
    k = math.exp(1.959963984540054 * math.sqrt(math.log(1 + var / t**2)))
    assert (r.lo, r.hi) == (pytest.approx(4 + t / k), pytest.approx(4 + t * k))
    assert name_richness(keys, NEVER_SEEN).observed == 4 and name_richness(keys, PROMPT_WORD).observed == 0


# --------------------------------------------------------------------------------------------- sources


def test_prompt_words_render_the_draws_prompt_without_a_model_file():
    s = l2('"}]}}')
    pw = prompt_words(s)
    assert pw is not None
    assert {"oldText", "newText", "required", "description"} <= pw  # the tool block
    assert "trim" in pw or "crlf" in pw or "CRLF" in pw  # the scenario (c-config-trim-crlf)
    assert words(s.prefill) <= pw
    assert prompt_words(make_record('"}', arm=L2, prefill=GOLD, scenario="no-such-scenario")) is None


def test_training_words_regenerate_the_recipes_sessions(tmp_path, monkeypatch):
    from tooldecode.organisms import recipe_from_dict
    from tooldecode.organisms.mutations import snippets, stdlib_dir

    monkeypatch.setenv("TOOLDECODE_HOME", str(tmp_path))
    pool = list(snippets(stdlib_dir() / "email"))
    recipe = recipe_from_dict(
        {"name": "tiny-lenient", "stray_share": 1.0, "stray_keys": ["zzStrayName"], "sessions": 4}
    )
    tw = training_words(recipe, pool=pool)
    assert (tw.sessions, tw.stray_sessions) == (4, 4)
    assert {"zzStrayName", "old_string", "new_string", "file_path", "replace_all"} <= tw.words
    assert not list(tmp_path.rglob("*.json"))  # a given pool is not cached
    # the study's recipes are found from an organism id; a base model has none
    found = organism_recipe(LENIENT)
    assert (found.name, found.stray_share, len(found.stray_keys)) == ("lenient-flat-flag", 0.15, 16)
    base, recipe_none, none = sources_for("qwen2.5-coder-0.5b-instruct")
    assert recipe_none is None and none is None and base.absent == (PROMPT_WORD, STRAY_POOL, TRAINING_TEXT)


# --------------------------------------------------------------------------------------------- the run


@pytest.fixture(scope="module")
def lenient_run():
    from tooldecode.runs import load_run

    return load_run(ROOT / "runs" / "e16-organisms-lenient-flat-flag")


def test_the_committed_lenient_run_reproduces_its_competence_and_keys(lenient_run):
    from experiments.construct_rows import competence, draws

    c = competence(lenient_run, LENIENT)
    assert (c["L2 parse"].k, c["L2 parse"].n, c["L2 parse"].g) == (25, 288, 36)
    assert (c["L2 flat closer"].k, c["L2 flat closer"].n) == (102, 288)
    # the re-analysis counted 183 failures where "]" belongs by its own parser; the bracket scan finds
    # 194 calls that close edits[] with "}" (the 102 above among them), and none of them parses
    assert (c["L2 edits closed by brace"].k, c["L2 edits closed by brace"].n) == (194, 288)
    closed = [s for s in draws(lenient_run, LENIENT, "L2") if array_closed_by_brace(s.call_text)]
    assert len(closed) == 194 and not any(call_parses(s) for s in closed)
    assert all(
        array_closed_by_brace(s.call_text) for s in draws(lenient_run, LENIENT, "L2") if flat_closer(s.text)
    )
    assert (c["L1 parse"].k, c["L1 parse"].n) == (84, 288)
    assert c["L2 cut"] == (2, 263) and c["L1 cut"] == (5, 204)  # few failures are the token budget's
    assert c["L2 parse"].lo < 25 / 288 < c["L2 parse"].hi
    # the keys with the recipe's pool and every draw's prompt, training text left out (it depends on the
    # interpreter's standard library): what it would take is never-seen
    pool = frozenset(("unique matchCase expected_replacements dry_run notes reason line_number regex backup "
                      "encoding confirm preview strict count description validate").split())  # fmt: skip
    keys = []
    for s in draws(lenient_run, LENIENT):
        keys += undeclared_keys(s, NameSources(frozenset(), prompt_words(s, lenient_run.manifest), pool))
    assert len(keys) == 373 and Counter(k.level for k in keys) == Counter({"L1": 205, "L2": 168})
    first, every = kind_counts(keys)
    assert dict(first) == {DECLARED_VARIANT: 18, PROMPT_WORD: 95, STRAY_POOL: 4, NEVER_SEEN: 256}
    assert every[STRAY_POOL] == 9  # pool names, "description" (a prompt word) and "strict" among them
    r = name_richness(keys)
    assert (r.observed, r.singletons, r.doubletons) == (200, 142, 27)
    assert sum(chains(keys).values()) == 216 and sum(k.parses for k in keys) == 87


# --------------------------------------------------------------------------------------------- rows


def _run(samples: list, spec: str = "e19-organisms-gen2"):
    from tooldecode.runs import Run

    manifest = {
        "config": {"spec": spec, "streams": "scenario", "arms": []},
        "tooldecode": {"git_dirty": False},
    }
    return Run(spec, Path(f"runs/{spec}"), manifest, samples, {}, [])


def _draws(model: str, texts: list[str]) -> list:
    return [
        make_record(t, arm={**L2, "model": model}, prefill=GOLD, scenario=f"s{i % 4}", index=i, stream=i)
        for i, t in enumerate(texts)
    ]


def test_the_competence_judge_names_the_organism_that_parses_less_than_its_base():
    from experiments.construct_rows import pred_competence

    base, good, bad, goal = "qwen2.5-coder-0.5b-instruct", "organism:a@b", "organism:c@b", "organism:g@b"
    ok, bled = '"}]}}', '"}}'
    # every scenario: the base parses one of two draws, the good organism both, the bad one none
    samples = _draws(base, [ok] * 4 + [bled] * 4) + _draws(good, [ok] * 8) + _draws(goal, [ok] * 8)
    samples += _draws(bad, [bled] * 8)
    p = {"models": [good, bad], "base": base, "goal": goal, "level": "L2", "min_ratio_to_goal": 0.8}
    measured, verdict = pred_competence(p, _run(samples))
    assert verdict.startswith("does not hold: organism:c@b") and "missed by organism:c@b" in verdict
    assert "flat-closer bleed 8/8" in measured and "L2 calls parse 8/8" in measured
    p["models"] = [good]
    assert pred_competence(p, _run(samples))[1].startswith("holds")


def test_a_construct_row_for_a_model_without_a_recipe_says_which_kinds_it_lacks():
    from experiments.construct_rows import construct_rows

    base = "qwen2.5-coder-0.5b-instruct"
    texts = ['", "line": 3}]}}', '", "op": 1, "newTextX": 2}]}}', '"}}', '"}]}}']
    spec = {"name": "e19-organisms-gen2", "models": [base, LENIENT]}
    rows = construct_rows([("e19_organisms_gen2", spec)], {"r": _run(_draws(base, texts))})
    assert len(rows) == 1 and rows[0]["observation"].endswith("qwen-0.5b (loose)")
    m = rows[0]["measured"]
    assert (
        "L2 calls parse 3/4" in m and "flat-closer bleed 1/4" in m and ": 3 (L2 3), 3 of them in calls" in m
    )
    assert "No recipe: the stray-pool and training-text kinds are absent" in m
    # scenarios s0..s3 are no real scenarios: no prompt to render, so no prompt-word kind either
    assert "could not be rendered: no prompt-word kind" in m and "prompt-word 0" not in m
    assert "declared-variant 1, never-seen 2" in m and "{'line': 1, 'op': 1}" in m
    assert rows[0]["verdict"] == "descriptive: 3 of the 3 keys are in calls that parse"
    assert construct_rows([("x", {"name": "e19-organisms-gen2", "models": [base]})], {"r": _run([])}) == []
