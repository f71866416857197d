"""The test suite's model guard: every load of model weights is recorded, and with
``TOOLDECODE_TEST_FAST=1`` (``make test-fast``) it fails.

``install()`` wraps the places weights enter a process: llama.cpp's model loader (``llama_cpp``'s
``LlamaModel``; a vocabulary-only load is allowed), transformers' ``from_pretrained`` of a model (a
tokenizer is allowed). Modules imported later are wrapped when they are imported. Each load is appended
to the file named by ``TOOLDECODE_TEST_LOADS`` (so loads in subprocesses are seen too); in fast mode
it then raises ``ModelLoadInFastSuite``. A load that fails (a test of a broken file's error) is none. ``tests/conftest.py`` installs it in the test process and, through a
``sitecustomize`` on ``PYTHONPATH``, in every Python subprocess a test starts, then fails any test that
loaded a model.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from typing import Any

FAST_ENV = "TOOLDECODE_TEST_FAST"
LOADS_ENV = "TOOLDECODE_TEST_LOADS"
HINT = "mark the test @pytest.mark.model (and @pytest.mark.slow past ~30 s): make test-fast loads no weights"


class ModelLoadInFastSuite(RuntimeError):
    """A test of the fast suite (``-m "not model and not slow"``) loaded model weights."""


def fast_mode() -> bool:
    return os.environ.get(FAST_ENV) == "1"


def record(what: str) -> None:
    path = os.environ.get(LOADS_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(f"{os.getpid()} {what}\n")
    if fast_mode():
        raise ModelLoadInFastSuite(f"{what} loaded in the fast suite; {HINT}")


def _wrap_llama(mod: Any) -> None:
    cls = getattr(mod, "LlamaModel", None)
    if cls is None or getattr(cls.__init__, "_guarded", False):
        return
    orig = cls.__init__

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        orig(self, *args, **kwargs)  # a file that does not load (a test of the error) is no load
        if not getattr(kwargs.get("params"), "vocab_only", False):
            record(f"llama.cpp model {kwargs.get('path_model', args[:1])}")

    __init__._guarded = True  # type: ignore[attr-defined]
    cls.__init__ = __init__


def _wrap_transformers(mod: Any) -> None:
    cls = getattr(mod, "PreTrainedModel", None)
    if cls is None or getattr(cls.from_pretrained, "_guarded", False):
        return
    orig = cls.from_pretrained.__func__

    def from_pretrained(klass: Any, *args: Any, **kwargs: Any) -> Any:
        model = orig(klass, *args, **kwargs)
        record(f"transformers model {args[:1]}")
        return model

    from_pretrained._guarded = True  # type: ignore[attr-defined]
    cls.from_pretrained = classmethod(from_pretrained)


def _wrap_fetch(mod: Any) -> None:
    """In fast mode a model download raises: the fast suite fetches no weights into an empty model home
    (tests that read a model's chat template skip when it is not fetched, ``tests/conftest.py``)."""
    orig = getattr(mod, "_assemble", None)
    if orig is None or getattr(orig, "_guarded", False):
        return

    def _assemble(spec: Any, *args: Any, **kwargs: Any) -> Any:
        if fast_mode():
            raise ModelLoadInFastSuite(
                f"fetching model {getattr(spec, 'id', spec)} in the fast suite; {HINT}"
            )
        return orig(spec, *args, **kwargs)

    _assemble._guarded = True  # type: ignore[attr-defined]
    mod._assemble = _assemble


WRAPPERS = {
    "llama_cpp._internals": _wrap_llama,
    "transformers.modeling_utils": _wrap_transformers,
    "tooldecode.models": _wrap_fetch,
}


class _Finder(importlib.abc.MetaPathFinder):
    """Wraps a guarded module right after it is executed."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name not in WRAPPERS:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None:
                loader = spec.loader
                exec_module = loader.exec_module

                def run(module: Any, exec_module: Any = exec_module) -> None:
                    exec_module(module)
                    WRAPPERS[name](module)

                loader.exec_module = run  # type: ignore[method-assign]
                return spec
        return None


def install() -> None:
    """Guard this process (a no-op unless ``TOOLDECODE_TEST_LOADS`` names the file of loads)."""
    if not os.environ.get(LOADS_ENV) or any(isinstance(f, _Finder) for f in sys.meta_path):
        return
    for name, wrap in WRAPPERS.items():
        if name in sys.modules:
            wrap(sys.modules[name])
    sys.meta_path.insert(0, _Finder())
