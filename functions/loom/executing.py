"""``Runtime.execute``: load, decide, run the session, report.

One worker call, top to bottom::

    state = load(execution)                     # snapshot + tail, folded
    an inbox wake?               -> drain it     (one append, decided from this state)
    loop:
        nothing to run?          -> report (and re-arm what should follow)
        another call's claim live? -> superseded
        poison?                  -> park it         (a write, decided from this state)
        an intent with no outcome? -> park in doubt (likewise)
        its queue full?          -> wait            (a lease, owned by this call)
        claim                    -> run the session, report

Every write here is decided from the state just loaded and conditioned on its seq
(:mod:`loom.decide`); when the log changed meanwhile, the state is reloaded and the whole
decision is made again from the top, so nothing decided on a stale state is written: a step
whose outcome landed while this call was deciding is not parked in doubt, and a claim that
appeared is not overtaken.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from loom import queues
from loom.claims import ACTIVE_HOLDERS, claim_is_live, new_holder
from loom.decide import MAX_DECISIONS, write
from loom.durability import claim
from loom.errors import ExecutionSupersededError
from loom.follow_up import follow_up, nothing_to_do
from loom.inbox import drain, remove, wants_drain
from loom.poison import decide_poison, poisoned
from loom.scope import SCOPE, off_scope
from loom.starts import run_handed, run_session
from loom.verdicts import decide_in_doubt, has_open_intents
from loom.wire import ExecutionPackage, ExecutionResult

if TYPE_CHECKING:
    from loom.fold import ExecutionState
    from loom.runtime import Runtime


async def execute(rt: Runtime, package: ExecutionPackage) -> ExecutionResult:
    """The body of :meth:`Runtime.execute <loom.runtime.Runtime.execute>`."""
    if SCOPE.get() is not None:  # run inline from a flow (a message's receiver, a child)
        with off_scope():  # its tasks are none of that flow's steps
            return await _execute(rt, package)
    return await _execute(rt, package)


async def _execute(rt: Runtime, package: ExecutionPackage) -> ExecutionResult:
    if (handed := run_handed(rt, package)) is not None:  # claimed with its create
        return await handed
    state, tail = await rt._load(package.execution_id)  # pyright: ignore[reportPrivateUsage]
    drained = await drain(rt, state) if wants_drain(package) else []  # fan-in: the inbox first
    if drained:
        state, tail = await rt._load(package.execution_id)  # pyright: ignore[reportPrivateUsage]
        try:
            return await _decided(rt, state, tail)
        finally:
            await remove(rt, state.execution_id, drained)
    return await _decided(rt, state, tail)


async def _decided(rt: Runtime, state: ExecutionState, tail: int) -> ExecutionResult:
    holder = new_holder()
    ACTIVE_HOLDERS.add(holder)  # live for this process's other calls from its claim on
    admitted = False
    try:
        for _ in range(MAX_DECISIONS):
            if nothing_to_do(rt, state):
                # A retried delivery re-arms the timer, in case the dispatch that should have
                # armed it failed after the suspension was written (dispatch ids deduplicate).
                await follow_up(rt, state)
                return await rt.report(state)
            # A worker that lacks the flow, or the version it started on, writes nothing.
            flow = rt.app.get_flow(state.flow, state.flow_version)
            now = rt.clock()
            _refuse_if_held(state, now)
            if poisoned(state, rt.max_idle_claims):
                state, wrote = await write(rt, state, decide_poison(rt.max_idle_claims, now))
                if wrote:
                    return ExecutionResult.from_state(state)
                continue  # the log moved: decide again from the top
            if has_open_intents(state):
                state, wrote = await write(rt, state, decide_in_doubt(now))
                if wrote:
                    return await rt.report(state)
                continue
            if not admitted:
                if not await queues.admit(rt, state, holder):  # full: try again later
                    return await queues.defer(rt, state)
                admitted = state.queue is not None
            session = await claim(rt, state, holder, flow)
            if session is None:  # the log moved while claiming: reload, decide again
                state, tail = await rt._load(state.execution_id)  # pyright: ignore[reportPrivateUsage]
                continue
            return await run_session(rt, session, tail)
        raise ExecutionSupersededError(
            f"the log of {state.execution_id!r} kept changing; nothing was run",
            details={"execution_id": state.execution_id},
        )
    finally:
        ACTIVE_HOLDERS.discard(holder)
        if admitted:  # (off a queue there is no lease: no coroutine to build)
            await queues.release(rt, state, holder)


def _refuse_if_held(state: ExecutionState, now: float) -> None:
    """Raise :class:`ExecutionSupersededError` when another call's claim is live."""
    if claim_is_live(state.claim, now):
        holder = state.claim["holder"]  # type: ignore[index]
        raise ExecutionSupersededError(
            f"execution {state.execution_id!r} is held by {holder!r}", details={"holder": holder}
        )
