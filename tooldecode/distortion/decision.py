"""The decision after the gold ``newText`` at L2, computed exactly under each policy a harness can adopt.

At L2 the gold call is forced through the content of the last ``newText`` (teacher-forced in the
model's natural tokenization, as the close-brace probe forces it: ``tooldecode.probe.force_points``) and
the outcome is decided right after: a string that goes on makes the payload wrong whatever follows; a
string that closes decides validity within a few tokens (the item's ``}``, then the closers of the call).
``decision_rows`` expands that decision with the probe's own machinery (``tooldecode.probe.
expand_decision``), one forward pass for the decision point and one batched pass per expansion level,
carrying a mass per policy at every node:

``loose``
    the model's P;
``strict`` (per mask engine)
    the mask of the tool's closed grammar at every expanded step, renormalised: strict's Q;
``strict-prefix`` (per mask engine)
    the prefix-keeping step Q⁺ (docs/strict-cost.md): a masked token's mass moved to its longest allowed
    token prefix, the rest renormalised;
``loose+drop-unknown-keys``
    derived from loose: P, where a key the item does not declare counts as the item closing with the
    gold payload (the harness drops the key; what the model writes after it is not expanded);
``strict-aligned``
    the model conditioned on a valid complete call, estimated from P restricted to the paths the strict
    grammar keeps alive (``aligned_row``: what is exact and what is assumed is stated there).

Every text written from the decision point falls in one bucket (``BUCKETS``):

- ``close_complete``: the closing quote, the item's ``}``, and the call's JSON closed as the gold's
  closes it (whitespace aside; what follows the call's JSON, the wrapper's end tag, is not expanded);
- ``close_diverges``: the item closes, then the call goes another way (another item, a stray closer);
- ``close_unresolved``: the item closes; the closers after it were not followed within the bounds;
- ``goes_on``: the string does not close (the payload is wrong whatever follows);
- ``invented``: a comma and a key the item does not declare (an invented name, a schema word, a key of
  another level, a mangled spelling of a present key); a strict mask gives it probability 0;
- ``other``: anything else decided (an exact repeat of a present key, a stray or wrong closer, a comma
  followed by no key);
- ``undetermined``: mass left unexpanded by the bounds (a comma whose key was not resolved included).

**Correct** at L2 is ``close_complete``: the string closes with the gold content, the item closes and the
call completes with the gold payload; a validating harness accepts exactly these calls (an invented key
makes the call invalid). Under ``loose+drop-unknown-keys`` the ``invented`` mass counts as correct too.
``p_correct_lo`` / ``p_correct_hi`` bound it over the mass the bounds left open (``close_unresolved``
and ``undetermined`` counted as wrong / as correct).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

import numpy as np

from tooldecode.classify import (
    CLOSE,
    CONTINUE,
    INVENTED,
    OTHER,
    REPEAT,
    SCHEMA_WORD,
    STRING_GOES_ON,
    UNDETERMINED,
    WRONG_LEVEL,
    Continuation,
    KeyContext,
    classify_continuation,
    key_context,
)
from tooldecode.probe import ProbeConfig, find_value_ends, force_points, outer_value_end
from tooldecode.sampling.expand import expand_decision

__all__ = [
    "BUCKETS",
    "DECISION_FILE",
    "NEWTEXT_KEYS",
    "POLICIES",
    "DecisionConfig",
    "DecisionRow",
    "aligned_row",
    "bucket_fields",
    "bucket_of",
    "decision_rows",
    "read_decision_rows",
]

DECISION_FILE = "decision.jsonl"  # the rows of a run's decision table
POLICIES = ("loose", "loose+drop-unknown-keys", "strict", "strict-prefix", "strict-aligned")
BUCKETS = (
    "close_complete",
    "close_diverges",
    "close_unresolved",
    "goes_on",
    "invented",
    "other",
    "undetermined",
)
NEWTEXT_KEYS = ("newText", "new_string")  # the replacement text of the nested and the flat edit tools
_EXTRA_KEYS = (INVENTED, SCHEMA_WORD, WRONG_LEVEL)
_WS = b" \t\r\n"


@dataclass(frozen=True)
class DecisionConfig:
    """Bounds of the expansion (the probe's, ``tooldecode.probe.ProbeConfig``, plus ``tail_depth``).

    ``depth`` levels decide the group (the closing quote and what follows it), ``key_depth`` more resolve
    a comma's key, ``tail_depth`` more follow the closers after the item's ``}``. Mass left unexpanded
    (below ``min_mass`` under every policy, past ``max_branches`` per level or past the depth, or in
    the last ``tail`` of a node's distribution) is reported, never guessed.
    """

    depth: int = 3
    key_depth: int = 4
    tail_depth: int = 6
    min_mass: float = 1e-4
    max_branches: int = 32
    tail: float = 1e-5

    def probe(self) -> ProbeConfig:
        """The probe's bounds of the same expansion."""
        return ProbeConfig(
            depth=self.depth,
            key_depth=self.key_depth,
            min_mass=self.min_mass,
            max_branches=self.max_branches,
            tail=self.tail,
        )

    @property
    def levels(self) -> int:
        return self.depth + max(self.key_depth, self.tail_depth)


@dataclass(frozen=True)
class DecisionRow:
    """One policy at the decision after the gold ``newText`` of one scenario, for one model.

    The ``p_*`` buckets (module docstring) sum to 1 (``p_close`` is the sum of the three ``close_*``);
    ``p_undetermined`` is the mass the bounds left open. ``p_correct`` is the policy's probability of a
    correct call (``p_correct_lo`` ≤ it ≤ ``p_correct_hi`` over the open mass); ``method`` says how the row
    was obtained (``exact``, ``exact, derived from loose``, or the strict-aligned estimate's rule).
    ``kinds`` splits the mass further (``tooldecode.classify`` kinds; for strict-aligned the live masses
    it is computed from). ``mask_removed`` is the mass a masked policy removes at the decision's first
    step (``1 − Z``; ``1 − Z⁺`` for strict-prefix), None where nothing is masked.
    """

    model: str
    model_sha256: str
    scenario: str
    policy: str
    engine: str | None
    method: str
    p_close: float
    p_close_complete: float
    p_close_diverges: float
    p_close_unresolved: float
    p_goes_on: float
    p_invented: float
    p_other: float
    p_undetermined: float
    p_correct: float
    p_correct_lo: float
    p_correct_hi: float
    kinds: dict[str, float] = field(default_factory=dict)
    mask_removed: float | None = None
    boundary: int = 0
    pending: str = ""
    prefix_as_sampled: bool | None = None
    variant_label: str = ""
    prompt_sha256: str = ""
    seconds: float = 0.0

    @property
    def name(self) -> str:
        """The policy as the decision table names it: ``strict`` on xgrammar, ``strict[llguidance]``, …"""
        if self.engine in (None, "xgrammar") or self.policy in ("loose", "loose+drop-unknown-keys"):
            return self.policy
        return f"{self.policy}[{self.engine}]"

    @property
    def total(self) -> float:
        """The sum of the buckets (1 up to rounding)."""
        return self.p_close + self.p_goes_on + self.p_invented + self.p_other + self.p_undetermined

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> DecisionRow:
        """A row from its stored dict (``ValueError`` naming a missing field; unknown fields are dropped)."""
        names = [f.name for f in dataclasses.fields(cls)]
        required = [f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING]
        missing = [k for k in required if k not in d and k != "kinds"]
        if missing:
            raise ValueError(f"decision row {d.get('scenario', '?')}: missing field(s) {', '.join(missing)}")
        return cls(**{k: d[k] for k in names if k in d})


class BucketFields(TypedDict):
    """The bucket probabilities of a ``DecisionRow``."""

    p_close: float
    p_close_complete: float
    p_close_diverges: float
    p_close_unresolved: float
    p_goes_on: float
    p_invented: float
    p_other: float
    p_undetermined: float


def bucket_fields(b: Mapping[str, float]) -> BucketFields:
    """A row's bucket probabilities (``p_close`` the sum of the three closes) from a bucket → mass map."""
    return BucketFields(
        p_close=b["close_complete"] + b["close_diverges"] + b["close_unresolved"],
        p_close_complete=b["close_complete"],
        p_close_diverges=b["close_diverges"],
        p_close_unresolved=b["close_unresolved"],
        p_goes_on=b["goes_on"],
        p_invented=b["invented"],
        p_other=b["other"],
        p_undetermined=b["undetermined"],
    )


def read_decision_rows(path: str | Path) -> list[DecisionRow]:
    """The rows of a ``decision.jsonl`` (a run folder or the file itself)."""
    p = Path(path)
    if p.is_dir():
        p = p / DECISION_FILE
    return [DecisionRow.from_json(json.loads(line)) for line in p.read_text().splitlines() if line.strip()]


# ---------------------------------------------------------------------------------------------
# classification


def bucket_of(c: Continuation, context: KeyContext) -> tuple[str, str]:
    """(bucket, kind) of a decided continuation other than a close (the close buckets need the tail).

    ``invented``: a key the item does not declare (kinds invented, schema_word, wrong_level, and a mangled
    spelling of a present key, kind ``mangled_repeat``); an exact repeat of a present key is ``other``
    (kind ``duplicate``)."""
    if c.kind == STRING_GOES_ON:
        return "goes_on", c.kind
    if c.group == CONTINUE:
        if c.kind in _EXTRA_KEYS:
            return "invented", c.kind
        if c.kind == REPEAT:
            if c.key in context.present:
                return "other", "duplicate"
            return "invented", "mangled_repeat"
        return "other", "continue_other" if c.kind == OTHER else c.kind
    return "other", c.kind


def _strip(b: bytes) -> bytes:
    return b.translate(None, _WS)


class _Policies:
    """The ``Weigh`` of the expansion: each policy's next-token weights at a node, from the model's P and
    the masks' allowed sets there (a matcher advanced over the forced prefix and the node's path)."""

    def __init__(
        self,
        masks: Mapping[str, Any],
        keepers: Mapping[str, Any],
        prefill: str,
        prefill_ids: Sequence[int],
        live: str | None,
    ) -> None:
        self.masks, self.keepers, self.live = masks, keepers, live
        self.prefill, self.prefill_ids = prefill, list(prefill_ids)
        self._allowed: dict[tuple[str, tuple[int, ...]], np.ndarray | None] = {}

    def allowed(self, engine: str, path: tuple[int, ...]) -> np.ndarray | None:
        """The allowed tokens of ``engine``'s grammar after the forced prefix and ``path`` (None: dead)."""
        key = (engine, path)
        if key not in self._allowed:
            from tooldecode.errors import MaskError

            try:
                m = self.masks[engine].matcher(self.prefill)
                for t in (*self.prefill_ids, *path):
                    m.accept(t)
                self._allowed[key] = np.array(m.allowed(), dtype=bool)
            except MaskError:
                self._allowed[key] = None
        return self._allowed[key]

    def __call__(
        self, path: tuple[int, ...], p: np.ndarray, masses: Mapping[str, float]
    ) -> dict[str, tuple[np.ndarray, float]]:
        out: dict[str, tuple[np.ndarray, float]] = {}
        for name in masses:
            kind, _, engine = name.partition(":")
            if kind == "loose":
                out[name] = (p, 1.0)
                continue
            allowed = self.allowed(engine, path)
            if allowed is None:  # the grammar rejects the path: the policy never reaches it
                out[name] = (np.zeros_like(p), 1.0)
                continue
            if kind == "live":
                w = np.where(allowed, p, 0.0)
                out[name] = (w, float(w.sum()))
                continue
            if kind == "prefix":
                n = p.size
                w = np.bincount(self.keepers[engine].targets(allowed), weights=p, minlength=n + 1)[:n]
            else:
                w = np.where(allowed, p, 0.0)
            z = float(w.sum())
            out[name] = (w / z, 1.0) if z > 0 else (np.zeros_like(p), 1.0)
        return out

    def removed(self, name: str, p: np.ndarray) -> float:
        """1 − the mass the policy keeps (or moves) at the decision's first step."""
        kind, _, engine = name.partition(":")
        allowed = self.allowed(engine, ())
        if allowed is None:
            return 1.0
        if kind == "prefix":
            n = p.size
            w = np.bincount(self.keepers[engine].targets(allowed), weights=p, minlength=n + 1)[:n]
            return max(0.0, 1.0 - float(w.sum()))
        return max(0.0, 1.0 - float(p[allowed].sum()))


# ---------------------------------------------------------------------------------------------
# the rows


def _trial(arm: dict[str, Any], scenario: Any, ref: Any, **kw: Any) -> Any:
    from tooldecode.trial import Trial

    return Trial(arm, scenario, ref=ref, **kw)


def _forced_text(call: str, call_ids: Sequence[int], backend: Any, boundary: int) -> tuple[str, list[int]]:
    """The forced call prefix for a grammar matcher: the longest text of whole tokens that decodes, then
    the remaining tokens up to ``boundary`` as ids (a boundary inside a UTF-8 character)."""
    data = call.encode("utf-8")
    ends = [0]
    for t in call_ids:
        ends.append(ends[-1] + len(backend.token_bytes(t)))
    k = ends.index(boundary)
    for j in range(k, -1, -1):
        try:
            return data[: ends[j]].decode("utf-8"), list(call_ids[j:k])
        except UnicodeDecodeError:
            continue
    return "", list(call_ids[:k])


class _Tally:
    """The expansion's classifier and its accumulators: the bucket masses and kinds of each policy."""

    def __init__(
        self,
        names: Sequence[str],
        context: KeyContext,
        pending: bytes,
        value: Any,
        want: bytes,
        cfg: DecisionConfig,
    ) -> None:
        self.buckets = {n: dict.fromkeys(BUCKETS, 0.0) for n in names}
        self.kinds: dict[str, dict[str, float]] = {n: defaultdict(float) for n in names}
        self.context, self.pending, self.value, self.want, self.cfg = context, pending, value, want, cfg

    def classify(self, written: bytes) -> tuple[Any, int | None]:
        """(label, limit) of the text written from the decision point (``tooldecode.probe.Classify``)."""
        cfg, v = self.cfg, self.value
        c = classify_continuation(
            written, context=self.context, pending=self.pending, container=v.container, in_string=v.is_string
        )
        if c.group == CLOSE:
            got = _strip(written[len(self.pending) :])
            if got.startswith(self.want):
                return ("close_complete", CLOSE), None
            if self.want.startswith(got):
                return "close_unresolved", cfg.depth + cfg.tail_depth
            return ("close_diverges", CLOSE), None
        if c.determined:
            return bucket_of(c, self.context), None
        if c.group == CONTINUE:
            return "continue_unresolved", cfg.depth + cfg.key_depth
        return UNDETERMINED, cfg.depth

    def leaf(self, label: tuple[str, str], m: dict[str, float]) -> None:
        for k, x in m.items():
            self.buckets[k][label[0]] += x
            self.kinds[k][label[1]] += x

    def unresolved(self, label: str, m: dict[str, float]) -> None:
        bucket = "close_unresolved" if label == "close_unresolved" else "undetermined"
        for k, x in m.items():
            self.buckets[k][bucket] += x
            if label == "continue_unresolved":
                self.kinds[k][label] += x


def _last_newtext(trial: Any) -> tuple[str, Any, bytes]:
    """The gold call, its last ``newText`` value and the gold's closers after it (whitespace dropped)."""
    call = trial.call
    ends = [v for v in find_value_ends(call) if v.key in NEWTEXT_KEYS]
    if not ends:
        raise ValueError(f"scenario {trial.scenario_id}: the gold call has no {' or '.join(NEWTEXT_KEYS)}")
    v = ends[-1]
    data = call.encode("utf-8")
    want = _strip(data[v.end : outer_value_end(call, v.start)])
    if want.strip(b"}]"):
        raise ValueError(f"scenario {trial.scenario_id}: {v.key} is not the last value of the call")
    return call, v, want


def _masks(
    arm: dict[str, Any], scenario: Any, ref: Any, backend: Any, engines: Sequence[str], prefill: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Per engine: strict's mask (the trial's constraint) and, where the engine allows strict-prefix, its
    prefix-keeping reweighting (``tooldecode.masking.PrefixKeeping``)."""
    from tooldecode.engines import EngineError

    masks: dict[str, Any] = {}
    keepers: dict[str, Any] = {}
    for e in engines:
        masks[e] = _trial({**arm, "mode": "strict", "engine": e}, scenario, ref).constraint(backend)
        try:
            pk = _trial({**arm, "mode": "strict-prefix", "engine": e}, scenario, ref).constraint(backend)
        except EngineError:
            continue
        keepers[e] = pk.matcher(prefill).reweight
    return masks, keepers


def decision_rows(
    backend: Any,
    scenario: Any,
    *,
    model: str,
    ref: Any = None,
    variant: Mapping[str, Any] | None = None,
    engines: Sequence[str] = ("xgrammar", "llguidance"),
    config: DecisionConfig | None = None,
    goes_on_valid: float = 1.0,
    model_sha256: str = "",
) -> list[DecisionRow]:
    """The decision after the last gold ``newText`` of ``scenario``, exactly, under every policy.

    Parameters
    ----------
    backend
        A loaded backend with full logits (llamacpp or hf).
    scenario
        The scenario; its gold call is forced through the last ``newText``'s content.
    model
        The model id the rows name (``ref`` resolves it when not given).
    variant
        Transcript fields (``history``, ``toolset``, …; conditioning is the probe's own).
    engines
        Mask engines of the strict policies (tooldecode's closed grammar in each engine's format, or an
        engine setting's own grammar); strict-prefix for those that allow it, strict-aligned on the
        first.
    config
        Bounds of the expansion.
    goes_on_valid
        strict-aligned's assumed share of goes-on continuations that still complete validly (``aligned_row``).
    model_sha256
        The weights' digest the rows record.

    Returns
    -------
    list[DecisionRow]
        loose, loose+drop-unknown-keys, strict and strict-prefix per engine, strict-aligned.

    Raises
    ------
    ValueError
        When the gold call has no ``newText`` or it is not the call's last value.
    """
    from tooldecode.models import resolve

    t0 = time.perf_counter()
    cfg = config or DecisionConfig()
    ref = ref if ref is not None else resolve(model)
    fields = dict(variant or {})
    arm = {"model": model, "backend": backend.name, "mode": "loose", "temperature": 1.0, **fields}
    trial = _trial({**arm, "conditioning": "free"}, scenario, ref)
    call, v, want = _last_newtext(trial)
    _full, (forced,) = force_points(backend, trial.text, call, [v])
    prefix = forced.prefix
    logits = backend.forward(prefix, [len(prefix) - 1])[0]
    ctx = key_context(
        call.encode("utf-8")[: v.start], trial.key_tools, expected_tool=trial.prompt.expected_tool
    )
    prefill, prefill_ids = _forced_text(call, backend.tokenize(call, special=True), backend, forced.boundary)
    masks, keepers = _masks(arm, scenario, ref, backend, engines, prefill)
    live = engines[0] if engines else None
    policies = _Policies(masks, keepers, prefill, prefill_ids, live)
    names = ["loose", *(f"strict:{e}" for e in masks), *(f"prefix:{e}" for e in keepers)]
    names += [f"live:{live}"] if live is not None else []
    tally = _Tally(names, ctx, forced.pending, v, want, cfg)
    expand_decision(
        backend,
        prefix,
        logits,
        classify=tally.classify,
        leaf=tally.leaf,
        unresolved=tally.unresolved,
        config=cfg.probe(),
        levels=cfg.levels,
        masses=dict.fromkeys(names, 1.0),
        weigh=policies,
        by_first_byte=True,
    )
    x = logits.astype(np.float64)
    p0 = np.exp(x - x.max())
    p0 /= p0.sum()
    l2 = _trial({**arm, "conditioning": "gold-prefix"}, scenario, ref)
    common = {
        "model": model,
        "model_sha256": model_sha256,
        "scenario": trial.scenario_id,
        "boundary": forced.boundary,
        "pending": forced.pending.decode("utf-8", "replace"),
        "prefix_as_sampled": backend.tokenize(l2.text) == prefix,
        "variant_label": ",".join(f"{k}={val}" for k, val in sorted(fields.items())) or "default",
        "prompt_sha256": trial.prompt_sha256,
    }
    b, k = tally.buckets, tally.kinds
    rows = [
        _row("loose", None, "exact", b["loose"], k["loose"], None, common),
        _row(
            "loose+drop-unknown-keys",
            None,
            "exact, derived from loose",
            b["loose"],
            k["loose"],
            None,
            common,
            drop=True,
        ),
    ]
    for name in names:
        kind, _, e = name.partition(":")
        if kind in ("strict", "prefix"):
            policy = "strict" if kind == "strict" else "strict-prefix"
            rows.append(_row(policy, e, "exact", b[name], k[name], policies.removed(name, p0), common))
    if live is not None:
        rows.append(aligned_row(b[f"live:{live}"], live, common, goes_on_valid=goes_on_valid))
    seconds = round(time.perf_counter() - t0, 2)
    return [dataclasses.replace(r, seconds=seconds) for r in rows]


def _row(
    policy: str,
    engine: str | None,
    method: str,
    b: Mapping[str, float],
    kinds: Mapping[str, float],
    removed: float | None,
    common: Mapping[str, Any],
    *,
    drop: bool = False,
) -> DecisionRow:
    correct = b["close_complete"] + (b["invented"] if drop else 0.0)
    return DecisionRow(
        policy=policy,
        engine=engine,
        method=method,
        **bucket_fields(b),
        p_correct=correct,
        p_correct_lo=correct,
        p_correct_hi=min(1.0, correct + b["close_unresolved"] + b["undetermined"]),
        kinds={k: float(x) for k, x in sorted(kinds.items())},
        mask_removed=removed,
        **common,
    )


def aligned_row(
    live: Mapping[str, float], engine: str | None, common: Mapping[str, Any], *, goes_on_valid: float = 1.0
) -> DecisionRow:
    """strict-aligned at the decision, from the live masses: P of each bucket restricted to the paths the
    strict grammar accepts (``live``, exact up to the bounds; every invented key and every stray closer
    is dead, so their live mass is 0).

    The model conditioned on a valid complete call weighs a live path by V, the probability that it
    still completes validly within the cap. The rule: V = 1 for every live bucket except ``goes_on``,
    whose V is ``goes_on_valid`` (g); then P_A(bucket) = live(bucket)·V / Σ live·V. Exact: the live masses
    and that dead paths have V = 0. Assumed: V = 1 for the close and open buckets (a closed item whose
    call then closes as the gold's is valid once the wrapper ends, which is not expanded) and V = g for
    a string that goes on. With V(close_complete) = 1, P_A(correct) falls as g rises: g = 1 (the default)
    gives its lower bound, with the open mass counted valid and wrong (a bound over every V, since V ≤ 1);
    ``p_correct_hi`` is g = 0 with the open mass counted correct, the top over g only: where a close that
    diverges from the gold rarely ends valid, V(close_diverges) < 1 and P_A(correct) is higher still.
    ``tooldecode.distortion.decision_table.aligned_from_draws`` estimates every V from loose draws."""
    g = float(goes_on_valid)
    weights = {k: live.get(k, 0.0) * (g if k == "goes_on" else 1.0) for k in BUCKETS}
    z = sum(weights.values())
    p = {k: (w / z if z > 0 else 0.0) for k, w in weights.items()}
    open_mass = live.get("close_unresolved", 0.0) + live.get("undetermined", 0.0)
    no_goes_on = z - weights["goes_on"]
    hi = (live.get("close_complete", 0.0) + open_mass) / no_goes_on if no_goes_on > 0 else 1.0
    method = "estimate: live paths of the strict grammar, V = 1 except goes-on" + (
        " (g = 1: lower bound of P(correct) over g)" if g >= 1.0 else f" (g = {g:g})"
    )
    return DecisionRow(
        policy="strict-aligned",
        engine=engine,
        method=method,
        **bucket_fields(p),
        p_correct=p["close_complete"],
        p_correct_lo=(live.get("close_complete", 0.0) / sum(live.get(k, 0.0) for k in BUCKETS))
        if z > 0
        else 0.0,
        p_correct_hi=min(1.0, hi),
        kinds={**{f"live_{k}": float(live.get(k, 0.0)) for k in BUCKETS}, "goes_on_valid": g},
        mask_removed=None,
        **common,
    )
