"""Testing helpers for users' flows: an in-memory environment, time skipping, replay.

``LoomTestEnv(app)`` runs flows on an in-memory store (and blob store) with a fake clock. With
``always_replay=True`` (the default) every execute call is followed by a replay of the whole
log that must reach the same place without invoking anything, so a non-deterministic flow
fails its tests rather than production. ``skip(seconds)`` moves the clock and fires the timers
that fall due. ``replay(app, events)`` checks a recorded history (golden logs) against code.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from loom import events as ev
from loom.app import EffectDef
from loom.blobs import BlobStore, InMemoryBlobStore
from loom.errors import NondeterminismError
from loom.kernel import cancellation
from loom.kernel.app import App
from loom.kernel.context import ParkSignal, SupersededSignal
from loom.kernel.fold import ExecutionState, fold
from loom.kernel.journal import DryJournal
from loom.kernel.session import Session
from loom.runtime import Runtime
from loom.store.base import EventStore
from loom.store.memory import InMemoryEventStore
from loom.wire import ExecutionPackage, ExecutionResult


class FakeClock:
    """A clock that moves only when told to."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


@dataclass
class ReplayOutcome:
    """What a replay of a history came to."""

    status: str
    output: Any = None
    error: dict[str, Any] | None = None
    waiting_on: list[str] = field(default_factory=list[str])


class _ReplaySession(Session):
    """A session that may not do anything new: every step must come from the log."""

    journal_class = DryJournal

    def __init__(self, runtime: Runtime, state: ExecutionState, app: App) -> None:
        super().__init__(runtime, state, app.get_flow(state.flow, state.flow_version), "replay")

    async def _live(self, step_id: str, defn: EffectDef, value: Any, attempt: int) -> Any:
        await cancellation.checkpoint(self)  # a recorded cancel arrives here, as it did live
        self._check_budget(self.state, defn.name)  # a budget stop is reproduced, not a divergence
        self._park(
            step_id,
            f"replay reached step {step_id} ({defn.name!r}), which the history does not record",
        )

    def decide(self, step_id: str, kind: str) -> Any:
        if step_id not in self.state.decisions:
            self._park(step_id, f"replay reached {kind}() at step {step_id}, not in the history")
        return super().decide(step_id, kind)

    @property
    def tail(self) -> list[ev.Event]:
        """What the replay would have appended."""
        assert isinstance(self.journal, DryJournal)
        return self.journal.tail


async def replay(
    app: App, events: Sequence[ev.Event], blobs: BlobStore | None = None
) -> ReplayOutcome:
    """Re-run the flow of a recorded history against ``app`` without invoking anything.

    Args:
        app: The code to check.
        events: The recorded history.
        blobs: Where the history's large payloads are (its blob references are read there).

    Raises:
        ConfigurationError: The history references a blob and ``blobs`` cannot serve it.
        NondeterminismError: The code does something the history does not record, or ends
            differently from it.
    """
    state = fold(events)
    runtime = Runtime(app, InMemoryEventStore(), blobs=blobs)
    session = _ReplaySession(runtime, state, app)
    await session.run()
    if isinstance(session.signal, (ParkSignal, SupersededSignal)):
        raise session.signal.args[0] if session.signal.args else NondeterminismError("diverged")
    outcome = _outcome(session)
    if outcome.output is not None:  # as a run reports it: read back from blobs, unescaped
        outcome.output = await runtime.payloads.decode(outcome.output, state.execution_id)
    return outcome


def _outcome(session: _ReplaySession) -> ReplayOutcome:
    for event in session.tail:
        if isinstance(event, ev.ExecutionCompleted):
            return ReplayOutcome("completed", output=event.output)
        if isinstance(event, ev.ExecutionFailed):
            return ReplayOutcome("failed", error=event.error.model_dump())
        if isinstance(event, ev.ExecutionCancelled):
            return ReplayOutcome("cancelled", error={"code": "cancelled", "message": event.reason})
    waiting = [e.step_id for e in session.tail if isinstance(e, ev.ExecutionSuspended)]
    return ReplayOutcome("suspended" if waiting else "running", waiting_on=waiting)


def check_replay(outcome: ReplayOutcome, result: ExecutionResult) -> None:
    """Raise if a replay did not reach where the live run did."""
    if result.status == "completed" and (outcome.status, outcome.output) != (
        "completed",
        result.output,
    ):
        raise NondeterminismError(
            f"replay ended {outcome.status} with {outcome.output!r}, the run completed with "
            f"{result.output!r}"
        )
    if result.status == "failed" and outcome.status != "failed":
        raise NondeterminismError(f"replay ended {outcome.status}; the run failed")
    if result.status == "cancelled" and outcome.status in ("completed", "failed"):
        # A cancel that ended the run without a hand-over stops a replay short, not this.
        raise NondeterminismError(f"replay ended {outcome.status}; the run was cancelled")


class LoomTestEnv:
    """An in-memory Loom for tests: ``env.runtime`` runs flows inline until they block."""

    def __init__(
        self,
        app: App,
        *,
        always_replay: bool = True,
        store: EventStore | None = None,
        **runtime_options: Any,
    ):
        self.app = app
        self.clock = FakeClock()
        # In memory unless given one: a store on disk tests what users run, restarts included.
        self.store = InMemoryEventStore() if store is None else store
        self.always_replay = always_replay
        # Large payloads work as in production, in memory; pass blobs=None to test without.
        runtime_options.setdefault("blobs", InMemoryBlobStore())
        self._options = runtime_options
        self.runtime = _CheckedRuntime(self, app, self.store, clock=self.clock, **runtime_options)

    def deploy(self, app: App) -> None:
        """Swap the code under the same store, clock, blobs and options, as a redeploy does."""
        self.app = app
        self.runtime = _CheckedRuntime(self, app, self.store, clock=self.clock, **self._options)

    async def start(self, flow: str, value: Any = None, **kwargs: Any) -> ExecutionResult:
        """Start a flow and run it until it blocks."""
        return await self.runtime.start(flow, value, **kwargs)

    async def skip(self, duration: timedelta | float) -> list[ExecutionResult]:
        """Move the clock forward and run every execution whose timer fell due."""
        seconds = duration.total_seconds() if isinstance(duration, timedelta) else duration
        self.clock.now += seconds
        results: list[ExecutionResult] = []
        for row in await self.store.list("suspended", due_before=self.clock.now):
            package = ExecutionPackage(execution_id=row.execution_id, reason="timer")
            results.append(await self.runtime.execute(package))
        return results

    async def history(self, execution_id: str) -> list[ev.Event]:
        """The execution's events."""
        return await self.store.read(execution_id)


_CHECKED = ("completed", "failed", "cancelled", "suspended")


class _CheckedRuntime(Runtime):
    def __init__(self, env: LoomTestEnv, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._env = env

    async def execute(self, package: ExecutionPackage) -> ExecutionResult:
        result = await super().execute(package)
        # A parked execution diverged on purpose: its replay would raise the same way.
        if self._env.always_replay and result.status in _CHECKED and result.parked_reason is None:
            history = await self.store.read(package.execution_id)
            check_replay(await replay(self.app, history, self.payloads.blobs), result)
        return result


def run(coro: Any) -> Any:
    """Run a coroutine to completion (for synchronous test code)."""
    return asyncio.run(coro)
