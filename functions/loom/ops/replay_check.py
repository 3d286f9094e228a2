"""The pre-deploy replay check: would the current code replay every stored history?

For each execution it loads the folded history (snapshot + tail) and re-runs the flow in
memory against the current code, serving every recorded step from the log and invoking
nothing. A history passes when the code asks for what the log records, step by step, up to
where the history ends:

* A live execution (running, suspended, in doubt, parked) passes when the replay reaches the
  end of its history (the next step the code wants is not recorded: a live run would do it
  now) or blocks on the gates it waits on, with every recorded step visited.
* A finished one (completed, failed) must also end the same way without new steps. A
  cancelled one is checked like a live one: it stopped wherever the cancel found it.

A divergence names the execution, its flow and version, the step, what the history records
there and what the code did. A flow or version the code no longer registers diverges at the
start: that is how deleting a version that still has live executions is caught.

The walk pages through the store's summaries (``EventStore.scan``) and checks a bounded
number of executions at a time, so memory does not grow with the number of executions.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from loom import events as ev
from loom.errors import LoomError, NondeterminismError, UnknownFlowError
from loom.kernel import cancellation
from loom.kernel.app import App
from loom.kernel.context import ParkSignal, SuspendSignal
from loom.kernel.defs import EffectDef, FlowDef
from loom.kernel.fold import ExecutionState
from loom.kernel.journal import DryJournal
from loom.kernel.runtime import Runtime
from loom.kernel.session import Session
from loom.store.base import LIVE_STATUSES, EventStore, ExecutionSummary

if TYPE_CHECKING:
    from loom.blobs import BlobStore

_CLOSED = ("completed", "failed")  # finished by the flow itself: nothing may follow


class _FrontierSignal(SuspendSignal):
    """The replay reached the end of the recorded history: a live run would go on here."""


@dataclass(frozen=True)
class Divergence:
    """One execution the current code would not replay.

    Attributes:
        execution_id: The execution.
        flow: Its flow.
        version: The flow version it started on.
        status: Its status in the store (``parked`` when parked for an operator).
        step_id: The step where code and history part, if there is one.
        history: What the history records there.
        code: What the current code did instead.
    """

    execution_id: str
    flow: str
    version: str
    status: str
    step_id: str | None
    history: str
    code: str

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict."""
        return asdict(self)

    def line(self) -> str:
        """One human-readable line."""
        return (
            f"{self.execution_id}  {self.flow} v{self.version} ({self.status})  "
            f"step {self.step_id or '-'}: history has {self.history}; code: {self.code}"
        )


@dataclass(frozen=True)
class Checked:
    """The verdict on one execution: ``divergence`` is None when it replays cleanly."""

    summary: ExecutionSummary
    divergence: Divergence | None

    @property
    def parked(self) -> bool:
        """Whether the execution is parked for an operator (e.g. nondeterminism)."""
        return self.summary.parked_reason is not None


class _CheckSession(Session):
    """Serves the log and stops at its end; invokes nothing."""

    journal_class = DryJournal

    def __init__(self, runtime: Runtime, state: ExecutionState, flow: FlowDef) -> None:
        super().__init__(runtime, state, flow, "replay-check")
        self.closed = state.status in _CLOSED
        self.visited: set[str] = set()

    def _frontier(self, step_id: str, what: str) -> Any:
        if self.closed:
            self._park(step_id, f"the execution finished, the code goes on to {what}")
        self._raise(_FrontierSignal())

    async def execute(self, step_id: str, effect: EffectDef | str, value: Any) -> Any:
        self.visited.add(step_id)
        # The timers of its durable backoffs (``{step}/retry{n}``, ``loom.kernel.backoff``) are the
        # step's own: a step that ended is served without waiting on them again.
        retries = f"{step_id}/retry"
        self.visited.update(g for g in self.state.gates if g.startswith(retries))
        rec = self.state.steps.get(step_id)
        if rec is not None and rec.get("status") in ("started", "in_doubt"):
            name = effect if isinstance(effect, str) else effect.name
            if rec.get("effect") == name:
                self._frontier(step_id, f"effect {name!r}")  # waits for a verdict
        return await super().execute(step_id, effect, value)

    async def _live(self, step_id: str, defn: EffectDef, value: Any, attempt: int) -> Any:
        await cancellation.checkpoint(self)  # a recorded cancel arrives here, as it did live
        if attempt == 1:
            self._unless_skipped(step_id)  # parks as the live session would
        self._check_budget(self.state, defn.name)  # a budget stop ends it as it did live
        self._frontier(step_id, f"effect {defn.name!r}")

    def decide(self, step_id: str, kind: str) -> Any:
        self.visited.add(step_id)
        if step_id not in self.state.decisions:
            self._check_unused(step_id, f"{kind}()")
            self._frontier(step_id, f"{kind}()")
        return super().decide(step_id, kind)

    async def gate(self, step_id: str, on: str, key: str, timeout: float | None) -> Any:
        self.visited.add(step_id)
        return await super().gate(step_id, on, key, timeout)

    @property
    def tail(self) -> list[ev.Event]:
        """What the replay would have appended."""
        assert isinstance(self.journal, DryJournal)
        return self.journal.tail


def describe(state: ExecutionState, step_id: str | None) -> str:
    """What the history records at ``step_id``, in words."""
    if step_id is None:
        return f"a start on version {state.flow_version}"
    if step_id in state.steps:
        rec = state.steps[step_id]
        return f"effect {rec.get('effect')!r} ({rec.get('status')})"
    if step_id in state.gates:
        gate = state.gates[step_id]
        return f"a gate on {gate['on']!r}/{gate['correlation_key']!r}"
    if step_id in state.decisions:
        return f"{state.decisions[step_id]['kind']}()"
    return "nothing at this step"


def _step_order(step_id: str) -> list[int]:
    return [int(p) if p.isdigit() else 0 for p in step_id.split(".")]


def _recorded(state: ExecutionState) -> set[str]:
    return {*state.steps, *state.decisions, *state.gates}


class _Verdict:
    """Builds the :class:`Divergence` of one execution from its state."""

    def __init__(self, summary: ExecutionSummary, state: ExecutionState) -> None:
        self.summary, self.state = summary, state
        self.recorded = _recorded(state)  # before the replay adds to the state

    def diverged(self, step_id: str | None, code: str, history: str | None = None) -> Divergence:
        s = self.summary
        status = "parked" if s.parked_reason is not None else s.status
        return Divergence(
            s.execution_id,
            self.state.flow or s.flow,
            self.state.flow_version,
            status,
            step_id,
            history if history is not None else describe(self.state, step_id),
            code,
        )

    def judge(self, session: _CheckSession) -> Divergence | None:
        signal = session.signal
        if isinstance(signal, ParkSignal):
            err: NondeterminismError = signal.args[0]
            return self.diverged(getattr(signal, "step_id", None), err.message)
        if isinstance(signal, _FrontierSignal):
            return None
        return self._judge_end(session)

    def _judge_end(self, session: _CheckSession) -> Divergence | None:
        ended, error = "suspended", None
        for event in session.tail:
            if isinstance(event, ev.ExecutionCompleted):
                ended = "completed"
            elif isinstance(event, ev.ExecutionFailed):
                ended, error = "failed", event.error
            elif isinstance(event, ev.ExecutionContinued):
                ended = "continued"
        if ended == "continued" and _refused_continue(self.state):
            return (
                None  # an older engine's rule, not the code's choice (loom.primitives.continuation)
            )
        missed = sorted(self.recorded - session.visited, key=_step_order)
        if missed:
            return self.diverged(missed[0], f"never reaches this step (the flow {ended})")
        if session.closed and ended != self.state.status:
            waiting = [e.step_id for e in session.tail if isinstance(e, ev.ExecutionSuspended)]
            step = waiting[0] if waiting else None
            return self.diverged(step, f"the flow {ended}", f"a {self.state.status} execution")
        if error is not None and error.code == "invalid_payload" and not session.closed:
            return self.diverged(None, f"fails: {error.message}", "values recorded by old code")
        return None


def _refused_continue(state: ExecutionState) -> bool:
    """Whether the run failed where an engine before the abandon rule of
    :mod:`loom.primitives.continuation` refused to continue (a step was in flight in another task):
    today's code continues there, which is no divergence of the code."""
    return state.status == "failed" and (state.error or {}).get("code") == "continue_in_flight"


async def check_execution(
    runtime: Runtime, summary: ExecutionSummary, state: ExecutionState
) -> Divergence | None:
    """Replay one execution's state against ``runtime.app``; its divergence, if any."""
    verdict = _Verdict(summary, state)
    try:
        flow = runtime.app.get_flow(state.flow, state.flow_version)
    except UnknownFlowError as exc:
        return verdict.diverged(None, exc.message)
    session = _CheckSession(runtime, state, flow)
    try:
        await session.run()
    except LoomError as exc:  # the input no longer fits, a blob is missing…
        return verdict.diverged(None, f"cannot replay: {exc.message}", "the recorded input")
    return verdict.judge(session)


class ReplayChecker:
    """Walks a store and checks every live execution and a sample of finished ones.

    Args:
        app: The code about to be deployed.
        store: The store holding the histories (only read).
        blobs: Where claim-checked payloads live, if anywhere.
        sample: How many of the newest completed and of the newest failed executions to
            check besides the live ones.
        page: Summaries per store page.
        concurrency: Executions read in one bulk read (two such reads are in flight).
    """

    def __init__(
        self,
        app: App,
        store: EventStore,
        *,
        blobs: BlobStore | None = None,
        sample: int = 100,
        page: int = 500,
        concurrency: int = 16,
    ) -> None:
        self.runtime = Runtime(app, store, blobs=blobs)
        self.store = store
        self.sample, self.page, self.concurrency = sample, page, concurrency

    async def summaries(self) -> AsyncIterator[list[ExecutionSummary]]:
        """Pages of what to check: every live execution, then the finished sample."""
        after: str | None = None
        while True:
            rows = await self.store.scan(LIVE_STATUSES, after=after, limit=self.page)
            if rows:
                yield rows
            if len(rows) < self.page:
                break
            after = rows[-1].execution_id
        if self.sample > 0:
            for status in _CLOSED:
                rows = await self.store.list(status, limit=self.sample)
                if rows:
                    yield rows

    async def check(self, summaries: Sequence[ExecutionSummary]) -> list[Checked]:
        """Load several executions in one bulk read and replay each."""
        logs = await self.store.load_many([s.execution_id for s in summaries])
        checked: list[Checked] = []
        for summary, log in zip(summaries, logs, strict=True):
            state, _ = await self.runtime.fold_loaded(summary.execution_id, log)
            checked.append(Checked(summary, await check_execution(self.runtime, summary, state)))
        return checked

    async def run(self, report: Callable[[Checked], Awaitable[None] | None]) -> None:
        """Check everything, calling ``report`` once per execution as its verdict comes.

        A page is cut into chunks of ``concurrency`` executions; two chunks are in hand at a
        time, so one is replayed while the next is read.
        """
        async for rows in self.summaries():
            size = self.concurrency
            chunks = iter([rows[i : i + size] for i in range(0, len(rows), size)])
            await asyncio.gather(self._drain(chunks, report), self._drain(chunks, report))

    async def _drain(
        self,
        chunks: Iterator[list[ExecutionSummary]],
        report: Callable[[Checked], Awaitable[None] | None],
    ) -> None:
        for chunk in chunks:  # both workers share the iterator: each chunk is taken once
            for checked in await self.check(chunk):
                outcome = report(checked)
                if outcome is not None:
                    await outcome
