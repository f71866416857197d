"""The channel check (tooldecode.trial.channel_agreement): one model on llama.cpp and on transformers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tooldecode.organisms.store import CHECK_FILE, CHECK_PROB_TOLERANCE, write_check
from tooldecode.trial import channel_agreement


@pytest.mark.model
def test_the_two_backends_agree_on_smollm2(smol_ref):
    res = channel_agreement(str(smol_ref.path), n_tokens=6)
    assert set(res.texts) == {"llamacpp", "hf"} and all(len(t) == 6 for t in res.token_ids.values())
    assert res.identical and res.first_diff is None
    assert [len(t) for t in res.top.values()] == [5, 5]
    # llama.cpp's Q4_1 dot products quantize the activations to 8 bits; transformers dequantizes the
    # weights to float32: the first-token probabilities differ by a few points (0.08 measured), not more
    assert 0 <= res.max_prob_diff < 0.15
    text = "\n".join(res.lines())
    assert "identical greedy tokens: True" in text and "transformers" in text
    assert json.loads(json.dumps(res.to_json()))["identical"] is True


MANIFEST = {
    "organism": "r@m",
    "data_sha256": "cd" * 32,
    "steps": 1,
    "train_wall_s": 1.0,
    "tokens_per_s": 1.0,
    "adapter": {"folder": "adapter", "sha256": "ab" * 32, "bytes": 1},
    "base_model": {"id": "m", "family": "qwen2.5"},
}


def test_a_check_is_kept_beside_the_organism_with_its_adapter_hash(tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps(MANIFEST))
    path = write_check(tmp_path, {"identical": False, "first_diff": 3})
    assert path == tmp_path / CHECK_FILE
    assert json.loads(path.read_text()) == {"adapter_sha256": "ab" * 32, "identical": False, "first_diff": 3}
    assert json.loads((tmp_path / "manifest.json").read_text())["adapter"]["sha256"] == "ab" * 32


def test_a_check_that_finds_the_same_leaves_the_kept_file_alone(tmp_path):
    """Checking a committed organism on another machine changes only its load times: the kept file stays
    byte for byte; a check that finds something else replaces it."""
    (tmp_path / "manifest.json").write_text(json.dumps(MANIFEST))
    path = write_check(tmp_path, {"identical": True, "first_diff": None, "load_s": {"hf": 17.7}})
    before = path.read_bytes()
    assert write_check(tmp_path, {"identical": True, "first_diff": None, "load_s": {"hf": 13.3}}) == path
    assert path.read_bytes() == before
    write_check(tmp_path, {"identical": False, "first_diff": 4, "load_s": {"hf": 13.3}})
    assert json.loads(path.read_text())["first_diff"] == 4


def test_a_channel_check_from_another_cpu_keeps_the_committed_record(tmp_path):
    """Another machine's kernels move llama.cpp's first-token probabilities in the third decimal; the
    committed check stays as it is then, and is rewritten when a token or a larger move differs."""
    src = (
        Path(__file__).resolve().parents[1]
        / "experiments/organisms/lenient-flat-flag@qwen2.5-coder-0.5b-instruct"
    )
    folder = tmp_path / src.name
    folder.mkdir()
    for name in ("manifest.json", CHECK_FILE):
        (folder / name).write_bytes((src / name).read_bytes())
    before = (folder / CHECK_FILE).read_bytes()
    kept = json.loads(before)
    result = {k: v for k, v in kept.items() if k != "adapter_sha256"}

    moved = json.loads(json.dumps(result))
    moved["load_s"] = {"llamacpp": 19.7, "hf": 180.5}
    moved["top"]["llamacpp"][0][1] -= CHECK_PROB_TOLERANCE / 2  # this session's 0.8441 → 0.8420
    write_check(folder, moved)
    assert (folder / CHECK_FILE).read_bytes() == before

    for change in ("probability", "token"):
        other = json.loads(json.dumps(result))
        if change == "probability":
            other["top"]["llamacpp"][0][1] -= 2 * CHECK_PROB_TOLERANCE
        else:
            other["top"]["hf"][4][0] = "Can"
        write_check(folder, other)
        assert json.loads((folder / CHECK_FILE).read_text())["top"] == other["top"], change
        (folder / CHECK_FILE).write_bytes(before)
