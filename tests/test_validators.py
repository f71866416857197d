"""One validator for every numeric and list option: spec fields and command-line flags alike."""

from __future__ import annotations

import pytest
from conftest import SMALL_SPEC

from tooldecode.cli import main
from tooldecode.experiments import SpecError, load_spec
from tooldecode.experiments.spec import OPTION_RULES, option_problem
from tooldecode.models import TEST_MODEL

SMALL = SMALL_SPEC  # the one tiny spec of the suite (tests/conftest.py)
SCENARIO = "c-config-trim-crlf"


def _error(capsys, argv: list[str]) -> str:
    rc = main(argv)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("tooldecode: error:"), err
    return lines[0]


SAMPLE_FLAGS = [
    (["-n", "0"], "-n"),
    (["-n", "-1"], "-n"),
    (["--temperature", "-1"], "--temperature"),
    (["--temperature", "nan"], "--temperature"),
    (["--temperature", "inf"], "--temperature"),
    (["--top-p", "7"], "--top-p"),
    (["--top-p", "0"], "--top-p"),
    (["--top-p", "nan"], "--top-p"),
    (["--max-new-tokens", "0"], "--max-new-tokens"),
    (["--max-new-tokens", "-5"], "--max-new-tokens"),
    (["--batch-size", "0"], "--batch-size"),
    (["--seed", "-1"], "--seed"),
    (["--seed", str(2**64)], "--seed"),
    (["--top-logprobs", "-2"], "--top-logprobs"),
    (["--base-url", "http://127.0.0.1:9/v1"], "--base-url"),
    (["--api-key-env", "KEY"], "--api-key-env"),
]


@pytest.mark.parametrize("flags,name", SAMPLE_FLAGS, ids=lambda v: " ".join(v) if isinstance(v, list) else v)
def test_sample_refuses_what_a_spec_refuses(capsys, flags, name):
    line = _error(capsys, ["sample", "--model", "no-such-model", "--scenario", SCENARIO, *flags])
    assert name in line  # refused before the model id is even looked up


PROBE_FLAGS = [
    (["--depth", "-1"], "--depth"),
    (["--key-depth", "-3"], "--key-depth"),
    (["--tail", "2"], "--tail"),
    (["--tail", "nan"], "--tail"),
    (["--min-mass", "-0.5"], "--min-mass"),
    (["--max-branches", "0"], "--max-branches"),
    (["--samples", "-1"], "--samples"),
    (["--select", "nosuchkey"], "nosuchkey"),
    (["--base-url", "http://127.0.0.1:9/v1"], "--base-url"),
]


@pytest.mark.parametrize("flags,name", PROBE_FLAGS, ids=lambda v: " ".join(v) if isinstance(v, list) else v)
def test_probe_refuses_what_a_spec_refuses(capsys, smol_ref, flags, name):
    line = _error(capsys, ["probe", "--model", TEST_MODEL, "--scenario", SCENARIO, *flags])
    assert name in line


def test_run_refuses_a_base_url_without_the_openai_backend(capsys, tmp_path):
    spec = tmp_path / "s.toml"
    spec.write_text(SMALL.replace(f'["{TEST_MODEL}"]', '["no-such-model"]'))
    line = _error(
        capsys, ["run", str(spec), "--out", str(tmp_path / "o"), "--base-url", "http://127.0.0.1:9/v1"]
    )
    assert "--base-url" in line and not (tmp_path / "o").exists()


BAD_SPECS = [
    ("seeds = [-1]", "seed"),
    (f"seeds = [{2**63 - 1}, {2**63 - 2}]\nn = 0", "'n'"),
    ("temperatures = [nan]", "temperature"),
    ("temperatures = [inf]", "temperature"),
    ("top_p = nan", "top_p"),
    ('engine = []\nmodes = ["strict"]', "engine"),
    ('engine = ["xgrammar", "xgrammar"]\nmodes = ["strict"]', "twice"),
    ("[probe]\ntail = 2.0", "tail"),
    ("[probe]\ntail = nan", "tail"),
    ("[probe]\ndepth = -1", "depth"),
    ("[probe]\nsamples = -1", "samples"),
]


@pytest.mark.parametrize("extra,match", BAD_SPECS)
def test_bad_spec_values(tmp_path, extra, match):
    keys = {part.split("=")[0].strip() + " " for part in extra.splitlines() if "=" in part}
    lines = [line for line in SMALL.splitlines() if not any(line.startswith(k) for k in keys)]
    path = tmp_path / "s.toml"
    path.write_text("\n".join(lines) + "\n" + extra + "\n")
    with pytest.raises(SpecError, match=match) as info:
        load_spec(path)
    assert "\n" not in str(info.value)


def test_a_seed_past_64_bits_is_refused(tmp_path):
    spec = load_spec(_write(tmp_path, SMALL))
    spec.seeds = [0, 2**64]  # would wrap onto seed 0's stream
    from tooldecode.experiments import validate_spec

    with pytest.raises(SpecError, match="seed"):
        validate_spec(spec)


def _write(tmp_path, body):
    path = tmp_path / "s.toml"
    path.write_text(body)
    return path


def test_the_rules():
    assert set(OPTION_RULES) >= {"count", "count0", "seed", "temperature", "top_p", "mass"}
    assert option_problem(1, "count") is None and option_problem(True, "count")
    assert option_problem(float("nan"), "temperature") and option_problem(0.0, "temperature") is None
    assert option_problem(1.0, "top_p") is None and option_problem(1.0, "mass")
