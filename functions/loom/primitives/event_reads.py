"""``ctx.get_event`` in a flow: read a value another execution published, as a step.

DBOS lets a workflow read another workflow's event and records what it read, so a replay
gets the same value however the other execution moved on. Here::

    url = await ctx.get_event(payment_id, "payment_url", timeout=60)

reads the latest value ``payment_id`` published under ``"payment_url"``
(:mod:`loom.primitives.published`), waiting up to ``timeout`` seconds for a first one, and
returns ``None`` if none came (DBOS's answer). The step, live:

1. reads the other execution's published values (an execution that does not exist yet is
   waited for like a key not set yet: it may be started meanwhile, as DBOS waits);
2. found, or nothing to wait for (``timeout=0``, or the other execution ended): records
   :class:`~loom.events.EventRead` with what it found, one append;
3. else records :class:`~loom.events.EventAwaited` with the wait's deadline (wall clock)
   before waiting, then waits (the execute call holds the execution, as an effect in
   flight does: its claim is extended, nothing is suspended) and records ``EventRead``
   with what it found by then. A worker that dies while waiting leaves the deadline in the
   log: its successor waits only for the time left, as DBOS does.

A replay is served ``EventRead`` and reads nothing. The value is copied into this
execution's log (offloaded to its own blobs when large), so purging the other execution
never changes what this one replays. Waiting costs a summary read per look
(:mod:`loom.primitives.waits`); a wait that should last for hours belongs in a message
(``ctx.recv``), which suspends the execution instead.
"""

from __future__ import annotations

import asyncio
import math
from typing import TYPE_CHECKING, Any, Final, NoReturn

from loom import crash
from loom import events as ev
from loom.errors import InputError, UnknownExecutionError
from loom.ids import check_execution_id
from loom.kernel import cancellation
from loom.kernel.context import FlowContext, next_step_id, off_scope
from loom.kernel.divergence import visit
from loom.kernel.fold import ExecutionState
from loom.kernel.primitive import Primitive
from loom.primitives.published import check_key
from loom.primitives.waits import EVERY, FIRST

if TYPE_CHECKING:
    from loom.kernel.runtime import Runtime
    from loom.kernel.session import Session
    from loom.kernel.state import StepRecord

__all__ = ["READ", "get_event"]

READ: Final = "loom.get_event"
"""The step record of a ``ctx.get_event`` (what the log shows in place of an effect name)."""
DEFAULT_TIMEOUT: Final = 60.0


def _awaited(s: ExecutionState, e: ev.EventAwaited) -> None:
    s.steps[e.step_id] = {"effect": READ, "status": "waiting", "deadline": e.deadline}


def _read(s: ExecutionState, e: ev.EventRead) -> None:
    s.steps[e.step_id] = {
        "effect": READ,
        "status": "completed",
        "found": e.found,
        "output": e.value,
        "seq": e.seq,
    }


def _check_timeout(timeout: float) -> float:
    number = isinstance(timeout, int | float) and not isinstance(timeout, bool)  # pyright: ignore[reportUnnecessaryIsInstance]
    if not number or not timeout >= 0:  # (also refuses NaN)
        raise InputError(f"get_event's timeout is seconds >= 0, got {timeout!r}")
    if math.isinf(timeout):
        raise InputError("get_event's timeout must be finite: wait on a message instead")
    return float(timeout)


async def get_event(
    session: Session, step_id: str, execution_id: str, key: str, timeout: float
) -> Any:
    """The session side of ``ctx.get_event`` (see the module docstring)."""
    if session.signal is not None:
        raise session.signal
    target, key, timeout = check_execution_id(execution_id), check_key(key), _check_timeout(timeout)
    rec = session.state.steps.get(step_id)
    if rec is not None and rec.get("effect") != READ:
        session._park(  # pyright: ignore[reportPrivateUsage]
            step_id, f"step {step_id}: log has effect {rec.get('effect')!r}, flow read an event"
        )
    if rec is None or rec.get("status") == "waiting":
        if session.journal.dry:  # a replay that reads nothing of the world: its frontier
            _frontier(session, step_id, f"get_event({target!r}, {key!r})")
        if rec is None:
            session._check_unused(step_id, f"get_event({target!r}, {key!r})")  # pyright: ignore[reportPrivateUsage]
        await cancellation.checkpoint(session)  # a new step: a pending cancel arrives here
        session._inflight += 1  # pyright: ignore[reportPrivateUsage]  # waiting, not blocked on gates
        try:
            with off_scope():
                rec = await _read_live(session, step_id, target, key, timeout, rec)
        finally:
            session._inflight -= 1  # pyright: ignore[reportPrivateUsage]
            session._poke()  # pyright: ignore[reportPrivateUsage]
    visit(session, step_id)
    await session._turn(rec.get("seq", 0))  # pyright: ignore[reportPrivateUsage]
    if not rec.get("found"):
        return None
    return await session._unless_store_fails(  # pyright: ignore[reportPrivateUsage]
        session.rt.payloads.decode(rec.get("output"), session.execution_id)
    )


def _frontier(session: Session, step_id: str, what: str) -> NoReturn:
    stop = getattr(session, "_frontier", None)  # the replay check's and a view's own stop
    if callable(stop):
        stop(step_id, what)
    session._park(step_id, f"step {step_id}: replay reached {what}, not in the history")  # pyright: ignore[reportPrivateUsage]


async def _read_live(
    session: Session,
    step_id: str,
    target: str,
    key: str,
    timeout: float,
    rec: StepRecord | None,
) -> StepRecord:
    rt = session.rt
    state = await _load(rt, target)
    got = state.published.get(key) if state is not None else None
    deadline = rec.get("deadline") if rec is not None else None
    ended = state is not None and state.finished
    if got is None and deadline is None and timeout > 0 and not ended:
        deadline = rt.clock() + timeout
        waited = ev.EventAwaited(step_id=step_id, execution_id=target, key=key, deadline=deadline)
        await session.append([waited], defer=False)
        crash.point("after_event_awaited", step_id)
    if got is None and deadline is not None and not ended:
        state, got = await _wait(rt, target, key, deadline - rt.clock(), state)
    stored = None
    if got is not None:
        value = await session._unless_store_fails(rt.payloads.decode(got["value"], target))  # pyright: ignore[reportPrivateUsage]
        stored, _ = await session._unless_store_fails(  # pyright: ignore[reportPrivateUsage]
            rt.payloads.encode(value, f"{session.execution_id}/event-read")
        )
    read = ev.EventRead(
        step_id=step_id, execution_id=target, key=key, found=got is not None, value=stored
    )
    await session.append([read], defer=False)
    crash.point("after_event_read", step_id)
    return session.state.steps[step_id]


async def _load(rt: Runtime, execution_id: str) -> ExecutionState | None:
    try:
        await rt.require(execution_id)
    except UnknownExecutionError:
        return None
    return await rt.load_state(execution_id)


async def _wait(
    rt: Runtime, target: str, key: str, seconds: float, state: ExecutionState | None
) -> tuple[ExecutionState | None, dict[str, Any] | None]:
    """Wait up to ``seconds`` for ``key``: a summary read per look, a load when the log grew."""
    loop = asyncio.get_running_loop()
    deadline, pause = loop.time() + seconds, FIRST
    seen = state.last_seq if state is not None else -1
    while (left := deadline - loop.time()) > 0:
        await asyncio.sleep(min(pause, left))
        pause = min(pause * 2, EVERY)
        try:
            last = (await rt.store.summary(target)).last_seq
        except UnknownExecutionError:
            continue  # not started yet
        if last == seen:
            continue
        state = await rt.load_state(target)
        seen = state.last_seq
        got = state.published.get(key)
        if got is not None or state.finished:
            return state, got
    return state, None


class EventReadsContext(FlowContext):
    """The ``ctx`` method reading another execution's published values."""

    __slots__ = ()

    async def get_event(self, execution_id: str, key: str, timeout: float = DEFAULT_TIMEOUT) -> Any:
        """The latest value ``execution_id`` published under ``key``, waiting up to
        ``timeout`` seconds for one; ``None`` if none came. A step: recorded, and served
        from the log on every replay (see :mod:`loom.primitives.event_reads`).

        Raises:
            InputError: A bad execution id, key or timeout.
        """
        return await get_event(self._session, next_step_id(self), execution_id, key, timeout)


PRIMITIVE = Primitive(
    "event_reads",
    step={"EventAwaited": _awaited, "EventRead": _read},
    context=EventReadsContext,
)
