"""The one-command queue (scripts/gpu_queue.py, `make gpu-queue`) on the CPU with its quick settings: every
recipe given is trained, then the spec runs on the base and on each organism, all under one folder."""

from __future__ import annotations

import json

import pytest

from tooldecode.organisms.mutations import stdlib_dir

SMALL_ROOT = stdlib_dir() / "email"

pytestmark = [pytest.mark.model, pytest.mark.slow]


def test_the_queue_trains_and_evaluates_every_recipe_in_one_call(smol_ref, tmp_path, monkeypatch):
    from scripts.gpu_queue import ROOT, main

    out = tmp_path / "q"
    monkeypatch.delenv("TOOLDECODE_ORGANISMS_PATH", raising=False)
    rc = main(
        [
            "--out", str(out),
            "--base", smol_ref.id,
            "--recipes", str(ROOT / "experiments" / "organisms" / "positive-control-quick.toml"),
            "--device", "cpu",
            "--quick",
            "--max-steps", "1",
            "--sessions", "1",
            "--scenarios", "json-tsconfig-path-aliases",  # among the corpus's shortest prompts
            "--max-new-tokens", "8",
            "--pool-root", str(SMALL_ROOT),
        ]
    )  # fmt: skip
    assert rc == 0
    log = json.loads((out / "gpu-queue.json").read_text())
    name = f"positive-control-quick@{smol_ref.id}"
    assert list(log["train"]) == [name] and log["device"] == "cpu"
    manifest = json.loads((out / "organisms" / name / "manifest.json").read_text())
    assert (
        manifest["steps"] == 1
        and (out / "organisms" / name / "adapter" / "adapter_model.safetensors").is_file()
    )
    runs = sorted(log["runs"])
    assert runs == ["e16-organisms-positive-control-quick", f"e16-organisms-{smol_ref.id}"]
    for run in runs:
        recs = [json.loads(x) for x in (out / "runs" / run / "samples.jsonl").read_text().splitlines()]
        config = json.loads((out / "runs" / run / "manifest.json").read_text())["config"]
        assert recs and config["fill_slots"] is True and config["max_new_tokens"] == 8
        assert config["scenarios"] == ["json-tsconfig-path-aliases"]
    organism_run = json.loads((out / "runs" / runs[0] / "manifest.json").read_text())
    assert organism_run["model"]["id"] == f"organism:{name}"
