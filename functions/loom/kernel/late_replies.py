"""A reply that loses to its gate's timeout is refused, never answered as a redelivery.

A gate opened with a timeout (``ctx.suspend(..., timeout=)``) records its deadline
(``ExecutionSuspended.wake_at``); once that passes the timeout wins, decided by the
recorded times alone (see the fold's ``_resumed``). A reply that comes after it changes
nothing, and its sender must hear so: a reply after a *recorded* timeout used to find the
timeout's resume under its own key and was answered 200 like a redelivery of an accepted
reply, and one after the deadline but before the timer's call was appended and then
silently ignored. Both are now :class:`~loom.errors.GateTimedOutError` (HTTP 409,
``code="gate_timed_out"``), on every route that resumes, since every one goes through
:func:`loom.kernel.control.resume`. An exact redelivery of a reply that *was* accepted stays an
idempotent success.
"""

from __future__ import annotations

from datetime import UTC, datetime

from loom.errors import GateTimedOutError
from loom.kernel.state import ExecutionState, GateRecord, resume_key


def timed_out_gate(
    state: ExecutionState, on: str, correlation_key: str, now: float | None = None
) -> GateTimedOutError | None:
    """Why a reply to gate ``on``/``correlation_key`` is refused: its timeout is recorded
    (it won), or, given ``now``, the open gate's deadline is past (the timer's call is
    late, but the fold would give the gate to the timeout all the same); else ``None``."""
    done = state.resumes.get(resume_key(on, correlation_key))
    if done is not None:
        if not done["timed_out"]:
            return None
        step_id, gate = _gate(state, on, correlation_key)
        return _refusal(state.execution_id, on, correlation_key, step_id, gate)
    if now is None:
        return None
    step_id, gate = _gate(state, on, correlation_key)
    if gate is None or gate["wake_at"] is None or now < gate["wake_at"]:
        return None
    return _refusal(state.execution_id, on, correlation_key, step_id, gate)


def _gate(state: ExecutionState, on: str, key: str) -> tuple[str | None, GateRecord | None]:
    for step_id, gate in state.gates.items():
        if gate["on"] == on and gate["correlation_key"] == key:
            return step_id, gate
    return None, None


def _refusal(
    eid: str, on: str, key: str, step_id: str | None, gate: GateRecord | None
) -> GateTimedOutError:
    wake_at = gate["wake_at"] if gate is not None else None
    when = f" at {datetime.fromtimestamp(wake_at, UTC).isoformat()}" if wake_at is not None else ""
    return GateTimedOutError(
        f"gate {on!r} (correlation key {key!r}) of execution {eid!r} timed out{when}; "
        "the timeout won and this reply is refused",
        details={
            "execution_id": eid,
            "on": on,
            "correlation_key": key,
            "step_id": step_id,
            "timed_out_at": wake_at,
        },
    )
