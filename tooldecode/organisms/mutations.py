"""Source snippets from the machine's Python and the bugs injected into them (one mutation each).

A *snippet* is one top-level function (or method, dedented) of a standard-library module, 6–30 lines,
read with ``ast`` from the installed interpreter's own sources: code nobody wrote for an evaluation.
A *mutation* changes one token on one body line the way a real bug looks — an off-by-one boundary, a
swapped operator, a wrong constant, an inverted condition — and the gold edit restores it. Everything
is chosen by a ``random.Random`` the caller seeds, so the same seed and the same sources give the same
snippets and bugs.
"""

from __future__ import annotations

import ast
import hashlib
import io
import random
import sysconfig
import textwrap
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

# Standard-library folders that are not ordinary library code (tests, GUI, vendored tools).
_SKIP_DIRS = {
    "test",
    "tests",
    "idlelib",
    "lib2to3",
    "tkinter",
    "turtledemo",
    "site-packages",
    "ensurepip",
    "__pycache__",
    "pydoc_data",
    "venv",
    "config-3.11-x86_64-linux-gnu",
}
MIN_LINES, MAX_LINES = 6, 30

# kind → (what the user sees, what the assistant says is wrong)
KINDS: dict[str, tuple[str, str]] = {
    "boundary": ("it is off by one at the edge of its range", "the comparison is off by one at the boundary"),
    "equality": ("the check takes the wrong branch", "the equality test is inverted"),
    "arith": ("the numbers it computes come out shifted", "the operator is swapped"),
    "logic": ("the condition accepts the wrong cases", "`and` and `or` are swapped in the condition"),
    "constant": ("a value it uses is wrong", "the constant is wrong"),
    "negation": ("its condition is inverted", "the condition lost (or gained) a `not`"),
    "flag": ("a flag it passes has the wrong value", "`True` and `False` are swapped"),
}
_SWAPS = {
    "<": ("<=", "boundary"),
    "<=": ("<", "boundary"),
    ">": (">=", "boundary"),
    ">=": (">", "boundary"),
    "==": ("!=", "equality"),
    "!=": ("==", "equality"),
    "+": ("-", "arith"),
    "-": ("+", "arith"),
    "and": ("or", "logic"),
    "or": ("and", "logic"),
    "True": ("False", "flag"),
    "False": ("True", "flag"),
}


@dataclass(frozen=True)
class Snippet:
    """One function's source, dedented, with where it came from."""

    module: str  # dotted module name, e.g. "json.encoder"
    name: str  # function name (``Class.method`` for methods)
    source: str  # the code, ending with a newline
    origin: str  # path of the file relative to the standard library
    origin_sha256: str  # of that file's bytes


@dataclass(frozen=True)
class Mutation:
    """One injected bug: ``mutated`` is ``original`` with one token changed."""

    kind: str  # a key of KINDS
    original: str  # the snippet's text before the bug
    mutated: str  # the text with the bug (what the file holds)
    line: int  # 0-based line of the change
    before: str  # the token as it was
    after: str  # the token the bug put there


def stdlib_dir() -> Path:
    """The folder of this interpreter's standard library sources."""
    return Path(sysconfig.get_paths()["stdlib"])


def _modules(root: Path) -> Iterator[Path]:
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if any(part in _SKIP_DIRS for part in rel.parts[:-1]) or rel.name.startswith("test"):
            continue
        yield path


def _functions(tree: ast.Module) -> Iterator[tuple[str, ast.FunctionDef]]:
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            yield node.name, node
        elif isinstance(node, ast.ClassDef):
            for sub in node.body:
                if isinstance(sub, ast.FunctionDef):
                    yield f"{node.name}.{sub.name}", sub


def snippets(root: Path | None = None) -> Iterator[Snippet]:
    """Every usable function of the standard library under ``root``, in a fixed order (sorted files,
    then source order). Usable: 6–30 lines, ASCII, no nested function or class, parses once dedented."""
    base = root or stdlib_dir()
    for path in _modules(base):
        try:
            data = path.read_bytes()
            text = data.decode("utf-8")
            tree = ast.parse(text)
        except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
            continue
        if not text.isascii():
            continue
        lines = text.splitlines(keepends=True)
        rel = path.relative_to(base).as_posix()
        module = rel[: -len(".py")].replace("/", ".").removesuffix(".__init__")
        digest = hashlib.sha256(data).hexdigest()
        for name, fn in _functions(tree):
            start = (fn.decorator_list[0].lineno if fn.decorator_list else fn.lineno) - 1
            end = fn.end_lineno or fn.lineno
            if not MIN_LINES <= end - start <= MAX_LINES:
                continue
            if any(
                isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda)
                for n in ast.walk(fn)
                if n is not fn
            ):
                continue
            source = textwrap.dedent("".join(lines[start:end]))
            if "\t" in source or '"""' not in source and "'''" not in source and len(source) < 120:
                continue
            try:
                ast.parse(source)
            except SyntaxError:
                continue
            yield Snippet(module, name, source if source.endswith("\n") else source + "\n", rel, digest)


def _tokens(source: str) -> list[tokenize.TokenInfo]:
    return list(tokenize.generate_tokens(io.StringIO(source).readline))


def _candidates(source: str) -> list[tuple[int, int, int, str, str, str]]:
    """(line, col_start, col_end, before, after, kind) for every token a bug may change (body lines only)."""
    out = []
    first_body = None
    try:
        fn = ast.parse(source).body[0]
        assert isinstance(fn, ast.FunctionDef)
        body = (
            fn.body[1:]
            if (
                fn.body
                and isinstance(fn.body[0], ast.Expr)
                and isinstance(getattr(fn.body[0], "value", None), ast.Constant)
            )
            else fn.body
        )
        first_body = body[0].lineno if body else None
    except (SyntaxError, IndexError, AssertionError):
        return out
    if first_body is None:
        return out
    prev: tokenize.TokenInfo | None = None
    for tok in _tokens(source):
        row, col = tok.start
        if row < first_body:
            prev = tok
            continue
        if tok.type in (tokenize.OP, tokenize.NAME) and tok.string in _SWAPS:
            after, kind = _SWAPS[tok.string]
            # "+"/"-" only as binary operators (after a name, number, or closing bracket)
            if tok.string in "+-" and not (
                prev and (prev.type in (tokenize.NAME, tokenize.NUMBER) or prev.string in ")]")
            ):
                prev = tok
                continue
            out.append((row - 1, col, tok.end[1], tok.string, after, kind))
        elif tok.type == tokenize.NUMBER and tok.string.isdigit() and len(tok.string) <= 3:
            out.append((row - 1, col, tok.end[1], tok.string, str(int(tok.string) + 1), "constant"))
        elif (
            tok.type == tokenize.NAME
            and tok.string in ("if", "while")
            and tok.start[1] == len(tok.line) - len(tok.line.lstrip())
        ):
            out.append((row - 1, col, tok.end[1], tok.string, f"{tok.string} not", "negation"))
        prev = tok
    return out


def mutate(snippet: Snippet, rng: random.Random) -> Mutation | None:
    """One bug in ``snippet``, chosen by ``rng``, whose line (bug included) occurs once in the file; None
    when the snippet offers none."""
    cands = _candidates(snippet.source)
    rng.shuffle(cands)
    lines = snippet.source.splitlines(keepends=True)
    for row, c0, c1, before, after, kind in cands:
        line = lines[row]
        new_line = line[:c0] + after + line[c1:]
        mutated = "".join(lines[:row] + [new_line] + lines[row + 1 :])
        if mutated.count(new_line) != 1 or snippet.source.count(line) != 1:
            continue
        try:
            ast.parse(mutated)
        except SyntaxError:
            continue
        return Mutation(kind, snippet.source, mutated, row, before, after)
    return None


__all__ = ["KINDS", "Mutation", "Snippet", "mutate", "snippets", "stdlib_dir"]
