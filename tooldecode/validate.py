"""One declarative checker for every door: spec files, recipes and training flags, command-line flags,
manifests, session logs and tool lists.

A value is checked against a *rule*, a name in ``OPTION_RULES`` (a test and what a value must be).
A table of values (a TOML table, a JSON object) is checked against a dict ``{field: rule}`` by
``check_table``; a nested table's rule is itself such a dict. Every problem is one line::

    <file>: field '<json.path>' must be <what>, got <value>; <what to do>

``tooldecode.experiments.spec`` checks its fields with these rules, as do ``tooldecode.organisms``
(recipes, training flags, manifests) and the flags of ``replay`` and ``distortion``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from typing import Any

from tooldecode.errors import ToolDecodeError

SEED_MAX = 2**63 - 1


class ValidationError(ToolDecodeError):
    """A value at a door (a file's field, a flag) that breaks its rule."""


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


_SHA256 = re.compile(r"[0-9a-f]{64}")

# rule -> (test, what a value must be)
OPTION_RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "count": (lambda v: _is_int(v) and v >= 1, "a whole number ≥ 1"),
    "count0": (lambda v: _is_int(v) and v >= 0, "a whole number ≥ 0"),
    "seed": (lambda v: _is_int(v) and 0 <= v <= SEED_MAX, "a whole number in [0, 2**63 - 1]"),
    "temperature": (lambda v: _is_num(v) and v >= 0, "a finite number ≥ 0"),
    "top_p": (lambda v: _is_num(v) and 0 < v <= 1, "a number in (0, 1]"),
    "mass": (lambda v: _is_num(v) and 0 <= v < 1, "a probability mass in [0, 1)"),
    "number0": (lambda v: _is_num(v) and v >= 0, "a finite number ≥ 0"),
    "share": (lambda v: _is_num(v) and 0 <= v <= 1, "a share in [0, 1]"),
    "probability": (lambda v: _is_num(v) and 0 <= v <= 1, "a probability in [0, 1]"),
    "dropout": (lambda v: _is_num(v) and 0 <= v < 1, "a dropout rate in [0, 1)"),
    "learning_rate": (lambda v: _is_num(v) and 0 < v < 1, "a learning rate in (0, 1)"),
    "tokens": (lambda v: _is_int(v) and 64 <= v <= 1_000_000, "a whole number of tokens in [64, 1000000]"),
    "bool": (lambda v: isinstance(v, bool), "true or false"),
    "text": (lambda v: isinstance(v, str), "text"),
    "name": (
        lambda v: isinstance(v, str) and bool(re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}", v)),
        "a plain name (letters, digits, '.', '_', '-')",
    ),
    "texts": (
        lambda v: isinstance(v, list | tuple) and all(isinstance(x, str) for x in v),
        "a list of strings",
    ),
    "numbers": (lambda v: isinstance(v, list) and all(_is_num(x) for x in v), "a list of finite numbers"),
    "sha256": (lambda v: isinstance(v, str) and bool(_SHA256.fullmatch(v)), "a sha256 (64 hex digits)"),
    "table": (lambda v: isinstance(v, dict), "a table"),
    "any": (lambda v: True, "any value"),
}

Rules = Mapping[str, "str | Rules"]


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def option_problem(value: Any, rule: str) -> str | None:
    """What is wrong with ``value`` under ``rule`` (a key of ``OPTION_RULES``), or None when it is fine.

    Parameters
    ----------
    value : Any
        The value to check.
    rule : str
        A key of ``OPTION_RULES``.

    Returns
    -------
    str or None
        ``"must be <what>, got <value>"``, or None.

    Examples
    --------
    >>> from tooldecode.validate import option_problem
    >>> option_problem(-5, "count")
    'must be a whole number ≥ 1, got -5'
    """
    test, what = OPTION_RULES[rule]
    return None if test(value) else f"must be {what}, got {_shown(value)}"


def check_options(
    values: dict[str, tuple[Any, str]], where: str = "", error: type[ToolDecodeError] | None = None
) -> None:
    """Check command-line values: ``{"--flag": (value, rule)}`` (a ``None`` value is an unset option).

    Parameters
    ----------
    values : dict
        ``{flag: (value, rule)}``.
    where : str
        A prefix for the message (e.g. ``"replay: "``).
    error : type, optional
        The ``ToolDecodeError`` subclass raised (default ``ValidationError``).

    Raises
    ------
    ToolDecodeError
        One line naming the first flag whose value breaks its rule, and what it must be.
    """
    for flag, (value, rule) in values.items():
        if value is None:
            continue
        problem = option_problem(value, rule)
        if problem is not None:
            raise (error or ValidationError)(f"{where}{flag} {problem}")


def check_table(
    data: Any,
    rules: Rules,
    where: str,
    *,
    path: str = "",
    fix: str = "fix it",
    required: tuple[str, ...] = (),
    allow_unknown: bool = False,
    error: type[ToolDecodeError] | None = None,
) -> None:
    """Check a table (a TOML table, a JSON object) against ``rules``: ``{field: rule}``, a nested dict
    for a nested table.

    Parameters
    ----------
    data : Any
        The parsed table.
    rules : mapping
        ``{field: rule name or nested rules}``.
    where : str
        The file (or other source) the table came from.
    path : str
        The JSON path of ``data`` in its file ("" for the top).
    fix : str
        What to do, ending each message.
    required : tuple of str
        Fields that must be present (dotted paths from the top are not needed: top-level names).
    allow_unknown : bool
        Whether fields not in ``rules`` are let through.
    error : type, optional
        The ``ToolDecodeError`` subclass raised (default ``ValidationError``).

    Raises
    ------
    ToolDecodeError
        One line: ``<where>: field '<path>' must be <what>, got <value>; <fix>``, or an unknown or
        missing field named with the known ones.

    Examples
    --------
    >>> from tooldecode.validate import check_table
    >>> check_table({"train": {"rank": "16"}}, {"train": {"rank": "count"}}, "r.toml")
    Traceback (most recent call last):
    ...
    tooldecode.validate.ValidationError: r.toml: field 'train.rank' must be a whole number ≥ 1, got '16'; fix it
    """
    err = error or ValidationError
    here = path or "the top level"
    if not isinstance(data, dict):
        raise err(f"{where}: {here} must be a table, got {type(data).__name__}; {fix}")
    if not allow_unknown:
        unknown = sorted(str(k) for k in data if k not in rules)
        if unknown:
            raise err(
                f"{where}: unknown field(s) {', '.join(unknown)}"
                + (f" in '{path}'" if path else "")
                + f"; known: {', '.join(sorted(rules))}"
            )
    for name in required:
        if name not in data:
            raise err(f"{where}: field '{_join(path, name)}' is missing; {fix}")
    for name, rule in rules.items():
        if name not in data:
            continue
        value, at = data[name], _join(path, name)
        if isinstance(rule, Mapping):
            check_table(value, rule, where, path=at, fix=fix, allow_unknown=allow_unknown, error=err)
            continue
        problem = option_problem(value, rule)
        if problem is not None:
            raise err(f"{where}: field '{at}' {problem}; {fix}")


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


__all__ = [
    "OPTION_RULES",
    "SEED_MAX",
    "ValidationError",
    "check_options",
    "check_table",
    "option_problem",
]
