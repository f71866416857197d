"""Model runtimes behind one interface (``Backend``): llama.cpp, transformers + torch, and an
OpenAI-compatible server (``openai``: llama-cpp-python's server, vLLM, SGLang)."""

from __future__ import annotations

from tooldecode.backends.base import Backend
from tooldecode.errors import ModelError
from tooldecode.models import ModelRef, resolve

BACKENDS = ("llamacpp", "hf", "openai")


def load_backend(name: str, model: ModelRef | str, **kwargs) -> Backend:
    """Load ``model`` (id, .gguf path or folder) in backend ``name`` ("llamacpp", "hf" or "openai").

    ``openai`` needs ``base_url`` (and takes ``api_key_env``, ``kind``, ... see ``OpenAIBackend``)."""
    ref = model if isinstance(model, ModelRef) else resolve(model)
    if name == "llamacpp":
        from tooldecode.backends.llamacpp import LlamaCppBackend

        return LlamaCppBackend(ref, **kwargs)
    if name == "hf":
        from tooldecode.backends.hf import HFBackend

        return HFBackend(ref, **kwargs)
    if name == "openai":
        from tooldecode.backends.openai import OpenAIBackend

        if not kwargs.get("base_url"):
            raise ModelError("--backend openai needs --base-url (e.g. http://127.0.0.1:8000/v1)")
        return OpenAIBackend(ref, **kwargs)
    raise ModelError(f"unknown backend '{name}'; choose one of: {', '.join(BACKENDS)}")


__all__ = ["BACKENDS", "Backend", "load_backend"]
