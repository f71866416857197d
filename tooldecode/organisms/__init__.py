"""Model organisms: small models LoRA-trained inside a stated harness, to test where invented keys come from.

A *recipe* (``recipes``) says what a training harness offers and lets through: the flat ``Edit`` tool with
or without its optional ``replace_all`` flag, stray trailing keys it silently drops, the nested ``edit``
tool (the negative control), one fixed implanted key (the positive control), thinking kept or not.
``mutations`` injects real-looking bugs into functions of the machine's own Python standard library;
``sessions`` turns each into an agentic session rendered through the project's chat templates;
``mixins`` adds, in the second generation, sessions of other tools whose arguments are arrays of
objects (a to-do list, a multi-file write); ``train`` fits a LoRA adapter on the assistant turns (peft);
``export`` writes the organism as a GGUF both backends load; ``store`` caches it with its manifest under ``$TOOLDECODE_HOME/organisms/``.
An organism is a model id wherever one is accepted: ``organism:<recipe>@<base>``.
"""

from tooldecode.organisms.recipes import Recipe, RecipeError, TrainConfig, load_recipe, recipe_from_dict

__all__ = ["Recipe", "RecipeError", "TrainConfig", "load_recipe", "recipe_from_dict"]
