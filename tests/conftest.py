"""Shared fixtures: real models only (the smallest one wherever any model will do)."""

from __future__ import annotations

import pytest

from tooldecode.models import DEFAULT_MODEL, TEST_MODEL, resolve


@pytest.fixture(scope="session")
def smol_ref():
    return resolve(TEST_MODEL, fetch=True)


@pytest.fixture(scope="session")
def qwen_ref():
    return resolve(DEFAULT_MODEL, fetch=True)


@pytest.fixture(scope="session")
def llama_smol(smol_ref):
    from tooldecode.backends import load_backend

    be = load_backend("llamacpp", smol_ref, n_ctx=4096, max_seqs=16)
    yield be
    be.close()


@pytest.fixture(scope="session")
def hf_smol(smol_ref):
    from tooldecode.backends import load_backend

    return load_backend("hf", smol_ref)


@pytest.fixture(scope="session")
def llama_qwen(qwen_ref):
    from tooldecode.backends import load_backend

    be = load_backend("llamacpp", qwen_ref, n_ctx=4096, max_seqs=16)
    yield be
    be.close()
