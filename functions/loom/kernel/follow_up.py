"""What an execute call arranges once it has run: the next dispatch, and the news of an end.

A suspended execution with a deadline gets a timer dispatch; an ended child resumes its
parent, an ended parent cancels its children (the follow-ups primitives install,
:mod:`loom.kernel.primitive`). An execute call that
finds nothing to run (:func:`nothing_to_do`) arranges the same again, in case the call that
should have did not get to it.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import TYPE_CHECKING

from loom.kernel import primitive
from loom.kernel.fold import ExecutionState
from loom.kernel.poison import is_poison_parked

if TYPE_CHECKING:
    from loom.kernel.runtime import Runtime
    from loom.wire import ExecutionResult

# The executions whose due timers an inline follow-up (no dispatcher, or an inline one) of
# this task is running. A timer already due when the execution suspends again (``ctx.sleep(0)`` in a
# loop) is run by that follow-up's loop, not by a call nested in the run: one nested execute
# call per sleep reached Python's recursion limit after a few hundred.
_INLINE: ContextVar[frozenset[str]] = ContextVar("loom_inline_follow_up", default=frozenset())


def nothing_to_do(rt: Runtime, state: ExecutionState) -> bool:
    """Whether an execute call finds nothing to run: ended, in doubt, parked as poison, or
    suspended with no wake-up due."""
    if state.finished or state.status == "in_doubt" or is_poison_parked(state):
        return True
    if state.status != "suspended" or state.parked_reason is not None:
        return False
    wake = state.next_wake_at()
    return wake is None or wake > rt.clock()


async def follow_up(rt: Runtime, state: ExecutionState) -> ExecutionResult | None:
    """Arrange the next dispatch: a timer when it sleeps; an end goes to parent/children.

    Returns where the execution got to when a timer already due ran it here (no dispatcher,
    or an inline one), so the call reports that rather than the suspension before it.
    """
    if primitive.follows_up(state):  # (else nobody to tell: no coroutine)
        await primitive.follow_up(rt, state)  # an end told to parent and children
    wake = _wake_at(state)
    if wake is None:
        return None
    if wake <= rt.clock() and (rt.dispatcher is None or rt.dispatcher.inline):  # runs here
        if state.execution_id in _INLINE.get():
            return None  # the follow-up that ran this call runs it again, in its loop
        return await _run_due(rt, state, wake)
    return await _dispatch_timer(rt, state, wake)  # (a later timer: dispatched, not run here)


def has_follow_up(state: ExecutionState) -> bool:
    """Whether :func:`follow_up` has anything to do for ``state``: else it returns ``None``
    at once, and a caller that asks first builds no coroutine (most calls end so)."""
    return _wake_at(state) is not None or primitive.follows_up(state)


def _wake_at(state: ExecutionState) -> float | None:
    if state.status != "suspended" or state.parked_reason is not None:
        return None
    return state.next_wake_at()


async def _dispatch_timer(
    rt: Runtime, state: ExecutionState, wake: float
) -> ExecutionResult | None:
    return await rt._dispatch(  # pyright: ignore[reportPrivateUsage]
        state.execution_id,
        state.flow,
        "timer",
        f"{state.execution_id}:{state.last_seq}:timer",
        not_before=wake,
    )


async def _run_due(rt: Runtime, state: ExecutionState, wake: float) -> ExecutionResult | None:
    """Run the execution here while it suspends on timers already due, in a loop."""
    token = _INLINE.set(_INLINE.get() | {state.execution_id})
    try:
        while True:
            ran = await _dispatch_timer(rt, state, wake)
            if ran is None or ran.status != "suspended":
                return ran
            state = await rt.load_state(state.execution_id)
            due = _wake_at(state)
            if due is None or due > rt.clock():
                return ran  # (a later timer was dispatched by the run, or waits for a call)
            wake = due
    finally:
        _INLINE.reset(token)
