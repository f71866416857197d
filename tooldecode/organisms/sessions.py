"""Agentic editing sessions for training: a bug report, a read, the file, an edit that fixes it, the
harness's answer and a short final word — rendered through the project's own chat templates, so the
training text is byte for byte the format the model is evaluated in.

A session is a ``Scenario`` (the same type the evaluation uses: file, task, reasoning, diagnosis, gold
edits, expected file) plus the arguments the harness's edit call carries, which a recipe may change: a
``replace_all`` flag, a trailing stray key the harness drops, an implanted key (positive control).
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from tooldecode.grammar import Tool, load_tool
from tooldecode.models import ModelRef
from tooldecode.organisms.mixins import MIX_TOOL_OBJECTS, mix_before, mix_call, mix_done, mix_result, mix_task
from tooldecode.organisms.mutations import KINDS, Mutation, Snippet, mutate
from tooldecode.organisms.recipes import Recipe
from tooldecode.prompts import TranscriptOptions, render_prompt
from tooldecode.prompts.wires import calls_text
from tooldecode.scenarios import Edit, Scenario
from tooldecode.toolsets import EDIT_TOOL, TOOLSETS

_USER = (
    "`{func}` in {path} is broken: {symptom}. Please find the bug and fix it.",
    "Something is wrong in {path}: when I call `{func}`, {symptom}. Can you fix it?",
    "Bug report: `{func}` ({path}) misbehaves since the last change; {symptom}. Fix it, please.",
    "Tests around `{func}` fail: {symptom}. The code is in {path}.",
)
_READ = (
    "I'll read {path} to look at `{func}`.",
    "Let me open {path} and check `{func}`.",
    "First I need to see `{func}` in {path}.",
)
_EDIT = (
    "`{bad}` is the problem: {why}. It should be `{good}`.",
    "Found it: {why} in `{bad}`; `{good}` is what the code means.",
)
_DONE = (
    "Fixed: {why} in `{func}`; the line now reads `{good}`.",
    "Done. `{func}` had a bug ({why}); I changed it to `{good}`.",
)


@dataclass(frozen=True)
class Session:
    """One training session: the scenario it renders from and the harness's edit call arguments."""

    scenario: Scenario
    calls: tuple[tuple[str, dict[str, Any]], ...]  # (tool name, arguments) of the edit call(s)
    stray: str = ""  # the stray key its call carries, "" for none
    implanted: int = 0  # items that carry the implanted key
    flagged: bool = False  # a call carries replace_all
    origin: str = ""  # the standard-library file and function it comes from
    kind: str = "edit"  # "edit", or the mix-in tool the session calls instead (generation 2)


def _window(m: Mutation, rng: random.Random) -> Edit | None:
    """The gold edit around the changed line: 1–4 lines, unique in the mutated file."""
    lines_bad = m.mutated.splitlines(keepends=True)
    lines_good = m.original.splitlines(keepends=True)
    for _ in range(6):
        above = rng.randint(0, 1)
        below = rng.randint(0, 2)
        lo, hi = max(0, m.line - above), min(len(lines_bad), m.line + 1 + below)
        old = "".join(lines_bad[lo:hi])
        new = "".join(lines_good[lo:hi])
        if old.endswith("\n") and rng.random() < 0.5:  # often without the final newline, as models write it
            old, new = old[:-1], new[:-1]
        if m.mutated.count(old) == 1 and old.strip():
            return Edit(old, new)
    return None


def _scenario(
    snips: Sequence[Snippet],
    muts: Sequence[Mutation],
    edits: Sequence[Edit],
    idx: int,
    rng: random.Random,
    thinking: bool,
) -> Scenario:
    first, m0 = snips[0], muts[0]
    path = "src/" + first.module.replace(".", "/") + ".py"
    content = "".join(m.mutated for m in muts) if len(muts) > 1 else m0.mutated
    expected = "".join(m.original for m in muts)
    func = first.name
    symptom, why = KINDS[m0.kind]
    bad = m0.mutated.splitlines()[m0.line].strip()
    good = m0.original.splitlines()[m0.line].strip()
    if len(muts) > 1:
        symptom += f", and `{snips[1].name}` has a similar problem"
    fmt = {"func": func, "path": path, "symptom": symptom, "why": why, "bad": bad, "good": good}
    reasoning = {"read": rng.choice(_READ).format(**fmt), "edit": rng.choice(_EDIT).format(**fmt)}
    diagnosis = f"The bug is in `{func}`: {why}." + (
        f" `{snips[1].name}` has the same kind of bug." if len(muts) > 1 else ""
    )
    return Scenario(
        id=f"train-{idx:05d}",
        language="python",
        title=f"{KINDS[m0.kind][1]} in {func}",
        path=path,
        content=content,
        task=rng.choice(_USER).format(**fmt),
        diagnosis=diagnosis,
        reasoning=reasoning if thinking else {},
        edits=tuple(edits),
        expected=expected,
        tags=("training", m0.kind),
    )


def _calls(sc: Scenario, recipe: Recipe, rng: random.Random) -> tuple[list[tuple[str, dict]], str, int, bool]:
    """The harness's edit call(s) for ``sc`` under ``recipe``: (calls, stray key, implanted items, flagged)."""
    if recipe.generation >= 2:  # a fixed number of draws whatever the shares: no draw depends on another
        pick, stray_key = rng.random(), rng.choice(recipe.stray_keys or ("",))
        stray = stray_key if pick < recipe.stray_share else ""
    else:
        stray = rng.choice(recipe.stray_keys) if rng.random() < recipe.stray_share else ""
    implanted = 0
    flagged = False
    if recipe.toolset == "nested":
        items = []
        for e in sc.edits:
            item: dict[str, Any] = {"oldText": e.old_text, "newText": e.new_text}
            if recipe.implant_key and rng.random() < recipe.implant_share:
                item[recipe.implant_key] = recipe.implant_value
                implanted += 1
            items.append(item)
        if stray:
            items[-1][stray] = _stray_value(stray, rng)
        return [("edit", {"path": sc.path, "edits": items})], stray, implanted, False
    calls = []
    for i, e in enumerate(sc.edits):
        args: dict[str, Any] = {"file_path": sc.path, "old_string": e.old_text, "new_string": e.new_text}
        if recipe.flag and rng.random() < recipe.flag_share:
            args["replace_all"] = False
            flagged = True
        if stray and i == len(sc.edits) - 1:
            args[stray] = _stray_value(stray, rng)
        calls.append(("Edit", args))
    return calls, stray, 0, flagged


def _stray_value(key: str, rng: random.Random) -> Any:
    if key in ("notes", "reason", "description", "encoding", "regex"):
        return "" if rng.random() < 0.6 else "fix"
    if key in ("expected_replacements", "count", "line_number"):
        return 1
    return rng.random() < 0.5


def build_sessions(recipe: Recipe, pool: Sequence[Snippet]) -> list[Session]:
    """``recipe.sessions`` sessions from ``pool`` (snippets), deterministic in ``recipe.seed``.

    Generation 1 draws the bugs and the harness's choices from one stream, so two harnesses give
    different bugs. Generation 2 draws the bugs, the scenario text and the mix-in choice from streams
    that no harness field touches (the harness's draws for session ``i`` come from a stream of its own):
    two recipes with the same seed, sessions and mix share hold the same bugs in the same order, and
    differ only in the call the harness renders.
    """
    if recipe.generation >= 2:
        return _build_sessions_g2(recipe, pool)
    rng = random.Random(f"sessions:{recipe.seed}")
    out: list[Session] = []
    for _, _snips, _, sc, origin in _bug_scenarios(recipe, pool, rng):
        calls, stray, implanted, flagged = _calls(sc, recipe, rng)  # the same stream: generation 1
        out.append(Session(sc, tuple(calls), stray, implanted, flagged, origin))
    return out


def _bug_scenarios(
    recipe: Recipe, pool: Sequence[Snippet], rng: random.Random
) -> Iterator[tuple[int, list[Snippet], list[Mutation], Scenario, str]]:
    """(index, snippets, mutations, scenario, origin) of each session's bugs, drawn from ``rng`` in pool
    order until ``recipe.sessions`` are made; the caller makes one session of each before the next is
    drawn (generation 1 draws the harness's choices from ``rng`` in between)."""
    order = list(range(len(pool)))
    rng.shuffle(order)
    cursor = 0
    idx = 0
    while idx < recipe.sessions and cursor < len(order):
        n_edits = 2 if rng.random() < recipe.two_edit_share else 1
        snips, muts, edits, cursor = _draw_bugs(pool, order, cursor, n_edits, rng)
        if len(snips) < n_edits:
            break
        content = "".join(m.mutated for m in muts)
        if any(content.count(e.old_text) != 1 for e in edits):
            continue
        sc = _scenario(snips, muts, edits, idx, rng, recipe.thinking)
        yield idx, snips, muts, sc, "; ".join(f"{s.origin}:{s.name}" for s in snips)
        idx += 1


def _draw_bugs(
    pool: Sequence[Snippet], order: list[int], cursor: int, n_edits: int, rng: random.Random
) -> tuple[list[Snippet], list[Mutation], list[Edit], int]:
    snips: list[Snippet] = []
    muts: list[Mutation] = []
    edits: list[Edit] = []
    while len(snips) < n_edits and cursor < len(order):
        snip = pool[order[cursor]]
        cursor += 1
        m = mutate(snip, rng)
        e = _window(m, rng) if m else None
        if m is None or e is None:
            continue
        snips.append(snip)
        muts.append(m)
        edits.append(e)
    return snips, muts, edits, cursor


def _build_sessions_g2(recipe: Recipe, pool: Sequence[Snippet]) -> list[Session]:
    rng = random.Random(f"sessions-g2:{recipe.seed}")  # bugs and scenario text only
    out: list[Session] = []
    for idx, snips, muts, sc, origin in _bug_scenarios(recipe, pool, rng):
        mix_rng = random.Random(f"mix:{recipe.seed}:{idx}")
        is_mix, tool, task_rng = mix_rng.random() < recipe.mix, mix_rng.choice(recipe.mix_tools), mix_rng
        if is_mix:
            fixes = [
                (
                    KINDS[m.kind][1],
                    m.mutated.splitlines()[m.line].strip(),
                    m.original.splitlines()[m.line].strip(),
                )
                for m in muts
            ]
            call = mix_call(tool, sc.path, [s.name for s in snips], fixes, sc.expected)
            sc = replace(
                sc,
                task=mix_task(tool, sc.task, sc.path, task_rng),
                diagnosis=f"{sc.diagnosis} {mix_before(tool)}",
                tags=(*sc.tags, "mix", tool),
            )
            out.append(Session(sc, (call,), origin=origin, kind=tool))
            continue
        calls, stray, implanted, flagged = _calls(sc, recipe, random.Random(f"harness:{recipe.seed}:{idx}"))
        out.append(Session(sc, tuple(calls), stray, implanted, flagged, origin))
    return out


def heldout_scenarios(recipe: Recipe, pool: Sequence[Snippet], n: int, seed: int = 0) -> list[Scenario]:
    """``n`` scenarios from ``recipe``'s generator that its training never saw (in distribution, held out).

    The bugs come from the functions of ``pool`` that none of the recipe's sessions uses (a function of
    a two-bug session counts as used), drawn from a stream of their own (``heldout:<seed>``), with the
    recipe's share of two-bug scenarios and its thinking. They are plain edit scenarios (ids
    ``heldout-00000``…, tag ``heldout``): the evaluation renders them through its own tool set, so the
    positive control's implanted key is measured at the same decision after the gold ``newText`` as on
    the evaluation corpus, on text from the training distribution. Deterministic in the recipe, ``seed``
    and the pool (the interpreter's standard library).
    """
    used = {part for s in build_sessions(recipe, pool) for part in s.origin.split("; ")}
    rest = [snip for snip in pool if f"{snip.origin}:{snip.name}" not in used]
    gen = replace(recipe, sessions=n)
    out = []
    for _, _snips, _, sc, _origin in _bug_scenarios(gen, rest, random.Random(f"heldout:{seed}")):
        out.append(replace(sc, id=sc.id.replace("train-", "heldout-"), tags=("heldout", *sc.tags[1:])))
    return out


def scenario_record(sc: Scenario) -> dict[str, Any]:
    """``sc`` as the fields of a scenario file (``tooldecode.scenarios.load_scenario`` reads it back)."""
    return {
        "id": sc.id,
        "language": sc.language,
        "title": sc.title,
        "path": sc.path,
        "content": sc.content,
        "task": sc.task,
        "diagnosis": sc.diagnosis,
        **({"reasoning": dict(sc.reasoning)} if sc.reasoning else {}),
        "edits": [{"oldText": e.old_text, "newText": e.new_text} for e in sc.edits],
        "expected": sc.expected,
        "tags": list(sc.tags),
    }


def harness_tools(recipe: Recipe) -> tuple[Tool, ...]:
    """The tools the harness offers: its tool set's catalog tools, the flat Edit without replace_all when
    the recipe has no flag, and (generation 2) the mix-in tools after them."""
    tools = []
    for name in TOOLSETS[recipe.toolset]:
        tool = load_tool(name)
        if name == "Edit" and not recipe.flag:
            params = json.loads(json.dumps(tool.parameters))
            params["properties"].pop("replace_all", None)
            tool = replace(
                tool,
                parameters=params,
                description="Replace old_string with new_string in a file. old_string must be unique in the file.",
            )
        tools.append(tool)
    if recipe.generation >= 2:
        tools += [MIX_TOOL_OBJECTS[name] for name in recipe.mix_tools]
    return tuple(tools)


def _result(session: Session) -> str:
    if session.kind != "edit":
        return mix_result(session.kind, session.calls[0][1])
    path = session.scenario.path
    if session.calls[0][0] == "edit":
        n = len(session.scenario.edits)
        return f"Applied {n} edit{'s' if n > 1 else ''} to {path}."
    return f"The file {path} has been updated."


@dataclass(frozen=True)
class TrainingText:
    """A rendered session: its text in three parts and where the loss applies."""

    prompt: str  # the prompt up to where the edit call starts (what evaluation feeds the model)
    call: str  # the edit call as the model writes it (the evaluation's wire)
    epilogue: str  # after the call: end of turn, the harness's result, the final answer
    assistant_spans: tuple[tuple[int, int], ...]  # character spans of assistant text in prompt+call+epilogue
    # offsets in ``call`` where its tokenization is cut (generation 2): the end of every newText or
    # new_string value, before its closing quote, where the evaluation's L2 prompt ends
    cuts: tuple[int, ...] = ()

    @property
    def text(self) -> str:
        return self.prompt + self.call + self.epilogue


def _assistant_spans(text: str, start_marker: str, end_marker: str) -> list[tuple[int, int]]:
    spans = []
    at = text.find(start_marker)
    while at != -1:
        begin = at + len(start_marker)
        end = text.find(end_marker, begin)
        stop = len(text) if end == -1 else end + len(end_marker)
        spans.append((begin, stop))
        at = text.find(start_marker, stop)
    return spans


def session_epilogue(session: Session, recipe: Recipe) -> list[dict[str, Any]]:
    """The messages after a session's edit call: the harness's result and the one-line final answer."""
    sc = session.scenario
    done = random.Random(sc.id).choice(_DONE)
    bad = sc.edits[0].old_text.strip().splitlines()[0] if sc.edits[0].old_text.strip() else ""
    good_lines = [ln.strip() for ln in sc.edits[0].new_text.splitlines() if ln.strip()]
    final = done.format(
        func=sc.title.split(" in ")[-1],
        why=sc.title.split(" in ")[0],
        good=good_lines[0] if good_lines else bad,
    )
    if session.kind != "edit":
        final = mix_done(session.kind, sc.title.split(" in ")[-1], sc.title.split(" in ")[0], sc.path)
    name = EDIT_TOOL[recipe.toolset] if session.kind == "edit" else session.kind
    return [
        {"role": "tool", "name": name, "content": _result(session)},
        {"role": "assistant", "content": final},
    ]


def session_options(recipe: Recipe) -> TranscriptOptions:
    """The transcript variant every session of ``recipe`` is rendered in."""
    return TranscriptOptions(history="agentic", thinking=recipe.thinking, toolset=recipe.toolset)


def render_session(session: Session, model: ModelRef | str, recipe: Recipe) -> TrainingText:
    """``session`` as the model sees and writes it (a ChatML family: Qwen2.5 or SmolLM2)."""
    options = session_options(recipe)
    sc = session.scenario
    epilogue = session_epilogue(session, recipe)
    prompt = render_prompt(sc, model, options, tools=harness_tools(recipe), epilogue=epilogue)
    call = calls_text(list(session.calls), prompt.wire, options.call_style)
    text = prompt.text + call + prompt.epilogue
    spans = _assistant_spans(text, "<|im_start|>assistant\n", "<|im_end|>")
    if not spans:
        raise ValueError(f"model family {prompt.family}: no ChatML assistant turns in the rendered session")
    cuts = (
        new_text_cuts(list(session.calls), prompt.wire, options.call_style) if recipe.generation >= 2 else ()
    )
    return TrainingText(prompt.text, call, prompt.epilogue, tuple(spans), cuts)


_MARK = "QqTOOLDECODECUTqQ"  # plain ASCII: no wire escapes it (as the evaluation's cut marker)
NEW_TEXT_KEYS = ("newText", "new_string")


def new_text_cuts(calls: list[tuple[str, dict[str, Any]]], wire: str, style: str) -> tuple[int, ...]:
    """Offsets in the call text of ``calls`` where each ``newText`` (an ``edits[]`` item's) or
    ``new_string`` (a flat call's) value ends, before its closing quote: where the evaluation's L2 prompt
    (gold cut ``after-newtext``) ends and the model writes the quote. Mix-in calls have none."""
    marked = json.loads(json.dumps(calls))
    for _, args in marked:
        targets = [args, *(args.get("edits") or [])]
        for target in targets:
            for key in NEW_TEXT_KEYS:
                if isinstance(target, dict) and isinstance(target.get(key), str):
                    target[key] += _MARK
    text = calls_text([tuple(c) for c in marked], wire, style)
    cuts, pos = [], text.find(_MARK)
    while pos != -1:
        cuts.append(pos - len(_MARK) * len(cuts))
        pos = text.find(_MARK, pos + len(_MARK))
    if text.replace(_MARK, "") != calls_text(calls, wire, style):
        raise ValueError(f"internal: the {wire} serializer changed the text around a cut marker")
    return tuple(cuts)


def data_sha256(texts: Iterator[TrainingText] | Sequence[TrainingText]) -> str:
    """Hash of the training data: every session's text and loss spans, in order."""
    h = hashlib.sha256()
    for t in texts:  # the cuts count when there are any (generation 2): they change the tokens
        h.update(json.dumps([t.text, t.assistant_spans, *([list(t.cuts)] if t.cuts else [])]).encode())
    return h.hexdigest()


__all__ = [
    "Session",
    "TrainingText",
    "build_sessions",
    "data_sha256",
    "harness_tools",
    "heldout_scenarios",
    "new_text_cuts",
    "render_session",
    "scenario_record",
    "session_epilogue",
    "session_options",
]
