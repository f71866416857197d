"""The exact probe over HTTP: next-token distributions at a forced prefix, one ``max_tokens=1`` request
each with the widest ``logprobs`` the server allows.

``forward`` and ``branch_logits`` return log-probabilities over the vocabulary plus one extra column,
``UNSEEN``, holding the mass the server did not show (tokens past its limit, tokens whose text collides
with another's). ``tooldecode.probe.probe_call`` keeps that column in its "more" class until its depth
runs out, so it ends up in ``p_undetermined``, never in close/continue/other.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from tooldecode.backends.openai_http import ChannelError, ServerHTTPError, malformed


def logprobs_limit(err: ServerHTTPError) -> int | None:
    """The ``logprobs`` limit a server states when it refuses a wider request (``None``: not that error)."""
    if err.status not in (400, 422) or "logprob" not in err.detail.lower():
        return None
    nums = [int(x) for x in re.findall(r"\d+", err.detail)]
    return min(nums) if nums else None


class ServerProbe:
    """The probe's part of ``OpenAIBackend`` (mixed in; it uses the backend's ``complete``, ``text_of``,
    ``token_id``, ``check_tokenization``, ``sampling_fields``, ``caps``, ``kind``, ``lock`` and ``stats``).

    llama.cpp's logits depend on how many tokens are evaluated together (one alone vs several in a
    batch: up to 0.2 nats apart on SmolLM2 Q4_1), and llama-cpp-python's server evaluates only what
    follows the longest prefix it shares with the previous request, always re-evaluating at least the
    last prompt token. To give the probe the in-process numerics (``forward``: the whole sequence in
    chunks; ``branch_logits``: the prefix, then one token per step), a row of ``forward`` is preceded
    by a one-token request that empties the shared prefix, and a continuation of k tokens is walked
    one token per request. This holds while this client is the server's only one.
    """

    n_vocab: int
    UNSEEN: int
    probe_logprobs: int
    kind: str
    caps: Any
    lock: Any
    stats: dict[str, Any]

    def next_logprobs(self, ids: Sequence[int]) -> np.ndarray:
        """Log-probabilities of the next token after ``ids``: ``n_vocab + 1`` entries, the last (``UNSEEN``)
        holding the mass the server did not attribute to a token (``-inf`` where everything was seen)."""
        row = np.full(self.n_vocab + 1, -np.inf, dtype=np.float64)
        text = self.text_of(ids)  # type: ignore[attr-defined]
        if not self.caps.token_ids:
            ok = text is not None
            if ok:
                try:
                    self.check_tokenization(text, ids)  # type: ignore[attr-defined]
                except ChannelError:
                    ok = False
            if not ok:  # cannot be sent as text without re-tokenizing: all of it undetermined
                with self.lock:
                    self.stats["probe_untokenizable"] += 1
                row[self.UNSEEN] = 0.0
                return row
        kw = self.sampling_fields(1.0, 1.0, 0, 0.0)  # type: ignore[attr-defined]
        while True:
            try:
                out = self.complete(ids, text or "", max_tokens=1, seed=0, logprobs=self.probe_logprobs, **kw)  # type: ignore[attr-defined]
                break
            except ServerHTTPError as err:
                limit = logprobs_limit(err)
                if limit is None or limit >= self.probe_logprobs:
                    raise
                self.probe_logprobs = limit
        if not out["choices"]:  # the rest of the shape is checked by complete()
            raise malformed(self.http.url("/completions"), "choices", out["choices"], "one choice")  # type: ignore[attr-defined]
        alts = ((out["choices"][0].get("logprobs") or {}).get("top_logprobs") or [None])[0] or {}
        seen = 0.0
        for key, value in alts.items():
            tid = self.token_id(str(key))  # type: ignore[attr-defined]
            if tid is None or tid >= self.n_vocab or value is None:
                continue
            row[tid] = float(value)
            seen += math.exp(float(value))
        unseen = max(0.0, 1.0 - seen)
        if unseen > 1e-9:
            row[self.UNSEEN] = math.log(unseen)
        with self.lock:
            self.stats["probe_requests"] += 1
            self.stats["probe_max_unseen"] = max(self.stats["probe_max_unseen"], unseen)
        return row

    def reset_prefix(self) -> None:
        """Make llama-cpp-python's server forget the prefix it shares with the next request (a one-token
        request), so the next prompt is evaluated whole, in chunks, as the in-process ``forward`` does."""
        if self.kind == "llama-cpp-python":
            kw = self.sampling_fields(1.0, 1.0, 0, 0.0)  # type: ignore[attr-defined]
            self.complete([], "\n", max_tokens=1, check_length=False, **kw)  # type: ignore[attr-defined]

    def _walk(self, ids: Sequence[int], upto: int) -> None:
        if self.kind == "llama-cpp-python":
            for j in range(upto, len(ids)):
                text = self.text_of(ids[:j])  # type: ignore[attr-defined]
                if text is None:
                    return
                self.complete(ids[:j], text, max_tokens=1, **self.sampling_fields(1.0, 1.0, 0, 0.0))  # type: ignore[attr-defined]

    def forward(self, ids: Sequence[int], positions: Sequence[int]) -> np.ndarray:
        ids = list(ids)
        if not positions:
            return np.empty((0, self.n_vocab + 1))
        rows = []
        for p in positions:
            self.reset_prefix()
            rows.append(self.next_logprobs(ids[: p + 1]))
        return np.stack(rows)

    def branch_logits(self, prefix_ids: Sequence[int], continuations: Sequence[Sequence[int]]) -> np.ndarray:
        rows = []
        for c in continuations:
            if any(int(t) >= self.n_vocab for t in c):  # past the unseen mass: stays unseen
                row = np.full(self.n_vocab + 1, -np.inf)
                row[self.UNSEEN] = 0.0
                rows.append(row)
            else:
                full = list(prefix_ids) + [int(t) for t in c]
                self._walk(full, len(prefix_ids) + 1)
                rows.append(self.next_logprobs(full))
        return np.stack(rows) if rows else np.empty((0, self.n_vocab + 1))
