"""What a worker records when a write is over the store's limits.

A :class:`~loom.errors.StoreLimitError` is not a passing fault: the same write fails the same
way every time, so answering "retry later" would have the execution retried forever. The
refused batch was not written (stores check their limits before writing), so the worker
records, in its place, what the batch was about as failed with ``code="store_limit"``:

* an effect's outcome (``EffectCompleted`` with an output too big to store): the step fails,
  and the flow gets an :class:`~loom.errors.EffectFailedError` it may handle. The effect
  ran; as for an output that is not exact JSON, it is not run again.
* the flow's result (``ExecutionCompleted``), or a failure too big to record: the step or
  the execution fails with this code instead.
* anything else: the execution fails (pending decisions dropped, they may be the bulk), and
  the execute call ends with the error.

Large payloads belong in a blob store (``LOOM_BLOBS``), which keeps every event small.
"""

from __future__ import annotations

from collections.abc import Sequence

from loom import events as ev
from loom.errors import StoreLimitError, failed_error


def limit_info(exc: StoreLimitError) -> ev.ErrorInfo:
    """How the refusal is recorded on the failed step or execution."""
    return ev.ErrorInfo(code=exc.code, type=type(exc).__name__, message=exc.message)


def instead(
    events: Sequence[ev.Event], exc: StoreLimitError
) -> tuple[list[ev.Event], BaseException | None] | None:
    """The events to record in place of a refused batch, and what to raise once they are.

    ``None`` when the batch already records a ``store_limit`` failure: there is nothing
    smaller to record in its place.
    """
    info = limit_info(exc)
    if any(_records_limit(e) for e in events):
        return None
    for event in events:
        if isinstance(event, ev.EffectCompleted | ev.EffectFailed):
            failed = ev.EffectFailed(
                step_id=event.step_id,
                effect=event.effect,
                error=info,
                attempts=event.attempts,
                duration_s=event.duration_s,
            )
            return [failed], failed_error(event.effect, event.step_id, info.model_dump())
        if isinstance(event, ev.ExecutionCompleted | ev.ExecutionFailed):
            return [ev.ExecutionFailed(error=info)], None
    return [ev.ExecutionFailed(error=info)], exc


def _records_limit(event: ev.Event) -> bool:
    error = getattr(event, "error", None)
    return isinstance(error, ev.ErrorInfo) and error.code == StoreLimitError.code
