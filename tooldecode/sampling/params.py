"""What a draw takes and gives: ``SamplingParams`` and the ``Sample`` record."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from tooldecode.streams import stream_key, stream_seed31

__all__ = ["Sample", "SamplingParams", "aligned_supported", "stream_key", "stream_seed31"]


@dataclass(frozen=True)
class SamplingParams:
    """How to draw: temperature, truncation, token cap, stop strings, seed, log-probabilities kept."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    max_new_tokens: int = 256
    stop: tuple[str, ...] = ()
    seed: int = 0
    # an extra word of every random stream (None: streams keyed by (seed, index) alone). Runs give each
    # scenario its own (``tooldecode.experiments``): with shared streams, the same random numbers decide
    # sample i of every scenario, and rates pooled over scenarios are no longer independent across them
    stream: int | None = None
    top_logprobs: int = 20
    keep_top: str = "all"  # "all" | "none" (runs keep top-k only at structural positions when stored)


@dataclass
class Sample:
    """One continuation: text, tokens with their log-probabilities, top-k, entropies, mask mass, finish reason."""

    index: int
    seed: int
    text: str
    token_ids: list[int]
    logprobs: list[float]
    top: list[list[list[float]] | None]
    entropy: list[float]
    entropy_masked: list[float] | None
    mask_removed: list[float] | None
    finish_reason: str
    error: str | None = None
    timing: dict[str, float] = field(default_factory=dict)

    def to_record(self) -> dict[str, Any]:
        return asdict(self)


def aligned_supported(params: SamplingParams) -> str | None:
    """Why ``params`` cannot be corrected by importance weights (None when they can).

    The weights come from the mask's removed mass under the plain distribution at temperature 1;
    other temperatures and any truncation (top-k, top-p, min-p) change the proposal."""
    if params.temperature != 1.0:
        return f"temperature {params.temperature} (the weights need temperature 1.0)"
    if params.top_k or params.top_p < 1.0 or params.min_p > 0.0:
        return "top-k/top-p/min-p truncation (the weights need the untruncated distribution)"
    return None
