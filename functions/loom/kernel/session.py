"""One ``execute`` call: replay the flow from the folded state, do what is new, append it.

A ``Session`` owns the execution for the call (its claim is in the log). Appends go through
one lock, so concurrent steps of one flow (``asyncio.gather``) are numbered in the order they
finish. An append that conflicts means someone else wrote: a resume, a verdict or a cancel is
merged and the append retried; another holder's claim or a cancel ends the session
(superseded). Nothing is invoked after that.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from loom import events as ev
from loom.errors import (
    ConfigurationError,
    GateTimeoutError,
    NondeterminismError,
    StoreError,
)
from loom.kernel import cancellation, decisions
from loom.kernel.context import (
    AbortSignal,
    ParkSignal,
    StopSignal,
    SupersededSignal,
    SuspendSignal,
    _Signal,  # pyright: ignore[reportPrivateUsage]
    reap,
    reaped,
    root_scope,
    task_factory,
)
from loom.kernel.defs import FlowDef
from loom.kernel.divergence import StepTally
from loom.kernel.durability import new_journal
from loom.kernel.endings import record_end
from loom.kernel.execution_limits import OPENING, event_limit, exceeded
from loom.kernel.exits import guarded
from loom.kernel.fold import ExecutionState, GateRecord, ResumeRecord, resume_key
from loom.kernel.journal import READY, Journal
from loom.kernel.loop_timers import LoopTimers, engine_io
from loom.kernel.ordering import Ordering, recorded_outcomes
from loom.kernel.primitive import INSTALLED
from loom.kernel.side_tasks import Heartbeat, Waiting, tracked_end
from loom.kernel.steps import EffectSteps
from loom.kernel.task_factories import install_task_factory

if TYPE_CHECKING:
    from loom.kernel.primitive import Admission
    from loom.kernel.runtime import Runtime

T = TypeVar("T")
_SETTLE_YIELDS = 8  # loop turns with no progress before a gate-only flow counts as blocked
_NO_CONTEXT = contextvars.Context()  # (a session's until ``run`` sets its own: never run in)


class Session(EffectSteps):
    """Runs one flow execution for the length of one ``execute`` call."""

    journal_class: type[Journal] = Journal

    @property
    def state(self) -> ExecutionState:
        """The folded state (replaced by a reload after a conflict)."""
        return self.journal.state

    def __init__(self, runtime: Runtime, state: ExecutionState, flow: FlowDef, holder: str):
        self.rt = runtime
        self.flow = flow
        self.holder = holder
        self.admitted: Admission | None = None  # the grant the call runs under (a queue's)
        self.journal = new_journal(self, state)
        self.execution_id = state.execution_id
        self.signal: BaseException | None = None
        self._waiting: dict[str, Waiting] = {}
        self._inflight = 0
        self._progress = 0
        self._wake: asyncio.Event | None = None  # made when a watcher is (most calls: none)
        self._tasks: list[asyncio.Task[Any]] = []
        self._flow_task: asyncio.Task[Any] | None = None
        self._watcher: asyncio.Task[None] | None = None  # started when there is a gate
        self._outside = _NO_CONTEXT  # the call's own context (set by run, before any use)
        self.start_seq = state.last_seq  # the log's end as the flow starts (set by run)
        # (``cancellation.outcomes`` adds a recorded cancel's place: with none, a call less)
        recorded = (
            recorded_outcomes(state) if state.cancel is None else cancellation.outcomes(state)
        )
        self.order = Ordering(recorded, self._poke)
        self.timers = LoopTimers(self, self._poke, self._halt)
        self.tally = StepTally(
            state
        )  # recorded steps the replay asked for (loom.kernel.divergence)
        self.max_events = event_limit(runtime.app, flow, state.budgets)  # (execution_limits)

    # -- bookkeeping ------------------------------------------------------------------

    def track(self, task: asyncio.Task[Any], then: Callable[[], object] | None = None) -> None:
        """Remember a flow task, to cancel it when the call ends; ``then`` runs once it is done."""
        self._tasks.append(task)  # kept after done, so _reap retrieves every outcome
        self.order.track(task, then)

    def _turn(self, seq: float) -> Awaitable[None]:
        """Wait until the outcome at ``seq`` may reach the flow (see ``loom.kernel.ordering``).

        Not a coroutine: the common case (nothing to wait for) awaits no frame at all.
        """
        if self.journal.state.cancel is not None:  # (``journal.state``: no property call)
            return self._turn_cancelling(seq)
        wait = self.order.turn(seq)
        if wait is None:
            return READY
        self._poke()
        return wait

    async def _turn_cancelling(self, seq: float) -> None:
        await cancellation.served(self, seq)
        wait = self.order.turn(seq)
        if wait is not None:
            self._poke()
            await wait

    def _poke(self) -> None:
        self._progress += 1
        if self._waiting or self.timers.armed:  # else the watcher has nothing to suspend on
            if self._wake is None:
                self._wake = asyncio.Event()
            self._wake.set()  # (a gate opened or a timer armed pokes again)
            flow = self._flow_task
            if self._watcher is None and flow is not None and not flow.done():  # first work
                watch = self._watch(flow)
                self._watcher = asyncio.Task(watch, loop=flow.get_loop(), context=self._outside)

    def _raise(self, signal: BaseException) -> NoReturn:
        if self.signal is None:
            self.signal = signal
        raise signal

    def _park(self, step_id: str, message: str) -> NoReturn:
        err = NondeterminismError(message, details={"step_id": step_id})
        signal = ParkSignal(err)
        signal.step_id = step_id  # type: ignore[attr-defined]
        self._raise(signal)

    # -- appends ------------------------------------------------------------------------

    async def append(self, events: Sequence[ev.Event], defer: bool = True) -> None:
        """Append ``events`` (after any pending decisions); merge foreign writes on conflict.
        ``defer=False``: the caller knows the journal would not hold them (``defer_now``)."""
        journal = self.journal
        if journal.state.last_seq >= self.max_events and not OPENING.isdisjoint(
            e.type for e in events
        ):
            self.room()  # the log is full: nothing new begins (loom.kernel.execution_limits)
        if defer and not journal.lock.locked() and journal.defer_now(events):
            return  # kept unforced until the next durable point (loom.kernel.durability)
        async with journal.lock:
            try:
                # (``while not await self._try_append(events)``, inlined: a coroutine less)
                while True:
                    try:
                        if await journal.try_append(events):
                            break
                    except SupersededSignal as signal:
                        self._raise(signal)
                    self._deliver_resumes()  # a resume merged in may be one a gate waits for
            except StoreError as exc:
                # Not the flow's to catch: the log may not hold what the flow would go on
                # believing. The execute call fails and its delivery is retried.
                self._raise(AbortSignal(exc))

    def room(self) -> None:
        """Stop the flow (it fails with ``limit_exceeded``) if its log holds ``max_events``
        already: called before anything new begins (an effect, a child, a message)."""
        used = self.journal.state.last_seq
        if used >= self.max_events:
            error = exceeded("max_events", self.max_events, used, "nothing new may begin")
            self._raise(StopSignal(error))

    async def _unless_store_fails(self, step: Awaitable[T]) -> T:
        """Await a payload encode or decode; a store or configuration failure unwinds like a
        failed append."""
        try:
            return await engine_io(self.order, step)
        except (StoreError, ConfigurationError) as exc:  # the deployment's, not the flow's
            self._raise(AbortSignal(exc))

    async def _try_append(self, events: Sequence[ev.Event]) -> bool:
        try:
            written = await self.journal.try_append(events)
        except SupersededSignal as signal:
            self._raise(signal)
        if not written:
            self._deliver_resumes()  # a resume merged in may be one a gate waits for
        return written

    def _deliver_resumes(self) -> None:
        for w in list(self._waiting.values()):
            got = self.state.resumes.get(resume_key(w.gate["on"], w.gate["correlation_key"]))
            if got is not None and not w.fut.done():
                w.turn = self.order.turn(got.get("seq", 0))
                w.fut.set_result(got)
                self._poke()

    # -- decisions ----------------------------------------------------------------------

    def decide(self, step_id: str, kind: str) -> Any:
        """Serve a recorded ``now/uuid/random`` or record a new one with the next append."""
        return decisions.decide(self, step_id, kind)

    def _check_unused(self, step_id: str, what: str) -> None:
        clash = decisions.clash(self.state, step_id, what)
        if clash is not None:
            self._park(step_id, clash)

    # -- gates --------------------------------------------------------------------------

    async def gate(self, step_id: str, on: str, key: str, timeout: float | None) -> Any:
        """Serve a recorded resume for ``on``/``key`` or wait for one (suspending)."""
        if self.signal is not None:
            raise self.signal
        recorded = self.state.gates.get(step_id)
        if recorded is None:
            self._check_unused(step_id, f"suspend(on={on!r})")
        elif (recorded["on"], recorded["correlation_key"]) != (on, key):
            self._park(
                step_id,
                f"step {step_id}: log waits on {recorded['on']!r}/"
                f"{recorded['correlation_key']!r}, flow on {on!r}/{key!r}",
            )
        got = self.state.resumes.get(resume_key(on, key))
        if got is None:
            got = await self._wait(step_id, on, key, timeout, recorded)
        else:
            await self._turn(got.get("seq", 0))
        if got["timed_out"]:
            if on == "loom.timer":
                return None
            raise GateTimeoutError(f"gate {on!r}/{key!r} timed out", details={"step_id": step_id})
        return await self._unless_store_fails(
            self.rt.payloads.decode(got["payload"], self.execution_id)
        )

    async def _wait(
        self, step_id: str, on: str, key: str, timeout: float | None, recorded: GateRecord | None
    ) -> ResumeRecord:
        await cancellation.checkpoint(self)
        if recorded is not None:
            gate = recorded
        else:
            wake_at = self.rt.clock() + timeout if timeout is not None else None
            gate: GateRecord = {"on": on, "correlation_key": key, "wake_at": wake_at}
        fut: asyncio.Future[ResumeRecord] = asyncio.get_running_loop().create_future()
        waiting = self._waiting[step_id] = Waiting(gate, fut, recorded is None)
        self._poke()
        try:
            got = await fut
            if waiting.turn is not None:
                await waiting.turn
            return got
        finally:
            self._waiting.pop(step_id, None)

    def _beat(self) -> Coroutine[Any, Any, None]:
        """A heartbeat's beat: an empty append, which prepends a claim extension when one is
        due (``loom.kernel.side_tasks``)."""
        return self.append([])

    def _beat_due(self) -> bool:
        """Whether the claim needs extending now (``loom.kernel.side_tasks``): an effect runs."""
        return bool(self._inflight or self.timers.busy) and self.signal is None

    async def _watch(self, flow_task: asyncio.Task[Any]) -> None:
        """Suspend the flow once it waits on gates only and nothing else can move it."""
        try:
            await self._watch_until_done(flow_task)
        except _Signal as signal:  # a failed hand-over's record, a supersession
            # Raised in this watcher, it would leave the flow waiting on its gates for good
            # and the execute call never answering: wake the flow with it.
            self._halt(signal)
        except Exception as exc:  # the engine's own bug: fail the call, never hang it
            self._halt(AbortSignal(exc))

    async def _watch_until_done(self, flow_task: asyncio.Task[Any]) -> None:
        wake = self._wake  # (set before the watcher is started)
        assert wake is not None
        while not flow_task.done():
            await wake.wait()
            wake.clear()
            if self._inflight or not self.timers.blockable(bool(self._waiting)):
                continue
            mark = self._progress
            for _ in range(_SETTLE_YIELDS):
                await asyncio.sleep(0)
                if self._progress != mark or self._inflight or flow_task.done():
                    break
            else:
                await (cancellation.deliver(self) if cancellation.due(self) else self._block())

    async def _block(self) -> None:
        async with self.journal.lock:
            while True:
                self._deliver_resumes()
                if any(w.fut.done() for w in self._waiting.values()) or not self.timers.blockable(
                    bool(self._waiting)
                ):
                    return  # a resume arrived, or a timer fires, meanwhile: keep running
                if cancellation.interrupts(self):
                    return  # a cancel arrived: it is handed over, not suspended on
                fresh = [(sid, w.gate) for sid, w in self._waiting.items() if w.new]
                gates = fresh or [(sid, w.gate) for sid, w in self._waiting.items()]
                batch: list[ev.Event] = [
                    ev.ExecutionSuspended(
                        step_id=sid,
                        on=g["on"],
                        correlation_key=g["correlation_key"],
                        wake_at=g["wake_at"],
                    )
                    for sid, g in gates
                ] + self.timers.gates()
                try:
                    written = await self._try_append(batch)
                except StoreError as exc:
                    return self._halt(AbortSignal(exc))  # the flow waits on gates: wake it
                except SupersededSignal as signal:
                    return self._halt(signal)
                if written:
                    break
        # From here on the flow is suspended whatever it does: its result is ignored, any
        # further ctx call raises, and the root task is cancelled so user code stops early.
        self.signal = SuspendSignal()
        for w in self._waiting.values():
            w.new = False
            if not w.fut.done():
                w.fut.set_exception(SuspendSignal())
        if self._flow_task is not None:
            self._flow_task.cancel()

    def _halt(self, signal: BaseException) -> None:
        """End a flow that waits on gates only: its waits raise ``signal``, it is cancelled."""
        self.signal = self.signal or signal
        for w in self._waiting.values():
            if not w.fut.done():
                w.fut.set_exception(signal)
        if self._flow_task is not None:
            self._flow_task.cancel()

    # -- the call -----------------------------------------------------------------------

    async def run(self) -> None:
        """Run the flow until it completes, fails, suspends, parks or is superseded."""
        state = self.journal.state  # (not the property: its call, a few per execution)
        self.start_seq = state.last_seq  # (what ``loom.kernel.cancellation`` tells apart by)
        if state.cancel is not None and await cancellation.before_run(self):
            return  # (no cancel, the usual case: nothing to do there, not even a coroutine)
        stored = state.input  # (decoding gives back what is no dict as it is: no coroutine)
        if isinstance(stored, dict):
            stored = await self.rt.payloads.decode(stored, self.execution_id)
        value = self.flow.typed.parse_input(stored)
        ctx = INSTALLED.context(self)  # the kernel's ctx and the primitives' (loom.app)
        loop = asyncio.get_running_loop()
        if loop.get_task_factory() is not task_factory:  # (installed once per loop)
            install_task_factory(loop)
        # The root task is built directly: through the factory it would become a child scope.
        # (``guarded``: a ``SystemExit`` in flow code must not stop the loop, see loom.kernel.exits)
        flow = guarded(self.flow.fn(ctx, value), self.flow.name)
        flow_task = asyncio.Task(flow, loop=loop, context=root_scope(self))
        ended = tracked_end(self, flow_task)
        self._flow_task, self._outside = flow_task, contextvars.copy_context()
        heartbeat = Heartbeat(self.rt.claim_ttl / 3, self._beat_due, self._beat, self._outside)
        try:
            await ended  # (as ``asyncio.wait([flow_task])``, with a loop turn less)
            if self.timers.armed or self.timers.busy:  # (else draining does nothing)
                await self.timers.drain()
        finally:
            self.timers.close()
            side = [t for t in (self._watcher, self.order.driver) if t is not None]
            tasks = [*side, *heartbeat.stop(), *self._tasks]
            if not reaped(tasks):  # (all done, the usual: no coroutine to build)
                await reap(tasks)
        try:
            await record_end(self, flow_task)
        except AbortSignal as signal:
            raise signal.args[0] from None
        except SupersededSignal as signal:
            # Overtaken while recording the end (a cancel's, after a cleanup spent): the call
            # answers as superseded (``run_session``), never with the signal itself.
            self.signal = signal
        finally:
            if self.state.cancel is not None:  # (only a cancel's sessions are known there)
                cancellation.forget(self)
