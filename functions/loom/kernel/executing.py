"""``Runtime.execute``: load, decide, run the session, report.

One worker call, top to bottom::

    state = load(execution)                     # snapshot + tail, folded
    an inbox wake?               -> drain it     (one append, decided from this state)
    loop:
        nothing to run?          -> report (and re-arm what should follow)
        another call's claim live? -> superseded
        poison?                  -> park it         (a write, decided from this state)
        an intent with no outcome? -> park in doubt (likewise)
        not admitted?            -> wait            (a queue's lease, owned by this call)
        claim                    -> run the session, report
        the lease lapsed in it?  -> its claim given back: reload, decide again (so wait)

Every write here is decided from the state just loaded and conditioned on its seq
(:mod:`loom.kernel.decide`); when the log changed meanwhile, the state is reloaded and the whole
decision is made again from the top, so nothing decided on a stale state is written: a step
whose outcome landed while this call was deciding is not parked in doubt, and a claim that
appeared is not overtaken.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from loom import events as ev
from loom.errors import AppendConflictError, ExecutionSupersededError
from loom.kernel.claims import ACTIVE_HOLDERS, claim_is_live, new_holder
from loom.kernel.context import LapsedSignal
from loom.kernel.decide import MAX_DECISIONS, write
from loom.kernel.durability import BatchedJournal
from loom.kernel.fold import ExecutionState, fold
from loom.kernel.follow_up import follow_up, nothing_to_do
from loom.kernel.inbox import (
    after_call,
    drain,
    remove,
    reported_after,
    wake_after,
    wants_drain,
)
from loom.kernel.poison import decide_poison, poisoned
from loom.kernel.primitive import INSTALLED
from loom.kernel.session import Session
from loom.kernel.starts import run_handed, run_session
from loom.kernel.timeouts import overdue
from loom.kernel.verdicts import decide_in_doubt, has_open_intents
from loom.scope import SCOPE, off_scope
from loom.store.base import AppendRequest, StatusChange
from loom.telemetry import flow_scope
from loom.wire import ExecutionPackage, ExecutionResult

if TYPE_CHECKING:
    from loom.kernel.defs import FlowDef
    from loom.kernel.runtime import Runtime


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
    drained = await drain(rt, state) if _drains_now(rt, package, state) else []
    if drained:
        state, tail = await rt._load(package.execution_id)  # pyright: ignore[reportPrivateUsage]
        try:
            return await _decided(rt, state, tail)
        finally:
            await remove(rt, state.execution_id, drained)
    return await _decided(rt, state, tail)


def _drains_now(rt: Runtime, package: ExecutionPackage, state: ExecutionState) -> bool:
    """Whether this call drains the inbox first (fan-in): a wake's, unless another call runs
    the execution (superseded below, rather than racing its session). A call of this
    process wakes it again once it is over; another's, the follow-up of this delivery or
    the sweep does."""
    if not wants_drain(package):
        return False
    if not claim_is_live(state.claim, rt.clock()):
        return True
    holder = str(state.claim["holder"])  # type: ignore[index]
    if holder in ACTIVE_HOLDERS:  # (checked with the claim: no await in between)
        wake_after(holder, state.execution_id)
    return False


async def _decided(rt: Runtime, state: ExecutionState, tail: int) -> ExecutionResult:
    holder = new_holder()
    ACTIVE_HOLDERS.add(holder)  # live for this process's other calls from its claim on
    try:
        result = await _run_decided(rt, state, tail, holder)
    finally:
        ACTIVE_HOLDERS.discard(holder)
        woke = await after_call(rt, holder, state.flow)
    return await reported_after(rt, result, woke)


async def _run_decided(
    rt: Runtime, state: ExecutionState, tail: int, holder: str
) -> ExecutionResult:
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
            gate = INSTALLED.admission  # (a queue's lease: ``loom.kernel.primitive``)
            if not admitted and gate is not None and gate.applies(state):
                if not await gate.admit(rt, state, holder):  # full: try again later
                    return await gate.defer(rt, state)
                admitted = True
            session = await claim(rt, state, holder, flow)
            if session is not None:
                session.admitted = gate if admitted else None
                try:
                    return await run_session(rt, session, tail)
                except LapsedSignal:  # its claim given back: wait for the next grant
                    await _release(rt, state, holder)
                    admitted = False
            # The log moved while claiming, or the admission lapsed: reload, decide again.
            state, tail = await rt._load(state.execution_id)  # pyright: ignore[reportPrivateUsage]
        raise ExecutionSupersededError(
            f"the log of {state.execution_id!r} kept changing; nothing was run",
            details={"execution_id": state.execution_id},
        )
    finally:
        if admitted:  # (else nothing to give back)
            await _release(rt, state, holder)


async def _release(rt: Runtime, state: ExecutionState, holder: str) -> None:
    """Give back what the admission granted ``holder`` (whatever of it is still its own)."""
    if INSTALLED.admission is not None:
        await INSTALLED.admission.release(rt, state, holder)


def _refuse_if_held(state: ExecutionState, now: float) -> None:
    """Raise :class:`ExecutionSupersededError` when another call's claim is live."""
    if claim_is_live(state.claim, now):
        holder = state.claim["holder"]  # type: ignore[index]
        raise ExecutionSupersededError(
            f"execution {state.execution_id!r} is held by {holder!r}", details={"holder": holder}
        )


async def claim(
    runtime: Runtime, state: ExecutionState, holder: str, flow: FlowDef
) -> Session | None:
    """Claim the execution for ``holder`` and open its session; ``None`` when the log
    changed since ``state`` was loaded (nothing written: the caller reloads and decides
    again).

    The claim (with the resumes of gates whose deadline passed) is one append, decided from
    ``state`` and conditioned on its seq; a batched session keeps a lone claim unforced
    instead, to be written with its first durable point.
    """
    flow_scope(flow.name)  # names the flow on the step spans of this call
    now = runtime.clock()
    batch: list[ev.Event] = [ev.ExecutionClaimed(holder=holder, until=now + runtime.claim_ttl)]
    batch.extend(overdue(runtime, state))  # a passed flow deadline goes before gate timeouts
    gate = INSTALLED.admission  # what the admission writes with its claim (a first dequeue)
    if gate is not None and gate.applies(state):
        batch.extend(gate.on_claim(runtime, state, now))
    for gate in sorted(state.open_gates().values(), key=lambda g: g["wake_at"] or 0.0):
        if gate["wake_at"] is not None and gate["wake_at"] <= now:  # earliest fires first
            batch.append(
                ev.ExecutionResumed(
                    on=gate["on"], correlation_key=gate["correlation_key"], timed_out=True
                )
            )
    # Gates whose deadline passed resume now: those are outcomes the session's ordering must
    # know from the start, so that claim is written at once, as in strict mode.
    takeover = state.claim is not None  # another holder's, who may still write: fence
    if flow.durability == "batched" and len(batch) == 1 and not takeover:
        session = Session(runtime, state, flow, holder)
        if isinstance(session.journal, BatchedJournal):
            session.journal.defer(batch)
            session.journal.claim_until = now + runtime.claim_ttl
            return session
    ev.number(batch, state.last_seq, now)
    # The status is written only when it changes: a fresh execution is running already.
    change = StatusChange("running") if state.status != "running" else None
    try:
        await runtime.store.append(
            AppendRequest(state.execution_id, state.last_seq, batch, change, fence=takeover)
        )
    except AppendConflictError:
        return None
    fold(batch, state)
    return Session(runtime, state, flow, holder)
