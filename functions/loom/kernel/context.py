"""What flow and effect code sees: ``FlowContext`` and ``EffectContext``.

Step ids are positional and deterministic. Each asyncio task of a flow has a *scope*: the
root flow task numbers its operations ``1, 2, 3…``; a task created inside a flow (by
``asyncio.gather``, ``create_task``, ``asyncio.wait``…) takes the next number of its parent
as a prefix, so its operations are ``3.1, 3.2…``. Task creation happens in the parent's
sequential code, so the numbering is the same live and on replay however the children
interleave. A task factory installed on the loop assigns the scopes.

Python changed that tree under the same code: ``asyncio.wait_for(ctx.execute(...), t)``
runs the awaited coroutine in a task of its own on Python 3.11 (step ``1.1``) and in the
caller's task from 3.12 on (step ``1``; 3.12 still makes a task for ``timeout <= 0``). An
execution started with :data:`STEP_NUMBERING` recorded on its ``ExecutionStarted`` numbers
the task ``wait_for`` creates in its caller's scope, which is 3.12's numbering and the only
one every version can reproduce: the caller is blocked in ``wait_for`` meanwhile, so nothing
else numbers from that scope. An execution recorded without it keeps the task tree of the
Python it runs on (the numbering it was recorded with, where that Python is the same).

Control-flow signals are private ``BaseException`` subclasses: ``except Exception`` in a flow
cannot swallow a suspension, a park or a supersession.
"""

from __future__ import annotations

import asyncio
import contextvars
import sys
import uuid as _uuid
from collections.abc import AsyncGenerator, Coroutine
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from loom.errors import ContextMisuseError
from loom.scope import SCOPE as SCOPE  # (re-exported: where the flow's tasks look)
from loom.scope import off_scope as off_scope

if TYPE_CHECKING:
    from loom.kernel.defs import EffectDef
    from loom.kernel.session import Session

T = TypeVar("T")


class _Signal(BaseException):
    """Base of the runtime's private control-flow signals."""


class SuspendSignal(_Signal):
    """The flow is blocked on gates only: unwind and wait for a resume."""


class ParkSignal(_Signal):
    """Replay diverged from the log: unwind and park for an operator."""


class SupersededSignal(_Signal):
    """Another holder overtook this one: unwind, invoke nothing more."""


class StopSignal(_Signal):
    """The execution must end now (budget exceeded)."""


class InDoubtSignal(_Signal):
    """An effect could not tell whether it ran: its step was parked in doubt; unwind."""


class LapsedSignal(_Signal):
    """The call's admission lapsed (its queue lease may be another call's now): unwind,
    start no effect, give the claim back; the execution waits for its turn again."""


class AbortSignal(_Signal):
    """The store failed under the session: unwind, record nothing more, fail the call."""


def task_signal(task: asyncio.Task[Any]) -> BaseException | None:
    """The control-flow signal a finished flow task ended on (cancelled: superseded)."""
    if task.cancelled():
        return SupersededSignal()
    exc = task.exception()
    return exc if isinstance(exc, _Signal) else None


STEP_NUMBERING = 2
"""The step numbering new executions record (``ExecutionStarted.step_numbering``): the task
``asyncio.wait_for`` creates for its awaitable is numbered in its caller's scope. Absent
(``None``): the executions recorded before it, numbered by the task tree as it comes."""

_WAIT_FOR = asyncio.wait_for.__code__
_ENSURE_FUTURE = asyncio.ensure_future.__code__
# Where ``wait_for``'s call to ``ensure_future`` sits above :func:`made_by_wait_for` when a
# factory builds the task: 1 the factory, then asyncio's ``create_task`` (none on uvloop,
# whose is native), ``_ensure_future`` (3.11 only), ``ensure_future``; one more for a foreign
# factory wrapping Loom's (loom.kernel.task_factories). Most likely first: each look is one frame.
_ENSURE_FUTURE_DEPTHS = (4, 3, 5) if sys.version_info < (3, 12) else (3, 2, 4)


class Scope:
    """The step numbering of one task of a flow: its prefix and its last number.

    ``flat_wait_for``: the task ``asyncio.wait_for`` creates shares this scope (the
    execution records :data:`STEP_NUMBERING`); the task's children inherit it.
    """

    __slots__ = ("flat_wait_for", "n", "prefix", "session", "timers")

    def __init__(self, prefix: str, session: Session, flat_wait_for: bool = False) -> None:
        self.prefix = prefix
        self.n = 0
        self.timers = 0
        self.session = session
        self.flat_wait_for = flat_wait_for

    def child(self) -> Scope:
        """The scope of a task created in this one: numbered from this scope's next id."""
        return Scope(self.next_id() + ".", self.session, self.flat_wait_for)

    def next_id(self) -> str:
        self.n += 1
        return f"{self.prefix}{self.n}"

    def next_timer_id(self) -> str:
        """The id of the scope's next loop timer (``t1``, ``3.t2``): a numbering of its own,
        so timers never shift the step ids of histories recorded before them."""
        self.timers += 1
        return f"{self.prefix}t{self.timers}"


async def _agen() -> AsyncGenerator[None]:  # (only its ``aclose`` awaitable's type is wanted)
    yield


_closer = _agen().aclose()
_AGEN_CLOSE: type = type(_closer)  # what the loop's async generator finalizer runs as a task
_closer.close()  # pyright: ignore[reportAttributeAccessIssue]  # (it is a generator-like)


def outside_flow(coro: object, context: contextvars.Context | None) -> contextvars.Context | None:
    """The context for a task that belongs to no flow although a flow's scope is current:
    the closing of an async generator the garbage collector freed (the loop's finalizer
    hook makes it a task in whatever context runs when the collector does, a flow's
    included: a store client's streaming reads leave such generators). ``None``: it may be
    a flow's task."""
    if type(coro) is not _AGEN_CLOSE:
        return None
    outside = context.copy() if context is not None else contextvars.copy_context()
    outside.run(SCOPE.set, None)
    return outside


def task_factory(
    loop: asyncio.AbstractEventLoop,
    coro: Coroutine[Any, Any, Any],
    context: contextvars.Context | None = None,
    **options: Any,
) -> asyncio.Task[Any]:
    # ``options``: what newer loops pass on to the task (``name``, ``eager_start``: uvloop
    # on Python 3.13 passes the latter to every factory).
    parent = SCOPE.get() if context is None else context.get(SCOPE)
    if parent is None:
        return asyncio.Task(coro, loop=loop, context=context, **options)
    if (outside := outside_flow(coro, context)) is not None:  # takes no step id
        return asyncio.Task(coro, loop=loop, context=outside, **options)
    if parent.flat_wait_for and made_by_wait_for():  # its context holds the parent's scope
        task = asyncio.Task(coro, loop=loop, context=context, **options)
    else:
        child_context = context.copy() if context is not None else contextvars.copy_context()
        child_context.run(SCOPE.set, parent.child())
        task = asyncio.Task(coro, loop=loop, context=child_context, **options)
    parent.session.track(task)
    return task


def made_by_wait_for() -> bool:
    """Whether the task factory calling this builds the task ``asyncio.wait_for`` creates for
    its awaitable (Python 3.11; 3.12 on with ``timeout <= 0``): ``ensure_future`` called by
    ``wait_for`` itself, at one of the few places it can be above the factory. (Not any
    ``wait_for`` further up: from 3.12 its awaitable runs in the caller's task, and the tasks
    that awaitable creates take scopes of their own.)"""
    # ``sys._getframe(n)`` materializes the one frame it returns: walking ``f_back`` from the
    # factory would build every frame on the way, several times the cost.
    for depth in _ENSURE_FUTURE_DEPTHS:
        try:
            frame = sys._getframe(depth)  # pyright: ignore[reportPrivateUsage]
        except ValueError:  # the stack is not that deep
            continue
        if frame.f_code is _ENSURE_FUTURE:
            caller = frame.f_back
            return caller is not None and caller.f_code is _WAIT_FOR
    return False


def root_scope(session: Session) -> contextvars.Context:
    """A context whose scope is the root of ``session``'s flow."""
    ctx = contextvars.copy_context()
    flat = session.state.step_numbering == STEP_NUMBERING
    ctx.run(SCOPE.set, Scope("", session, flat))
    return ctx


def next_step_id(ctx: FlowContext | None = None) -> str:
    """The next step id of the current task's scope (checked to be ``ctx``'s flow's)."""
    scope = SCOPE.get()
    if scope is None or (ctx is not None and scope.session is not ctx._session):  # pyright: ignore[reportPrivateUsage]
        raise misuse(ctx, scope)
    return scope.next_id()


def owned(ctx: FlowContext) -> None:
    """Check that the current task is of ``ctx``'s flow (for calls that take no step id)."""
    scope = SCOPE.get()
    if scope is None or scope.session is not ctx._session:  # pyright: ignore[reportPrivateUsage]
        raise misuse(ctx, scope)


def misuse(ctx: FlowContext | None, scope: Scope | None) -> ContextMisuseError:
    """The error for a ``ctx`` awaited outside its own flow (kept out of the step path)."""
    if scope is None or ctx is None:
        return ContextMisuseError("ctx operations must be awaited inside the flow that owns ctx")
    # A ctx kept from another execution (a global, a closure): its steps would be recorded
    # in that execution's log, numbered from this one's scope.
    return ContextMisuseError(
        f"the ctx of execution {ctx.execution_id!r} was awaited inside the flow of execution "
        f"{scope.session.execution_id!r}: a flow uses only the ctx it was given"
    )


class FlowContext:
    """The flow's only door to the world. Every call is recorded or served from the log."""

    __slots__ = ("_session", "execution_id")

    def __init__(self, session: Session) -> None:
        self._session = session
        self.execution_id: str = session.execution_id

    async def execute(self, effect: EffectDef | str, value: Any = None) -> Any:
        """Run an effect as a step: recorded once, served from the log on replay."""
        scope = SCOPE.get()  # (``next_step_id`` inlined: every step of every flow runs this)
        if scope is None or scope.session is not self._session:
            raise misuse(self, scope)
        scope.n += 1  # (``scope.next_id()`` inlined, too)
        return await self._session.execute(f"{scope.prefix}{scope.n}", effect, value)

    async def suspend(
        self,
        on: str,
        correlation_key: str,
        timeout: timedelta | float | None = None,
    ) -> Any:
        """Wait for a resume with this ``on`` and ``correlation_key``; return its payload.

        Raises:
            GateTimeoutError: ``timeout`` passed first.
        """
        seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else timeout
        return await self._session.gate(next_step_id(self), on, correlation_key, seconds)

    async def sleep(self, duration: timedelta | float) -> None:
        """A durable timer: the execution suspends and is woken when it falls due."""
        seconds = duration.total_seconds() if isinstance(duration, timedelta) else duration
        sid = next_step_id(self)
        await self._session.gate(sid, "loom.timer", f"{self.execution_id}:{sid}", seconds)

    def now(self) -> datetime:
        """The current time, recorded on first run and the same on every replay."""
        value = self._session.decide(next_step_id(self), "now")
        return datetime.fromtimestamp(value, UTC)

    def uuid(self) -> _uuid.UUID:
        """A random UUID, recorded on first run and the same on every replay."""
        return _uuid.UUID(self._session.decide(next_step_id(self), "uuid"))

    def random(self) -> float:
        """A random float in [0, 1), recorded on first run and the same on every replay."""
        return float(self._session.decide(next_step_id(self), "random"))


@dataclass
class EffectContext:
    """What an effect sees: its identity, attempt, deadline and cancellation.

    Attributes:
        execution_id: The execution the step belongs to.
        step_id: The step's deterministic id.
        idempotency_key: ``f"{execution_id}:{step_id}"``, the same on every attempt; pass it
            to the system you call so it can deduplicate.
        attempt: 1 for the first attempt of this step, counting across crashes.
        effect: The effect's registered name.
        deadline: When this attempt times out (epoch seconds), if it has a timeout.
    """

    execution_id: str
    step_id: str
    idempotency_key: str
    attempt: int
    effect: str
    deadline: float | None = None
    # A plain flag, not a threading.Event: set by the loop thread, read by an effect's worker
    # thread; an Event would cost a lock and a condition on every step.
    _cancelled: bool = field(default=False, repr=False)

    @property
    def cancelled(self) -> bool:
        """True once the attempt timed out or was cancelled; sync effects should check it."""
        return self._cancelled

    def cancel(self) -> None:
        """Mark the attempt cancelled (the runtime does this on timeout)."""
        self._cancelled = True


def reaped(tasks: list[asyncio.Task[Any]]) -> bool:
    """What :func:`reap` does when every task is done already (most calls: the flow's one
    task, ended), without its coroutine: True; False when some still run (await ``reap``)."""
    for task in tasks:
        if not task.done():
            return False
    for task in tasks:
        if not task.cancelled():
            task.exception()
    return True


async def reap(tasks: list[asyncio.Task[Any]]) -> None:
    """Cancel what a flow left running and retrieve every outcome (a child's suspension is
    not an error to report)."""
    running = [task for task in tasks if not task.done()]
    for task in running:
        task.cancel()
    if running:  # (waiting on finished tasks alone still costs a loop turn and a timer)
        await asyncio.wait(running, timeout=1.0)
    for task in tasks:
        if task.done() and not task.cancelled():
            task.exception()
