"""The package layout (docs/architecture.md): data flows one way, no import cycles, modules of a readable size."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "tooldecode"

# The stages in the order data flows (docs/architecture.md). A module may import its own layer or an
# earlier one, never a later one.
LAYERS = (
    {
        "tooldecode",
        "errors",
        "toolsets",
        "stats",
        "streams",
        "records",
    },  # leaves
    {"models"},
    {"grammar"},  # schema → grammar
    {"scenarios"},
    {"chat_templates", "prompts"},  # scenario → prompt
    {"backends", "masking", "organisms"},  # organisms: models trained inside a stated harness
    {"sampling", "engines", "classify", "probe"},  # model + prompt (+ grammar) → samples
    {"scoring"},  # samples → verdicts
    {"repair"},
    {"runs"},  # run folders: the store, and the loader that scores verdicts once
    {"measures"},  # verdicts + continuations → what each stored sample shows
    {"distortion", "report"},  # statistics → report
    {"experiments"},  # orchestration
    {"cli", "__main__"},  # command line
)
MAX_LINES = 650  # "about 600"


def _component(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _imports() -> dict[str, set[str]]:
    """Component → the components its modules import (top-level and function-level imports)."""
    edges: dict[str, set[str]] = defaultdict(set)
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE.parent).with_suffix("").parts
        me = _component(".".join(rel))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "tooldecode":
                if node.module == "tooldecode":
                    targets = [a.name for a in node.names]
                else:
                    targets = [_component(node.module)]
            elif isinstance(node, ast.Import):
                targets = [_component(a.name) for a in node.names if a.name.split(".")[0] == "tooldecode"]
            else:
                continue
            for target in targets:
                if target != me:
                    edges[me].add(target if target in _RANK else "tooldecode")
    return edges


_RANK = {name: i for i, layer in enumerate(LAYERS) for name in layer}


def test_every_package_has_a_stage():
    modules = {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    unplaced = sorted((modules | packages) - set(_RANK))
    assert not unplaced, f"place {unplaced} in a stage of LAYERS (and in docs/architecture.md)"


def test_no_import_runs_against_the_flow():
    up = sorted(
        f"{a} -> {b}"
        for a, targets in _imports().items()
        for b in targets
        if _RANK.get(b, 0) > _RANK.get(a, 0)
    )
    assert not up, up


def test_no_import_cycles_between_packages():
    edges = _imports()
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append(path[path.index(nxt) :] + [nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])
    assert not cycles, cycles


def test_modules_fit_in_one_head():
    long = {
        str(p.relative_to(PACKAGE.parent)): n
        for p in PACKAGE.rglob("*.py")
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not long, long


# --- experiments/ and scripts/: the study and the tools around the library ------------------------------

ROOT = PACKAGE.parent
STUDY_DIRS = ("experiments", "scripts")
# Known debts: files over MAX_LINES today (split them, then remove them here); a new one fails.
LONG_KNOWN: set[str] = set()


def _py_files(*dirs: str) -> list[Path]:
    return sorted(p for d in dirs for p in (ROOT / d).rglob("*.py"))


def test_experiments_and_scripts_fit_in_one_head():
    long = {
        str(p.relative_to(ROOT)): n
        for p in _py_files(*STUDY_DIRS)
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    new = {k: n for k, n in long.items() if k not in LONG_KNOWN}
    assert not new, f"over {MAX_LINES} lines: {new}"


# argparse belongs to tooldecode/cli/. Known debts: modules outside it that build parsers today (their
# commands are registered beside their stage, or they hold argparse helpers); a new one fails.
ARGPARSE_KNOWN = {
    "tooldecode/models.py",  # the `models` command group
    "tooldecode/grammar/cli.py",  # the `grammar` command group
    "tooldecode/scenarios/cli.py",  # the `scenarios` command group
    "tooldecode/backends/openai.py",  # add_server_arguments: the --base-url/--api-key-env/--server-kind flags
}
_PARSER_CALLS = {
    "add_argument",
    "add_parser",
    "add_subparsers",
    "add_argument_group",
    "add_mutually_exclusive_group",
}


def _uses_argparse(tree: ast.AST) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "argparse" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "argparse":
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in _PARSER_CALLS:
                return True
    return False


def test_argparse_only_in_the_cli_package():
    users = {
        str(p.relative_to(ROOT))
        for p in PACKAGE.rglob("*.py")
        if p.parent.name != "cli" or p.parent.parent != PACKAGE
        if _uses_argparse(ast.parse(p.read_text(encoding="utf-8")))
    }
    new = sorted(users - ARGPARSE_KNOWN)
    assert not new, f"argparse outside tooldecode/cli/: {new} (put the command in tooldecode/cli/)"


def _imported_names(tree: ast.AST) -> set[str]:
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {
        n.module.split(".")[0]
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom) and n.module and not n.level
    }
    return names


def test_the_library_does_not_import_the_study():
    """No module of tooldecode/ imports a module of experiments/ or scripts/ (nor puts them on sys.path):
    the study builds on the library, never the other way round."""
    study = {p.stem for p in _py_files(*STUDY_DIRS)} | set(STUDY_DIRS)
    bad = []
    for p in PACKAGE.rglob("*.py"):
        tree = ast.parse(p.read_text(encoding="utf-8"))
        hits = _imported_names(tree) & study
        for node in ast.walk(tree):  # sys.path.insert(…, "…/experiments") and the like
            if isinstance(node, ast.Call) and "sys.path" in ast.unparse(node.func):
                hits |= {d for d in STUDY_DIRS if d in ast.unparse(node)}
        if hits:
            bad.append(f"{p.relative_to(ROOT)}: {sorted(hits)}")
    assert not bad, bad


def test_the_study_checks_see_what_they_check():
    """The checks above parse real files: the study's folders hold Python, and the known debts exist."""
    assert _py_files("experiments") and _py_files("scripts")
    assert _uses_argparse(ast.parse((ROOT / "tooldecode/grammar/cli.py").read_text(encoding="utf-8")))
    assert _imported_names(ast.parse("import study\nfrom e15_table import x\nfrom . import y")) >= {
        "study",
        "e15_table",
    }
