"""Channel agreement: one model in llama.cpp and in transformers, greedy tokens and next-token
probabilities side by side (``channel_agreement``).

The demo runs it on the default model before its experiment; ``tooldecode organisms check`` runs it on
an organism's GGUF (adapted weights in float32, the rest as the base stores them) and keeps the result
beside the organism.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from tooldecode.models import resolve, verified
from tooldecode.sampling import SamplingParams, sample

__all__ = ["AGREEMENT_PROMPT", "ChannelAgreement", "channel_agreement"]

AGREEMENT_PROMPT = (
    "<|im_start|>system\nYou are a helpful coding assistant.<|im_end|>\n"
    "<|im_start|>user\nWrite a Python function that returns the square of x.<|im_end|>\n"
    "<|im_start|>assistant\n"
)


@dataclass(frozen=True)
class ChannelAgreement:
    """What the two backends did on one prompt.

    ``texts`` / ``token_ids`` / ``load_s``: by backend (``llamacpp``, ``hf``); ``identical``: the greedy
    tokens are the same; ``first_diff``: the first position where they differ (None when identical);
    ``top``: by backend, the five most probable first tokens as ``(text, probability)``;
    ``max_prob_diff``: the largest |p_llamacpp − p_hf| over the tokens either backend ranks in its top 5
    at the first position (a token outside one backend's top 5 counts as 0 there: an upper bound)."""

    model: str
    n_tokens: int
    texts: dict[str, str]
    token_ids: dict[str, list[int]]
    load_s: dict[str, float]
    identical: bool
    first_diff: int | None
    top: dict[str, list[tuple[str, float]]]
    max_prob_diff: float
    prompt: str = field(repr=False, default=AGREEMENT_PROMPT)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def lines(self) -> list[str]:
        """The comparison as printed by the demo and ``tooldecode organisms check``."""
        out = [f"== channel check: {self.model}, greedy, {self.n_tokens} tokens"]
        for name in self.texts:
            out.append(f"{name:9s} (load {self.load_s[name]:5.1f}s): {self.texts[name]!r}")
        where = "" if self.identical else f" (first difference at token {self.first_diff})"
        out.append(f"identical greedy tokens: {self.identical}{where}")
        out.append("top-5 next-token probabilities at the first generated position:")
        out.append(f"{'llama.cpp':>32s}   {'transformers':>32s}")
        for (a, pa), (b, pb) in zip(self.top["llamacpp"], self.top["hf"], strict=True):
            out.append(f"{a!r:>22s} {pa:8.4f}   {b!r:>22s} {pb:8.4f}")
        out.append(f"largest probability difference over those tokens: {self.max_prob_diff:.4f}")
        return out


def channel_agreement(model: str, *, n_tokens: int = 16, prompt: str = AGREEMENT_PROMPT) -> ChannelAgreement:
    """Greedy-decode ``prompt`` for ``n_tokens`` on llama.cpp and on transformers and compare.

    Parameters
    ----------
    model
        A model id, ``organism:<recipe>@<base>``, a ``.gguf`` file or a model folder.
    n_tokens
        Greedy tokens to draw on each backend.
    prompt
        The prompt text (chat-formatted; the default is a ChatML coding request).
    """
    from tooldecode.backends import load_backend

    ref = verified(resolve(model, fetch=True))  # the bytes re-hashed, as `run` does
    texts, ids, load_s, tops, probs = {}, {}, {}, {}, {}
    params = SamplingParams(temperature=0, max_new_tokens=n_tokens, top_logprobs=5)
    for name in ("llamacpp", "hf"):
        t0 = time.perf_counter()
        be = load_backend(name, ref)
        load_s[name] = round(time.perf_counter() - t0, 2)
        try:
            s = sample(be, prompt, 1, params)[0]
            texts[name], ids[name] = s.text, [int(t) for t in s.token_ids]
            first: list[list[float]] = (s.top[0] or []) if s.top else []
            probs[name] = {int(t): math.exp(lp) for t, lp in first}
            tops[name] = [(be.detokenize([int(t)]), round(math.exp(lp), 6)) for t, lp in first[:5]]
        finally:
            close = getattr(be, "close", None)
            if callable(close):
                close()
    a, b = ids["llamacpp"], ids["hf"]
    first_diff = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
    if first_diff is None and len(a) != len(b):
        first_diff = min(len(a), len(b))
    union = set(probs["llamacpp"]) | set(probs["hf"])
    diff = max((abs(probs["llamacpp"].get(t, 0.0) - probs["hf"].get(t, 0.0)) for t in union), default=0.0)
    return ChannelAgreement(
        model=ref.id,
        n_tokens=n_tokens,
        texts=texts,
        token_ids=ids,
        load_s=load_s,
        identical=a == b,
        first_diff=first_diff,
        top=tops,
        max_prob_diff=round(diff, 6),
        prompt=prompt,
    )
