"""Model runtimes behind one interface (``Backend``): llama.cpp and transformers + torch."""

from __future__ import annotations

from tooldecode.backends.base import Backend
from tooldecode.errors import ModelError
from tooldecode.models import ModelRef, resolve

BACKENDS = ("llamacpp", "hf")


def load_backend(name: str, model: ModelRef | str, **kwargs) -> Backend:
    """Load ``model`` (id, .gguf path or folder) in backend ``name`` ("llamacpp" or "hf")."""
    ref = model if isinstance(model, ModelRef) else resolve(model)
    if name == "llamacpp":
        from tooldecode.backends.llamacpp import LlamaCppBackend

        return LlamaCppBackend(ref, **kwargs)
    if name == "hf":
        from tooldecode.backends.hf import HFBackend

        return HFBackend(ref, **kwargs)
    raise ModelError(f"unknown backend '{name}'; choose one of: {', '.join(BACKENDS)}")


__all__ = ["BACKENDS", "Backend", "load_backend"]
