"""The records that cross stages, as types: the arm (``Condition``), a raw sample (``SampleRecord``), its
verdict (``VerdictRecord``) and a close-brace probe row (``ProbeRow``).

Each reads the JSON object a run stores (``from_json``) and writes it back (``to_json``) as the same
dict, keys in the same order: fields the type does not know are kept in ``extra``, optional fields that
were absent stay absent. ``label`` and ``draw_key`` are the one definition of an arm's part of a sample
key and of a sample's draw identity.

>>> arm = Condition.from_json({"model": "qwen2.5-coder-0.5b-instruct", "backend": "llamacpp",
...                            "mode": "strict", "temperature": 1.0, "level": "L2"})
>>> label(arm)
'qwen-0.5b,L2,strict,temperature=1.0'

A leaf: imports only the standard library and ``tooldecode.errors``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from tooldecode.errors import ToolDecodeError

__all__ = [
    "CONDITIONINGS",
    "LEVELS",
    "MODES",
    "STRICT_MODES",
    "TOOL_MODES",
    "VARIANT_FIELDS",
    "Condition",
    "OfferedTool",
    "ProbeRow",
    "RecordError",
    "SampleRecord",
    "VerdictRecord",
    "draw_key",
    "label",
]

# masked modes: "strict" (every object closed), "strict-spec" (the schema as written), "strict-aligned"
# (strict, masked particles resampled by importance weight) and "strict-prefix" (a masked token's mass
# moved to its longest allowed prefix)
STRICT_MODES = ("strict", "strict-spec", "strict-aligned", "strict-prefix")
# provider-style tool calling on a server: chat completions with tools=[…], per-tool strict or not
TOOL_MODES = ("tools-strict", "tools-loose")
MODES = ("loose", *STRICT_MODES, *TOOL_MODES)
# how much of the call is forced before sampling: nothing (L0), the tool's name (L1), the gold call up
# to a cut (L2); L3 is the exact probe (``ProbeRow``), which samples nothing
CONDITIONINGS = {"free": "L0", "forced-tool": "L1", "gold-prefix": "L2"}
LEVELS = ("L0", "L1", "L2", "L3")


def samples_per_arm(n_by_mode: Mapping[str, Any], n: int, mode: str | None, level: str | None = None) -> int:
    """Samples per (arm, scenario, seed) for an arm of ``mode`` at ``level``, from a spec's (or a run
    config's) ``n`` and ``n_by_mode``: its ``"MODE@LEVEL"`` key, else its ``"MODE"`` key, else ``n``."""
    if level is not None and f"{mode}@{level}" in n_by_mode:
        return int(n_by_mode[f"{mode}@{level}"])
    return int(n_by_mode.get(str(mode), n))


# the arm fields that change the transcript (``TranscriptOptions``' fields a spec's [variant] sets)
VARIANT_FIELDS = tuple(
    (
        "history thinking prior toolset schema_view call_format conditioning gold_cut call_style schema_extra"
    ).split()
)
# the fields of an arm's label, in label order (model, level and mode bare, the rest as name=value)
_LABEL_FIELDS = tuple(
    (
        "model level mode history thinking prior toolset schema_view call_format temperature gold_cut "
        "call_style"
    ).split()
)


class RecordError(ToolDecodeError):
    """A stored record that is not what its type says (a missing field, a value of the wrong type)."""


class _OrUnknown(dict):
    """A stored dict for ``str.format_map``: an absent field reads ``?``."""

    def __missing__(self, key: str) -> str:
        return "?"


_R = TypeVar("_R", bound="_Record")
_NUMBER = (int, float)


def _check_type(value: Any, types: type | tuple[type, ...], name: str, where: str) -> Any:
    """``value`` if it is an instance of ``types`` (bool is not a number here), else RecordError."""
    ok = isinstance(value, types) and not (isinstance(value, bool) and bool not in _as_tuple(types))
    if not ok:
        want = " or ".join(t.__name__ for t in _as_tuple(types))
        raise RecordError(
            f"{where}: field {name!r} is {type(value).__name__} ({_short(value)}), expected {want}; "
            "the record is not one tooldecode wrote"
        )
    return value


def _as_tuple(types: type | tuple[type, ...]) -> tuple[type, ...]:
    return types if isinstance(types, tuple) else (types,)


def _short(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


@dataclass(frozen=True)
class _Record:
    """JSON round-trip shared by the record types.

    ``_REQUIRED``: fields every stored record has (a missing one is a RecordError); ``_OPTIONAL``: fields
    that may be absent (``None`` then, and left out of ``to_json``); ``_TYPES``: the JSON types each
    field's value may have; ``_NULLABLE``: required fields that may be ``null``. A field given as ``null`` where absence is the norm is kept in ``extra``, so
    the dict comes back as it was."""

    # what was read but is no field (given back by to_json), and the order the keys were read in
    extra: dict[str, Any] = field(default_factory=dict, compare=False, kw_only=True)
    order: tuple[str, ...] = field(default=(), compare=False, repr=False, kw_only=True)

    _REQUIRED: ClassVar[tuple[str, ...]] = ()
    _OPTIONAL: ClassVar[tuple[str, ...]] = ()
    _TYPES: ClassVar[dict[str, type | tuple[type, ...]]] = {}
    _NULLABLE: ClassVar[tuple[str, ...]] = ()
    _KIND: ClassVar[str] = "record"
    _WHERE: ClassVar[str | None] = None  # the record named in an error: fields of the dict ('?' if absent)

    @classmethod
    def _where(cls, d: Mapping[str, Any]) -> str:
        if cls._WHERE is not None:
            return cls._WHERE.format_map(_OrUnknown(d))
        return f"{cls._KIND} {d.get('key') or d.get('scenario') or '?'}"

    @classmethod
    def _fields_of(cls, d: Mapping[str, Any], convert: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Keyword arguments of ``cls`` from the stored dict ``d`` (``convert``: field → reader)."""
        if not isinstance(d, Mapping):
            raise RecordError(f"a {cls._KIND} is a JSON object, not {type(d).__name__}")
        where = cls._where(d)
        missing = [k for k in cls._REQUIRED if k not in d]
        if missing:
            raise RecordError(
                f"{where}: missing field(s) {', '.join(missing)}; the record is not one tooldecode wrote"
            )
        kw: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for k, v in d.items():
            known = k in cls._REQUIRED or k in cls._OPTIONAL
            if not known or (v is None and k in cls._OPTIONAL):
                extra[k] = v
                continue
            if k in cls._TYPES and not (v is None and (k in cls._NULLABLE or k in cls._OPTIONAL)):
                _check_type(v, cls._TYPES[k], k, where)
            kw[k] = convert[k](v) if convert and k in convert and v is not None else v
        kw["extra"] = extra
        kw["order"] = tuple(d)
        return kw

    def to_json(self) -> dict[str, Any]:
        """The record as the JSON object a run stores (keys in the order they were read, where read)."""
        out: dict[str, Any] = {}
        for k in (*self._REQUIRED, *self._OPTIONAL):
            v = getattr(self, k)
            if k in self._OPTIONAL and v is None:
                continue
            if isinstance(v, _Record):
                v = v.to_json()
            elif isinstance(v, tuple) and all(isinstance(t, _Record) for t in v):
                v = [t.to_json() for t in v]
            out[k] = v
        out.update(self.extra)
        return self._ordered(out)

    def _ordered(self, out: dict[str, Any]) -> dict[str, Any]:
        """``out`` with its keys in the order the record was read in (new keys last); a record made here,
        not read, in field order (``_REQUIRED``, then ``_OPTIONAL``)."""
        rank = {k: i for i, k in enumerate(self.order or (*self._REQUIRED, *self._OPTIONAL))}
        return dict(sorted(out.items(), key=lambda kv: rank.get(kv[0], len(rank))))

    @classmethod
    def from_json(cls: type[_R], d: Mapping[str, Any]) -> _R:
        """The record of a stored JSON object; RecordError (one line) when it is not one."""
        return cls(**cls._fields_of(d))

    @classmethod
    def from_line(cls: type[_R], line: str) -> _R:
        """The record of one line of a ``.jsonl`` file."""
        try:
            d = json.loads(line)
        except ValueError as e:
            raise RecordError(f"a {cls._KIND} line is not JSON ({e}); the file is damaged") from None
        return cls.from_json(d)


@dataclass(frozen=True)
class Condition(_Record):
    """An arm: what decides how a sample is drawn, besides the scenario, seed and index.

    ``None`` is "not set by this arm" (the transcript option's default applies); ``wire`` and
    ``expected_tool`` follow from the other fields and the model (the runner records them)."""

    model: str
    backend: str
    mode: str
    temperature: float
    level: str | None = None
    conditioning: str | None = None
    history: str | None = None
    thinking: bool | None = None
    prior: bool | None = None
    toolset: str | None = None
    schema_view: str | None = None
    call_format: str | None = None
    gold_cut: str | None = None
    call_style: str | None = None
    schema_extra: dict[str, Any] | None = None
    engine: str | None = None
    duplicates: str | None = None
    wire: str | None = None
    expected_tool: str | None = None

    _KIND = "arm"
    _WHERE = "arm of model {model}"
    _REQUIRED = ("model", "backend", "mode", "temperature")
    _OPTIONAL = tuple(
        (
            "history thinking prior toolset schema_view call_format conditioning gold_cut call_style "
            "schema_extra level engine duplicates wire expected_tool"
        ).split()
    )
    _TYPES = {
        "model": str,
        "backend": str,
        "mode": str,
        "temperature": _NUMBER,
        "level": str,
        "conditioning": str,
        "history": str,
        "thinking": bool,
        "prior": bool,
        "toolset": str,
        "schema_view": str,
        "call_format": str,
        "gold_cut": str,
        "call_style": str,
        "schema_extra": dict,
        "engine": str,
        "duplicates": str,
        "wire": str,
        "expected_tool": str,
    }

    @property
    def strict(self) -> bool:
        """Whether a mask (or a server's grammar) constrains this arm's samples."""
        return self.mode in STRICT_MODES

    def get(self, name: str, default: Any = None) -> Any:
        """The arm's value of field ``name`` by name (a field it does not know: from ``extra``);
        ``default`` where the arm does not set it. What a spec's ``field = value`` filter reads."""
        value = getattr(self, name) if name in self._REQUIRED or name in self._OPTIONAL else None
        if value is None:
            value = self.extra.get(name)
        return default if value is None else value

    def label(self) -> str:
        """The arm's part of a sample key: model (short), level and mode bare, then ``field=value`` for
        each variant field the arm sets, the schema extra, and engine and duplicates where not default.

        >>> Condition("qwen2.5-coder-0.5b-instruct", "llamacpp", "loose", 1.0, level="L0",
        ...           history="agentic").label()
        'qwen-0.5b,L0,loose,history=agentic,temperature=1.0'
        """
        parts = []
        for k in _LABEL_FIELDS:
            v = getattr(self, k)
            if v is None:
                continue
            if k == "model":
                v = str(v).replace("qwen2.5-coder-", "qwen-").replace("-instruct", "")
            parts.append(f"{v}" if k in ("model", "level", "mode") else f"{k}={v}")
        if self.schema_extra:
            parts.append("extra=" + json.dumps(self.schema_extra, sort_keys=True, separators=(",", ":")))
        if (self.engine or "xgrammar") != "xgrammar":  # the default engine stays out of older runs' keys
            parts.append(f"engine={self.engine}")
        if (self.duplicates or "forbid") != "forbid":
            parts.append(f"duplicates={self.duplicates}")
        return ",".join(parts)


@dataclass(frozen=True)
class OfferedTool(_Record):
    """One tool the prompt offered: its name, arguments schema and description."""

    name: str
    parameters: dict[str, Any] | bool
    description: str | None = None

    _KIND = "offered tool"
    _WHERE = "offered tool {name}"
    _REQUIRED = ("name", "parameters")
    _OPTIONAL = ("description",)
    _TYPES = {"name": str, "parameters": (dict, bool), "description": str}


def _tools(value: Any) -> tuple[OfferedTool, ...]:
    if not isinstance(value, list):
        raise RecordError(f"a sample's 'tools' is {type(value).__name__}, expected a list of tools")
    return tuple(OfferedTool.from_json(t) for t in value)


@dataclass(frozen=True)
class SampleRecord(_Record):
    """One line of ``samples.jsonl``: a generated continuation with its per-token measurements.

    Per-token lists (``token_ids``, ``logprobs``, ``top``, ``entropy``, ``entropy_masked``,
    ``mask_removed``) are ``None`` where the backend did not report them. ``tools``: the tools the
    prompt offered, where the record carries them (runs written before they did have ``None``)."""

    key: str
    arm: Condition
    scenario: str
    seed: int
    index: int
    prompt_sha256: str
    prefill: str
    text: str
    token_ids: list[int] | None
    logprobs: list[float] | None
    top: list[Any] | None
    entropy: list[float] | None
    entropy_masked: list[float] | None
    mask_removed: list[float] | None
    finish_reason: str
    error: str | None
    timing: dict[str, Any]
    stream: int | None = None
    particles: dict[str, Any] | None = None
    copy_of: str | None = None
    tools: tuple[OfferedTool, ...] | None = None

    _KIND = "sample"
    _REQUIRED = tuple(
        (
            "key arm scenario seed index prompt_sha256 prefill text token_ids logprobs top entropy "
            "entropy_masked mask_removed finish_reason error timing"
        ).split()
    )
    _OPTIONAL = ("stream", "particles", "copy_of", "tools")
    _NULLABLE = ("token_ids", "logprobs", "top", "entropy", "entropy_masked", "mask_removed", "error")
    _TYPES = {
        "key": str,
        "arm": dict,
        "scenario": str,
        "seed": int,
        "index": int,
        "prompt_sha256": str,
        "prefill": str,
        "text": str,
        "token_ids": list,
        "logprobs": list,
        "top": list,
        "entropy": list,
        "entropy_masked": list,
        "mask_removed": list,
        "finish_reason": str,
        "error": str,
        "timing": dict,
        "stream": int,
        "particles": dict,
        "copy_of": str,
        "tools": list,
    }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> SampleRecord:
        return cls(**cls._fields_of(d, {"arm": Condition.from_json, "tools": _tools}))

    @property
    def label(self) -> str:
        """The arm's part of the key (``key`` is ``"<label>/<scenario>/<seed>/<index>"``)."""
        return self.key.rsplit("/", 3)[0]

    @property
    def call_text(self) -> str:
        """The call as the model wrote it: the forced prefill, then the generated text."""
        return self.prefill + self.text

    def draw_key(self) -> tuple[Any, ...]:
        """The draw's identity: two samples with equal keys are one draw (copies count once).

        The same model saw the same prompt bytes and prefill under the same mode, engine, open grammar's
        ``duplicates`` and temperature, with the same seed, random stream and index (sampling is
        deterministic given these); at temperature 0, the same tokens and text are one draw."""
        a = self.arm
        base = (
            a.model,
            self.prompt_sha256,
            self.prefill,
            a.mode,
            a.engine,
            a.duplicates or "forbid",
            a.temperature,
        )
        if not a.temperature:
            return (*base, tuple(self.token_ids or ()), self.text)
        return (*base, self.seed, self.stream, self.index)


# what a scored verdict carries beyond its head (a skipped sample's verdict has none of them)
_VERDICT_BODY = tuple(
    ("flags tool wrapping invented_keys errors payload arguments shape n_calls duplicate_keys").split()
)


@dataclass(frozen=True)
class VerdictRecord(_Record):
    """One line of ``verdicts-<scorer>.jsonl``: the verdict of one sample.

    A sample that failed (its ``error`` set) is not scored: ``verdict`` is ``None``, ``skipped`` says
    why, and the body fields (``flags`` … ``duplicate_keys``) are absent (``None`` here)."""

    key: str
    scorer: str
    arm: Condition
    scenario: str
    verdict: str | None
    skipped: str | None = None
    flags: list[str] | None = None
    tool: str | None = None
    wrapping: str | None = None
    invented_keys: list[dict[str, Any]] | None = None
    errors: list[str] | None = None
    payload: dict[str, Any] | None = None
    arguments: Any = None
    shape: str | None = None
    n_calls: int | None = None
    duplicate_keys: list[str] | None = None
    outcome: dict[str, Any] | None = None

    _KIND = "verdict"
    _REQUIRED = ("key", "scorer", "arm", "scenario", "verdict")
    _OPTIONAL = ("skipped", *_VERDICT_BODY, "outcome")
    _NULLABLE = ("verdict",)
    _TYPES = {
        "key": str,
        "scorer": str,
        "arm": dict,
        "scenario": str,
        "verdict": str,
        "skipped": str,
        "flags": list,
        "tool": str,
        "wrapping": str,
        "invented_keys": list,
        "errors": list,
        "payload": dict,
        "shape": str,
        "n_calls": int,
        "duplicate_keys": list,
        "outcome": dict,
    }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> VerdictRecord:
        kw = cls._fields_of(d, {"arm": Condition.from_json})
        if "skipped" not in kw:
            # a scored verdict has every body field, null ones included: they are fields, not extras
            for k in _VERDICT_BODY:
                if k in kw["extra"] and kw["extra"][k] is None:
                    kw[k] = kw["extra"].pop(k)
            missing = [k for k in _VERDICT_BODY if k not in d]
            if missing:
                raise RecordError(f"{cls._where(d)}: missing field(s) {', '.join(missing)}; rescore the run")
        return cls(**kw)

    def to_json(self) -> dict[str, Any]:
        out = super().to_json()
        if self.skipped is None:
            for k in _VERDICT_BODY:
                out.setdefault(k, getattr(self, k))
            out = self._ordered(out)
        return out


@dataclass(frozen=True)
class ProbeRow(_Record):
    """One line of a run's ``probe.jsonl``: the exact close-brace probe at one decision point of a call.

    ``p_close + p_continue + p_other + p_undetermined`` is the probability mass of the next text after
    the value at ``path`` (the key ``after``); the ``*_by_kind`` dicts split continue and other mass.
    The fields the probe's callers add vary by writer (``call_style``, ``newtext_*``,
    ``prompt_sha256``, ``same_prompt_as``, ``seconds``): they are kept in ``extra`` and read through
    the properties below."""

    index: int
    path: str
    after: str
    container: str
    actual: str
    p_close: float
    p_continue: float
    p_other: float
    p_undetermined: float
    entropy: float
    boundary: int
    pending: str
    top: list[Any]
    value_chars: int
    value_lines: int
    value_escapes: int
    continuations: Any
    p_continue_by_kind: dict[str, float]
    p_continue_undetermined: float
    p_other_by_kind: dict[str, float]
    continue_keys: dict[str, float]
    decision_entropy: float
    model: str
    variant: dict[str, Any]
    variant_label: str
    scenario: str
    wire: str
    n_items: int
    item_index: int | None

    _KIND = "probe row"
    _WHERE = "probe row {model}/{variant_label}/{scenario}"
    _REQUIRED = tuple(
        (
            "index path after container actual p_close p_continue p_other p_undetermined entropy boundary "
            "pending top value_chars value_lines value_escapes continuations p_continue_by_kind "
            "p_continue_undetermined p_other_by_kind continue_keys decision_entropy model variant "
            "variant_label scenario wire n_items item_index"
        ).split()
    )
    _NULLABLE = ("continuations", "item_index")
    _TYPES = {
        "index": int,
        "path": str,
        "after": str,
        "container": str,
        "actual": str,
        "p_close": _NUMBER,
        "p_continue": _NUMBER,
        "p_other": _NUMBER,
        "p_undetermined": _NUMBER,
        "entropy": _NUMBER,
        "boundary": int,
        "pending": str,
        "top": list,
        "value_chars": int,
        "value_lines": int,
        "value_escapes": int,
        "p_continue_by_kind": dict,
        "p_continue_undetermined": _NUMBER,
        "p_other_by_kind": dict,
        "continue_keys": dict,
        "decision_entropy": _NUMBER,
        "model": str,
        "variant": dict,
        "variant_label": str,
        "scenario": str,
        "wire": str,
        "n_items": int,
        "item_index": int,
    }

    @property
    def same_prompt_as(self) -> str | None:
        """The label of the variant whose rows these copy (its prompt bytes were the same), or None."""
        v = self.extra.get("same_prompt_as")
        return v if isinstance(v, str) else None

    @property
    def prompt_sha256(self) -> str | None:
        """sha256 of the probed prompt, where the writer kept it."""
        v = self.extra.get("prompt_sha256")
        return v if isinstance(v, str) else None

    @property
    def call_style(self) -> str | None:
        """The call's layout (compact, tight, pretty), where the writer kept it."""
        v = self.extra.get("call_style")
        return v if isinstance(v, str) else None


def label(arm: Condition | Mapping[str, Any]) -> str:
    """The arm's part of a sample key (``Condition.label``), of a ``Condition`` or a stored arm dict."""
    return (arm if isinstance(arm, Condition) else Condition.from_json(arm)).label()


def draw_key(sample: SampleRecord | Mapping[str, Any]) -> tuple[Any, ...]:
    """The draw identity of a sample (``SampleRecord.draw_key``), of a record or a stored dict."""
    return (sample if isinstance(sample, SampleRecord) else SampleRecord.from_json(sample)).draw_key()
