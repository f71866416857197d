"""The construct, extended: what an undeclared key in an ``edits[]`` item looks like, and where its name
could come from (docs/organisms.md, "The construct, extended").

``scan_items`` reads the first call of a draw (prefill + text) leniently: the items of its ``edits``
array, each with its keys in written order, the JSON type of each value, its ``newText`` and whether
``}}`` followed it; it needs no parse, so the calls that do not parse (most of a model's that cannot
write the nested call) give their keys too. ``undeclared_keys`` turns every key an item has that the
item schema does not declare into an ``UndeclaredKey``: the item's index and the item count, the
length of the item's ``newText``, the value's type, its place in the item's chain of undeclared keys,
and the **kind of its name**, the first that applies in ``NAME_KINDS``:

``declared-variant``
    a variant of a key the tool declares at any level (``declared_variant``: ``path`` in an item,
    ``new_text``, ``newText2``, ``myNewText``, ``filePath``, ``text``, ``newTxt``);
``prompt-word``
    a word of the prompt the draw saw (``prompt_words``);
``stray-pool``
    one of the recipe's stray names (``Recipe.stray_keys``, when its ``stray_share`` is above 0: the
    names its lenient harness let through in training);
``training-text``
    a word of the organism's training text (``training_words``: the recipe's sessions, regenerated);
``never-seen``
    none of these.

The order puts what the draw's own prompt explains first (a base model has it too), then what only
training explains, most specific first: a name of the pool that the prompt also shows
(``description``, a word of every tool block) is a ``prompt-word``, so ``stray-pool`` and
``training-text`` take only names that would otherwise be ``never-seen``, and the kinds of an organism
and of its base are counted alike. ``UndeclaredKey.kinds`` keeps every kind that applies.

A name *occurs* in a text when every word of it (a run of letters, digits and ``_``) is a word of the
text, case kept. The texts are rendered without a chat template (``PLAIN``: the project's plain
transcript, which holds the same system text, tool block, turns and calls), so the words are the same
on every machine and need no model file; a chat template's own special tokens are not words of them.
A model without a recipe (a base model) has no ``stray-pool`` or ``training-text`` kind:
``NameSources.absent`` says which kinds a model lacks.
"""

from tooldecode.construct.keys import (
    UndeclaredKey,
    chains,
    draws_of,
    kind_counts,
    name_richness,
    undeclared_keys,
)
from tooldecode.construct.names import (
    DECLARED_VARIANT,
    NAME_KINDS,
    NEVER_SEEN,
    PROMPT_WORD,
    STRAY_POOL,
    TRAINING_TEXT,
    NameSources,
    declared_variant,
    name_kinds,
    occurs,
    words,
)
from tooldecode.construct.scan import ScannedItem, ScannedKey, scan_items
from tooldecode.construct.sources import (
    PLAIN,
    TrainingWords,
    organism_recipe,
    prompt_words,
    sources_for,
    training_words,
)

__all__ = [
    "DECLARED_VARIANT",
    "NAME_KINDS",
    "NEVER_SEEN",
    "PLAIN",
    "PROMPT_WORD",
    "STRAY_POOL",
    "TRAINING_TEXT",
    "NameSources",
    "ScannedItem",
    "ScannedKey",
    "TrainingWords",
    "UndeclaredKey",
    "chains",
    "declared_variant",
    "draws_of",
    "kind_counts",
    "name_kinds",
    "name_richness",
    "occurs",
    "organism_recipe",
    "prompt_words",
    "scan_items",
    "sources_for",
    "training_words",
    "undeclared_keys",
    "words",
]
