"""Exact enumeration of the masked and conditioned distributions on small grammars."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tooldecode.distortion.weights import DistortionError

# ---------------------------------------------------------------------------------------------
# exact enumeration (small grammars)


@dataclass(frozen=True)
class ExactSequence:
    """One complete token sequence of a small grammar with its exact probabilities."""

    token_ids: tuple[int, ...]  # ending with a stop token
    text: str
    log_p: float  # under the model (unmasked, temperature 1)
    log_q: float  # under the masked sampler
    log_w: float  # log_p − log_q = Σ_t log Z_t


@dataclass(frozen=True)
class ExactDistribution:
    """Every complete masked token sequence of a grammar from one prompt (``exact_masked_distribution``)."""

    sequences: list[ExactSequence]

    @property
    def p_valid(self) -> float:
        return float(sum(math.exp(s.log_p) for s in self.sequences))

    def q(self) -> np.ndarray:
        return np.exp([s.log_q for s in self.sequences])

    def p_l(self) -> np.ndarray:
        p = np.exp([s.log_p for s in self.sequences])
        return p / p.sum()

    @property
    def kl_q_pl(self) -> float:
        """Σ_y Q(y) log(Q(y) / P_L(y)), computed from the distributions themselves."""
        q, pl = self.q(), self.p_l()
        keep = q > 0
        return float(np.sum(q[keep] * (np.log(q[keep]) - np.log(pl[keep]))))

    @property
    def kl_pl_q(self) -> float:
        q, pl = self.q(), self.p_l()
        keep = pl > 0
        return float(np.sum(pl[keep] * (np.log(pl[keep]) - np.log(q[keep]))))

    def by_text(self, probs: np.ndarray) -> dict[str, float]:
        """Sum ``probs`` (aligned with ``sequences``) over tokenizations of the same text."""
        out: dict[str, float] = {}
        for s, p in zip(self.sequences, probs, strict=True):
            out[s.text] = out.get(s.text, 0.0) + float(p)
        return out


def exact_masked_distribution(
    backend: Any, prompt_ids: Sequence[int], mask: Any, *, max_tokens: int = 12, max_nodes: int = 4000
) -> ExactDistribution:
    """Enumerate every token sequence a masked sampler can produce from ``prompt_ids`` (breadth first,
    one batched forward pass per depth), with log P, log Q and log w of each. For grammars whose
    language is finite and short; a prefix still open after ``max_tokens`` tokens or more than
    ``max_nodes`` prefixes raise ``DistortionError``. Probabilities in float64 from the backend's logits."""
    eog = backend.eog_ids
    prompt_ids = list(prompt_ids)
    frontier: list[tuple[tuple[int, ...], float, float]] = [((), 0.0, 0.0)]  # (prefix, log_p, log_q)
    done: list[ExactSequence] = []
    seen = 0
    for _depth in range(max_tokens + 1):
        if not frontier:
            break
        seen += len(frontier)
        if seen > max_nodes:
            raise DistortionError(f"more than {max_nodes} prefixes: the grammar is too large to enumerate")
        conts = [list(prompt_ids[-1:]) + list(p) for p, _, _ in frontier]
        logits = backend.branch_logits(prompt_ids[:-1], conts).astype(np.float64)
        nxt: list[tuple[tuple[int, ...], float, float]] = []
        for (prefix, lp, lq), row in zip(frontier, logits, strict=True):
            m = mask.matcher()
            for t in prefix:
                m.accept(t)
            allowed = m.allowed()
            if m.done():
                allowed = np.zeros_like(allowed)
                allowed[list(eog)] = True
            top = row.max()
            logp = row - (top + math.log(np.exp(row - top).sum()))
            log_z = float(np.logaddexp.reduce(logp[allowed]))
            for tok in np.flatnonzero(allowed):
                tok = int(tok)
                lp2, lq2 = lp + float(logp[tok]), lq + float(logp[tok]) - log_z
                if tok in eog:
                    text = backend.detokenize(prefix)
                    done.append(ExactSequence(prefix + (tok,), text, lp2, lq2, lp2 - lq2))
                else:
                    nxt.append((prefix + (tok,), lp2, lq2))
        frontier = nxt
    if frontier:
        raise DistortionError(
            f"prefixes still open after {max_tokens} tokens: the grammar is too long to enumerate"
        )
    return ExactDistribution(done)
