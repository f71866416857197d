"""Loose and grammar-masked (strict) sampling of many continuations from one prompt.

The prompt is evaluated once; ``n`` samples are decoded as parallel sequences (``batch_size`` at a
time) that share its KV cache. Every sample keeps its tokens, each token's log-probability under
the model's unmasked distribution, the top-k alternatives, the entropy before and after the mask
and the probability mass the mask removed.

Reproducibility: sample ``i`` of seed ``s`` draws its random numbers from its own generator seeded
with ``(s, i)``, so a sample does not depend on the others in its batch (up to the backend's
numerics for different batch shapes, see ``Backend.info()["eval_mode"]``).
"""

from __future__ import annotations

from tooldecode.sampling.adaptive import AdaptiveRequest, Trie, sample_adaptive, sample_adaptive_queue
from tooldecode.sampling.aligned import (
    ALIGNED_METHODS,
    ALIGNED_PARTICLES,
    ALIGNED_TARGETS,
    AlignedSample,
    aligned_request,
    log_weight,
    sample_aligned,
)
from tooldecode.sampling.draw import DrawRequest, sample, sample_queue
from tooldecode.sampling.params import Sample, SamplingParams, aligned_supported, stream_key

__all__ = [
    "AdaptiveRequest",
    "ALIGNED_METHODS",
    "ALIGNED_PARTICLES",
    "ALIGNED_TARGETS",
    "AlignedSample",
    "DrawRequest",
    "Sample",
    "SamplingParams",
    "Trie",
    "aligned_request",
    "aligned_supported",
    "log_weight",
    "sample",
    "sample_adaptive",
    "sample_adaptive_queue",
    "sample_aligned",
    "sample_queue",
    "stream_key",
]
