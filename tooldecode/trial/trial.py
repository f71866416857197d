"""``Trial``: one condition on one scenario — its prompt rendered once, then drawn, probed, replayed, scored."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from tooldecode.records import VARIANT_FIELDS, Condition
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
        The ``tooldecode.scenarios.Scenario`` the prompt is rendered from.
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
    ) -> None:
        from tooldecode.models import resolve
        from tooldecode.prompts import TranscriptOptions, render_prompt

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
        self.prompt = render_prompt(scenario, self.ref, self.options)
        # the text the model sees and the tool forms that classify a key, as the view shows them
        self.text, self.key_tools = apply_view(
            self.prompt.text, self.prompt.tools, self.prompt.expected_tool, tool_view
        )
        self.tool_view = tool_view
        self._constraints: dict[int, Any] = {}
        self._grammars: dict[str, str] = {}

    # --- drawing ------------------------------------------------------------------------------
    def params(self, **kw: Any) -> Any:
        """``SamplingParams`` at the condition's temperature with the prompt's stop strings (``kw``: the rest)."""
        from tooldecode.sampling import SamplingParams

        return SamplingParams(temperature=self.condition.temperature, stop=tuple(self.prompt.stop), **kw)

    def constraint(self, backend: Any) -> Any:
        """What constrains the samples on ``backend`` (``tooldecode.trial.channel.constraint``; built once
        per backend)."""
        key = id(backend)
        if key not in self._constraints:
            self._constraints[key] = constraint(
                self.channel,
                self.prompt,
                backend,
                mode=self.condition.mode,
                engine=self.engine,
                ws=self.ws,
                duplicates=self.duplicates,
            )
        return self._constraints[key]

    def sample(
        self,
        backend: Any,
        n: int,
        params: Any,
        *,
        batch_size: int | None = None,
        start_index: int = 0,
        on_batch: Callable[[list], None] | None = None,
    ) -> list:
        """Samples ``start_index`` … ``start_index + n - 1`` through the condition's channel.

        ``params`` is a ``tooldecode.sampling.SamplingParams`` (``Trial.params``); ``on_batch`` receives
        samples as they complete."""
        draw = drawer(
            self.channel,
            self.prompt,
            self.condition.mode,
            conditioning=self.options.conditioning,
            aligned=self.aligned,
        )
        return draw(
            backend,
            self.text,
            n,
            params,
            mask=self.constraint(backend),
            prefill=self.prompt.prefill,
            batch_size=batch_size,
            start_index=start_index,
            on_batch=on_batch,
        )

    # --- the exact probe ----------------------------------------------------------------------
    @property
    def call(self) -> str:
        """The scenario's gold call in the model's wire and the condition's call style."""
        from tooldecode.prompts import gold_call_text

        session = getattr(self.scenario, "kind", "edit") == "session"  # rendered by the model's template
        return gold_call_text(self.scenario, self.options, self.ref if session else self.ref.family)

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
        """The verdict (``tooldecode.scoring.score_text``) of a drawn sample (or its text), prefill included."""
        from tooldecode.scoring import score_text

        text = sample if isinstance(sample, str) else sample.text
        if not isinstance(sample, str) and finish_reason is None:
            finish_reason = sample.finish_reason
        return score_text(
            self.prompt.prefill + text,
            list(self.prompt.tools),
            wire=self.prompt.wire,
            expected_tool=self.prompt.expected_tool,
            scenario=self.scenario if getattr(self.scenario, "kind", "edit") == "edit" else None,
            finish_reason=finish_reason,
        )
