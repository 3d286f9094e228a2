"""Durable backoff: a retry wait too long for one execute call becomes a durable timer.

A worker on Cloud Run is a billed request; sleeping through ``Retry(initial_interval=60)``
inside it keeps an instance busy for a minute. A backoff longer than the runtime's
``max_inline_backoff`` instead appends ``EffectRetried{attempt, not_before}`` and waits on a
timer gate (``loom.timer``, step id ``"<step>/retry<attempt>"``): the execution suspends,
the dispatcher arms its timer (Cloud Tasks ``schedule_time`` in production, an in-process
timer under ``loom serve``), and whichever instance runs the next execute call makes the
attempt. Short backoffs stay inline.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from loom import events as ev

if TYPE_CHECKING:
    from loom.kernel.effects import Outcome
    from loom.kernel.session import Session

DEFAULT_MAX_INLINE_BACKOFF: Final = 10.0  # seconds a worker may sleep between two attempts

BACKOFF: Final = object()  # what an invocation returns when its next attempt is scheduled


def scheduled(step_id: str, effect: str, attempt: int, outcome: Outcome) -> ev.EffectRetried:
    """The event that schedules attempt ``attempt`` at ``outcome.retry_at``."""
    return ev.EffectRetried(
        step_id=step_id,
        effect=effect,
        attempt=attempt,
        error=outcome.error,
        not_before=outcome.retry_at,
    )


async def wait_for_retry(session: Session, step_id: str, attempt: int, not_before: float) -> None:
    """Wait durably until ``not_before`` before attempt ``attempt`` of ``step_id``."""
    gate_id = f"{step_id}/retry{attempt}"
    seconds = max(0.0, not_before - session.rt.clock())
    await session.gate(gate_id, "loom.timer", f"{session.execution_id}:{gate_id}", seconds)
