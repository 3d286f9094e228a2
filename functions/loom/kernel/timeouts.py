"""Flow timeouts: ``@app.flow(..., timeout=timedelta(days=7))`` and a per-start override.

The deadline is recorded on ``ExecutionStarted`` (``deadline``, epoch seconds), so it is
decided by the log, not by when a timer task happens to be delivered: once the clock has
passed it, the first execute call or flow operation appends ``CancelRequested`` (``by`` is
:data:`TIMEOUT_BY`) before anything else happens, and the execution is cancelled with
cleanup like any other (:mod:`loom.kernel.cancellation`). While the execution is suspended the
deadline counts as a wake-up time (``ExecutionState.next_wake_at``), so the durable-timer
dispatch (a Cloud Tasks ``schedule_time`` in production) wakes it when it falls due.
"""

from __future__ import annotations

import math
from datetime import timedelta
from typing import TYPE_CHECKING

from loom import events as ev
from loom.errors import InvalidPayloadError

if TYPE_CHECKING:
    from loom.kernel.defs import FlowDef
    from loom.kernel.fold import ExecutionState
    from loom.kernel.runtime import Runtime
    from loom.kernel.session import Session

DEFAULT_CLEANUP = 300.0
"""Seconds a cancelled flow's cleanup may run, unless the flow says otherwise."""

TIMEOUT_BY = "loom.timeout"
"""``by`` of the cancel a flow's own deadline requests."""

TIMEOUT_REASON = "the flow's timeout passed"


def deadline_for(defn: FlowDef, override: float | timedelta | None, now: float) -> float | None:
    """The deadline a start records: ``override`` or the flow's ``timeout``, from ``now``.

    Raises:
        InvalidPayloadError: ``override`` is not a positive, finite duration.
    """
    seconds = override.total_seconds() if isinstance(override, timedelta) else override
    if seconds is not None and not (math.isfinite(seconds) and seconds > 0):
        raise InvalidPayloadError(
            f"timeout must be a positive number of seconds, got {override!r}",
            details={"timeout": str(override)},
        )
    seconds = seconds if seconds is not None else defn.timeout
    return now + seconds if seconds is not None else None


def cleanup_budget(rt: Runtime, state: ExecutionState) -> float:
    """The cleanup budget of the flow version ``state`` runs on (a default if unknown here)."""
    defn = rt.app.versions.get(state.flow, {}).get(state.flow_version)
    return defn.cleanup_timeout if defn is not None else DEFAULT_CLEANUP


def overdue(rt: Runtime, state: ExecutionState) -> list[ev.Event]:
    """The cancel to write before anything else when the deadline has passed: a claim, a
    resume or a verdict that comes later in the log than the deadline must not get in first.
    """
    deadline = state.deadline
    if deadline is None or state.cancel is not None or state.finished:
        return []
    if rt.clock() < deadline:
        return []
    cleanup = cleanup_budget(rt, state)
    return [ev.CancelRequested(reason=TIMEOUT_REASON, by=TIMEOUT_BY, cleanup_s=cleanup)]


def timed_out(session: Session) -> bool:
    """Whether the execution's recorded deadline has passed (a live session only asks)."""
    deadline = session.state.deadline
    return deadline is not None and session.rt.clock() >= deadline
