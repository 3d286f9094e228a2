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
from loom.kernel.claims import claim_is_live
from loom.kernel.decide import NOTHING, Decide, Decision, write
from loom.kernel.fold import ExecutionState
from loom.store.base import StatusChange

if TYPE_CHECKING:
    from loom.kernel.runtime import Runtime
    from loom.wire import ExecutionResult

DEFAULT_MAX_IDLE_CLAIMS: Final = 5
POISON: Final = "poison"


def is_poison_parked(state: ExecutionState) -> bool:
    """Whether ``state`` is parked as poison (redeliveries must leave it alone)."""
    return (state.parked_reason or "").startswith(POISON)


def poisoned(state: ExecutionState, limit: int) -> bool:
    """Whether ``limit`` execute calls in a row claimed ``state`` without progress."""
    return state.idle_claims >= limit and not state.finished


def decide_poison(limit: int, now: float) -> Decide:
    """The decider of a poison park: park ``state`` as poison, naming how many calls died and
    where it stood, while it still is (no call made progress or took it meanwhile)."""

    def decide(state: ExecutionState) -> Decision:
        if not poisoned(state, limit) or state.parked_reason is not None:
            return NOTHING
        if claim_is_live(state.claim, now):
            return NOTHING  # a call took it meanwhile: not ours to park
        reason = (
            f"{POISON}: {state.idle_claims} execute calls in a row claimed it and made no "
            f"progress (last event #{state.last_seq}); "
            f"`loom retry {state.execution_id}` runs it again"
        )
        return Decision(
            [ev.ExecutionParked(reason=reason)], StatusChange("suspended", None, reason)
        )

    return decide


async def retry(runtime: Runtime, execution_id: str, by: str = "operator") -> ExecutionResult:
    """Let a parked execution run again (see the module docstring).

    Raises:
        UnknownExecutionError: No such execution.
        NotParkedError: The execution is not parked.
    """
    from loom.wire import ExecutionResult

    await runtime.require(execution_id)
    state = await runtime.load_state(execution_id)

    def decide(now: ExecutionState) -> Decision:
        if now.parked_reason is None or now.finished:
            raise NotParkedError(
                f"execution {execution_id!r} is {now.status} and not parked; nothing to retry",
                details={"execution_id": execution_id, "status": now.status},
            )
        return Decision([ev.ExecutionRetried(by=by)], StatusChange("running"))

    state, _ = await write(runtime, state, decide)
    dispatch_id = f"{execution_id}:{state.last_seq}:retry"
    ran = await runtime._dispatch(execution_id, state.flow, "manual", dispatch_id)  # pyright: ignore[reportPrivateUsage]
    return ran or ExecutionResult.from_state(state, include_state=False)
