"""What a resume is, decided on a state: held already, refused, or new (and then whether it
wakes the execution). Shared by the resume control call (:mod:`loom.kernel.control`) and
the inbox's drain (:mod:`loom.kernel.inbox`), so a resume is decided the same way by both.
"""

from __future__ import annotations

from typing import Any

from loom import events as ev
from loom.errors import ExecutionFinishedError
from loom.kernel.fold import ExecutionState, resume_key
from loom.kernel.late_replies import timed_out_gate
from loom.store.base import StatusChange


def resume_decision(
    state: ExecutionState, on: str, correlation_key: str, stored: Any, by: str | None, now: float
) -> tuple[ev.ExecutionResumed, bool] | None:
    """A resume decided on ``state`` (an inbox's, :mod:`loom.kernel.inbox`): its event and whether
    it opens a gate of a suspended execution; ``None`` when ``state`` holds it already.

    Raises:
        GateTimedOutError: Its gate's timeout won.
        ExecutionFinishedError: The execution ended.
    """
    if settled(state, resume_key(on, correlation_key), on, correlation_key, now):
        return None
    event = ev.ExecutionResumed(on=on, correlation_key=correlation_key, payload=stored, by=by)
    return event, resume_change(state, on, correlation_key) is not None


def settled(state: ExecutionState, key: str, on: str, correlation_key: str, now: float) -> bool:
    """Whether ``state`` holds the resume already (a redelivery: a no-op, even after the
    end); refuse it if its gate timed out (or its deadline passed by ``now``) or the
    execution ended without it.

    Raises:
        GateTimedOutError: The gate's timeout won.
        ExecutionFinishedError: The execution ended.
    """
    late = timed_out_gate(state, on, correlation_key, now)  # (``loom.kernel.late_replies``)
    if late is not None:
        raise late
    if key in state.resumes:
        return True
    if state.finished:
        raise ExecutionFinishedError(
            f"execution {state.execution_id!r} is {state.status}; resume refused",
            details={"status": state.status},
        )
    return False


def opens(state: ExecutionState, on: str, correlation_key: str) -> bool:
    """Whether the resume meets a gate the flow has open (else it is buffered)."""
    return any(
        g["on"] == on and g["correlation_key"] == correlation_key
        for g in state.open_gates().values()
    )


def resume_change(state: ExecutionState, on: str, correlation_key: str) -> StatusChange | None:
    """``running`` when the resume opens a gate of a suspended execution."""
    return (
        StatusChange("running")
        if opens(state, on, correlation_key) and state.status == "suspended"
        else None
    )
