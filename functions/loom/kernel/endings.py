"""How an ``execute`` call's flow task ended, recorded: completed, failed, parked, or nothing.

A session's flow task ends on its return value, an exception, or a control-flow signal.
What the log then needs is decided here: a suspension, an in-doubt park or a supersession
is in the log already (or must not be written); a lapsed admission gives the claim back (a
claim that ends now); a divergence parks the execution; a budget
stop or an exception fails it; a return value completes it (or fails it when the value is
not exact JSON, see :func:`loom.kernel.payloads.completion_event`).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from loom import events as ev
from loom.errors import NondeterminismError
from loom.kernel import cancellation
from loom.kernel.context import (
    AbortSignal,
    InDoubtSignal,
    LapsedSignal,
    ParkSignal,
    StopSignal,
    SupersededSignal,
    SuspendSignal,
    task_signal,
)
from loom.kernel.effects import error_info
from loom.kernel.payloads import completion_event, completion_inline

if TYPE_CHECKING:
    from loom.kernel.session import Session


async def record_end(session: Session, flow_task: asyncio.Task[Any]) -> None:
    """Append what the end of ``flow_task`` means for the log, if anything.

    Raises:
        StoreError: The store failed (an ``AbortSignal`` the flow unwound on).
    """
    # (``finish`` does nothing without a cancel: most ends skip building its coroutine.)
    if session.journal.state.cancel is not None and await cancellation.finish(session, flow_task):
        return
    signal = session.signal or task_signal(flow_task)
    if isinstance(signal, AbortSignal):
        raise signal.args[0]
    if isinstance(signal, SupersededSignal | SuspendSignal | InDoubtSignal):
        return  # overtaken, or the suspension (the in-doubt park) is already in the log
    if isinstance(signal, LapsedSignal):  # the claim given back: the next grant runs it
        until = session.rt.clock()
        await session.append([ev.ExecutionClaimed(holder=session.holder, until=until)], False)
        return
    if isinstance(signal, ParkSignal):
        err: NondeterminismError = signal.args[0]
        reason = f"nondeterminism: {err.message}"
        step_id = getattr(signal, "step_id", None)
        await session.append([ev.ExecutionParked(reason=reason, step_id=step_id)], defer=False)
        return
    # (``defer=False``: no journal holds an end back, see ``Journal.defer_now``)
    if isinstance(signal, StopSignal):
        await session.append([ev.ExecutionFailed(error=error_info(signal.args[0]))], defer=False)
        return
    exc = flow_task.exception()
    if exc is not None:
        await session.append([ev.ExecutionFailed(error=error_info(exc))], defer=False)
        return
    codec, result = session.rt.payloads, flow_task.result()
    end = completion_inline(codec, result)  # (most outputs: no coroutine to build)
    if end is None:
        end = await completion_event(codec, result, session.execution_id)
    await session.append([end], defer=False)
