"""``PerBackend``: what is built for one backend (a compiled mask, a token-prefix table, an engine's own
model) kept for as long as that backend lives.

A cache keyed on ``id(backend)`` outlives its backend: a backend loaded later may get the same id and be
handed what was built for another vocabulary. A ``PerBackend`` holds its values under a weak reference to
the backend object itself, so they go when it goes and a new backend never sees them.

>>> class Backend: ...
>>> built = PerBackend()
>>> be = Backend()
>>> built.get(be, "mask", lambda: ["compiled"]) is built.get(be, "mask", lambda: ["again"])
True
>>> built.get(Backend(), "mask", lambda: ["again"])
['again']
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

__all__ = ["PerBackend"]

V = TypeVar("V")


class PerBackend(Generic[V]):
    """Values built for backends (or any object standing for a model), each kept under its key while its
    backend lives. An object that cannot be weakly referenced gets its value built on every call."""

    def __init__(self) -> None:
        self._by: weakref.WeakKeyDictionary[Any, dict[Hashable, V]] = weakref.WeakKeyDictionary()

    def get(self, backend: Any, key: Hashable, build: Callable[[], V]) -> V:
        """The value built for ``backend`` under ``key`` (``build()`` the first time)."""
        try:
            held = self._by.get(backend)
            if held is None:
                held = self._by[backend] = {}
        except TypeError:  # not weakly referenceable (or unhashable): nothing is kept for it
            return build()
        if key not in held:
            held[key] = build()
        return held[key]

    def clear(self) -> None:
        """Forget every value (a test that swaps an engine's implementation)."""
        self._by.clear()
