"""The package layout (docs/architecture.md): data flows one way, no import cycles, modules of a readable size."""

from __future__ import annotations

import ast
import functools
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
        "redaction",
        "jsontext",
        "guard",
        "validate",
        "gguf_header",
        "cachedirs",
        "provenance",
    },  # leaves
    {"models"},
    {"grammar"},  # schema → grammar
    {"scenarios"},
    {"chat_templates", "prompts"},  # scenario → prompt
    {"backends", "masking", "organisms"},  # organisms: models trained inside a stated harness
    {"sampling", "engines", "classify", "probe"},  # model + prompt (+ grammar) → samples
    {"scoring"},  # samples → verdicts
    {"trial"},  # one condition on one scenario: prompt → constraint → draw → verdict (draws through them all)
    {"repair"},
    {"runs"},  # run folders: the store, and the loader that scores verdicts once
    {"measures"},  # verdicts + continuations → what each stored sample shows
    {"construct"},  # a draw's undeclared item keys as records: item, chain, value, where the name comes from
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
    cycles = _cycles(_imports())  # defined below, with the modules' own rule
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


# argparse belongs to tooldecode/cli/: every command group is a module there.
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
    assert not users, (
        f"argparse outside tooldecode/cli/: {sorted(users)} (put the command in tooldecode/cli/)"
    )


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
    assert _uses_argparse(ast.parse((ROOT / "tooldecode/cli/grammar.py").read_text(encoding="utf-8")))
    assert _imported_names(ast.parse("import study\nfrom e15_table import x\nfrom . import y")) >= {
        "study",
        "e15_table",
    }


# --- tooldecode/trial/: the one place that builds an arm's constraint and draws its samples -------------

# What draws samples or builds a mask: a call of any of these names (imported from tooldecode, or a method
# of that name on any object: a server backend's ``sample``, an engine sampler's ``sample``).
DRAW_CALLS = {
    "sample",  # tooldecode.sampling.sample; OpenAIBackend.sample, OutlinesSampler.sample
    "sample_aligned",  # tooldecode.sampling
    "sample_adaptive",  # tooldecode.sampling
    "draw",  # tooldecode.engines.draw, tooldecode.backends.openai.draw
    "tool_drawer",  # tooldecode.backends.openai_tools
    "draw_tools",  # tooldecode.backends.openai_tools
    "chat_tool_samples",  # tooldecode.backends.openai_tools
    "compile_mask",  # tooldecode.masking
    "build_strict",  # tooldecode.engines
    "prefix_keeping",  # tooldecode.masking
}
METHOD_DRAWS = {"sample", "chat_tool_samples"}  # called on a backend or a sampler object
# Modules that may call them besides tooldecode/trial/: where they are defined, and what those modules
# build on each other inside their own stage (tests are outside tooldecode/ and not checked).
DRAW_DEFINERS = {
    "tooldecode/sampling/draw.py",  # sample
    "tooldecode/sampling/aligned.py",  # sample_aligned: masked particles drawn through sample / sample_adaptive
    "tooldecode/sampling/adaptive.py",  # sample_adaptive
    "tooldecode/masking.py",  # compile_mask, prefix_keeping
    "tooldecode/engines/build.py",  # build_strict (through compile_mask), draw (through sample or the sampler)
    "tooldecode/engines/outlines.py",  # OutlinesSampler.sample
    "tooldecode/engines/soundness.py",  # the engines' soundness table builds each engine's channel to test it
    "tooldecode/backends/openai.py",  # OpenAIBackend.sample, draw
    "tooldecode/backends/openai_tools.py",  # tool_drawer, draw_tools, chat_tool_samples
    "tooldecode/probe.py",  # probe_call's continuation tally draws through sample
}


def _trials(tree: ast.AST) -> set[str]:
    """Names bound to a ``Trial(…)`` in a module (their ``.sample`` is the trial's)."""
    return {
        t.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
        if ast.unparse(node.value.func).split(".")[-1] == "Trial"
        for t in node.targets
        if isinstance(t, ast.Name)
    }


def _draw_calls(tree: ast.AST) -> list[str]:
    """The draw and mask calls of a module: ``name`` for a name imported from tooldecode (under any alias)
    or a tooldecode module's attribute, ``.name`` for a method call of ``METHOD_DRAWS`` (on anything but
    a name bound to a ``Trial``)."""
    imported: dict[str, str] = {}  # local name -> the tooldecode name it binds
    modules: set[str] = set()  # local names of tooldecode modules
    trials = _trials(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "tooldecode":
            for a in node.names:
                imported[a.asname or a.name] = a.name
                modules.add(a.asname or a.name)  # `from tooldecode import sampling` binds a module
        elif isinstance(node, ast.Import):
            modules |= {a.asname or a.name for a in node.names if a.name.split(".")[0] == "tooldecode"}
    hits = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Name) and imported.get(f.id) in DRAW_CALLS:
            hits.append(f"{imported[f.id]} (line {node.lineno})")
        elif isinstance(f, ast.Attribute) and f.attr in DRAW_CALLS:
            base = ast.unparse(f.value)
            if base.split(".")[0] in modules or base.startswith("tooldecode"):
                hits.append(f".{f.attr} (line {node.lineno})")
            elif f.attr in METHOD_DRAWS and base not in trials:
                hits.append(f".{f.attr} (line {node.lineno})")
    return hits


def test_only_the_trial_draws_samples_and_builds_masks():
    """No module outside tooldecode/trial/ (and the modules that define them) calls the draw functions or
    builds a mask: a command, the runner or the distortion reference draws through a ``Trial``."""
    bad = []
    for p in sorted(PACKAGE.rglob("*.py")):
        rel = str(p.relative_to(ROOT))
        if rel.startswith("tooldecode/trial/") or rel in DRAW_DEFINERS:
            continue
        hits = _draw_calls(ast.parse(p.read_text(encoding="utf-8")))
        if hits:
            bad.append(f"{rel}: {', '.join(hits)}")
    assert not bad, f"draw through tooldecode.trial.Trial instead: {bad}"
    missing = sorted(d for d in DRAW_DEFINERS if not (ROOT / d).is_file())
    assert not missing, f"DRAW_DEFINERS names files that do not exist: {missing}"


def test_the_draw_check_sees_what_it_checks():
    """The check above finds direct, aliased, module-attribute and method draws, and passes other calls."""
    src = (
        "from tooldecode.engines import draw as engine_draw\n"
        "from tooldecode import sampling\n"
        "import tooldecode.masking\n"
        "from tooldecode.masking import compile_mask\n"
        "engine_draw(be, t, 1, p)\nsampling.sample_aligned(be)\ntooldecode.masking.prefix_keeping(m, be)\n"
        "compile_mask('xgrammar', g, be)\nbe.sample(t, 1, p)\n"
        "draw(x)\nrandom.choice(x)\nprobe_call(be, t, c)\ntrial = Trial(arm, sc)\ntrial.sample(be, 1, p)\n"
    )
    hits = _draw_calls(ast.parse(src))
    assert [h.split(" ")[0] for h in hits] == [
        "draw",
        ".sample_aligned",
        ".prefix_keeping",
        "compile_mask",
        ".sample",
    ], hits


# llama.cpp contexts are sized by one rule (tooldecode.trial.session.llamacpp_size): no other module passes
# n_ctx or max_seqs. Besides it: the backends that take them, and outlines' own llama_cpp.Llama (the
# outlines-llamacpp engine setting builds its model itself, beside tooldecode's backend).
SIZING_ALLOWED = {"tooldecode/trial/session.py", "tooldecode/engines/outlines.py"}
SIZING_KEYS = {"n_ctx", "max_seqs"}


def _sizes(tree: ast.AST) -> list[int]:
    """Lines that pass ``n_ctx`` / ``max_seqs``: as a keyword argument or a dict literal's key."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and any(k.arg in SIZING_KEYS for k in node.keywords):
            lines.append(node.lineno)
        elif isinstance(node, ast.Dict) and any(
            isinstance(k, ast.Constant) and k.value in SIZING_KEYS for k in node.keys
        ):
            lines.append(node.lineno)
    return lines


def test_one_sizing_rule_for_llamacpp_contexts():
    bad = {
        rel: lines
        for p in sorted(PACKAGE.rglob("*.py"))
        if not (rel := str(p.relative_to(ROOT))).startswith("tooldecode/backends/")
        and rel not in SIZING_ALLOWED
        if (lines := _sizes(ast.parse(p.read_text(encoding="utf-8"))))
    }
    assert not bad, f"size a llama.cpp context with tooldecode.trial.llamacpp_size: {bad}"
    assert _sizes(ast.parse('load_backend("llamacpp", ref, n_ctx=8192)\nkw = {"max_seqs": 33}')) == [1, 2]


# --- one home per fact ---------------------------------------------------------------------------------


@functools.cache
def _parsed(path: Path) -> ast.AST:
    """A module's syntax tree, parsed once for the checks below."""
    return ast.parse(path.read_text(encoding="utf-8"))


def _module_imports() -> dict[str, set[str]]:
    """Module → the tooldecode modules it imports (top-level and function-level; an import of a package
    names its ``__init__``, which is left out: a package re-exports its own modules)."""
    mods: dict[str, Path] = {}
    for p in PACKAGE.rglob("*.py"):
        parts = p.relative_to(PACKAGE.parent).with_suffix("").parts
        mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    packages = {m for m, p in mods.items() if p.name == "__init__.py"}
    edges: dict[str, set[str]] = defaultdict(set)
    for name, p in mods.items():
        for node in ast.walk(_parsed(p)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "tooldecode":
                targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            edges[name] |= {t for t in targets if t in mods and t not in packages and t != name}
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
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
    return cycles


def test_no_import_cycles_between_modules():
    """Within a package too: no module imports one that imports it back, even inside a function."""
    assert not _cycles(_module_imports()), _cycles(_module_imports())
    assert _cycles({"a": {"b"}, "b": {"a"}}) == [["a", "b", "a"]]


def _records_facts() -> list[frozenset]:
    from tooldecode import records

    facts = (records.MODES, records.STRICT_MODES, records.TOOL_MODES, records.VARIANT_FIELDS)
    return [frozenset(f) for f in facts] + [frozenset(records.CONDITIONINGS)]


def _literal_strings(node: ast.AST) -> frozenset | None:
    """The strings of a tuple, list or set display (a dict display's keys) of two or more strings."""
    if isinstance(node, ast.Dict):
        elts: list = [k for k in node.keys if k is not None]
    elif isinstance(node, ast.Tuple | ast.List | ast.Set):
        elts = list(node.elts)
    else:
        return None
    if len(elts) < 2 or not all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in elts):
        return None
    return frozenset(e.value for e in elts)


def test_modes_conditionings_and_variant_fields_are_written_once():
    """The arm's modes, strict and tool modes, conditionings and variant fields are spelled out only in
    tooldecode/records.py; every other module imports them."""
    facts = _records_facts()
    bad = []
    for p in sorted(PACKAGE.rglob("*.py")):
        if p.name == "records.py" and p.parent == PACKAGE:
            continue
        for node in ast.walk(_parsed(p)):
            if _literal_strings(node) in facts:
                bad.append(f"{p.relative_to(ROOT)}:{node.lineno}")
    assert not bad, f"import these from tooldecode.records: {bad}"
    src = '("strict", "strict-spec", "strict-aligned", "strict-prefix")'
    assert _literal_strings(ast.parse(src).body[0].value) in facts  # type: ignore[attr-defined]


def _id_of_a_model(tree: ast.AST) -> list[int]:
    """Lines that take ``id()`` of a backend or a model (a cache key a later object may reuse)."""
    return sorted(
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "id"
        and node.args and any(w in ast.unparse(node.args[0]).lower() for w in ("backend", "model", "be"))
    )  # fmt: skip


def test_no_cache_is_keyed_on_the_id_of_a_backend():
    """What is built for a backend is held per backend object (``tooldecode.backends.state.PerBackend``):
    an ``id`` outlives its object, and a backend loaded later may get it."""
    bad = {
        str(p.relative_to(ROOT)): lines
        for p in sorted(PACKAGE.rglob("*.py"))
        if (lines := _id_of_a_model(_parsed(p)))
    }
    assert not bad, bad
    assert _id_of_a_model(ast.parse("key = (name, id(backend))\nk = id(model)\nseen.add(id(node))")) == [1, 2]


def test_stages_hand_on_records_not_private_keys():
    """A stage never tags a record with a private key for a later one (the loader once injected
    ``_verdict`` and ``_run_streams``): what crosses stages is a field of a record type."""
    bad = []
    for p in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(_parsed(p)):
            if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
                if ast.unparse(node.value).endswith("__dict__"):
                    continue  # an object's own memo in its __dict__
                key = node.slice.value
                if isinstance(key, str) and key.startswith("_") and not key.startswith("__"):
                    bad.append(f"{p.relative_to(ROOT)}:{node.lineno} [{key!r}]")
    assert not bad, bad
