"""What an execute call arranges once it has run: the next dispatch, and the news of an end.

A suspended execution with a deadline gets a timer dispatch; an ended child resumes its
parent, an ended parent cancels its children (:mod:`loom.children`). An execute call that
finds nothing to run (:func:`nothing_to_do`) arranges the same again, in case the call that
should have did not get to it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from loom.children import follow_up as follow_up_children
from loom.fold import ExecutionState
from loom.poison import is_poison_parked

if TYPE_CHECKING:
    from loom.runtime import Runtime
    from loom.wire import ExecutionResult


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

    Returns where the execution got to when the timer was already due and ran inline (no
    dispatcher): ``state`` is then stale, and the caller must report this instead.
    """
    if state.parent is not None or state.children:  # (else nobody to tell: no coroutine)
        await follow_up_children(rt, state)
    if state.status == "suspended" and state.parked_reason is None:
        wake = state.next_wake_at()
        if wake is not None:
            return await rt._dispatch(  # pyright: ignore[reportPrivateUsage]
                state.execution_id,
                state.flow,
                "timer",
                f"{state.execution_id}:{state.last_seq}:timer",
                not_before=wake,
            )
    return None
