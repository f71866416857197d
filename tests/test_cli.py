"""The command line: one explicit list of command groups, each registered, every command's --help."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

import tooldecode.cli as cli


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse keeps its subparsers only here
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _all_commands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = []
    for name, sub in _subcommands(parser).items():
        out.append((*prefix, name))
        out.extend(_all_commands(sub, (*prefix, name)))
    return out


def test_each_command_module_registers_its_group():
    parser = argparse.ArgumentParser(prog="tooldecode")
    sub = parser.add_subparsers(dest="command")
    for module in cli.COMMAND_MODULES:
        before = set(sub.choices)
        module.register(sub)
        assert set(sub.choices) - before, f"{module.__name__} registered no command"


# Modules of tooldecode/cli/ that are not a command group: `scenarios show` (added by the scenarios
# group) and the parser pieces the groups share.
NOT_GROUPS = {"tooldecode.cli.prompts", "tooldecode.cli.options", "tooldecode.cli.server_flags"}


def test_every_cli_module_is_listed():
    """A module in tooldecode/cli/ that the list forgets would be a command nobody can run."""
    folder = Path(cli.__file__).parent
    modules = {f"tooldecode.cli.{p.stem}" for p in folder.glob("*.py") if p.stem != "__init__"}
    groups = [m.__name__ for m in cli.COMMAND_MODULES]
    assert len(groups) == len(set(groups))
    assert NOT_GROUPS <= modules and modules - NOT_GROUPS == set(groups)
    assert not list(folder.parent.glob("*_cli.py"))  # no command modules outside the package
    assert not list(folder.parent.glob("*/cli.py"))


def test_the_cli_package_names_its_groups_explicitly():
    """Groups are imported by name (no module loaded from a string), and each is a module of tooldecode/cli/."""
    source = Path(cli.__file__).read_text(encoding="utf-8")
    assert "importlib" not in source
    assert all(m.__name__.startswith("tooldecode.cli.") for m in cli.COMMAND_MODULES)


def _options(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()):
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            yield prefix, action
    for name, sub in _subcommands(parser).items():
        yield from _options(sub, (*prefix, name))


def test_every_default_model_is_the_one_constant():
    """--model and --base default to tooldecode.models.DEFAULT_MODEL wherever they have a default."""
    from tooldecode.models import DEFAULT_MODEL

    found = {
        cmd: action.default
        for cmd, action in _options(cli.build_parser())
        if {"--model", "--base"} & set(action.option_strings) and action.default is not None
    }
    assert {("sample",), ("probe",), ("replay",), ("scenarios", "show"), ("organisms", "train")} <= set(found)
    assert set(found.values()) == {DEFAULT_MODEL}


def test_the_default_model_is_spelled_once():
    """No module of tooldecode/ but models.py writes the default model's id (docstrings aside), and
    models.py writes it once, as the constant."""
    import ast

    from tooldecode.models import DEFAULT_MODEL

    package = Path(cli.__file__).parents[1]
    spelled = []
    for path in package.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        spelled += [
            (f"{path.relative_to(package)}:{node.lineno}", node.value == DEFAULT_MODEL)
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and DEFAULT_MODEL in node.value
            and id(node) not in docstrings
        ]
    outside = [where for where, exact in spelled if not where.startswith("models.py:")]
    assert not outside, f"use tooldecode.models.DEFAULT_MODEL instead: {outside}"
    assert [exact for where, exact in spelled if where.startswith("models.py:")].count(True) == 1


def test_every_command_prints_help(capsys):
    commands = _all_commands(cli.build_parser())
    assert {("run",), ("report",), ("distortion",), ("scenarios", "show"), ("runs", "list")} <= set(commands)
    for cmd in commands:
        with pytest.raises(SystemExit) as exc:
            cli.main([*cmd, "--help"])
        assert exc.value.code == 0, cmd
        assert capsys.readouterr().out.startswith(f"usage: tooldecode {' '.join(cmd)}")


def test_python_dash_m_tooldecode_help():
    done = subprocess.run([sys.executable, "-m", "tooldecode", "--help"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    for name in ("models", "grammar", "scenarios", "sample", "probe", "rescore", "repair", "run", "report"):
        assert name in done.stdout


def test_a_run_records_the_command_that_recreates_it():
    """`tooldecode run SPEC --model X` is recorded with its --model (the report prints this command)."""
    from tooldecode.experiments import load_spec
    from tooldecode.experiments.runner import run_command

    root = Path(__file__).resolve().parents[1]
    spec = load_spec(root / "experiments" / "e1_strict_vs_loose.toml", quick=True)
    out = root / "out" / "e1"
    assert run_command(spec, out) == [
        "tooldecode",
        "run",
        "experiments/e1_strict_vs_loose.toml" if Path.cwd() == root else str(spec.path),
        "--quick",
        "--out",
        "out/e1" if Path.cwd() == root else str(out),
    ]
    spec.models = ["smollm2-135m-instruct"]
    spec.backend = "hf"
    cmd = run_command(spec, out)
    assert cmd[cmd.index("--model") + 1] == "smollm2-135m-instruct"
    assert cmd[cmd.index("--backend") + 1] == "hf"
    assert cmd.count("--model") == 1


@pytest.mark.model
def test_sample_and_probe_read_a_users_scenario_folder(tmp_path):
    """`--dir` points sample and probe at a user's folder of scenarios instead of the built-in corpus."""
    src = (
        Path(__file__).resolve().parents[1] / "tooldecode" / "scenarios" / "data" / "c-config-trim-crlf.yaml"
    )
    text = src.read_text().replace("id: c-config-trim-crlf", "id: my-own-trim", 1)
    assert "id: my-own-trim" in text
    (tmp_path / "mine.yaml").write_text(text)
    base = [sys.executable, "-m", "tooldecode"]
    out = subprocess.run(
        [*base, "sample", "--dir", str(tmp_path), "--scenario", "my-own-trim", "--model", "smollm2-135m-instruct",
         "-n", "1", "--max-new-tokens", "4", "--json"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.count('"verdict"') == 1  # one scored sample of the scenario the corpus lacks
    # the built-in corpus does not have it: without --dir it is a one-line error
    miss = subprocess.run(
        [*base, "probe", "--scenario", "my-own-trim", "--model", "smollm2-135m-instruct"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert miss.returncode != 0 and "unknown scenario 'my-own-trim'" in miss.stderr


def test_run_modes_names_only_modes_of_the_spec(tmp_path, capsys):
    """`tooldecode run SPEC --modes X`: a mode the spec does not draw is a one-line error, before anything
    is loaded or written."""
    root = Path(__file__).resolve().parents[1]
    out = tmp_path / "run"
    code = cli.main(
        [
            "run",
            str(root / "experiments" / "e17_strict_cost.toml"),
            "--quick",
            "--modes",
            "loose",
            "retry",
            "--out",
            str(out),
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        code == 2
        and len(err) == 1
        and "--modes: retry" in err[0]
        and "loose, strict, strict-aligned" in err[0]
    )
    assert not out.exists()


def test_run_levels_names_only_levels_of_the_spec(tmp_path, capsys):
    """`tooldecode run SPEC --levels X`: a level none of the spec's arms has is a one-line error, before
    anything is loaded or written."""
    root = Path(__file__).resolve().parents[1]
    out = tmp_path / "run"
    spec = str(root / "experiments" / "e19_organisms_gen2.toml")
    code = cli.main(["run", spec, "--quick", "--levels", "L2", "L3", "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--levels: L3" in err[0] and "(L1, L2)" in err[0]
    assert not out.exists()
