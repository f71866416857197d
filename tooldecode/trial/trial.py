"""``Trial``: one condition on one scenario — its prompt rendered once, then drawn, probed, replayed, scored."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from tooldecode.backends.state import PerBackend
from tooldecode.records import VARIANT_FIELDS, Condition, OfferedTool, SampleRecord
from tooldecode.trial.channel import TrialError, channel_of, constraint, drawer, strict_grammar
from tooldecode.trial.views import apply_view, check_view


def replay_status(matcher: Any, token_ids: Sequence[int], eog: frozenset[int], finish_reason: str) -> str:
    """Replay one loose sample's tokens through a fresh strict-grammar matcher.

    Returns ``valid`` (every token allowed, ending with a stop token where the grammar may end),
    ``valid-prefix`` (every token allowed and the sample was cut at the token cap: the masked
    sampler would have been cut at the same point), ``invalid@<t>`` (token t is not allowed: the
    strict arm never produces this sample) or ``stop-string`` (ended on a stop string, not a stop
    token; counted invalid: the masked sampler stops on stop tokens)."""
    for t, tok in enumerate(token_ids):
        allowed = matcher.allowed()
        if matcher.done():
            allowed = np.zeros_like(allowed)
            allowed[list(eog)] = True
        if not allowed[int(tok)]:
            return f"invalid@{t}"
        if int(tok) in eog:
            return "valid"
        matcher.accept(int(tok))
    return "valid-prefix" if finish_reason == "length" else "stop-string"


# the characters of a structural decision point: a token carrying one keeps its top-k in a record
_STRUCT = set(',}]":')
# a record's leading keys as runs store them (the rest in field order)
_SAMPLE_ORDER = ("key", "arm", "scenario", "seed", "stream", "index", "prompt_sha256", "prefill")


def _rounded(values: list[float] | None, digits: int) -> list[float] | None:
    return None if values is None else [round(x, digits) for x in values]


def condition_of(arm: Condition | Mapping[str, Any]) -> Condition:
    """The ``Condition`` of an arm (a stored arm dict is read with ``Condition.from_json``)."""
    return arm if isinstance(arm, Condition) else Condition.from_json(arm)


def variant_of(options: Any) -> dict[str, Any]:
    """The variant fields of ``TranscriptOptions`` as ``Condition`` keyword arguments."""
    return {k: getattr(options, k) for k in VARIANT_FIELDS}


class Trial:
    """One condition (an arm) on one scenario: the prompt, its constraint and its draws in one place.

    Parameters
    ----------
    condition
        The arm: a ``tooldecode.records.Condition`` or a stored arm dict.
    scenario
        The ``tooldecode.scenarios.Scenario`` the prompt is rendered from, or a session scenario (one call
        of an imported session, ``tooldecode.scenarios.importers.session_scenario``: its history, tools and
        call; ``tooldecode.prompts.session``).
    ref
        The resolved model (default: ``resolve(condition.model)``; the model must be fetched).
    ws
        The whitespace policy of tooldecode's grammars.
    engine
        The engine setting of a strict condition that names none (``Condition.engine`` wins).
    aligned
        ``strict-aligned``'s options (``particles``, ``method``, ``target``).
    tool_view
        How the prompt shows the offered tools (``tooldecode.trial.views.VIEWS``).
    tools
        The tools the prompt offers (``tooldecode.grammar.Tool``; a user's tool list, an imported
        session's): by default the scenario's own where it carries them (a ``tools`` attribute), else
        the tool set's catalog tools in the arm's schema view. The constraint, the records and the
        verdicts all read the tools as the prompt shows them.

    Raises
    ------
    TrialError, tooldecode.engines.EngineError, tooldecode.errors.PromptError
        Before any model loads: a mode the backend cannot draw, an unknown view, options that do not
        render.
    """

    def __init__(
        self,
        condition: Condition | Mapping[str, Any],
        scenario: Any,
        *,
        ref: Any = None,
        ws: str = "bounded",
        engine: str = "xgrammar",
        aligned: Mapping[str, Any] | None = None,
        tool_view: str = "as-written",
        tools: Sequence[Any] | None = None,
    ) -> None:
        from tooldecode.models import resolve
        from tooldecode.prompts import TranscriptOptions, render_prompt
        from tooldecode.prompts.session import is_session_scenario, render_session

        self.condition = cond = condition_of(condition)
        self.scenario = scenario
        self.options = TranscriptOptions(
            **{k: getattr(cond, k) for k in VARIANT_FIELDS if getattr(cond, k) is not None}
        )
        self.engine = cond.engine or engine
        self.duplicates = cond.duplicates or "forbid"
        self.ws = ws
        self.aligned = dict(aligned or {})
        self.channel = channel_of(
            cond.mode, cond.backend, self.engine, conditioning=self.options.conditioning
        )
        check_view(tool_view)
        self.ref = ref if ref is not None else resolve(cond.model)
        self._call: str | None = None
        if is_session_scenario(scenario):  # one call of an imported session: its history, tools and call
            self.scenario_id = str(
                scenario.get("id", "session") if isinstance(scenario, Mapping) else scenario.id
            )
            self.prompt, self._call = render_session(self.ref, scenario)
        else:
            self.scenario_id = scenario.id
            if tools is None:
                tools = getattr(scenario, "tools", None) or None
            self.prompt = render_prompt(scenario, self.ref, self.options, tools=tools)
        # the text the model sees and the tool forms that classify a key, as the view shows them
        self.text, self.key_tools = apply_view(
            self.prompt.text, self.prompt.tools, self.prompt.expected_tool, tool_view
        )
        self.tool_view = tool_view
        self._constraints: PerBackend[Any] = PerBackend()
        self._grammars: dict[str, str] = {}
        self._sha: str | None = None

    # --- drawing ------------------------------------------------------------------------------
    def params(self, **kw: Any) -> Any:
        """``SamplingParams`` at the condition's temperature with the prompt's stop strings (``kw``: the rest)."""
        from tooldecode.sampling import SamplingParams

        return SamplingParams(temperature=self.condition.temperature, stop=tuple(self.prompt.stop), **kw)

    def constraint(self, backend: Any) -> Any:
        """What constrains the samples on ``backend`` (``tooldecode.trial.channel.constraint``; built once
        per backend)."""
        return self._constraints.get(
            backend,
            "constraint",
            lambda: constraint(
                self.channel,
                self.prompt,
                backend,
                mode=self.condition.mode,
                engine=self.engine,
                ws=self.ws,
                duplicates=self.duplicates,
            ),
        )

    def sample(
        self,
        backend: Any,
        n: int,
        params: Any,
        *,
        batch_size: int | None = None,
        start_index: int = 0,
        on_batch: Callable[[list[SampleRecord]], None] | None = None,
    ) -> list[SampleRecord]:
        """Samples ``start_index`` … ``start_index + n - 1`` through the condition's channel, as records.

        ``params`` is a ``tooldecode.sampling.SamplingParams`` (``Trial.params``); ``on_batch`` receives
        the records as their samples complete. Each record is built by ``Trial.record``."""
        draw = self._drawer()
        built: dict[int, SampleRecord] = {}

        def records(batch: list) -> list[SampleRecord]:
            out = []
            for s in batch:
                if s.index not in built:
                    built[s.index] = self.record(s, params, backend)
                out.append(built[s.index])
            return out

        drawn = draw(
            backend,
            self.text,
            n,
            params,
            mask=self.constraint(backend),
            prefill=self.prompt.prefill,
            batch_size=batch_size,
            start_index=start_index,
            on_batch=(lambda batch: on_batch(records(batch))) if on_batch is not None else None,
        )
        return records(drawn)

    # --- the records --------------------------------------------------------------------------
    @property
    def arm(self) -> Condition:
        """The condition as its samples record it: with the prompt's wire and the tool it expects."""
        return dataclasses.replace(
            self.condition, wire=self.prompt.wire, expected_tool=self.prompt.expected_tool
        )

    @property
    def tools(self) -> tuple[OfferedTool, ...]:
        """The tools the prompt shows at the call (name and arguments schema, as shown)."""
        return tuple(OfferedTool(t.name, t.parameters) for t in self.prompt.tools)

    @property
    def prompt_sha256(self) -> str:
        """sha256 of the prompt text the model sees (prefill included)."""
        if self._sha is None:
            self._sha = hashlib.sha256(self.text.encode()).hexdigest()
        return self._sha

    def key(self, seed: int, index: int) -> str:
        """The key of sample ``index`` at ``seed``: ``"<arm label>/<scenario>/<seed>/<index>"``."""
        return f"{self.condition.label()}/{self.scenario_id}/{seed}/{index}"

    def _drawer(self) -> Callable[..., list]:
        """The condition's draw function (``tooldecode.trial.channel.drawer``)."""
        return drawer(
            self.channel,
            self.prompt,
            self.condition.mode,
            conditioning=self.options.conditioning,
            aligned=self.aligned,
        )

    def _records(self, batch: Sequence[Any], params: Any, backend: Any) -> list[SampleRecord]:
        return [self.record(s, params, backend) for s in batch]

    def record(self, draw: Any, params: Any, backend: Any) -> SampleRecord:
        """The ``SampleRecord`` of one drawn sample (a ``tooldecode.sampling.Sample`` or a server's).

        Log-probabilities and entropies are rounded, and top-k lists kept only at structural decision
        points (tokens carrying ``, } ] " :``) to bound a run's size; what a server could not report is
        ``None``. Fields of the draw the record has no field for (a server's ``tokens``) are kept."""
        d = dict(draw.to_record())
        top, ids = d.pop("top"), d.pop("token_ids")
        if top is not None and ids is not None:
            top = [
                t
                if t is not None and _STRUCT & set(backend.token_bytes(tok).decode("utf-8", "ignore"))
                else None
                for t, tok in zip(top, ids, strict=True)
            ]
        logprobs, entropy = d.pop("logprobs"), d.pop("entropy")
        masked, removed = d.pop("entropy_masked"), d.pop("mask_removed")
        index = d.pop("index")
        d.pop("seed", None)
        return SampleRecord(
            key=self.key(params.seed, index),
            arm=self.arm,
            scenario=self.scenario_id,
            seed=params.seed,
            stream=params.stream,
            index=index,
            prompt_sha256=self.prompt_sha256,
            prefill=self.prompt.prefill,
            text=d.pop("text"),
            token_ids=ids,
            logprobs=_rounded(logprobs, 5),
            top=top,
            entropy=_rounded(entropy, 4),
            entropy_masked=_rounded(masked, 5),
            mask_removed=_rounded(removed, 5),
            finish_reason=d.pop("finish_reason"),
            error=d.pop("error"),
            timing=d.pop("timing"),
            particles=d.pop("particles", None),
            tools=self.tools,
            extra=d,
            order=_SAMPLE_ORDER,
        )

    def request(
        self,
        backend: Any,
        n: int,
        params: Any,
        *,
        start_index: int = 0,
        on_batch: Callable[[list[SampleRecord]], None] | None = None,
    ) -> Any:
        """Samples ``start_index`` … ``start_index + n - 1`` as one item of a shared draw queue, where the
        condition's channel can share decode steps: ``tooldecode.sampling.DrawRequest`` (for
        ``sample_queue``) where it draws with the plain sampler, ``tooldecode.sampling.AdaptiveRequest``
        (for ``sample_adaptive_queue``) for strict-aligned's adaptive sampler one walk at a time; ``None``
        for every other channel (other aligned methods, servers, engine samplers), whose draws go through
        ``sample``. ``on_batch`` receives the records (``Trial.record``) as the samples complete, as
        ``sample``'s does."""
        from tooldecode.sampling import DrawRequest, aligned_request, sample

        if self.channel == "aligned":
            make: Callable[..., Any] = functools.partial(aligned_request, **self.aligned)
        elif self._drawer() is sample:
            make = DrawRequest
        else:
            return None
        return make(
            backend.tokenize(self.text),
            n,
            params,
            mask=self.constraint(backend),
            prefill=self.prompt.prefill,
            start_index=start_index,
            on_batch=(lambda batch: on_batch(self._records(batch, params, backend)))
            if on_batch is not None
            else None,
        )

    # --- the exact probe ----------------------------------------------------------------------
    @property
    def call(self) -> str:
        """The scenario's gold call in the model's wire and the condition's call style (a session
        scenario's call as the session made it)."""
        from tooldecode.prompts import gold_call_text

        if self._call is not None:
            return self._call
        return gold_call_text(self.scenario, self.options, self.ref.family)

    def probe(
        self,
        backend: Any,
        *,
        points: Sequence[Any] | None = None,
        select: str | Sequence[str] | None = None,
        config: Any = None,
        samples: int = 0,
        seed: int = 0,
    ) -> list:
        """The close-brace probe (``tooldecode.probe.probe_call``) at the decision points of the gold call,
        teacher-forced after the prompt; keys are classified against the tools as the view shows them.

        Raises
        ------
        TrialError
            The condition forces a prefill (the probe forces the whole call: use conditioning ``free``).
        """
        from tooldecode.probe import probe_call

        if self.prompt.prefill:
            raise TrialError(
                f"the probe teacher-forces the whole gold call; build the trial with conditioning 'free', "
                f"not {self.options.conditioning!r}"
            )
        return probe_call(
            backend,
            self.text,
            self.call,
            points=points,
            select=select,
            config=config,
            samples=samples,
            seed=seed,
            tools=self.key_tools,
            expected_tool=self.prompt.expected_tool,
        )

    # --- replay and score ---------------------------------------------------------------------
    def grammar(self, mode: str = "strict") -> str:
        """The GBNF of a masked ``mode`` (``strict`` or ``strict-spec``) over the prompt's tools (rendered once)."""
        if mode not in self._grammars:
            self._grammars[mode] = strict_grammar(self.prompt, self.ws, mode, "xgrammar", self.duplicates)
        return self._grammars[mode]

    def replay(
        self, backend: Any, token_ids: Sequence[int], finish_reason: str, *, mode: str = "strict"
    ) -> str:
        """``replay_status`` of drawn tokens under the GBNF of ``mode`` through xgrammar (acceptance is the
        grammar's, whichever engine sampled), advanced over the prefill."""
        from tooldecode.masking import compile_mask

        mask = compile_mask("xgrammar", self.grammar(mode), backend)
        return replay_status(mask.matcher(self.prompt.prefill), token_ids, backend.eog_ids, finish_reason)

    def score(self, sample: Any, finish_reason: str | None = None) -> Any:
        """The verdict of a drawn sample, prefill included: a ``SampleRecord`` through
        ``tooldecode.scoring.score_record`` against the tools it records (what ``run`` → ``rescore``
        gives it), a text (or an object with ``text`` and ``finish_reason``) through ``score_text``
        against the prompt's tools."""
        from tooldecode.scoring import score_record, score_text

        if isinstance(sample, SampleRecord):
            return score_record(sample, None if self._call is not None else self.scenario)
        text = sample if isinstance(sample, str) else sample.text
        if not isinstance(sample, str) and finish_reason is None:
            finish_reason = sample.finish_reason
        return score_text(
            self.prompt.prefill + text,
            list(self.prompt.tools),
            wire=self.prompt.wire,
            expected_tool=self.prompt.expected_tool,
            scenario=None if self._call is not None else self.scenario,  # a session has no gold file
            finish_reason=finish_reason,
        )
