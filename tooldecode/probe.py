"""The close-brace probe: at each structural decision point of a call, how much probability goes to
closing the container, to continuing it (``,`` → one more key or item), or to something else.

The call text is teacher-forced in the model's *natural* tokenization (the call tokenized on its
own, as the model would write it). For a decision after a value that ends at byte ``e`` (for a
string, its closing quote is byte ``e-1``), the forced prefix stops at the last token boundary
``b`` at or before the value's final character, so the model still has to write ``call[b:e]``
(the "pending" bytes, e.g. the closing quote) and then its structural choice. Each candidate token
is attributed by its bytes: a token that completes the pending bytes and carries ``,``/``}``/``]``
(``",``, ``"}``, `` },``) is classified at once; a token that stops before the decision is
determined (``"`` alone, or whitespace) is expanded with the model one more step, recursively to
``depth`` levels (default 3). A continue is expanded ``key_depth`` levels further, until the key
string closes and what follows it is seen, so its probability splits exactly by the kinds of
``tooldecode.classify`` (repeat, declared, wrong level, schema word, invented, next item, other).
Mass left unexpanded (below ``min_mass``, past the branch limit or past the depth) is reported as
undetermined (``p_undetermined``, and ``p_continue_undetermined`` for a continue whose key was not
resolved), never guessed.

All positions share one forward pass over the forced call; expansions branch from the cached
prefix as parallel sequences (``tooldecode.sampling.expand.expand_decision``, which also carries the
masked policies of ``tooldecode.distortion.decision``). ``force_points`` is the forcing itself.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from tooldecode.backends.base import Backend
from tooldecode.classify import (
    CLOSE,
    CONTINUE,
    CONTINUE_KINDS,
    OTHER,
    OTHER_KINDS,
    UNDETERMINED,
    KeyContext,
    classify_continuation,
    key_context,
)
from tooldecode.sampling.expand import expand_decision

WS = b" \t\r\n"


@dataclass(frozen=True)
class ValueEnd:
    """A value inside a container, found by scanning the call text (byte offsets)."""

    path: str  # container path, e.g. "edits[0]" (relative to the JSON value that holds it)
    key: str  # key of the value (objects) or "[i]" (arrays)
    container: str  # "object" | "array"
    start: int  # byte offset where the value starts
    end: int  # byte offset just after the value
    is_string: bool
    next_char: str  # what the call does next: "," or the closing bracket


@dataclass
class DecisionPoint:
    """The probe at one decision point.

    ``p_close + p_continue + p_other + p_undetermined == 1``. ``p_continue_by_kind`` splits
    ``p_continue`` by the kinds of ``tooldecode.classify`` (``repeat``, ``declared``, ``wrong_level``,
    ``schema_word``, ``invented``, ``next_item``, ``other``); its values plus
    ``p_continue_undetermined`` (continues whose key was not resolved within the bounds) sum to
    ``p_continue``. ``continue_keys`` holds the most probable key strings with their mass;
    ``entropy`` is the next-token entropy, ``decision_entropy`` that of close / continue / other.
    """

    index: int
    path: str
    after: str
    container: str
    actual: str  # "close" | "continue": what the forced call does here
    p_close: float
    p_continue: float
    p_other: float
    p_undetermined: float
    entropy: float
    boundary: int  # byte offset of the forced prefix's end in the call text
    pending: str  # call bytes the model still has to write before the decision
    top: list[tuple[str, float, str]] = field(default_factory=list)
    value_chars: int = 0
    value_lines: int = 0
    value_escapes: int = 0
    continuations: dict[str, int] | None = None
    p_continue_by_kind: dict[str, float] = field(default_factory=dict)
    p_continue_undetermined: float = 0.0
    p_other_by_kind: dict[str, float] = field(default_factory=dict)
    continue_keys: dict[str, float] = field(default_factory=dict)
    decision_entropy: float = float("nan")

    def to_dict(self) -> dict:
        return asdict(self)


# ---------------------------------------------------------------------------------------------
# scanning


class _Scan:
    def __init__(self, data: bytes) -> None:
        self.d = data
        self.points: list[ValueEnd] = []

    def ws(self, i: int) -> int:
        while i < len(self.d) and self.d[i] in WS:
            i += 1
        return i

    def string(self, i: int) -> int:
        assert self.d[i : i + 1] == b'"'
        i += 1
        while i < len(self.d):
            c = self.d[i]
            if c == 0x5C:  # backslash
                i += 2
                continue
            if c == 0x22:
                return i + 1
            i += 1
        raise ValueError("unterminated string")

    def value(self, i: int, path: str) -> int:
        i = self.ws(i)
        c = self.d[i : i + 1]
        if c == b'"':
            return self.string(i)
        if c == b"{":
            return self.container(i, path, b"}")
        if c == b"[":
            return self.container(i, path, b"]")
        m = re.compile(rb"-?\d+(\.\d+)?([eE][+-]?\d+)?|true|false|null").match(self.d, i)
        if not m:
            raise ValueError(f"bad JSON value at byte {i}")
        return m.end()

    def container(self, i: int, path: str, close: bytes) -> int:
        kind = "object" if close == b"}" else "array"
        i = self.ws(i + 1)
        if self.d[i : i + 1] == close:
            return i + 1
        n = 0
        while True:
            if kind == "object":
                i = self.ws(i)
                kend = self.string(i)
                key = self.d[i + 1 : kend - 1].decode("utf-8", "replace")
                i = self.ws(kend)
                if self.d[i : i + 1] != b":":
                    raise ValueError(f"expected ':' at byte {i}")
                i = self.ws(i + 1)
                child = f"{path}.{key}" if path else key
                label = key
            else:
                child = f"{path}[{n}]"
                label = f"[{n}]"
            vstart = self.ws(i)
            vend = self.value(vstart, child)
            j = self.ws(vend)
            nxt = self.d[j : j + 1]
            self.points.append(
                ValueEnd(
                    path or "$",
                    label,
                    kind,
                    vstart,
                    vend,
                    self.d[vstart : vstart + 1] == b'"',
                    nxt.decode("latin-1"),
                )
            )
            if nxt == b",":
                i = j + 1
                n += 1
                continue
            if nxt == close:
                return j + 1
            raise ValueError(f"expected ',' or {close.decode()} at byte {j}")


def find_value_ends(call: str, *, root_path: str = "") -> list[ValueEnd]:
    """Every value inside every JSON object/array of ``call`` (wrappers like ``<tool_call>`` skipped).

    In a ``{"name": …, "arguments": {…}}`` call the arguments' paths start with ``arguments``.
    """
    data = call.encode("utf-8")
    out: list[ValueEnd] = []
    i = 0
    while i < len(data):
        if data[i : i + 1] in (b"{", b"["):
            sc = _Scan(data)
            try:
                end = sc.value(i, root_path)
            except (ValueError, IndexError):
                i += 1
                continue
            out.extend(sc.points)
            i = end
        else:
            i += 1
    return out


# ---------------------------------------------------------------------------------------------
# classification


def _classify(s: bytes, pending: bytes, closer: bytes) -> tuple[str, bytes]:
    """Group of a generated byte string given the pending bytes: close/continue/other/more.

    The group only (no key resolution); ``tooldecode.classify.classify_continuation`` gives the kind.
    """
    c = classify_continuation(s, pending=pending, container="object" if closer == b"}" else "array")
    if c.group == UNDETERMINED:
        rest = pending[len(s) :] if len(s) < len(pending) else b""
        return "more", rest
    return c.group, b""


@dataclass
class ProbeConfig:
    """Bounds of the probe's expansion.

    ``depth`` levels decide the group (close / continue / other); a continue whose kind is not yet
    known (the key string still open, or no ``:`` seen yet) gets ``key_depth`` more levels. Mass left
    unexpanded (below ``min_mass``, past ``max_branches`` per level, past the depth, or in the tail of
    a distribution past ``1 - tail``) is reported as undetermined, never guessed.
    """

    depth: int = 3  # expansion levels to decide the group (1 = no expansion)
    key_depth: int = 6  # further levels to resolve a continue's key (0 = groups only)
    min_mass: float = 1e-4  # expand an undetermined branch only if its path probability is at least this
    max_branches: int = 32  # expansions per level
    tail: float = 1e-6  # tokens are classified until this much mass is left (the rest is undetermined)
    top: int = 8


def _level(logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    x = logits.astype(np.float64)
    x = x - x.max()
    p = np.exp(x)
    p /= p.sum()
    order = np.argsort(-p)
    return p, order


@dataclass
class _Decision:
    totals: dict[str, float]
    kinds: dict[str, float]  # continue kinds
    other_kinds: dict[str, float]
    continue_undetermined: float
    keys: dict[str, float]
    entropy: float
    top: list[tuple[str, float, str]]


def _decide(
    backend: Backend,
    prefix: list[int],
    logits: np.ndarray,
    pending: bytes,
    container: str,
    in_string: bool,
    context: KeyContext,
    cfg: ProbeConfig,
) -> _Decision:
    totals = {CLOSE: 0.0, CONTINUE: 0.0, OTHER: 0.0, UNDETERMINED: 0.0}
    kinds = dict.fromkeys(CONTINUE_KINDS, 0.0)
    other_kinds = dict.fromkeys(OTHER_KINDS, 0.0)
    keys: Counter[str] = Counter()
    cont_undet = 0.0
    max_levels = cfg.depth + cfg.key_depth

    def classify(written: bytes) -> tuple[Any, int | None]:
        c = classify_continuation(
            written, context=context, pending=pending, container=container, in_string=in_string
        )
        if c.determined:
            return c, None
        return c.group, (cfg.depth if c.group == UNDETERMINED else max_levels)

    def leaf(c: Any, m: dict[str, float]) -> None:
        totals[c.group] += m["p"]
        if c.group == CONTINUE:
            kinds[c.kind] += m["p"]
            if c.key is not None:
                keys[c.key] += m["p"]
        elif c.group == OTHER:
            other_kinds[c.kind] += m["p"]

    def unresolved(group: Any, m: dict[str, float]) -> None:
        nonlocal cont_undet
        if group == CONTINUE:
            totals[CONTINUE] += m["p"]
            cont_undet += m["p"]
        else:
            totals[UNDETERMINED] += m["p"]

    p, order = _level(logits)
    nz = p[p > 0]
    entropy = float(-(nz * np.log(nz)).sum())
    top: list[tuple[str, float, str]] = []
    cum = 0.0
    vocab = backend.vocab_bytes
    for t in order[: cfg.top].tolist():
        if cum >= 1.0 - cfg.tail:
            break
        cum += float(p[t])
        tb = vocab[t] if t not in backend.eog_ids else b"\x00<eog>"
        c = classify_continuation(
            tb, context=context, pending=pending, container=container, in_string=in_string
        )
        top.append(
            (
                tb.decode("utf-8", "replace"),
                round(float(p[t]), 6),
                "more" if c.group == UNDETERMINED else c.group,
            )
        )
    expand_decision(
        backend,
        prefix,
        logits,
        classify=classify,
        leaf=leaf,
        unresolved=unresolved,
        config=cfg,
        levels=max_levels,
        root=UNDETERMINED,
    )
    return _Decision(totals, kinds, other_kinds, cont_undet, dict(keys.most_common(12)), entropy, top)


def decision_entropy(p_close: float, p_continue: float, p_other: float) -> float:
    """Entropy (nats) of the decision itself: close / continue / other, renormalized over what was decided."""
    ps = np.array([p_close, p_continue, p_other], dtype=np.float64)
    tot = ps.sum()
    if tot <= 0:
        return float("nan")
    ps = ps[ps > 0] / tot
    return float(-(ps * np.log(ps)).sum())


def _escapes(raw: bytes) -> int:
    return len(re.findall(rb"\\.", raw))


@dataclass(frozen=True)
class Forced:
    """The call teacher-forced up to a decision point, in the model's natural tokenization.

    ``prefix`` holds the prompt's tokens and the call's up to ``boundary`` (a byte offset in the call:
    the last token boundary at or before the value's final byte, for a string before its closing
    quote); ``pending`` are the call bytes from there to the value's end, which the model still has to
    write before its structural choice (at least the closing quote of a string).
    """

    value: ValueEnd
    prefix: list[int]
    boundary: int
    pending: bytes


def force_points(
    backend: Backend, prompt: str, call: str, points: Sequence[ValueEnd]
) -> tuple[list[int], list[Forced]]:
    """The prompt and call tokens (the call tokenized on its own, as the model writes it) and, for each
    of ``points``, the ``Forced`` prefix that stops at its decision point.

    Raises
    ------
    ValueError
        When the call's tokens do not give back its bytes (no token boundaries to place).
    """
    prompt_ids = backend.tokenize(prompt)
    call_ids = backend.tokenize(call, special=True)
    data = call.encode("utf-8")
    bounds = [0]
    for t in call_ids:
        bounds.append(bounds[-1] + len(backend.token_bytes(t)))
    if bounds[-1] != len(data):
        raise ValueError("call tokenization does not round-trip; cannot place token boundaries")
    full = prompt_ids + call_ids
    out = []
    for v in points:
        limit = v.end - 1 if v.is_string else v.end
        k = max(j for j, b in enumerate(bounds) if b <= limit)
        out.append(Forced(v, full[: len(prompt_ids) + k], bounds[k], data[bounds[k] : v.end]))
    return full, out


def outer_value_end(call: str, offset: int) -> int:
    """The byte offset just after the outermost JSON object or array of ``call`` that holds byte
    ``offset`` (wrappers such as ``<tool_call>`` skipped); ``ValueError`` when none does."""
    data = call.encode("utf-8")
    i = 0
    while i < len(data):
        if data[i : i + 1] in (b"{", b"["):
            try:
                end = _Scan(data).value(i, "")
            except (ValueError, IndexError, AssertionError):
                i += 1
                continue
            if i <= offset < end:
                return end
            i = end
        else:
            i += 1
    raise ValueError(f"no JSON value of the call holds byte {offset}")


def probe_call(
    backend: Backend,
    prompt: str,
    call: str,
    *,
    points: Sequence[ValueEnd] | None = None,
    select: str | Sequence[str] | None = None,
    config: ProbeConfig | None = None,
    samples: int = 0,
    sample_tokens: int = 24,
    seed: int = 0,
    tools: Sequence[Any] = (),
    expected_tool: str | None = None,
) -> list[DecisionPoint]:
    """Probe every decision point of ``call`` (or those whose ``after`` key is ``select``, or one of
    ``select`` when it is a sequence of keys).

    ``prompt`` ends exactly where the call starts; ``call`` is the whole call text as the model would
    write it (wrapper included). ``tools`` are the tool definitions shown in the prompt (``Tool``
    objects or their JSON forms): they resolve a continue's key into repeat / declared / wrong level /
    schema word / invented (``tooldecode.classify.key_context``; without them every key is invented).
    With ``samples > 0``, that many continuations are sampled from each decision point and tallied by
    kind (``kind`` or ``kind:key``).
    """
    cfg = config or ProbeConfig()
    data = call.encode("utf-8")
    vals = list(points) if points is not None else find_value_ends(call)
    if select is not None:
        keys = {select} if isinstance(select, str) else set(select)
        vals = [v for v in vals if v.key in keys]
    full, chosen = force_points(backend, prompt, call, vals)
    positions = sorted({len(f.prefix) - 1 for f in chosen})
    logging.getLogger("tooldecode.progress").info(
        "probe: evaluating %d prompt and call tokens, then %d decision points", len(full), len(chosen)
    )
    logits = backend.forward(full, positions) if positions else np.empty((0, backend.n_vocab))
    row_of = {p: i for i, p in enumerate(positions)}
    out: list[DecisionPoint] = []
    progress = logging.getLogger("tooldecode.progress")
    for n, f in enumerate(chosen):
        v, prefix, pending = f.value, f.prefix, f.pending
        progress.info("probe: decision point %d of %d (%s after %s)", n + 1, len(chosen), v.path, v.key)
        ctx = key_context(data[: v.start], tools, expected_tool=expected_tool)
        dec = _decide(
            backend, prefix, logits[row_of[len(prefix) - 1]], pending, v.container, v.is_string, ctx, cfg
        )
        t = dec.totals
        raw = data[v.start : v.end]
        dp = DecisionPoint(
            index=n,
            path=v.path,
            after=v.key,
            container=v.container,
            actual="continue" if v.next_char == "," else "close",
            p_close=t[CLOSE],
            p_continue=t[CONTINUE],
            p_other=t[OTHER],
            p_undetermined=t[UNDETERMINED],
            entropy=dec.entropy,
            boundary=f.boundary,
            pending=pending.decode("utf-8", "replace"),
            top=dec.top,
            value_chars=len(raw.decode("utf-8", "replace")),
            value_lines=raw.count(b"\\n") + 1 if v.is_string else raw.count(b"\n") + 1,
            value_escapes=_escapes(raw) if v.is_string else 0,
            p_continue_by_kind=dec.kinds,
            p_continue_undetermined=dec.continue_undetermined,
            p_other_by_kind=dec.other_kinds,
            continue_keys=dec.keys,
            decision_entropy=decision_entropy(t[CLOSE], t[CONTINUE], t[OTHER]),
        )
        if samples:
            dp.continuations = _tally(
                backend, prefix, pending, v.container, v.is_string, ctx, samples, sample_tokens, seed
            )
        out.append(dp)
    return out


def _tally(
    backend: Backend,
    prefix: list[int],
    pending: bytes,
    container: str,
    in_string: bool,
    context: KeyContext,
    n: int,
    max_tokens: int,
    seed: int,
) -> dict[str, int]:
    from tooldecode.sampling import SamplingParams, sample

    counts: Counter[str] = Counter()
    for s in sample(
        backend,
        prefix,
        n,
        SamplingParams(temperature=1.0, max_new_tokens=max_tokens, seed=seed, top_logprobs=0),
    ):
        c = classify_continuation(
            s.text, context=context, pending=pending, container=container, in_string=in_string, final=True
        )
        counts[f"{c.kind}:{c.key}" if c.key is not None and c.group == CONTINUE else c.kind] += 1
    return dict(counts)


def summarize(points: Sequence[DecisionPoint]) -> str:
    """A fixed-width table of the probe, one row per decision point (continue split by kind)."""
    lines = [
        f"{'#':>3} {'path':24s} {'after':10s} {'actual':8s} {'P(close)':>9s} {'P(cont)':>9s} "
        f"{'repeat':>8s} {'schema':>8s} {'invent':>8s} {'P(other)':>9s} {'P(undet)':>9s} {'H':>6s}  pending"
    ]
    for d in points:
        k = d.p_continue_by_kind
        lines.append(
            f"{d.index:>3} {d.path[-24:]:24s} {d.after[:10]:10s} {d.actual:8s} {d.p_close:9.4f} "
            f"{d.p_continue:9.4f} {k.get('repeat', 0.0):8.4f} {k.get('schema_word', 0.0):8.4f} "
            f"{k.get('invented', 0.0):8.4f} {d.p_other:9.4f} "
            f"{d.p_undetermined + d.p_continue_undetermined:9.4f} {d.entropy:6.3f}  {d.pending!r}"
        )
    return "\n".join(lines)
