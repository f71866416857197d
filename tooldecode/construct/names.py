"""The kind of an undeclared key's name (``NAME_KINDS``, ``name_kinds``): the rule for a variant of a
declared key (``declared_variant``), and when a name occurs in a text (``words``, ``occurs``)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = [
    "DECLARED_VARIANT",
    "NAME_KINDS",
    "NEVER_SEEN",
    "PROMPT_WORD",
    "STRAY_POOL",
    "TRAINING_TEXT",
    "NameSources",
    "declared_variant",
    "name_kinds",
    "occurs",
    "words",
]

STRAY_POOL = "stray-pool"
DECLARED_VARIANT = "declared-variant"
PROMPT_WORD = "prompt-word"
TRAINING_TEXT = "training-text"
NEVER_SEEN = "never-seen"
# the precedence: a name's kind is the first of these that applies
NAME_KINDS = (DECLARED_VARIANT, PROMPT_WORD, STRAY_POOL, TRAINING_TEXT, NEVER_SEEN)

_WORD = re.compile(r"\w+")


def words(text: str) -> frozenset[str]:
    """The words of ``text``: runs of letters, digits and ``_`` (Unicode), case kept."""
    return frozenset(_WORD.findall(text))


def occurs(name: str, vocabulary: frozenset[str]) -> bool:
    """Whether every word of ``name`` is in ``vocabulary`` (a name without a word never occurs)."""
    parts = _WORD.findall(name)
    return bool(parts) and all(p in vocabulary for p in parts)


_NAME = re.compile(r"^[A-Za-z_$][A-Za-z0-9_$-]{0,63}$")


def _norm(name: str) -> str:
    return re.sub(r"[\s_\-]", "", name).lower()


def _parts(name: str) -> list[str]:
    """The words of a key: its ``_``/``-``/space parts split at camel-case humps, lowercased."""
    out = []
    for chunk in re.split(r"[\s_\-]+", name):
        out += re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+", chunk)
    return [p.lower() for p in out if p]


def _levenshtein(a: str, b: str) -> int:
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def declared_variant(name: str, declared: Iterable[str]) -> bool:
    """Whether ``name`` is a variant of a key in ``declared`` (the tool's property names, any level).

    Only a name-like key can be one (a letter, ``_`` or ``$`` first, then letters, digits, ``_``, ``$``,
    ``-``, at most 64 characters: not a line of code written where a key belongs). Then,
    with ``N(x)`` = ``x`` lowercased without ``_``, ``-`` and spaces, ``name`` is a variant of ``d`` when
    (a) ``N(name) == N(d)`` (``path`` itself, ``new_text``, ``NewText``); (b) ``N(d)`` has at least 4
    letters and ``N(name)`` begins or ends with it (``newText2``, ``newTextDoc``, ``myNewText``,
    ``filePath``); (c) ``N(d)`` begins with ``N(name)`` of at least 4 letters (``edit``), or ``name`` is
    one of ``d``'s words of at least 3 letters (``text``, ``old``, ``new``); (d) ``N(d)`` has at least 6
    letters and the edit distance between ``N(name)`` and ``N(d)`` is at most 2 (``newTxt``, ``oldTex``).
    """
    n = _norm(name)
    if not n or not _NAME.match(name.strip()):
        return False
    for d in declared:
        nd = _norm(d)
        if not nd:
            continue
        if n == nd:
            return True
        if len(nd) >= 4 and (n.startswith(nd) or n.endswith(nd)):
            return True
        if len(n) >= 4 and nd.startswith(n):
            return True
        if len(n) >= 3 and n in [p for p in _parts(d) if len(p) >= 3]:
            return True
        if len(nd) >= 6 and abs(len(n) - len(nd)) <= 2 and _levenshtein(n, nd) <= 2:
            return True
    return False


@dataclass(frozen=True)
class NameSources:
    """What a model's names are checked against. ``stray_pool`` / ``training`` are None for a model
    without a recipe (a base model) or a recipe without a stray pool; ``declared``: the tool's property
    names (all levels); ``prompt``: the words of the prompt the draw saw (None: not known)."""

    declared: frozenset[str]
    prompt: frozenset[str] | None = None
    stray_pool: frozenset[str] | None = None
    training: frozenset[str] | None = None

    @property
    def absent(self) -> tuple[str, ...]:
        """The kinds this model cannot have (no recipe, no stray pool, no prompt)."""
        out = []
        if self.prompt is None:
            out.append(PROMPT_WORD)
        if self.stray_pool is None:
            out.append(STRAY_POOL)
        if self.training is None:
            out.append(TRAINING_TEXT)
        return tuple(out)


def name_kinds(name: str, sources: NameSources) -> tuple[str, ...]:
    """Every kind of ``NAME_KINDS`` that applies to ``name``, in precedence order (``never-seen`` alone
    when none does); the first is the name's kind."""
    bare = name.strip()
    out = []
    if declared_variant(bare, sources.declared):
        out.append(DECLARED_VARIANT)
    if sources.prompt is not None and occurs(bare, sources.prompt):
        out.append(PROMPT_WORD)
    if sources.stray_pool is not None and bare in sources.stray_pool:
        out.append(STRAY_POOL)
    if sources.training is not None and occurs(bare, sources.training):
        out.append(TRAINING_TEXT)
    return tuple(out) or (NEVER_SEEN,)
