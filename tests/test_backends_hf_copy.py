"""transformers' copy of a GGUF (``tooldecode.backends.hf.load_pretrained``): dequantized once into a
folder beside the file, then loaded from there; the same tensors and the same tokenizer as a load of the
GGUF itself, and a folder built from other bytes or versions is rebuilt, not trusted."""

from __future__ import annotations

import json

import pytest

from tooldecode.errors import ModelError

pytestmark = [pytest.mark.model]

TEXT = 'def f(x):\n    return {"edits": [{"oldText": "a\\tb", "newText": "é → ü"}]}  # <|im_end|>\n'


def test_a_stale_copy_is_rebuilt_and_matches_the_gguf_bit_for_bit(smol_ref, tmp_path, monkeypatch):
    import dataclasses

    import torch

    from tooldecode.backends.hf import CONVERTED_ENV, converted_folder, load_pretrained

    (tmp_path / smol_ref.path.name).symlink_to(smol_ref.path)
    ref = dataclasses.replace(smol_ref, path=tmp_path / smol_ref.path.name)
    folder = converted_folder(ref)
    assert folder.parent == tmp_path
    folder.mkdir()
    (folder / "source.json").write_text(json.dumps({"gguf": ref.path.name, "sha256": "0" * 64}))
    (folder / "config.json").write_text("{}")  # another file's copy: it must not be loaded

    tok, model = load_pretrained(ref, dtype="float32", device="cpu")
    source = json.loads((folder / "source.json").read_text())
    assert source["sha256"] == smol_ref.digest() and source["gguf"] == ref.path.name
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(f".{folder.name}.")]  # no temp left

    monkeypatch.setenv(CONVERTED_ENV, "0")
    tok0, model0 = load_pretrained(ref, dtype="float32", device="cpu")
    a, b = model.state_dict(), model0.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert tok(TEXT)["input_ids"] == tok0(TEXT)["input_ids"]
    assert tok.get_vocab() == tok0.get_vocab() and tok.all_special_ids == tok0.all_special_ids
    assert tok.chat_template == tok0.chat_template
    assert model.generation_config.eos_token_id == model0.generation_config.eos_token_id


def test_a_bad_switch_is_one_line(smol_ref, monkeypatch):
    from tooldecode.backends.hf import CONVERTED_ENV, load_pretrained

    monkeypatch.setenv(CONVERTED_ENV, "yes")
    with pytest.raises(ModelError) as err:
        load_pretrained(smol_ref, dtype="float32", device="cpu")
    assert "\n" not in str(err.value) and CONVERTED_ENV in str(err.value)
