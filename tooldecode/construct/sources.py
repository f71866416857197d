"""What a name is checked against: the words of the prompt a draw saw (``prompt_words``), and of the
organism's training sessions, regenerated from its recipe without any model (``training_words``,
cached under ``$TOOLDECODE_HOME/construct/``); ``sources_for`` gathers a model's."""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tooldecode.construct.names import NameSources, words
from tooldecode.models import ORGANISM_PREFIX, ModelRef, home
from tooldecode.records import VARIANT_FIELDS, SampleRecord

__all__ = ["PLAIN", "TrainingWords", "organism_recipe", "prompt_words", "sources_for", "training_words"]

# the plain transcript family (no chat template, no model file): how prompts and training sessions
# are rendered for their words
PLAIN = ModelRef("plain-transcript", Path("plain-transcript.gguf"), "gemma3-base", False)
_WORDS_VERSION = 1  # of the training-word cache: raise when the rule that builds the words changes


_PROMPTS: dict[tuple, frozenset[str]] = {}


def prompt_words(s: SampleRecord, manifest: Mapping[str, Any] | None = None) -> frozenset[str] | None:
    """The words of the prompt a draw saw: its scenario rendered in its arm's variant as a plain
    transcript (``PLAIN``: the system text with the tool block, every turn, the history's calls), the
    tools' JSON forms and the draw's own prefill. None when the scenario cannot be read."""
    from tooldecode.errors import ToolDecodeError
    from tooldecode.prompts import TranscriptOptions, render_prompt
    from tooldecode.prompts.tools import tool_json
    from tooldecode.scoring.score import record_scenario

    variant = {k: getattr(s.arm, k) for k in VARIANT_FIELDS if getattr(s.arm, k) is not None}
    config = (manifest or {}).get("config") or {}
    dirs = (manifest or {}).get("scenario_dirs") or config.get("scenario_dirs")
    key = (s.scenario, json.dumps(variant, sort_keys=True, default=str), json.dumps(dirs))
    if key not in _PROMPTS:
        try:
            scenario = record_scenario(s.scenario, manifest or {})
            prompt = render_prompt(scenario, PLAIN, TranscriptOptions(**variant))
        except (ToolDecodeError, KeyError, ValueError):
            return None
        shown = " ".join(json.dumps(tool_json(t)) for t in prompt.tools)
        _PROMPTS[key] = words(prompt.text + "\n" + shown)
    return _PROMPTS[key] | words(s.prefill)


@dataclass(frozen=True)
class TrainingWords:
    """The words of a recipe's training sessions (``training_words``) and what was regenerated:
    sessions, those with a stray key and with the flag, the interpreter whose standard library gave
    the code."""

    recipe: str
    words: frozenset[str]
    sessions: int
    stray_sessions: int
    flagged_sessions: int
    python: str


def organism_recipe(model: str, recipe_dirs: Sequence[Path] = ()) -> Any:
    """The ``Recipe`` an ``organism:<recipe>@<base>`` model id names, read from ``<recipe>.toml`` in
    ``recipe_dirs`` (default: the checkout's ``experiments/organisms``); None for another model or a
    recipe not found."""
    from tooldecode.organisms import load_recipe

    if not model.startswith(ORGANISM_PREFIX):
        return None
    name = model[len(ORGANISM_PREFIX) :].partition("@")[0]
    dirs = list(recipe_dirs) or [Path(__file__).resolve().parents[2] / "experiments" / "organisms"]
    for d in dirs:
        path = Path(d) / f"{name}.toml"
        if path.is_file():
            return load_recipe(path)
    return None


def training_words(recipe: Any, *, pool: Sequence[Any] | None = None, cache: bool = True) -> TrainingWords:
    """The words of ``recipe``'s training sessions, regenerated as ``tooldecode organisms sessions`` does
    (the seed's sessions from this interpreter's standard library), each rendered as a plain transcript
    (``PLAIN``) with the harness's tools, its call(s), the harness's result and the final answer.

    Cached under ``$TOOLDECODE_HOME/construct/`` by the recipe's sha256 and the Python version (another
    interpreter's standard library gives other sessions). ``pool``: the snippets to draw the bugs from
    instead of the whole standard library (not cached)."""
    from tooldecode.organisms.sessions import build_sessions, harness_tools, session_epilogue, session_options
    from tooldecode.organisms.store import snippet_pool
    from tooldecode.prompts import render_prompt
    from tooldecode.prompts.wires import calls_text

    python = sys.version.split()[0]
    cache = cache and pool is None
    digest = hashlib.sha256(f"{recipe.sha256()}:{python}:{_WORDS_VERSION}".encode()).hexdigest()[:20]
    path = home() / "construct" / f"{recipe.name}-{digest}.json"
    if cache and path.is_file():
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            return TrainingWords(
                data["recipe"],
                frozenset(data["words"]),
                int(data["sessions"]),
                int(data["stray_sessions"]),
                int(data["flagged_sessions"]),
                str(data["python"]),
            )
        except (OSError, ValueError, KeyError, TypeError):
            pass  # rebuilt below
    sessions = build_sessions(recipe, snippet_pool() if pool is None else pool)
    options = session_options(recipe)
    tools = harness_tools(recipe)
    vocab: set[str] = set()
    for session in sessions:
        prompt = render_prompt(session.scenario, PLAIN, options, tools=tools)
        call = calls_text(list(session.calls), prompt.wire, options.call_style)
        after = "\n".join(str(m["content"]) for m in session_epilogue(session, recipe))
        vocab |= words(prompt.text + "\n" + call + "\n" + after)
    out = TrainingWords(
        recipe.name,
        frozenset(vocab),
        len(sessions),
        sum(1 for s in sessions if s.stray),
        sum(1 for s in sessions if s.flagged),
        python,
    )
    if cache:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(path.name + ".partial")
            record = {**out.__dict__, "words": sorted(out.words)}
            tmp.write_text(json.dumps(record), encoding="utf-8")
            tmp.replace(path)
        except OSError:
            pass  # a read-only home: the words are rebuilt next time
    return out


def sources_for(
    model: str, recipe_dirs: Sequence[Path] = (), *, cache: bool = True
) -> tuple[NameSources, Any, TrainingWords | None]:
    """The model-level ``NameSources`` (no prompt words: those are per draw, ``prompt_words``), the
    recipe (None for a model without one) and its training words."""
    recipe = organism_recipe(model, recipe_dirs)
    if recipe is None:
        return NameSources(frozenset()), None, None
    tw = training_words(recipe, cache=cache)
    pool = frozenset(recipe.stray_keys) if recipe.stray_share > 0 and recipe.stray_keys else None
    return NameSources(frozenset(), None, pool, tw.words), recipe, tw
