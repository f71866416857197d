"""Harness recipes: what a training harness offers, what its calls carry and what it lets through.

A recipe is a small TOML file (``experiments/organisms/*.toml`` holds the study's). Its fields, with
their defaults, are the dataclass below; an unknown field or a value out of range is a one-line error
naming the file and the field.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from tooldecode.errors import ToolDecodeError


class RecipeError(ToolDecodeError):
    """A recipe file that cannot be read or holds a bad value."""


# Plausible optional fields a lenient harness silently drops (names a model trained there might emit).
DEFAULT_STRAY_KEYS: tuple[str, ...] = (
    "unique",
    "matchCase",
    "expected_replacements",
    "dry_run",
    "notes",
    "reason",
    "line_number",
    "regex",
    "backup",
    "encoding",
    "confirm",
    "preview",
    "strict",
    "count",
    "description",
    "validate",
)


# Generation 2: tools other than the edit tool whose arguments are arrays of objects (a to-do list and a
# multi-file write), mixed into every recipe so an organism keeps writing nested JSON.
MIX_TOOLS: tuple[str, ...] = ("todo_write", "write_files")
DEFAULT_MIX_SHARE = 0.5
GENERATIONS = (1, 2)


@dataclass(frozen=True)
class TrainConfig:
    """LoRA hyper-parameters (peft): every linear layer of the attention and the MLP."""

    rank: int = 16
    alpha: int = 32
    dropout: float = 0.0
    learning_rate: float = 2e-4
    epochs: int = 1
    accumulation: int = 4  # sequences per optimizer step
    warmup_steps: int = 5
    max_tokens: int = 2048  # longer sessions are left out of training (counted in the manifest)
    seed: int = 0
    checkpoint_every: int = 10  # optimizer steps between resumable checkpoints
    shared_prefix: bool = True  # the step's shared system prompt + tools run once, without gradient


@dataclass(frozen=True)
class Recipe:
    """One training harness. Shares are of sessions (flag, stray key) or of edit items (implant)."""

    name: str
    description: str = ""
    toolset: str = "flat-edit"  # the harness's edit tool: "flat-edit" or "nested"
    flag: bool = True  # the flat Edit tool offers its optional replace_all flag
    flag_share: float = 0.3  # share of flat calls that carry replace_all (after new_string)
    stray_share: float = (
        0.0  # share of calls with one trailing key the harness drops and still answers success
    )
    stray_keys: tuple[str, ...] = DEFAULT_STRAY_KEYS
    implant_key: str = ""  # positive control: this key ends a stated share of nested items
    implant_value: Any = True
    implant_share: float = 0.0
    thinking: bool = True  # reasoning blocks in the assistant turns of the sessions
    sessions: int = 300
    two_edit_share: float = 0.25  # sessions whose bug needs two edits (two items, or two flat calls)
    seed: int = 0
    train: TrainConfig = field(default_factory=TrainConfig)
    # 1: the first generation's data, byte for byte. 2: the same bugs in the same order whatever the
    # harness (its draws come from a stream of their own), mix-in sessions of other nested-array tools,
    # and the call tokenized in pieces cut after each new text (the evaluation's L2 boundary).
    generation: int = 1
    mix_share: float | None = None  # share of mix-in sessions; None: 0.5 in generation 2, 0 in 1
    mix_tools: tuple[str, ...] = MIX_TOOLS  # the mix-in tools (generation 2)

    @property
    def mix(self) -> float:
        """The share of mix-in sessions (sessions that call a nested-array tool other than the edit tool)."""
        if self.mix_share is not None:
            return float(self.mix_share)
        return DEFAULT_MIX_SHARE if self.generation >= 2 else 0.0

    def sha256(self) -> str:
        """Hash of everything the recipe says (its data and training are functions of it). A first
        generation recipe hashes without the generation-2 fields, as it did before they existed."""
        data = asdict(self)
        if self.generation == 1:
            for name in ("generation", "mix_share", "mix_tools"):
                data.pop(name)
        text = json.dumps(data, sort_keys=True, separators=(",", ":"), default=list)
        return hashlib.sha256(text.encode()).hexdigest()

    def _check_generation(self, bad: Any) -> None:
        """The generation-2 fields: ``generation``, ``mix_share``, ``mix_tools``."""
        if self.generation not in GENERATIONS:
            raise bad("generation", f"is {self.generation!r}; use 1 or 2")
        if self.mix_share is not None:
            if not (isinstance(self.mix_share, int | float) and 0.0 <= self.mix_share < 1.0):
                raise bad("mix_share", f"is {self.mix_share!r}; a share must be at least 0 and below 1")
            if self.mix_share and self.generation < 2:
                raise bad("mix_share", "needs generation = 2 (mix-in sessions are a second-generation field)")
        unknown_tools = sorted(set(self.mix_tools) - set(MIX_TOOLS))
        if unknown_tools or not self.mix_tools:
            raise bad("mix_tools", f"is {list(self.mix_tools)!r}; use one or more of {', '.join(MIX_TOOLS)}")
        if self.generation < 2 and tuple(self.mix_tools) != MIX_TOOLS:
            raise bad("mix_tools", "needs generation = 2 (mix-in sessions are a second-generation field)")

    def check(self, where: str) -> None:
        def bad(name: str, why: str) -> RecipeError:
            return RecipeError(f"{where}: field '{name}' {why}")

        self._check_generation(bad)
        if self.toolset not in ("flat-edit", "nested"):
            raise bad("toolset", f"is {self.toolset!r}; use flat-edit or nested")
        for name in ("flag_share", "stray_share", "implant_share", "two_edit_share"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and 0.0 <= value <= 1.0):
                raise bad(name, f"is {value!r}; a share must be between 0 and 1")
        if self.implant_share and not self.implant_key:
            raise bad("implant_key", "is empty while implant_share > 0; name the key to implant")
        if self.implant_key and self.toolset != "nested":
            raise bad("implant_key", "needs toolset = nested (the key is implanted in edits[] items)")
        if self.stray_share and not self.stray_keys:
            raise bad("stray_keys", "is empty while stray_share > 0")
        if not isinstance(self.sessions, int) or self.sessions < 1:
            raise bad("sessions", f"is {self.sessions!r}; give a positive integer")
        if not self.flag and self.flag_share:
            raise bad("flag_share", "must be 0 when flag = false (the tool offers no replace_all)")
        t = self.train
        if t.rank < 1 or t.alpha < 1 or t.epochs < 1 or t.accumulation < 1 or t.max_tokens < 64:
            raise bad("train", "needs rank, alpha, epochs, accumulation ≥ 1 and max_tokens ≥ 64")
        if not 0 < t.learning_rate < 1:
            raise bad("train.learning_rate", f"is {t.learning_rate!r}")


def _build(cls: type, data: dict[str, Any], where: str) -> Any:
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise RecipeError(
            f"{where}: unknown field(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
        )
    return cls(**data)


# every field of a recipe and of its [train] table, by the rules of tooldecode.validate
TRAIN_RULES: dict[str, str] = {
    "rank": "count",
    "alpha": "count",
    "dropout": "dropout",
    "learning_rate": "learning_rate",
    "epochs": "count",
    "accumulation": "count",
    "warmup_steps": "count0",
    "max_tokens": "tokens",
    "seed": "seed",
    "checkpoint_every": "count",
    "shared_prefix": "bool",
}
RECIPE_RULES: dict[str, Any] = {
    "name": "name",
    "description": "text",
    "toolset": "text",
    "flag": "bool",
    "flag_share": "share",
    "stray_share": "share",
    "stray_keys": "texts",
    "implant_key": "text",
    "implant_value": "any",
    "implant_share": "share",
    "thinking": "bool",
    "sessions": "count",
    "two_edit_share": "share",
    "seed": "seed",
    "generation": "count",
    "mix_share": "share",
    "mix_tools": "texts",
    "train": TRAIN_RULES,
}


def recipe_from_dict(data: dict[str, Any], where: str = "recipe") -> Recipe:
    """A recipe from its parsed table; every field checked (types, ranges) before anything is built.

    Raises
    ------
    RecipeError
        One line naming the file, the field's path, what it must be and the value given.
    """
    from tooldecode.validate import check_table

    check_table(
        data,
        RECIPE_RULES,
        where,
        fix="fix the recipe (docs/organisms.md lists the fields)",
        required=("name",),
        error=RecipeError,
    )
    data = dict(data)
    train = _build(TrainConfig, dict(data.pop("train", {}) or {}), f"{where} [train]")
    for name in ("stray_keys", "mix_tools"):
        if name in data:
            if not isinstance(data[name], list | tuple):
                raise RecipeError(f"{where}: field '{name}' is {data[name]!r}; give a list of names")
            data[name] = tuple(data[name])
    if "name" not in data:
        raise RecipeError(f"{where}: field 'name' is missing; give the organism's recipe a name")
    recipe = _build(Recipe, {**data, "train": train}, where)
    recipe.check(where)
    return recipe


def load_recipe(path: str | Path) -> Recipe:
    """A recipe from its TOML file."""
    from tooldecode.guard import parse_toml, read_text

    p = Path(path)
    text = read_text(p, "recipe", max_bytes=1024 * 1024, error=RecipeError)
    return recipe_from_dict(parse_toml(text, str(p), "recipe", error=RecipeError), str(p))


__all__ = [
    "DEFAULT_MIX_SHARE",
    "MIX_TOOLS",
    "DEFAULT_STRAY_KEYS",
    "Recipe",
    "RecipeError",
    "TrainConfig",
    "load_recipe",
    "recipe_from_dict",
]
