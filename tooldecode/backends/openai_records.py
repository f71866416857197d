"""Sample records of the ``openai`` backend: the in-process sampler's fields, ``None`` where the server
cannot supply them, each ``None`` with its reason in ``absent``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from typing import Any

# why a field of a server's sample is None (one home for these sentences)
NO_DISTRIBUTION = "a server returns no full next-token distribution per generated token"
AMBIGUOUS_TEXT = "the server reports tokens as text and a text here is shared by several tokens"
MASKED_LOGPROBS = (
    "under structured outputs this server reports the grammar-masked distribution's log-probabilities, "
    "not the model's (tooldecode's logprobs are the model's)"
)
NOT_REQUESTED = "not requested (logprobs=False)"
PARSED_CALL = (
    "chat tool calling: the server returns the call it parsed, not the tokens it generated, so token "
    "fields cannot be aligned with the text"
)


@dataclass
class ServerSample:
    """One sample drawn by a server.

    The fields of ``tooldecode.sampling.Sample`` (``None`` where the server cannot supply them), plus
    ``tokens`` (the server's own token texts), ``tool_name`` (chat tool calling: the called tool) and
    ``absent`` (field name → why it is ``None``).
    """

    index: int
    seed: int
    text: str
    token_ids: list[int] | None
    logprobs: list[float] | None
    top: list[list[list[float]] | None] | None
    # no server returns the full distribution these need: None, with NO_DISTRIBUTION in absent
    entropy: list[float] | None = field(default=None, kw_only=True)
    entropy_masked: list[float] | None = field(default=None, kw_only=True)
    mask_removed: list[float] | None = field(default=None, kw_only=True)
    finish_reason: str
    error: str | None = None
    timing: dict[str, Any] = field(default_factory=dict)
    tokens: list[str] | None = None
    tool_name: str | None = None
    absent: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("entropy", "entropy_masked", "mask_removed"):
            if getattr(self, name) is None:
                self.absent.setdefault(name, NO_DISTRIBUTION)

    def to_record(self) -> dict[str, Any]:
        return asdict(self)


def request_seed(params: Any, index: int) -> int:
    """The server-side seed of sample ``index`` (``streams.stream_seed31``: seed, stream and index)."""
    from tooldecode.streams import stream_seed31

    return stream_seed31(params, index)


def draw_concurrently(
    jobs: Sequence[Callable[[], list[ServerSample]]],
    workers: int,
    on_batch: Callable[[list[ServerSample]], None] | None = None,
) -> list[ServerSample]:
    """Run the request ``jobs`` on up to ``workers`` threads; their samples in index order.

    ``on_batch`` receives each job's samples as they arrive. The first job that raises stops the ones
    not yet started; what completed is kept (and passed to ``on_batch``), then the error is raised.
    """
    out: list[ServerSample] = []
    error: BaseException | None = None
    pool = ThreadPoolExecutor(max_workers=max(1, min(workers, len(jobs) or 1)))
    try:
        futures = [pool.submit(job) for job in jobs]
        for fut in as_completed(futures):
            try:
                got = fut.result()
            except BaseException as err:  # keep what completed; stop the rest
                if error is None:
                    error = err
                    for f in futures:
                        f.cancel()
                continue
            out.extend(got)
            if on_batch is not None and got:
                on_batch(got)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    if error is not None:
        raise error
    return sorted(out, key=lambda s: s.index)
