"""The kernel's runtime: control calls (start, resume, verdict, cancel, get, list) and ``execute``.

``loom.runtime.Runtime`` (where the app is assembled) adds the primitives' own control
calls (messages, published values, forks) and start options (queues) on top.

``execute`` is what a worker does with an :class:`~loom.wire.ExecutionPackage`: load
(snapshot + tail) → fold → claim → run the flow from the start, serving recorded steps from
the state and appending what is new. Control calls append one event each and hand the
execution to the dispatcher; with no dispatcher they run it inline until it blocks.
"""

from __future__ import annotations

import logging
import random
import time
import uuid
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from loom import crash
from loom import events as ev
from loom.errors import ExecutionSupersededError, UnknownExecutionError
from loom.grants import GrantPolicy
from loom.ids import check_execution_id
from loom.kernel import control, executing, poison
from loom.kernel.app import App
from loom.kernel.backoff import DEFAULT_MAX_INLINE_BACKOFF
from loom.kernel.cancellation import request_cancel
from loom.kernel.context import STEP_NUMBERING
from loom.kernel.defs import to_json_value
from loom.kernel.execution_limits import check_requested, effective
from loom.kernel.fold import ExecutionState, fold
from loom.kernel.payloads import DEFAULT_THRESHOLD, PayloadCodec, dump_exact
from loom.kernel.poison import DEFAULT_MAX_IDLE_CLAIMS
from loom.kernel.primitive import check_outside_id
from loom.kernel.starts import (
    check_same_start,
    never_ran,
    note_created,
    runs_here,
    start_here,
    started_event,
)
from loom.kernel.timeouts import deadline_for
from loom.store.base import EventStore, ExecutionSummary, LoadedLog, Snapshot
from loom.telemetry import traced_execute
from loom.wire import ExecutionPackage, ExecutionResult, Reason

if TYPE_CHECKING:
    from loom.blobs import BlobStore
    from loom.dispatch.base import Dispatcher
    from loom.reserved_ids import IdForm

log = logging.getLogger("loom")


class Runtime:
    """Runs the flows of one app over one event store (the kernel's part: see the module
    docstring).

    Args:
        app: The flows and effects.
        store: Where logs live.
        dispatcher: Who runs executions after a control call; ``None`` runs them inline.
        blobs: Where payloads over ``blob_threshold`` bytes go.
        clock: Wall-clock seconds; injectable for tests that skip time.
        claim_ttl: Seconds a claim lasts without being extended.
        snapshot_every: Events between snapshots while running.
        grants: Who may grant which capabilities on a start that names its principal
            (default: the app's ``grants``).
        snapshot_min_tail: When an execute call ends (suspended, parked, finished), a snapshot
            is written if at least this many events came since the last one; a shorter tail
            is cheaper to re-read than a snapshot is to write (ADR 0004). Default: what the
            store advertises (``EventStore.snapshot_min_tail``).
        max_inline_backoff: Longest retry backoff a worker sleeps through; a longer one
            ends the execute call and schedules the attempt on a durable timer.
        max_idle_claims: Execute calls in a row that may claim an execution without
            progress before the next one parks it as ``poison`` (see ``loom.kernel.poison``).
    """

    def __init__(
        self,
        app: App,
        store: EventStore,
        *,
        dispatcher: Dispatcher | None = None,
        blobs: BlobStore | None = None,
        clock: Callable[[], float] = time.time,
        claim_ttl: float = 30.0,
        snapshot_every: int = 1000,
        snapshot_min_tail: int | None = None,
        blob_threshold: int = DEFAULT_THRESHOLD,
        grants: GrantPolicy | None = None,
        max_inline_backoff: float = DEFAULT_MAX_INLINE_BACKOFF,
        max_idle_claims: int = DEFAULT_MAX_IDLE_CLAIMS,
    ) -> None:
        self.app = app
        self.grants = grants or app.grants
        self.store = store
        self.dispatcher = dispatcher
        self.clock = clock
        self.claim_ttl = claim_ttl
        self.snapshot_every = snapshot_every
        self.snapshot_min_tail = (
            store.snapshot_min_tail if snapshot_min_tail is None else snapshot_min_tail
        )
        self.payloads = PayloadCodec(blobs, blob_threshold)
        self.max_inline_backoff = max_inline_backoff
        self.max_idle_claims = max_idle_claims
        self._rng = random.Random()

    # -- state --------------------------------------------------------------------------

    async def load_state(self, execution_id: str) -> ExecutionState:
        """Fold the newest snapshot and the events after it."""
        return (await self._load(execution_id))[0]

    async def _load(self, execution_id: str) -> tuple[ExecutionState, int]:
        """The folded state, and how many events came after the snapshot."""
        return await self.fold_loaded(execution_id, await self.store.load(execution_id))

    async def fold_loaded(self, execution_id: str, loaded: LoadedLog) -> tuple[ExecutionState, int]:
        """Fold what ``store.load`` returned: the state, and how many events came after the
        snapshot (all of them when the snapshot could not be read)."""
        try:
            base = ExecutionState.from_json(loaded.snapshot.state) if loaded.snapshot else None
        except (KeyError, TypeError, ValueError) as exc:
            # A snapshot is derivable from the log: one this release cannot read (damaged,
            # or a newer release's) costs a full read, never the execution.
            log.warning("unreadable snapshot of %s, folding its whole log: %r", execution_id, exc)
            events = await self.store.read(execution_id)
            return fold(events), len(events)
        return fold(loaded.events, base), len(loaded.events)

    async def save_snapshot(self, state: ExecutionState) -> None:
        """Store ``state`` as the snapshot at its last seq."""
        await self.store.save_snapshot(
            state.execution_id, Snapshot(state.last_seq, state.to_json())
        )

    def new_decision(self, kind: str) -> Any:
        """A fresh value for ``ctx.now/uuid/random`` (recorded by the session)."""
        if kind == "now":
            return self.clock()
        if kind == "uuid":
            return str(uuid.UUID(int=self._rng.getrandbits(128), version=4))
        return self._rng.random()

    # -- start --------------------------------------------------------------------------

    async def start(
        self,
        flow: str,
        input: Any = None,
        *,
        execution_id: str | None = None,
        capabilities: set[str] | frozenset[str] | list[str] = frozenset(),
        budgets: dict[str, float] | None = None,
        run: bool = True,
        by: str | None = None,
        version: str | int | None = None,
        timeout: float | timedelta | None = None,
        fields: Mapping[str, Any] | None = None,
        derived: IdForm | None = None,
    ) -> ExecutionResult:
        """Start ``flow`` (idempotent by ``execution_id``) and, with ``run``, dispatch it.

        A repeat with the same id, flow and input dispatches an execution that was created
        but never run (at-least-once start, see :mod:`loom.kernel.starts`), else reports it.

        ``by`` is who asks (recorded). Every entry point outside the process (HTTP, Pub/Sub,
        Commission, the CLI) names it, and ``capabilities`` must then be grantable by it
        under ``self.grants``; ``None`` is the trusted path of the process's own code.
        The execution runs on ``version`` of the flow (default: the latest registered) for
        its whole life; the version is recorded in ``ExecutionStarted.flow_version``.
        ``timeout`` overrides the flow's own (``loom.kernel.timeouts``). ``fields`` are
        ``ExecutionStarted`` fields a primitive's start option sets (a queue's).
        ``budgets`` are the execution's effect budgets and limits (names in
        :mod:`loom.kernel.execution_limits`); ``by`` may raise a limit above the flow's own
        only as far as the grant policy allows.
        ``derived`` is for the engine alone: the reserved form (:mod:`loom.reserved_ids`) it
        derived ``execution_id`` in; a repeat then must also be by the same ``by``.

        Raises:
            NotPermittedError: ``by`` may not grant some of ``capabilities``, or raise a
                limit that far.
            InputError: ``budgets`` names no limit or budget, or a value that is not one.
            UnknownFlowError: No such flow (``UnknownFlowVersionError``: no such version).
            InvalidPayloadError: The input fails the flow's input model.
            ExecutionConflictError: The id exists with another flow or input.
            InvalidExecutionIdError: ``execution_id`` breaks the id rule (:mod:`loom.ids`).
            ReservedExecutionIdError: ``execution_id`` has a form the engine derives
                (:mod:`loom.reserved_ids`), or holds an execution the engine did not make.
        """
        eid = (
            check_outside_id(check_execution_id(execution_id), derived=derived)
            if execution_id is not None
            else str(uuid.uuid4())
        )
        defn = self.app.get_flow(flow, version)
        asked = check_requested(budgets) if budgets else {}
        if by is not None:
            self.grants.check(by, flow, capabilities)
            if asked:  # limits above the flow's own need the policy's leave
                own = effective(self.app, flow, defn.version, {})
                self.grants.check_limits(by, flow, asked, own.as_dict())
        value = to_json_value(defn.typed.parse_input(input))
        raw = dump_exact(value)  # (an input stored inline, the usual: no coroutine to build)
        inline = self.payloads.inline(value, raw)
        stored = (
            (await self.payloads.encode(value, f"{eid}/input", raw))[0]
            if inline is None
            else inline[0]
        )
        now = self.clock()
        started = started_event(
            {
                "execution_id": eid,
                "flow": flow,
                "input": stored,
                "flow_version": defn.version,
                "capabilities": sorted(capabilities),
                "budgets": asked,
                "at": now,
                "by": by,
                **(fields or {}),
                "deadline": deadline_for(defn, timeout, now),
                "step_numbering": STEP_NUMBERING,
            }
        )
        here = await start_here(self, started, defn) if run and runs_here(self, started) else None
        if isinstance(here, ExecutionResult):  # claimed with the create, and run here
            return here
        created, first = (False, here) if here is not None else await self.store.create(started)
        crash.point("after_start")
        if created:
            note_created(eid)
        else:  # a repeat: run it if it never ran (see ``loom.kernel.starts``)
            check_same_start(first, started, own=derived is not None)
            state = await self.load_state(eid)
            if not (run and never_ran(state, self.clock())):
                return await self.report(state)
        ran = await self._dispatch(eid, flow, "start", f"{eid}:1") if run else None
        return ran or await self.report(fold([first]), include_state=False)

    async def _dispatch(
        self, eid: str, flow: str, reason: Reason, dispatch_id: str, not_before: float | None = None
    ) -> ExecutionResult | None:
        """Hand the execution on; return its result when it ran inline (no dispatcher)."""
        package = ExecutionPackage(
            execution_id=eid, flow=flow, reason=reason, dispatch_id=dispatch_id
        )
        if self.dispatcher is not None:
            await self.dispatcher.dispatch(package, dispatch_id, not_before=not_before)
            # An inline dispatcher also runs a timer already due at once (``ctx.sleep(0)``).
            if self.dispatcher.inline and (not_before is None or not_before <= self.clock()):
                return await self.result(eid)  # it ran here: report where it got to
        elif not_before is None or not_before <= self.clock():
            try:
                return await self.execute(package)
            except ExecutionSupersededError:
                pass  # a live holder has it; it will see what we appended
        return None

    # -- execute ------------------------------------------------------------------------

    @traced_execute
    async def execute(self, package: ExecutionPackage) -> ExecutionResult:
        """One worker call: rebuild, claim, run until blocked, and report where it stands.

        Raises:
            UnknownExecutionError: No such execution.
            ExecutionSupersededError: Another holder's claim is live, or it overtook us.
        """
        return await executing.execute(self, package)

    # -- control calls ------------------------------------------------------------------

    async def resume(
        self,
        execution_id: str,
        on: str,
        correlation_key: str,
        payload: Any = None,
        *,
        by: str | None = None,
    ) -> ExecutionResult:
        """Deliver a resume. Early ones are buffered; a duplicate (same on + key) is a no-op.

        ``by`` (who asked) is recorded on the event.

        Raises:
            UnknownExecutionError: No such execution.
            ExecutionFinishedError: The execution already ended.
        """
        return await control.resume(self, execution_id, on, correlation_key, payload, by=by)

    async def verdict(
        self,
        execution_id: str,
        step_id: str,
        verdict: str,
        *,
        output: Any = None,
        error: str | None = None,
        by: str = "operator",
        episode: int | None = None,
    ) -> ExecutionResult:
        """Resolve an in-doubt step: ``performed`` (with output), ``not_performed``, ``failed``.

        ``episode`` is the seq of the ``EffectInDoubt`` the verdict answers (shown in the
        result's ``in_doubt``); every caller from outside the process must give it, so a
        replayed verdict cannot settle a later episode. ``None`` settles the open one.

        Raises:
            UnknownExecutionError: No such execution.
            VerdictError: The step is not in doubt, or the verdict or output is invalid.
            StaleVerdictError: ``episode`` is not the open episode.
        """
        return await control.verdict(
            self, execution_id, step_id, verdict, output, error, by, episode
        )

    retry = poison.retry  # run a parked (poison, nondeterministic) execution again

    async def cancel(
        self, execution_id: str, reason: str = "", *, by: str | None = None
    ) -> ExecutionResult:
        """Cancel an execution; its flow gets ``asyncio.CancelledError`` at its next await and
        may clean up. ``by`` is recorded. See :func:`loom.kernel.cancellation.request_cancel`."""
        return await request_cancel(self, execution_id, reason, by)

    async def report(
        self, state: ExecutionState, *, include_state: bool = True, settled: bool = False
    ) -> ExecutionResult:
        """Where ``state`` stands, with its output as the flow returned it (read back from
        the blob store if it was offloaded); ``settled``: see ``ExecutionResult.from_state``."""
        result = ExecutionResult.from_state(state, include_state=include_state, settled=settled)
        stored = result.output
        if isinstance(stored, dict):  # (else decoding gives it back as it is: no coroutine)
            output = await self.payloads.decode(stored, state.execution_id)
            if output is not stored:  # (most outputs are stored as they are: no assignment,
                result.output = output  # which costs a pydantic ``__setattr__``)
        return result

    async def result(self, execution_id: str) -> ExecutionResult:
        """Where an execution stands now."""
        return await self.report(await self.load_state(execution_id))

    async def history(self, execution_id: str) -> list[ev.Event]:
        """Every event of the execution, in order."""
        return await self.store.read(execution_id)

    async def get(self, execution_id: str) -> tuple[ExecutionResult, list[ev.Event]]:
        """State and history: where the execution stands, and every event that led there."""
        events = await self.store.read(execution_id)
        return await self.report(fold(events)), events

    async def list(self, status: str | None = None, limit: int = 1000) -> list[ExecutionSummary]:
        """Summaries of executions, newest first."""
        return await self.store.list(status, limit=limit)

    async def require(self, execution_id: str) -> ExecutionSummary:
        """The summary of an execution, or :class:`UnknownExecutionError`."""
        try:
            return await self.store.summary(execution_id)
        except UnknownExecutionError:
            raise UnknownExecutionError(
                f"unknown execution {execution_id!r}", details={"execution_id": execution_id}
            ) from None
