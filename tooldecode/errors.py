"""Error types. Every error a user can cause carries a one-line message: what, where, what to do."""

from __future__ import annotations

from tooldecode.redaction import redact


class ToolDecodeError(Exception):
    """Base class. ``str(err)`` is a single line fit for a terminal, with every secret masked
    (``tooldecode.redaction.redact``)."""

    def __init__(self, message: str) -> None:
        super().__init__(redact(" ".join(message.split())))


class ModelError(ToolDecodeError):
    """Unknown model id, missing or corrupt weights, unreachable package."""


class SchemaError(ToolDecodeError):
    """A tool schema that is malformed or cannot be rendered."""


class ScenarioError(ToolDecodeError):
    """A scenario file that is malformed or inconsistent."""


class PromptError(ToolDecodeError):
    """A transcript variant, model or scenario that cannot be rendered as asked."""


class RunError(ToolDecodeError):
    """A run directory that is missing, corrupt or inconsistent with the requested config."""


class MaskError(ToolDecodeError):
    """A grammar mask failed while sampling; the sample is aborted rather than left unconstrained."""
