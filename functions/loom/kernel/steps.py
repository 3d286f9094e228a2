"""A session's effect steps: serve a recorded step, or invoke the effect and record it.

Part of :class:`~loom.kernel.session.Session` (its base class), kept in a module of its own: a
step served from the log, a live step (the durable point before it, the cancel check, the
invocation, the record of its outcome) and the step's turn to reach the flow. The
commonest step's invocation is :mod:`loom.kernel.fast_step`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from loom import crash
from loom import events as ev
from loom.errors import EffectFailedError, failed_error
from loom.kernel import cancellation, fast_step
from loom.kernel.backoff import BACKOFF, scheduled, wait_for_retry
from loom.kernel.context import SCOPE, EffectContext, InDoubtSignal, LapsedSignal, StopSignal
from loom.kernel.defs import EffectDef
from loom.kernel.durability import before_effect
from loom.kernel.effects import (
    Outcome,
    admit,
    budget_exceeded,
    completed_event,
    failed_event,
    invoke_with_retry,
)
from loom.kernel.fold import ExecutionState, StepRecord

if TYPE_CHECKING:
    from loom.kernel.divergence import StepTally
    from loom.kernel.journal import Journal
    from loom.kernel.loop_timers import LoopTimers
    from loom.kernel.ordering import Ordering
    from loom.kernel.primitive import Admission
    from loom.kernel.runtime import Runtime

T = TypeVar("T")


class EffectSteps:
    """The effect steps of a session: ``Session`` derives from this class, and only it
    (``self`` is the session where a function takes one)."""

    if TYPE_CHECKING:  # what the session provides
        rt: Runtime
        journal: Journal
        execution_id: str
        holder: str
        admitted: Admission | None
        signal: BaseException | None
        timers: LoopTimers
        tally: StepTally
        order: Ordering
        _inflight: int
        _progress: int
        _waiting: dict[str, Any]

        @property
        def state(self) -> ExecutionState: ...
        def _turn(self, seq: float) -> Awaitable[None]: ...
        def _poke(self) -> None: ...
        def _raise(self, signal: BaseException) -> NoReturn: ...
        def _park(self, step_id: str, message: str) -> NoReturn: ...
        def _check_unused(self, step_id: str, what: str) -> None: ...
        def room(self) -> None: ...

        max_events: int

        async def append(self, events: Sequence[ev.Event], defer: bool = True) -> None: ...
        async def _unless_store_fails(self, step: Awaitable[T]) -> T: ...

    def execute(self, step_id: str, effect: EffectDef | str, value: Any) -> Awaitable[Any]:
        """Serve a recorded step or invoke the effect live and record the outcome.

        Not a coroutine: a new step's await is its live step's own, a frame fewer on every
        step (the flow awaits this at once, so nothing runs between the call and the await).
        """
        if self.signal is not None:
            raise self.signal
        defn = effect if isinstance(effect, EffectDef) else self.rt.app.get_effect(effect)
        state = self.journal.state  # (read before any await: a reload replaces it)
        # (``state.steps`` without the property's call where the records are loaded, as a
        # live session's nearly always are: ``_steps`` is set exactly when they are.)
        rec = (state._steps or state.steps).get(step_id)  # pyright: ignore[reportPrivateUsage]
        if rec is None:
            decided = state._decisions  # pyright: ignore[reportPrivateUsage]
            if step_id in (state.decisions if decided is None else decided) or (
                step_id in state.gates
            ):
                self._check_unused(step_id, f"effect {defn.name!r}")
            return self._live(step_id, defn, value, 1)
        return self._recorded(step_id, defn, value, rec)

    async def _recorded(self, step_id: str, defn: EffectDef, value: Any, rec: StepRecord) -> Any:
        self.tally.saw(step_id, rec)
        if rec.get("effect") != defn.name:
            self._park(
                step_id,
                f"step {step_id}: log has effect {rec.get('effect')!r}, flow called {defn.name!r}",
            )
        status = rec.get("status")
        if status in ("completed", "failed"):
            await self._turn(rec.get("seq", 0))
        if status == "completed":
            stored = rec.get("output")
            output = await self._unless_store_fails(
                self.rt.payloads.decode(stored, self.execution_id)
            )
            return defn.typed.parse_output(output)
        if status == "failed":
            raise failed_error(defn.name, step_id, rec.get("error") or {})
        if status in ("not_performed", "retrying"):  # the recorded attempt did not finish
            return await self._live(step_id, defn, value, rec.get("attempt", 1) + 1)
        if status == "backoff":
            attempt, not_before = rec.get("attempt", 2), rec.get("not_before", 0)
            await wait_for_retry(self, step_id, attempt, not_before)  # type: ignore[arg-type]
            return await self._live(step_id, defn, value, rec.get("attempt", 2))
        # started / in_doubt: the runtime parks those before the flow runs; never re-invoke.
        self._park(step_id, f"step {step_id} is {status}; it needs a verdict")

    async def _live(self, step_id: str, defn: EffectDef, value: Any, attempt: int) -> Any:
        await before_effect(self)  # no effect runs before a held completion is durable
        if self.admitted is not None:  # (after the durable point: it may have waited long)
            await self._still_admitted()
        state = self.journal.state  # (after the await: a conflict there reloads it)
        if state.cancel is not None or state.deadline is not None:
            await cancellation.checkpoint(self)  # type: ignore[arg-type]  # (nothing to check: no coroutine)
        # A step the log does not hold: did the replay skip one it does? (Once a tally has
        # counted no recorded step, as a fresh execution's does, no call on later steps.)
        if attempt == 1 and self.tally.recorded != 0:
            self._unless_skipped(step_id)
        self._inflight += 1
        timers = self.timers
        token = SCOPE.set(None)  # tasks the effect creates must not consume flow step ids
        try:
            # (``timers.guard`` inlined: a property call per step)
            if timers.open or self.order.open_tasks > 1:
                result = await timers.detach(self._invoke(step_id, defn, value, attempt))
            elif fast_step.applies(
                self, defn, attempt
            ):  # the commonest step (loom.kernel.fast_step)
                result = await fast_step.invoke(self, step_id, defn, value)
            else:
                result = await self._invoke(step_id, defn, value, attempt)
        except EffectFailedError:
            await self._turn(self.state.steps[step_id].get("seq", 0))
            raise
        finally:
            SCOPE.reset(token)
            self._inflight -= 1
            if self._waiting or timers.armed:
                self._poke()
            else:
                self._progress += 1  # (``_poke`` with no watcher to wake: no call)
        if result is BACKOFF:  # the next attempt waits on a durable timer
            return await self.execute(step_id, defn, value)
        state = self.journal.state
        seq = (state._steps or state.steps)[step_id].get("seq", 0)  # pyright: ignore[reportPrivateUsage]
        if state.cancel is not None:
            await self._turn(seq)
        else:  # (``_turn`` inlined for the common case: a call less on every step)
            wait = self.order.turn(seq)
            if wait is not None:
                self._poke()
                await wait
        return result

    def _unless_skipped(self, step_id: str) -> None:
        """Park before new step ``step_id`` if the replay skipped a recorded step
        (:mod:`loom.kernel.divergence`)."""
        state, cut = self.journal.state, self.timers.first_firing()
        skipped = self.tally.skipped(state, step_id, self.order.open_tasks, cut)
        if skipped is not None:
            self._park(step_id, skipped)

    async def _invoke(self, step_id: str, defn: EffectDef, value: Any, attempt: int) -> Any:
        state = self.state
        key = state.step_key(step_id)
        value, refused = admit(defn, value, state.capabilities)
        if refused is not None:
            await self._refuse(step_id, defn, refused)
        # Budgets are checked when a step starts (most executions have none: no call): a
        # step begun runs its retry policy out, whether its backoffs are slept through or
        # resumed from a durable timer, so both make the same attempts (the meter counts
        # every one of them, ``loom.kernel.fold``).
        if state.budgets and attempt == 1:
            self._check_budget(state, defn.name)
        if state.last_seq >= self.max_events:  # a full log begins nothing new
            self.room()
        crash.point("before_intent", step_id)
        if not defn.idempotent:
            await self.append(
                [
                    ev.EffectStarted(
                        step_id=step_id, effect=defn.name, attempt=attempt, idempotency_key=key
                    )
                ]
            )
            crash.point("after_intent", step_id)
        ectx = EffectContext(self.execution_id, step_id, key, attempt, defn.name)
        voided = (state.steps.get(step_id) or {}).get("voided", 0)  # (never ran)
        outcome = await invoke_with_retry(
            defn,
            ectx,
            value,
            self.rt.clock,
            self._retrying,
            self.rt.max_inline_backoff,
            voided,
        )
        crash.point("after_effect", step_id)
        return await self._record(step_id, defn, attempt, outcome)

    async def _refuse(self, step_id: str, defn: EffectDef, refused: ev.ErrorInfo) -> NoReturn:
        """Record the step as failed without invoking its effect (``admit`` refused it)."""
        await self.append([ev.EffectFailed(step_id=step_id, effect=defn.name, error=refused)])
        raise failed_error(defn.name, step_id, refused.model_dump())

    async def _record(self, step_id: str, defn: EffectDef, attempt: int, outcome: Outcome) -> Any:
        """Append what attempts ``attempt`` on of the step came to; its output, or raise."""
        if outcome.retry_at is not None:
            await self.append([scheduled(step_id, defn.name, attempt + outcome.attempts, outcome)])
            return BACKOFF
        if attempt > 1:  # the outcome records every attempt of the step, earlier calls' too
            outcome.attempts += attempt - 1
        unknown = outcome.error is not None and outcome.error.code == "outcome_unknown"
        if unknown and not defn.idempotent:
            # The effect says it cannot know whether it ran: exactly a crash mid-call.
            await self.append([ev.EffectInDoubt(step_id=step_id, effect=defn.name)])
            self._raise(InDoubtSignal())
        codec = self.rt.payloads
        if outcome.error is None and codec.blobs is None and len(outcome.raw) > codec.threshold:
            # It ran and returned: failed for good, never run again (as ``invalid_output``).
            what = f"the output of step {step_id} (effect {defn.name!r})"
            outcome.error = codec.too_large(len(outcome.raw), what)
        if outcome.error is not None:
            await self.append([failed_event(step_id, defn.name, outcome, outcome.error)])
            raise failed_error(defn.name, step_id, outcome.error.model_dump())
        stored = codec.inline(outcome.value, outcome.raw) or await self._unless_store_fails(
            codec.encode(outcome.value, f"{self.execution_id}/{step_id}/output", outcome.raw)
        )
        await self.append([completed_event(step_id, defn.name, outcome, *stored)])
        self.journal.completed(step_id)  # the after_complete crash point (loom.kernel.durability)
        return defn.typed.parse_output(outcome.value)

    async def _retrying(self, ectx: EffectContext, error: ev.ErrorInfo | None) -> None:
        retried = ev.EffectRetried(
            step_id=ectx.step_id, effect=ectx.effect, attempt=ectx.attempt, error=error
        )
        await self.append([retried])
        if self.admitted is not None:  # the next attempt is an effect starting too
            await self._still_admitted()

    async def _still_admitted(self) -> None:
        """Stop before an effect starts if the call's admission lapsed (a queue lease
        renewed too late: another execution may run in its place)."""
        assert self.admitted is not None
        held = self.admitted.holds(self.rt, self.journal.state, self.holder)
        if held is not None and not await held:
            self._raise(LapsedSignal())

    def _check_budget(self, state: ExecutionState, effect: str) -> None:
        """Stop before a step invokes ``effect`` if a budget is spent."""
        exceeded = budget_exceeded(state.budgets, state.meter, effect)
        if exceeded is not None:
            self._raise(StopSignal(exceeded))
