"""A replay that writes nothing and stops where the log ends: the flow's state as it stands.

Queries and update validators read a value computed by the flow's own code. Loom keeps no
flow in memory between execute calls, so the flow is run again, in memory, from its log: the
execution's state is loaded, every recorded step is served from it, and each of the flow's
tasks runs on until it would do something the log does not hold (the frontier). There it
stops:

* an effect, a gate, a timer, a child, a message the log does not hold: the task waits there
  for ever (its ``finally`` blocks do not run, so nothing the flow would only do later
  changes the state read);
* a ``ctx.now()``/``uuid()``/``random()`` not recorded is drawn and not recorded;
* a divergence from the log stops the task where it diverges.

Once every task has stopped and the loop is quiet (no outcome waits for its turn, no
payload is being read), the view is *settled*: a query handler is called then, an update's
validator too. Nothing is written: the session's journal keeps what it would append in
memory, its runtime's store refuses every write and its dispatcher every dispatch (a task
that tries stops there), so a view never reaches another execution or the log.

A view costs a replay of the execution's current run; an execution that continues as new
keeps that short.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import copy
from collections.abc import AsyncGenerator, Awaitable
from typing import TYPE_CHECKING, Any, Final, NoReturn, cast

from loom.dispatch.base import Dispatcher
from loom.errors import LoomError, QueryFailedError, UnknownFlowError
from loom.kernel import cancellation
from loom.kernel.context import SupersededSignal, SuspendSignal
from loom.kernel.defs import EffectDef, FlowDef
from loom.kernel.fold import ExecutionState
from loom.kernel.journal import DryJournal
from loom.kernel.session import Session
from loom.primitives import handlers as registry
from loom.store.base import EventStore

if TYPE_CHECKING:
    from loom.kernel.runtime import Runtime
    from loom.primitives.handlers import Handlers
    from loom.wire import ExecutionPackage

__all__ = ["View", "viewing"]

QUIET_TURNS: Final = 24
"""Loop turns with no move before a view counts as settled: more than the ordering's own
settling between two outcomes (``loom.kernel.ordering``) and the suspension watcher's."""
DEFAULT_TIMEOUT: Final = 10.0
"""Seconds a view may take to settle (a replay of the current run)."""


class _Stopped(SuspendSignal):
    """Raised in the one task that would do what the log does not hold (not the session)."""


_WRITES: Final = ("create", "append", "save_snapshot", "delete_execution", "purge")


class _ReadOnlyStore:
    """The store seen from a view: reads go through, every write stops the task asking."""

    def __init__(self, store: EventStore) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        if name in _WRITES:
            return _refuse
        if name == "leases":
            raise _Stopped()
        return getattr(self._store, name)


async def _refuse(*_: Any, **__: Any) -> NoReturn:
    raise _Stopped()


class _NoDispatch(Dispatcher):
    """The dispatcher of a view: nothing is handed on."""

    async def dispatch(
        self, package: ExecutionPackage, dispatch_id: str, not_before: float | None = None
    ) -> None:
        raise _Stopped()


class ViewSession(Session):
    """Serves the log and stops each task at its frontier (see the module docstring)."""

    journal_class = DryJournal

    def __init__(self, runtime: Runtime, state: ExecutionState, flow: FlowDef) -> None:
        super().__init__(runtime, state, flow, "view")
        self.stops = 0  # tasks stopped at the frontier

    def execute(self, step_id: str, effect: EffectDef | str, value: Any) -> Awaitable[Any]:
        rec = self.state.steps.get(step_id)
        if rec is not None and rec.get("status") in ("started", "in_doubt"):
            return self._stop()  # its outcome is unknown: a verdict comes first
        return super().execute(step_id, effect, value)

    async def _live(self, step_id: str, defn: EffectDef, value: Any, attempt: int) -> Any:
        await cancellation.checkpoint(self)  # a recorded cancel arrives here, as it did live
        await self._stop()

    async def _stop(self) -> Any:
        self.stops += 1
        self._poke()
        await asyncio.get_running_loop().create_future()  # cancelled when the view closes

    def _park(self, step_id: str, message: str) -> NoReturn:
        self.stops += 1
        raise _Stopped()  # this task diverges here; the others replay on

    def _frontier(self, step_id: str, what: str) -> NoReturn:
        """A step a dry session cannot take (``loom.primitives.event_reads``)."""
        self._park(step_id, what)

    async def _block(self) -> None:
        return  # every task waits on gates: settled, and nothing is written


class View:
    """A settled replay: the handlers the flow registered, as it stands now.

    Attributes:
        state: The state the replay started from (the execution as loaded).
        handlers: What the flow registered.
    """

    def __init__(self, state: ExecutionState, handlers: Handlers) -> None:
        self.state = state
        self.handlers = handlers


@contextlib.asynccontextmanager
async def viewing(
    rt: Runtime, state: ExecutionState, timeout: float = DEFAULT_TIMEOUT
) -> AsyncGenerator[View]:
    """Replay ``state``'s flow until it settles and yield what it registered; the replay
    is torn down when the block ends (see the module docstring).

    Raises:
        QueryFailedError: The flow (or its version) is not in this deployment, its input no
            longer fits, or the replay did not settle within ``timeout`` seconds.
    """
    try:
        flow = rt.app.get_flow(state.flow, state.flow_version)
    except UnknownFlowError as exc:
        raise QueryFailedError(
            f"cannot replay {state.execution_id!r}: {exc.message}", details=exc.details
        ) from None
    shadow = copy.copy(rt)  # the same app, codec and clock; a store and dispatcher that refuse
    shadow.store = cast("EventStore", _ReadOnlyStore(rt.store))
    shadow.dispatcher = _NoDispatch()
    session = ViewSession(shadow, state, flow)
    loop = asyncio.get_running_loop()
    task = loop.create_task(session.run(), context=contextvars.Context())
    try:
        await _settled(session, task, timeout)
        yield View(state, registry.of(session))
    finally:
        session._halt(SupersededSignal())  # pyright: ignore[reportPrivateUsage]
        with contextlib.suppress(LoomError, SupersededSignal, SuspendSignal):
            await task


async def _settled(session: ViewSession, task: asyncio.Task[None], timeout: float) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    quiet = 0
    order = session.order
    while quiet < QUIET_TURNS:
        if task.done():
            if not task.cancelled() and isinstance(task.exception(), LoomError):
                error = cast(LoomError, task.exception())
                raise QueryFailedError(
                    f"cannot replay {session.execution_id!r}: {error.message}",
                    details={"code": error.code},
                )
            return  # the flow ended: its handlers still see its state
        mark = (order.moves, session._progress)  # pyright: ignore[reportPrivateUsage]
        await asyncio.sleep(0)
        moved = (order.moves, session._progress) != mark  # pyright: ignore[reportPrivateUsage]
        quiet = 0 if moved or order.waiting or order.busy else quiet + 1
        if loop.time() > deadline:
            raise QueryFailedError(
                f"the replay of {session.execution_id!r} did not settle within {timeout:g}s",
                details={"execution_id": session.execution_id},
            )
