"""The command line: one explicit list of command groups, each registered, every command's --help."""

from __future__ import annotations

import argparse
import importlib
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
    for name in cli.COMMAND_MODULES:
        before = set(sub.choices)
        importlib.import_module(name).register(sub)
        assert set(sub.choices) - before, f"{name} registered no command"


def test_every_cli_module_is_listed():
    """A module in tooldecode/cli/ that the list forgets would be a command nobody can run."""
    folder = Path(cli.__file__).parent
    modules = {f"tooldecode.cli.{p.stem}" for p in folder.glob("*.py") if p.stem != "__init__"}
    hooked = {"tooldecode.cli.prompts", "tooldecode.cli.server_flags"}  # `scenarios show`; the server flags
    assert modules - hooked == {m for m in cli.COMMAND_MODULES if m.startswith("tooldecode.cli.")}
    assert not list(folder.parent.glob("*_cli.py"))  # no command modules outside the package


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
