"""Prompt KV on disk at aligned prefixes (``tooldecode.backends.prefix_store``, ``TOOLDECODE_PREFIX_CACHE``):
a prefix restored from the store gives the same logits, bit for bit, and the same draws as the prompt
evaluated from scratch, in ``begin`` and in a filled slot; a damaged entry is evaluated instead."""

from __future__ import annotations

import numpy as np
import pytest

from tooldecode.backends.prefix_store import ENV
from tooldecode.errors import ModelError
from tooldecode.prompts import parse_variant, render_prompt
from tooldecode.sampling import DrawRequest, SamplingParams, sample, sample_queue
from tooldecode.scenarios import get_scenario

pytestmark = [pytest.mark.model]


N_BATCH = 128  # aligned chunks of 128: two stored prefixes in a 300-token prompt


def _backend(smol_ref):
    from tooldecode.backends import load_backend

    return load_backend("llamacpp", smol_ref, n_ctx=2048, max_seqs=4, n_batch=N_BATCH)


def _ids(be, smol_ref, scenario: str, variant: str = "agentic,gold-prefix") -> list[int]:
    p = render_prompt(get_scenario(scenario), smol_ref, parse_variant(variant))
    return be.tokenize(p.text + p.prefill)


def _queue(be, ids: list[int], params: SamplingParams) -> list:
    """Three draws of ``ids`` on two filled slots (``sample_queue``), by index."""
    got: dict = {}
    req = DrawRequest(ids, 3, params, on_batch=lambda ss: got.update({s.index: s.token_ids for s in ss}))
    sample_queue(be, [req], slots=2)
    return [got[i] for i in range(3)]


def test_a_restored_prefix_gives_the_logits_and_draws_of_a_fresh_evaluation(smol_ref, tmp_path, monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    fresh = _backend(smol_ref)
    whole = _ids(fresh, smol_ref, "json-tsconfig-path-aliases")
    a = whole[:300]
    b = whole[:150] + _ids(fresh, smol_ref, "py-mutable-default-cart")[-150:]  # shares 128, not 256
    assert a[:128] == b[:128] and a[:256] != b[:256]
    ref_a, ref_b = fresh.begin(a, 1), None
    fresh.end()
    ref_b = fresh.begin(b, 1)
    fresh.end()
    params = SamplingParams(max_new_tokens=12, seed=5)
    draws = [s.token_ids for s in sample(fresh, a, 3, params)]
    fresh.close()
    fresh = _backend(smol_ref)
    queued = _queue(fresh, a, params)
    fresh.close()

    monkeypatch.setenv(ENV, str(tmp_path / "kv"))
    cold = _backend(smol_ref)  # evaluates, and stores the prefixes of 128 and 256 tokens
    assert np.array_equal(cold.begin(a, 1), ref_a)
    cold.end()
    cold.close()
    assert len(list((tmp_path / "kv").glob("*.kv"))) == 2

    warm = _backend(smol_ref)  # a new context: 256 tokens of a come back from the store, 128 of b
    assert np.array_equal(warm.begin(a, 1), ref_a)
    warm.end()
    assert np.array_equal(warm.begin(b, 1), ref_b)
    warm.end()
    assert [s.token_ids for s in sample(warm, a, 3, params)] == draws
    assert warm._store.hits >= 2  # noqa: SLF001 (the store's own counter)
    warm.close()

    # filled slots: the first slot, with no donor, takes the stored prefix; the same draws as without it
    slots = _backend(smol_ref)
    assert _queue(slots, a, params) == queued
    assert slots._store.hits == 1  # noqa: SLF001
    slots.close()

    # a damaged entry is not restored: the prefix is evaluated again, with the same logits
    for f in (tmp_path / "kv").glob("*.kv"):
        f.write_bytes(f.read_bytes()[:1000])
    damaged = _backend(smol_ref)
    assert np.array_equal(damaged.begin(a, 1), ref_a)
    damaged.close()


def test_a_cache_folder_that_cannot_be_made_is_one_line(smol_ref, tmp_path, monkeypatch):
    (tmp_path / "file").write_text("x")
    monkeypatch.setenv(ENV, str(tmp_path / "file" / "kv"))
    with pytest.raises(ModelError) as err:
        _backend(smol_ref)
    assert "\n" not in str(err.value) and ENV in str(err.value)
