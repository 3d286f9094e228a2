"""Loop timers inside a flow are flow time, backed by the log.

asyncio's deadlines — ``asyncio.sleep``, ``asyncio.wait_for``, ``asyncio.timeout``, the
``timeout=`` of ``asyncio.wait``/``as_completed`` — all end in ``loop.call_at`` or
``loop.call_later``. Loom wraps both: a timer asked for by code running in a flow's context
(the flow's tasks carry a step scope, see :mod:`loom.kernel.context`) becomes a :class:`FlowTimer`;
every other timer (an effect's own code, the engine, other executions) stays on the loop's
clock.

A flow timer

- takes a deterministic id in its task's scope (``t1``, ``3.t2``: a numbering of its own, so
  timers never shift the step ids of a history recorded before them);
- records its deadline, the runtime's clock at creation plus the delay, as
  ``DecisionRecorded{kind: "timer"}`` with the next append (a timer cancelled before that
  append leaves nothing); on replay the recorded deadline is the deadline;
- fires as an outcome with a place in the log, ``ExecutionResumed{on: "loom.loop_timer",
  correlation_key: "<execution>:<timer id>" (``#run<n>`` after the id from run 2 on),
  timed_out: true}``, handed to the flow through
  :class:`~loom.kernel.ordering.Ordering` once the flow has settled, so it reaches the flow at the
  same point live and on replay (a replay does not wait on any clock);
- live, fires at its deadline even while a step runs;
- when the flow is otherwise blocked, is written as a timer gate (``ExecutionSuspended`` with
  ``wake_at``): the execution suspends, the dispatcher wakes it at the deadline, and a reply
  recorded at or after the deadline loses to the timer (:func:`fire_due`).

A step whose await is cancelled (by a timer, or by ``task.cancel()``) is not interrupted: while
a timer or a sibling task could cancel it, a step runs *detached*, so its outcome is recorded
when it comes and passed over by the ordering (nobody awaits it), and a non-idempotent step
keeps its delivery contract. The call ends only once detached steps have landed.
"""

from __future__ import annotations

import asyncio
import contextvars
import math
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, Final, TypeVar

from loom import events as ev
from loom.errors import ConfigurationError
from loom.kernel.context import SCOPE, off_scope
from loom.kernel.context import _Signal as Signal  # pyright: ignore[reportPrivateUsage]
from loom.kernel.fold import LOOP_TIMER, resume_key

if TYPE_CHECKING:
    from loom.kernel.context import Scope
    from loom.kernel.ordering import Ordering
    from loom.kernel.session import Session

T = TypeVar("T")


class FlowTimer(asyncio.TimerHandle):
    """The handle of a loop timer created by flow code (what ``call_at`` returned)."""

    __slots__ = ("_arm", "_fired", "_timers", "_turn", "deadline", "step_id")

    def __init__(
        self,
        timers: LoopTimers,
        step_id: str,
        deadline: float,
        when: float,
        callback: Callable[..., object],
        args: tuple[Any, ...],
        context: contextvars.Context | None,
    ) -> None:
        super().__init__(when, callback, args, timers.loop, context)
        self._timers = timers
        self.step_id = step_id
        self.deadline = deadline  # epoch seconds on the runtime's clock, as recorded
        self._arm: asyncio.TimerHandle | None = None  # the real loop timer, while live
        self._turn: asyncio.Future[None] | None = None  # the firing's place in the order
        self._fired = False

    def cancel(self) -> None:
        """Cancel the timer; one not fired yet is forgotten (see :meth:`LoopTimers.forget`)."""
        if not self.cancelled():
            # ``Handle.cancel``, not ``TimerHandle.cancel``: this handle is never in the loop's
            # heap (``_arm`` is), so the loop has nothing to be told, and a loop that keeps
            # handles of its own (uvloop) does not implement being told.
            asyncio.Handle.cancel(self)
            if not self._fired:
                self._timers.forget(self)

    def _go(self, turn: asyncio.Future[None]) -> None:
        if not turn.cancelled() and not self.cancelled():
            self._fired = True
            self._timers.open.discard(self)
            self._run()


class LoopTimers:
    """The loop timers of one session's flow, and the steps that run detached under them.

    Args:
        session: The session whose flow creates the timers.
        poke: Wakes the session's watcher (something changed).
        halt: Ends a flow that cannot go on (a signal raised where the flow cannot see it).
    """

    def __init__(
        self,
        session: Session,
        poke: Callable[[], None],
        halt: Callable[[BaseException], None],
    ) -> None:
        self.session = session
        self.loop = asyncio.get_running_loop()
        self._poke = poke
        self._halt = halt
        # (``install``'s first look inlined: the loop is nearly always wrapped already)
        self._call_at = getattr(self.loop, _INSTALLED, None) or install(self.loop)
        self.open: set[FlowTimer] = set()  # neither fired nor cancelled
        self.armed: dict[str, FlowTimer] = {}  # live on the loop's clock, not yet due
        self._busy: set[asyncio.Task[Any]] = set()  # detached steps, firings being appended
        self._abandoned: set[asyncio.Task[Any]] = set()  # detached steps nobody awaits now
        self.closed = False

    @property
    def guard(self) -> bool:
        """Whether a step's await could be cancelled under it (a timer, a sibling task)."""
        return bool(self.open) or self.session.order.open_tasks > 1

    @property
    def busy(self) -> bool:
        """Whether a detached step runs or a firing is being appended (no suspending)."""
        return bool(self._busy)

    def blockable(self, gates: bool) -> bool:
        """Whether a flow that waits on ``gates`` (or none) waits on gates and timers only,
        with nothing about to move it: it may suspend."""
        idle = not (self.session.order.waiting or self._busy)
        return idle and (gates or bool(self.armed))

    # -- creation -----------------------------------------------------------------------

    def create(
        self,
        scope: Scope,
        when: float,
        callback: Callable[..., object],
        args: tuple[Any, ...],
        context: contextvars.Context | None,
        delay: float | None = None,
    ) -> FlowTimer:
        """The flow timer for ``call_at(when, callback, *args)`` asked for in ``scope``
        (``delay``: what ``call_later`` was given, exact where ``when`` is rounded)."""
        s = self.session
        tid = scope.next_timer_id()
        delay = when - self.loop.time() if delay is None else delay
        deadline = self._deadline(tid, max(0.0, delay))
        timer = FlowTimer(self, tid, deadline, when, callback, args, context)
        if s.signal is not None or self.closed:
            return timer  # the call is ending: the timer never fires here
        self.open.add(timer)
        fired = s.state.resumes.get(resume_key(LOOP_TIMER, self.key(tid)))
        if fired is not None:
            self._take_turn(timer, fired["seq"])
        elif s.journal.dry or deadline == math.inf:
            # A replay never fires what its history does not hold; an endless sleep
            # (``asyncio.sleep(math.inf)``) never fires at all: both only wait.
            self.armed[tid] = timer
        else:
            delay = max(0.0, deadline - s.rt.clock())
            timer._arm = self._call_at(  # pyright: ignore[reportPrivateUsage]
                self.loop.time() + delay, self._due, timer, context=contextvars.Context()
            )
            self.armed[tid] = timer
        self._poke()
        return timer

    def first_firing(self) -> float | None:
        """Where the log puts the earliest firing among the open timers, if it holds one: a
        step asked for now may be one such a firing cut short live, its outcome never
        recorded (see :mod:`loom.kernel.divergence`)."""
        resumes = self.session.state.resumes
        seqs = [
            r["seq"]
            for t in self.open
            if (r := resumes.get(resume_key(LOOP_TIMER, self.key(t.step_id)))) is not None
        ]
        return min(seqs, default=None)

    def key(self, tid: str) -> str:
        """The correlation key of timer ``tid``'s gate and firing, unique across runs (a
        firing without a gate is carried over by ``continue_as_new``)."""
        return self.session.state.step_key(tid)

    def _deadline(self, tid: str, delay: float) -> float:
        s = self.session
        rec = s.state.decisions.get(tid)
        if rec is not None and rec.get("kind") == "timer":
            return float(rec["value"])
        gate = s.state.gates.get(tid)
        if gate is not None and gate["wake_at"] is not None:
            return gate["wake_at"]
        deadline = s.rt.clock() + delay
        if deadline == math.inf:
            return deadline  # nothing to record: JSON cannot hold it, and it never fires
        s.journal.pending.append(ev.DecisionRecorded(step_id=tid, kind="timer", value=deadline))
        s.state.decisions[tid] = {"kind": "timer", "value": deadline}
        return deadline

    def forget(self, timer: FlowTimer) -> None:
        """A cancelled timer: disarm it, and drop its deadline if not yet appended."""
        self.open.discard(timer)
        self.armed.pop(timer.step_id, None)
        for handle in (timer._arm, timer._turn):  # pyright: ignore[reportPrivateUsage]
            if handle is not None:
                handle.cancel()
        pending = self.session.journal.pending
        for event in pending:
            if isinstance(event, ev.DecisionRecorded) and event.step_id == timer.step_id:
                pending.remove(event)
                self.session.state.decisions.pop(timer.step_id, None)
                break
        self._poke()

    # -- firing -------------------------------------------------------------------------

    def _due(self, timer: FlowTimer) -> None:
        """The real deadline passed: record the firing (its turn comes after)."""
        if self.armed.pop(timer.step_id, None) is None or timer.cancelled():
            return
        self._hold(self.loop.create_task(self._fire(timer), context=contextvars.Context()))

    async def _fire(self, timer: FlowTimer) -> None:
        s = self.session
        async with s.journal.lock:  # a suspension being written goes first
            if s.signal is not None or timer.cancelled():
                return
        event = ev.ExecutionResumed(
            on=LOOP_TIMER, correlation_key=self.key(timer.step_id), timed_out=True
        )
        try:
            await s.append([event])
        except Signal as signal:
            return self._halt(signal)
        got = s.state.resumes.get(resume_key(LOOP_TIMER, self.key(timer.step_id)))
        if got is not None and not timer.cancelled():
            self._take_turn(timer, got["seq"])

    def _take_turn(self, timer: FlowTimer, seq: float) -> None:
        turn = self.session.order.queue(seq)
        timer._turn = turn  # pyright: ignore[reportPrivateUsage]
        turn.add_done_callback(timer._go)  # pyright: ignore[reportPrivateUsage]
        self._poke()

    # -- suspension ---------------------------------------------------------------------

    def gates(self) -> list[ev.Event]:
        """The armed timers as timer gates, for the suspension being written."""
        return [
            ev.ExecutionSuspended(
                step_id=t.step_id,
                on=LOOP_TIMER,
                correlation_key=self.key(t.step_id),
                wake_at=None if t.deadline == math.inf else t.deadline,
            )
            for t in self.armed.values()
        ]

    # -- detached steps -----------------------------------------------------------------

    def detach(self, call: Coroutine[Any, Any, T]) -> Awaitable[T]:
        """Run a step's invocation in a task of its own: cancelling the await leaves it
        running, and its outcome is recorded when it comes."""
        task = self.loop.create_task(call)
        self._hold(task)
        task.add_done_callback(self._landed)
        awaited = asyncio.shield(task)
        awaited.add_done_callback(lambda f: self._abandon(task) if f.cancelled() else None)
        return awaited

    def _abandon(self, task: asyncio.Task[Any]) -> None:
        if not task.done():
            self._abandoned.add(task)

    def _landed(self, task: asyncio.Task[Any]) -> None:
        if not task.cancelled() and isinstance(task.exception(), Signal):
            self._halt(task.exception())  # type: ignore[arg-type]

    def _hold(self, task: asyncio.Task[Any]) -> None:
        self._busy.add(task)
        task.add_done_callback(self._release)

    def _release(self, task: asyncio.Task[Any]) -> None:
        self._busy.discard(task)
        self._abandoned.discard(task)
        self._poke()

    async def landed(self) -> None:
        """Wait until the steps whose await was abandoned have landed in the log (a step
        still awaited is the flow's to await)."""
        while self._abandoned:
            await asyncio.wait(set(self._abandoned))

    async def drain(self) -> None:
        """The flow has ended: disarm its timers and let detached steps and firings being
        appended land (not when the call ends on a signal: they are cancelled)."""
        for timer in list(self.armed.values()):
            timer.cancel()
        while self._busy and self.session.signal is None:
            await asyncio.wait(set(self._busy))

    def close(self) -> None:
        """Cancel whatever is left (the call is over)."""
        self.closed = True
        for timer in list(self.open):
            timer.cancel()
        for task in list(self._busy):
            task.cancel()


async def engine_io(order: Ordering, step: Awaitable[T]) -> T:
    """Await engine work (a payload read or write) from a flow's task: its timers are the
    loop's, and the flow is not quiet meanwhile (see :mod:`loom.kernel.ordering`)."""
    with off_scope():
        order.busy += 1
        try:
            return await step
        finally:
            order.busy -= 1


_INSTALLED: Final = "_loom_call_at"


def install(loop: asyncio.AbstractEventLoop) -> Callable[..., asyncio.TimerHandle]:
    """Wrap ``loop.call_at`` (and ``call_later``, for its exact delay) so flow code's timers
    become flow timers (idempotent); return the loop's own ``call_at``.

    Raises:
        ConfigurationError: The loop's ``call_at`` cannot be wrapped (no attribute can be
            set on the loop): flows could not keep their timers on flow time.
    """
    original = getattr(loop, _INSTALLED, None)
    if original is not None:
        return original
    original = loop.call_at
    # The loop's own call_later for other code's timers: a loop whose call_at calls
    # ``self.call_later`` (uvloop's) would otherwise come back here without end.
    original_later = loop.call_later

    def call_at(
        when: float,
        callback: Callable[..., object],
        *args: Any,
        context: contextvars.Context | None = None,
    ) -> asyncio.TimerHandle:
        scope = SCOPE.get() if context is None else context.get(SCOPE)
        if scope is None:
            return original(when, callback, *args, context=context)
        return scope.session.timers.create(scope, when, callback, args, context)

    def call_later(
        delay: float,
        callback: Callable[..., object],
        *args: Any,
        context: contextvars.Context | None = None,
    ) -> asyncio.TimerHandle:
        scope = SCOPE.get() if context is None else context.get(SCOPE)
        if scope is None:
            return original_later(delay, callback, *args, context=context)
        timers = scope.session.timers
        return timers.create(scope, loop.time() + delay, callback, args, context, delay)

    try:
        loop.call_at = call_at  # type: ignore[method-assign]
        loop.call_later = call_later  # type: ignore[method-assign]
        setattr(loop, _INSTALLED, original)
    except AttributeError:
        raise ConfigurationError(
            f"loom keeps a flow's asyncio timers on flow time by wrapping the event loop's "
            f"call_at, which {type(loop).__module__}.{type(loop).__qualname__} does not "
            "allow; run flows on asyncio's own event loop (e.g. uvicorn --loop asyncio)"
        ) from None
    return original
