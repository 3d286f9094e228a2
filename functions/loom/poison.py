"""Poison executions: an execute call that dies at the same place again and again.

An OOM, a segfault or a SIGKILL in the middle of a step leaves no event behind but the
call's ``ExecutionClaimed``; the delivery is retried and dies again, forever. The fold counts
claims by new holders with no progress between them (``idle_claims``). When an execute call
finds that count at the runtime's ``max_idle_claims``, it parks the execution with reason
``poison: …`` instead of running it, and redeliveries leave it parked. ``Runtime.retry``
(``loom retry ID``, ``POST /executions/{id}/retry``) appends ``ExecutionRetried``, which
clears the park and the count, and runs it again; it does the same for an execution parked
for nondeterminism once fixed code is deployed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from loom import events as ev
from loom.errors import NotParkedError
from loom.store.base import StatusChange

if TYPE_CHECKING:
    from loom.fold import ExecutionState
    from loom.runtime import Runtime
    from loom.wire import ExecutionResult

DEFAULT_MAX_IDLE_CLAIMS: Final = 5
POISON: Final = "poison"


def is_poison_parked(state: ExecutionState) -> bool:
    """Whether ``state`` is parked as poison (redeliveries must leave it alone)."""
    return (state.parked_reason or "").startswith(POISON)


def poisoned(state: ExecutionState, limit: int) -> bool:
    """Whether ``limit`` execute calls in a row claimed ``state`` without progress."""
    return state.idle_claims >= limit and not state.finished


async def park_poison(runtime: Runtime, state: ExecutionState) -> ExecutionState:
    """Park ``state`` as poison, naming how many calls died and where it stood."""
    reason = (
        f"{POISON}: {state.idle_claims} execute calls in a row claimed it and made no "
        f"progress (last event #{state.last_seq}); `loom retry {state.execution_id}` runs it again"
    )
    event = ev.ExecutionParked(reason=reason)
    change = StatusChange("suspended", None, reason)
    return await runtime._append_control(state, [event], change)  # pyright: ignore[reportPrivateUsage]


async def retry(runtime: Runtime, execution_id: str, by: str = "operator") -> ExecutionResult:
    """Let a parked execution run again (see the module docstring).

    Raises:
        UnknownExecutionError: No such execution.
        NotParkedError: The execution is not parked.
    """
    from loom.wire import ExecutionResult

    await runtime.require(execution_id)
    state = await runtime.load_state(execution_id)
    if state.parked_reason is None or state.finished:
        raise NotParkedError(
            f"execution {execution_id!r} is {state.status} and not parked; nothing to retry",
            details={"execution_id": execution_id, "status": state.status},
        )
    events: list[ev.Event] = [ev.ExecutionRetried(by=by)]
    state = await runtime._append_control(state, events, StatusChange("running"))  # pyright: ignore[reportPrivateUsage]
    dispatch_id = f"{execution_id}:{state.last_seq}:retry"
    ran = await runtime._dispatch(execution_id, state.flow, "manual", dispatch_id)  # pyright: ignore[reportPrivateUsage]
    return ran or ExecutionResult.from_state(state, include_state=False)
