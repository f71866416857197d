"""Random streams: the seed words of one sample's stream, and a 31-bit integer seed made from them.

A leaf: the samplers (``tooldecode.sampling``), the engines and the server backends all key their
randomness here, so that one draw's stream has one definition whichever channel makes it.
"""

from __future__ import annotations

from typing import Protocol


class StreamParams(Protocol):
    """What a stream is keyed by: the run's ``seed`` and an optional ``stream`` word (a scenario's)."""

    @property
    def seed(self) -> int: ...

    @property
    def stream(self) -> int | None: ...


def stream_key(params: StreamParams, index: int, *tail: int) -> list[int]:
    """The seed words of sample ``index``'s random stream: ``[seed, index]`` (or ``[seed, stream, index]``),
    then ``tail`` (a purpose tag, so that one sample's streams for different uses never coincide)."""
    head = [params.seed, index] if params.stream is None else [params.seed, params.stream, index]
    return head + list(tail)


def stream_seed31(params: StreamParams, index: int) -> int:
    """A 31-bit integer seed for sample ``index``'s stream (for engines that take one integer: a
    server's ``seed``, outlines' generator); stable across runs."""
    import numpy as np

    return int(np.random.SeedSequence(stream_key(params, index)).generate_state(1)[0]) & 0x7FFFFFFF
