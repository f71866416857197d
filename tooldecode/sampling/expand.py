"""Exact expansion of what a model writes after a prefix: every continuation, level by level, classified
by its bytes and weighed under one or more policies (``expand_decision``).

Where a sampler draws one continuation at a time, the expansion enumerates them: at each node (the
tokens written since the prefix) every next token is classified, decided ones are tallied, open ones
are expanded with the model one more step, all nodes of a level in one ``branch_logits`` call. Each
node carries a mass per policy (the model itself, a token mask renormalised, a reweighted mask, …), so
one pass over the model's distributions gives the exact probabilities of every policy at once. Mass
the bounds leave open is handed back as such, never guessed. The close-brace probe
(``tooldecode.probe``) and the decision table (``tooldecode.distortion.decision``) run on it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from tooldecode.backends.base import Backend
from tooldecode.backends.state import PerBackend

__all__ = ["Bounds", "Classify", "Weigh", "expand_decision", "model_weights", "softmax"]


class Bounds(Protocol):
    """The bounds ``expand_decision`` reads (``tooldecode.probe.ProbeConfig`` has them)."""

    min_mass: float
    max_branches: int
    tail: float


def softmax(logits: np.ndarray) -> np.ndarray:
    """The model's next-token distribution from its logits, in float64."""
    x = logits.astype(np.float64)
    x = x - x.max()
    p = np.exp(x)
    return p / p.sum()


# what a classifier says of the text written from a decision point: (label, limit). ``limit`` None: the
# text is decided and ``label`` is its class; an int: still open, expandable while ``level + 1 < limit``,
# and ``label`` names where its mass goes if it is left unexpanded
Classify = Callable[[bytes], tuple[Any, "int | None"]]
# the next-token weights of each policy at a node: ``(path, p, masses) -> {policy: (weights, total)}``,
# ``p`` the model's distribution there, ``weights`` the policy's (zero where it puts no mass) and
# ``total`` their sum as a share of the node's mass (1 for a renormalised policy)
Weigh = Callable[[tuple[int, ...], np.ndarray, Mapping[str, float]], Mapping[str, tuple[np.ndarray, float]]]


def model_weights(path: tuple[int, ...], p: np.ndarray, masses: Mapping[str, float]) -> dict:
    """The default ``Weigh``: every policy is the model itself."""
    return {k: (p, 1.0) for k in masses}


_EOG_TEXT = b"\x00<eog>"  # what an end-of-generation token writes, for the classifiers
_FIRST: PerBackend[np.ndarray] = PerBackend()  # each token's first byte, per backend


def _first_bytes(backend: Backend) -> np.ndarray:
    """Each token's first byte (0 for an end-of-generation id, whose stand-in text starts with NUL; 256
    for a token without bytes)."""

    def build() -> np.ndarray:
        n = backend.n_vocab
        out = np.array([b[0] if b else 256 for b in backend.vocab_bytes[:n]], dtype=np.int64)
        out[[i for i in backend.eog_ids if i < n]] = 0
        return out

    return _FIRST.get(backend, "first-bytes", build)


def expand_decision(
    backend: Backend,
    prefix: Sequence[int],
    logits: np.ndarray,
    *,
    classify: Classify,
    leaf: Callable[[Any, dict[str, float]], None],
    unresolved: Callable[[Any, dict[str, float]], None],
    config: Bounds,
    levels: int,
    root: Any = None,
    masses: Mapping[str, float] | None = None,
    weigh: Weigh = model_weights,
    by_first_byte: bool = False,
) -> None:
    """The probe's expansion of what follows ``prefix``, level by level, under one or more policies.

    Every node (the tokens written from the decision point) carries a mass per policy (``masses`` at the
    root, default ``{"p": 1.0}``: the model alone). At a node, ``weigh`` gives each policy's next-token
    weights; tokens are taken in order of their largest weight under any policy until every policy has
    classified all but ``config.tail`` of its share. Each token's text is classified (``classify``): a
    decided one adds its masses to ``leaf(label, masses)``; an open one becomes a child, expanded (one
    ``branch_logits`` call per level) when its largest mass is at least ``config.min_mass``, it is among
    the ``config.max_branches`` largest and ``level + 1 < limit``. Mass left unexpanded (a node's tail, a
    child not expanded, a node at the last of ``levels``) goes to ``unresolved(label, masses)``, with
    the label of the node it belongs to (``root`` for the decision point itself).

    ``by_first_byte``: first classify the node's text plus each single byte; every token whose first
    byte already decides its class gets that class at once, however small its weight (a decided class
    never changes as the text grows: ``tests/test_probe.py`` checks it byte by byte), so only the
    tokens still open go through the ordered, tail-bounded pass. Exact on all of the vocabulary, and
    fast where most tokens are decided by one byte (inside a string). Off by default: the probe's stored
    rows were computed without it.
    """
    vocab = backend.vocab_bytes
    eog = backend.eog_ids
    first = _first_bytes(backend) if by_first_byte else None
    start = dict(masses) if masses is not None else {"p": 1.0}
    frontier: list[tuple[tuple[int, ...], bytes, dict[str, float], Any, np.ndarray]] = [
        ((), b"", start, root, logits)
    ]
    for level in range(levels):
        children: list[tuple[tuple[int, ...], bytes, dict[str, float], Any, int]] = []
        for path, written, mass, label, lg in frontier:
            p = softmax(lg)
            dists = {k: w for k, w in weigh(path, p, mass).items() if mass.get(k, 0.0) > 0.0}
            if not dists:
                continue
            cum = dict.fromkeys(dists, 0.0)
            todo = None
            if first is not None:
                todo = _decide_by_first_byte(first, written, mass, dists, classify, leaf, cum)
                children += _take_in_order(
                    _order_array(dists, todo),
                    path,
                    written,
                    mass,
                    dists,
                    cum,
                    config,
                    level,
                    vocab,
                    eog,
                    classify,
                    leaf,
                    unresolved,
                )
                unresolved(label, {k: mass[k] * max(0.0, dists[k][1] - cum[k]) for k in dists})
                continue
            for t in _order(dists, todo):
                if all(cum[k] >= dists[k][1] - config.tail for k in dists):
                    break
                share = {}
                for k, (w, _total) in dists.items():
                    q = float(w[t])
                    if q > 0.0:
                        cum[k] += q
                        share[k] = mass[k] * q
                if not share:
                    continue
                tb = vocab[t] if t not in eog else _EOG_TEXT
                what, limit = classify(written + tb)
                if limit is None:
                    leaf(what, share)
                else:
                    children.append((path + (int(t),), written + tb, share, what, limit))
            unresolved(label, {k: mass[k] * max(0.0, dists[k][1] - cum[k]) for k in dists})
        children.sort(key=lambda e: -max(e[2].values()))
        room = [e for e in children if max(e[2].values()) >= config.min_mass and level + 1 < e[4]]
        keep = room[: config.max_branches]
        kept = {id(e) for e in keep}
        for e in children:
            if id(e) not in kept:
                unresolved(e[3], e[2])
        if not keep:
            return
        branch = backend.branch_logits(prefix, [list(e[0]) for e in keep])
        frontier = [(e[0], e[1], e[2], e[3], branch[k]) for k, e in enumerate(keep)]
    for _path, _written, mass, label, _lg in frontier:
        unresolved(label, mass)


def _order(dists: Mapping[str, tuple[np.ndarray, float]], todo: np.ndarray | None) -> list[int]:
    """Token ids by their largest weight under any policy (only ``todo``'s where given)."""
    return _order_array(dists, todo).tolist()


def _order_array(dists: Mapping[str, tuple[np.ndarray, float]], todo: np.ndarray | None) -> np.ndarray:
    ws = [w for w, _ in dists.values()]
    key = ws[0] if len(ws) == 1 else np.max(np.vstack(ws), axis=0)
    if todo is None:
        return np.argsort(-key)
    ids = np.flatnonzero(todo)
    return ids[np.argsort(-key[ids])]


def _take_in_order(
    order: np.ndarray,
    path: tuple[int, ...],
    written: bytes,
    mass: Mapping[str, float],
    dists: Mapping[str, tuple[np.ndarray, float]],
    cum: dict[str, float],
    config: Bounds,
    level: int,
    vocab: Sequence[bytes],
    eog: frozenset[int],
    classify: Classify,
    leaf: Callable[[Any, dict[str, float]], None],
    unresolved: Callable[[Any, dict[str, float]], None],
) -> list[tuple[tuple[int, ...], bytes, dict[str, float], Any, int]]:
    """The ordered, tail-bounded pass of ``expand_decision`` over ``order``, in arrays: the same tokens
    taken (in order, until every policy has classified all but ``config.tail`` of its share, ``cum``
    summed token by token as the loop sums it), decided ones added to ``leaf`` by label. Of the open ones,
    those the level could expand (mass at least ``config.min_mass``, ``level + 1 < limit``), at most
    ``config.max_branches`` of the largest, are returned as children in order; the rest can never be among
    the level's expanded children, so their mass goes to ``unresolved`` by label at once, as the loop
    would send it after the level. Tokens are classified by their shortest byte prefix that decides them
    (``_classify_tokens``), so a decided class costs one classification per distinct prefix."""
    keys = list(dists)
    if not len(order):
        return []
    w = np.vstack([dists[k][0][order] for k in keys]).astype(np.float64, copy=False)
    start = np.array([cum[k] for k in keys], dtype=np.float64)
    running = np.cumsum(np.hstack([start[:, None], w]), axis=1)  # running[:, i]: before token i
    need = np.array([dists[k][1] - config.tail for k in keys], dtype=np.float64)
    done = np.all(running[:, :-1] >= need[:, None], axis=0)
    stop = int(np.argmax(done)) if done.any() else len(order)
    for j, k in enumerate(keys):
        cum[k] = float(running[j, stop])
    taken = w[:, :stop]
    live = np.flatnonzero((taken > 0.0).any(axis=0))
    if not len(live):
        return []
    ids = order[live].tolist()
    shares = taken[:, live] * np.array([mass[k] for k in keys], dtype=np.float64)[:, None]
    biggest = shares.max(axis=0)
    # the first byte of each of these tokens is known not to decide (``_decide_by_first_byte``)
    labels = _classify_tokens(written, ids, vocab, eog, classify, known_open=1)
    decided: dict[Any, list[int]] = {}
    left: dict[Any, list[int]] = {}
    room: list[int] = []
    for j, (what, limit) in enumerate(labels):
        if limit is None:
            decided.setdefault(what, []).append(j)
        elif biggest[j] >= config.min_mass and level + 1 < limit:
            room.append(j)
        else:
            left.setdefault(what, []).append(j)
    room.sort(key=lambda j: -biggest[j])  # stable: the level's own order among this node's children
    for j in room[config.max_branches :]:
        left.setdefault(labels[j][0], []).append(j)
    for group, send in ((decided, leaf), (left, unresolved)):
        for what, js in group.items():
            sums = taken[:, live[js]].sum(axis=1)
            share = {k: mass[k] * float(sums[i]) for i, k in enumerate(keys) if sums[i] > 0.0}
            if share:
                send(what, share)
    children = []
    for j in sorted(room[: config.max_branches]):
        t = ids[j]
        what, limit = labels[j]
        assert limit is not None  # in ``room``: open
        share = {k: float(shares[i, j]) for i, k in enumerate(keys) if taken[i, live[j]] > 0.0}
        tb = vocab[t] if t not in eog else _EOG_TEXT
        children.append((path + (int(t),), written + tb, share, what, limit))
    return children


def _classify_tokens(
    written: bytes,
    ids: Sequence[int],
    vocab: Sequence[bytes],
    eog: frozenset[int],
    classify: Classify,
    *,
    known_open: int = 0,
) -> list[tuple[Any, int | None]]:
    """``classify(written + token)`` of each token, one call per distinct byte prefix where a prefix
    already decides the class (a decided class never changes as the text grows: the guarantee
    ``by_first_byte`` rests on, checked byte by byte in ``tests/test_probe.py``); a token no shorter
    prefix decides is classified whole. ``known_open``: prefixes up to this length are known not to decide."""
    out: list[tuple[Any, int | None] | None] = [None] * len(ids)
    waiting: list[int] = []
    for j, t in enumerate(ids):
        if t in eog:
            out[j] = classify(written + _EOG_TEXT)
        else:
            waiting.append(j)
    n = known_open + 1
    while waiting:
        groups: dict[bytes, list[int]] = {}
        for j in waiting:
            tb = vocab[ids[j]]
            if len(tb) <= n:
                out[j] = classify(written + tb)
            else:
                groups.setdefault(tb[:n], []).append(j)
        waiting = []
        for head, js in groups.items():
            if len(js) == 1:
                j = js[0]
                out[j] = classify(written + vocab[ids[j]])
                continue
            what, limit = classify(written + head)
            if limit is None:
                for j in js:
                    out[j] = (what, None)
            else:
                waiting += js
        n += 1
    return out  # type: ignore[return-value]


def _decide_by_first_byte(
    first: np.ndarray,
    written: bytes,
    mass: Mapping[str, float],
    dists: Mapping[str, tuple[np.ndarray, float]],
    classify: Classify,
    leaf: Callable[[Any, dict[str, float]], None],
    cum: dict[str, float],
) -> np.ndarray:
    """The tokens a single byte decides, added to ``leaf`` by byte (and to ``cum``); the rest's mask."""
    labels: dict[int, Any] = {}
    decided = np.zeros(257, dtype=bool)
    for b in range(256):
        what, limit = classify(written + bytes([b]))
        if limit is None:
            decided[b] = True
            labels[b] = what
    done = decided[first]
    sums = {k: np.bincount(first[done], weights=w[done], minlength=257) for k, (w, _t) in dists.items()}
    for b, what in labels.items():
        share = {k: mass[k] * float(s[b]) for k, s in sums.items() if s[b] > 0.0}
        if share:
            leaf(what, share)
    for k, s in sums.items():
        cum[k] += float(s.sum())
    return ~done
