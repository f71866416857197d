"""One trial: the only place that builds a condition's prompt, constraint and draw.

A ``Trial(condition, scenario)`` renders the prompt once and then ``sample``s through the condition's
channel (``tooldecode.trial.channel``: a server's grammar field, a mask engine, an engine's own
sampler, the tool modes, strict-aligned or the strict-prefix wrapper), ``probe``s the gold call,
``replay``s drawn tokens through the strict grammar and ``score``s a drawn text. Backends come from
one ``ModelCache`` sized by one rule (``tooldecode.trial.session.llamacpp_size``). The commands
(``tooldecode sample``, ``probe``, ``run``) and the distortion reference all draw through it.
"""

from __future__ import annotations

from tooldecode.trial.agreement import AGREEMENT_PROMPT, ChannelAgreement, channel_agreement
from tooldecode.trial.channel import (
    CHANNELS,
    SERVER_MODES,
    TrialError,
    channel_of,
    constraint,
    drawer,
    strict_grammar,
)
from tooldecode.trial.session import (
    CONTEXT_TOKENS,
    DRAW_SLOTS,
    VOCABULARY_TOKENS,
    ModelCache,
    backend_kwargs,
    llamacpp_size,
)
from tooldecode.trial.trial import Trial, condition_of, replay_status, variant_of
from tooldecode.trial.views import VIEWS, apply_view, check_view, typescript_signature

__all__ = [
    "AGREEMENT_PROMPT",
    "ChannelAgreement",
    "channel_agreement",
    "CHANNELS",
    "CONTEXT_TOKENS",
    "DRAW_SLOTS",
    "SERVER_MODES",
    "VIEWS",
    "VOCABULARY_TOKENS",
    "ModelCache",
    "Trial",
    "TrialError",
    "apply_view",
    "backend_kwargs",
    "channel_of",
    "check_view",
    "condition_of",
    "constraint",
    "drawer",
    "llamacpp_size",
    "replay_status",
    "strict_grammar",
    "typescript_signature",
    "variant_of",
]
