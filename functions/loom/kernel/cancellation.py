"""Cancellation with cleanup: ``Runtime.cancel`` and a flow's ``timeout``.

A cancel is a request, not an ending. ``CancelRequested`` is appended (with who asked, the
reason and the cleanup budget) and the execution is dispatched. The flow then gets
``asyncio.CancelledError`` at its next await that the log cannot serve: an effect not yet
recorded, or a gate with no resume (the one it is blocked on, if it is blocked). Its
``except``/``finally`` blocks run as ordinary flow code, so compensating effects are
recorded and replayed like any other step, until ``cleanup_s`` seconds after the request.
The execution then ends:

* ``cancelled`` when the ``CancelledError`` leaves the flow (or the budget is spent: the
  next operation past it stops the flow, and a suspended cleanup is woken at the deadline);
* ``completed`` when the flow swallows the error and returns (as Temporal lets it);
* ``failed`` when cleanup raises something else.

The hand-over is recorded as ``CancelDelivered``. A replay hands the ``CancelledError`` over
at that event's place among the step outcomes (``loom.kernel.ordering``), so every task of the flow
has seen exactly the outcomes it saw live when the error arrives. Live, the hand-over waits
until no effect is in flight, so an invocation is never cut off before its outcome is
recorded. The root task of the flow is cancelled (the error reaches whatever it awaits:
``asyncio.gather`` passes it to its children); tasks that were running at the hand-over
never start anything new afterwards (an operation one asks for raises the
``CancelledError`` instead). Only the root's cleanup runs new steps.

A flow ``timeout`` requests the cancel itself when its recorded deadline passes
(:mod:`loom.kernel.timeouts`).
"""

from __future__ import annotations

import asyncio
import contextvars
import weakref
from typing import TYPE_CHECKING, Any

from loom import events as ev
from loom.errors import ExecutionFinishedError
from loom.kernel import primitive, timeouts
from loom.kernel.context import AbortSignal, _Signal, off_scope  # pyright: ignore[reportPrivateUsage]
from loom.kernel.decide import NOTHING, Decision, write
from loom.kernel.fold import ExecutionState
from loom.kernel.journal import DryJournal
from loom.kernel.ordering import recorded_outcomes
from loom.store.base import StatusChange

if TYPE_CHECKING:
    from loom.kernel.runtime import Runtime
    from loom.kernel.session import Session
    from loom.wire import ExecutionResult

__all__ = ["CleanupSpentSignal", "request_cancel"]


class CleanupSpentSignal(_Signal):
    """The cleanup budget of a cancelled flow is spent: unwind, end ``cancelled``."""


class _Delivery:
    """What one session knows about the cancel: handed over yet, and to which tasks.

    Made the first time the session has to do with a cancel, not for every session: most
    never do, and an entry here costs a weak reference, its callback and a set.
    """

    __slots__ = ("delivered", "delivering", "doomed", "replay", "start_seq")

    def __init__(self, start_seq: int) -> None:
        self.start_seq = start_seq  # the log's end when the session started its flow
        self.replay: asyncio.Task[None] | None = None  # hands a recorded cancel over again
        self.delivering = False
        self.delivered = False
        self.doomed: set[asyncio.Task[Any]] = set()  # running at the hand-over, never resumed


_SESSIONS: weakref.WeakKeyDictionary[Session, _Delivery] = weakref.WeakKeyDictionary()


def forget(session: Session) -> None:
    """Drop what this module knows of ``session`` once its call is over: the entry holds
    the session's tasks (the doomed branches, the replayed hand-over), which hold the
    session, so the weak key alone would never let it go."""
    _SESSIONS.pop(session, None)


def _of(session: Session) -> _Delivery:
    known = _SESSIONS.get(session)
    if known is None:
        known = _SESSIONS[session] = _Delivery(session.start_seq)
    return known


def is_live(session: Session) -> bool:
    """False in a replay that may not write (the test toolkit, the replay check)."""
    return not isinstance(session.journal, DryJournal)


# -- the runtime side -------------------------------------------------------------------


async def request_cancel(
    rt: Runtime, execution_id: str, reason: str = "", by: str | None = None
) -> ExecutionResult:
    """The body of :meth:`Runtime.cancel`: record the request, then run the cleanup.

    An execution that cannot run its flow (parked for an operator, or in doubt) ends
    ``cancelled`` at once. A process without the flow's code records the request and leaves
    the cleanup to a worker that has it. A second request while one is pending changes
    nothing (the first reason and ``by`` stand).

    Raises:
        UnknownExecutionError: No such execution.
        ExecutionFinishedError: The execution already ended.
    """
    state = await rt.load_state(execution_id)

    def decide(now: ExecutionState) -> Decision:
        # Decided again on every reload: a verdict, a retry, an end or another cancel that
        # landed meanwhile changes what this request comes to.
        _check_open(now)
        if now.cancel is not None:  # a request landed first: it stands (idempotent)
            return NOTHING
        if now.parked_reason is not None or now.status == "in_doubt":  # no flow to clean up
            return Decision([ev.ExecutionCancelled(reason=reason, by=by)], _ENDED)
        budget = timeouts.cleanup_budget(rt, now)
        event = ev.CancelRequested(reason=reason, by=by, cleanup_s=budget)
        return Decision([event], StatusChange("running") if now.status == "suspended" else None)

    state, wrote = await write(rt, state, decide)
    if state.finished:  # ended here: what the flow started is told it ended
        await primitive.follow_up(rt, state)  # what the flow started is told it ended
        return await rt.report(state)
    if not wrote:
        return await rt.report(state)
    eid = state.execution_id
    if state.flow not in rt.app.versions:  # this process lacks the code: a worker runs it
        return await rt.report(state)  # (the sweep dispatches a running execution left alone)
    ran = await rt._dispatch(eid, state.flow, "manual", f"{eid}:{state.last_seq}:cancel")  # pyright: ignore[reportPrivateUsage]
    return ran or await rt.report(state)


_ENDED = StatusChange("cancelled")


def _check_open(state: ExecutionState) -> None:
    if state.finished:
        raise ExecutionFinishedError(
            f"execution {state.execution_id!r} is already {state.status}",
            details={"status": state.status},
        )


# -- the session side -------------------------------------------------------------------


def outcomes(state: ExecutionState) -> list[float]:
    """The recorded outcomes a session hands over in order, with a recorded cancel's place."""
    delivered = state.cancel.get("delivered") if state.cancel is not None else None
    seqs = recorded_outcomes(state)  # (a list of its own: extended in place)
    if delivered:
        seqs.append(delivered)
    return seqs


async def before_run(session: Session) -> bool:
    """Before the flow runs, when a cancel is pending (the session skips the call when
    none is): end a spent cleanup and arm the replay of a recorded hand-over. True when the
    execution ended here."""
    cancel = session.state.cancel
    if cancel is None:
        return False
    known = _of(session)
    try:
        if is_live(session) and session.rt.clock() >= cancel["deadline"]:
            await _end(session, spent=True)
            return True
    except AbortSignal as signal:
        raise signal.args[0] from None
    if cancel.get("delivered"):
        known.replay = asyncio.get_running_loop().create_task(
            _replay_delivery(session, cancel["delivered"]), context=contextvars.Context()
        )
    return False


async def checkpoint(session: Session) -> None:
    """Before an operation the log cannot serve: this is where a pending cancel arrives."""
    cancel = session.state.cancel
    if cancel is None:
        if not (is_live(session) and timeouts.timed_out(session)):
            return
        await _append(session, timeouts.overdue(session.rt, session.state))
        cancel = session.state.cancel
        assert cancel is not None
    known = _of(session)
    if known.delivered:
        if asyncio.current_task() in known.doomed:
            # A branch from before the cancel starts nothing new: the operation raises the
            # cancel, so the branch unwinds and a ``gather`` over it ends. Blocking it for
            # good (a ``finally`` running an effect in a gathered branch) hung the root, its
            # cleanup and the execute call. (The yield: a branch swallowing it in a loop.)
            await asyncio.sleep(0)
            raise asyncio.CancelledError
        if is_live(session) and session.rt.clock() >= cancel["deadline"]:
            session._raise(CleanupSpentSignal())  # pyright: ignore[reportPrivateUsage]
        return
    await _arrive(session, cancel)


async def served(session: Session, seq: float) -> None:
    """Before a recorded outcome reaches the flow: one recorded after a cancel request that
    has not been handed over yet (a resume that came after it) is where the cancel arrives.
    """
    cancel = session.state.cancel
    if cancel is None or cancel.get("delivered") or seq < cancel["seq"]:
        return
    known = _of(session)
    if not known.delivered and seq <= known.start_seq:  # not an outcome this session made
        await _arrive(session, cancel)


async def _arrive(session: Session, cancel: dict[str, Any]) -> None:
    if not is_live(session) and not cancel.get("delivered"):
        return  # a replay at the end of its history: the live run has not handed it over
    if not _of(session).delivering and not cancel.get("delivered"):
        await deliver(session)
    await _forever()  # the root task's cancellation arrives here


async def _forever() -> None:
    await asyncio.get_running_loop().create_future()


def handed_over(session: Session) -> bool:
    """Whether a ``CancelledError`` the flow sees now is this cancel (a live session's, not
    the unwinding of a suspension or a supersession)."""
    return is_live(session) and _of(session).delivered and session.signal is None


def due(session: Session) -> bool:
    """Whether a cancel waits to be handed over live (the flow is blocked on gates)."""
    cancel = session.state.cancel
    known = _of(session)
    return (
        cancel is not None
        and not cancel.get("delivered")
        and not known.delivering
        and is_live(session)
    )


def interrupts(session: Session) -> bool:
    """Whether a blocked flow must not suspend: a cancel arrived; wake the watcher."""
    if due(session):
        session._poke()  # pyright: ignore[reportPrivateUsage]
        return True
    return False


async def deliver(session: Session) -> None:
    """Record the hand-over once no effect is in flight, then cancel the flow's root."""
    known = _of(session)
    known.delivering = True
    while session._inflight:  # noqa: ASYNC110  # pyright: ignore[reportPrivateUsage]
        await asyncio.sleep(0.005)  # an invocation finishes and records its outcome first
    seq = (session.state.cancel or {}).get("seq", 0)
    # Met while replaying, nothing after the request reached the flow: its place is the
    # request's. Merged into a running session, outcomes before this one may have.
    place = seq if seq <= known.start_seq else None
    await _append(session, [ev.CancelDelivered(place=place)])
    _cancel_root(session, known)


async def _append(session: Session, events: list[ev.Event]) -> None:
    """Append from a flow task: tasks the store creates must not consume flow step ids."""
    with off_scope():
        await session.append(events)


async def _replay_delivery(session: Session, seq: float) -> None:
    """Hand the cancel over at its recorded place among the outcomes, once the flow has
    settled there (it waits for a later outcome, or at the await the live run stopped)."""
    _of(session).delivering = True
    while session._flow_task is None:  # noqa: ASYNC110  # pyright: ignore[reportPrivateUsage]
        await asyncio.sleep(0)  # the session decodes the input before it starts the flow
    wait = session.order.queue(seq)  # after the flow settles, never at once
    session._poke()  # pyright: ignore[reportPrivateUsage]
    await wait
    _cancel_root(session, _of(session))


def _cancel_root(session: Session, known: _Delivery) -> None:
    root = session._flow_task  # pyright: ignore[reportPrivateUsage]
    tasks = session._tasks  # pyright: ignore[reportPrivateUsage]
    known.doomed = {t for t in tasks if not t.done() and t is not root}
    known.delivered = True
    if root is not None and not root.done() and session.signal is None:
        root.cancel()


async def finish(session: Session, flow_task: asyncio.Task[Any]) -> bool:
    """End a cancelled flow as ``cancelled``; True when it did."""
    if session.state.cancel is None:
        return False
    replaying = _of(session).replay
    if replaying is not None and not replaying.done():
        replaying.cancel()  # the flow ended before its recorded hand-over (it diverged)
    spent = isinstance(session.signal, CleanupSpentSignal)
    if spent or (session.signal is None and flow_task.cancelled() and _of(session).delivered):
        await _end(session, spent=spent)
        return True
    return False


async def _end(session: Session, *, spent: bool) -> None:
    cancel = session.state.cancel or {}
    reason = cancel.get("reason", "")
    if spent:
        reason = f"{reason} (cleanup stopped: its budget was spent)".lstrip()
    await session.append([ev.ExecutionCancelled(reason=reason, by=cancel.get("by"))])


# -- the fold ---------------------------------------------------------------------------


def carry_over(s: ExecutionState) -> None:
    """Into the next run (``continue_as_new``): a cancel not handed over yet arrives there;
    one already handed over was dealt with by the run that continued (as if it returned)."""
    if s.cancel is not None and s.cancel.get("delivered"):
        s.cancel = None
