"""Durable cases: each case is an event-sourced stream on any :class:`EventStore` (ADR 0008).

A case ``C`` lives in the log ``commission.case:C``:

* seq 1 is ``ExecutionStarted(flow="commission.case", input={"case_id": C})``, a header;
* every case event is wrapped in ``ExecutionResumed(on="commission.<type>",
  correlation_key="C#<seq>", payload=<the event>)``; the key is unique per event so the engine's
  duplicate-resume rule never merges two of them.

The first case event is appended with status ``suspended`` (no wake time), so sweepers that
look for stranded or due executions never dispatch a case; closing the commission marks the
stream ``completed``. Every write is an ``append`` at the seq the writer last read, so the
store's optimistic concurrency (``AppendConflictError``) fences revisions on every backend:
memory, SQLite and Firestore alike.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence

from pydantic import JsonValue

from loom.commission.errors import CaseConflictError, CaseNotFoundError, CommissionError
from loom.commission.events import (
    CASE_EVENT_ADAPTER,
    CaseEvent,
    CaseOpened,
    CaseRevised,
    CaseState,
    CommissionAssigned,
    CommissionClosed,
    fold_case,
)
from loom.commission.model import AnyCommission
from loom.errors import AppendConflictError, UnknownExecutionError
from loom.events import Event, ExecutionResumed, ExecutionStarted
from loom.ids import check_case_id
from loom.store.base import AppendRequest, EventStore, StatusChange

CASE_FLOW = "commission.case"
_ON_PREFIX = "commission."
_RETRIES = 5


def stream_id(case_id: str) -> str:
    """The execution id of a case's stream.

    Raises:
        InvalidExecutionIdError: ``case_id`` breaks the id rule of :mod:`loom.ids` (case ids
            are at most 200 bytes, leaving room for the prefix and executor step suffixes).
    """
    return f"{CASE_FLOW}:{check_case_id(case_id)}"


def _decode(raw: Iterable[Event]) -> tuple[list[CaseEvent], int]:
    """The case events in ``raw`` and the last seq seen (foreign events are skipped)."""
    events: list[CaseEvent] = []
    last = 0
    for envelope in raw:
        last = envelope.seq
        if isinstance(envelope, ExecutionResumed) and envelope.on.startswith(_ON_PREFIX):
            event = CASE_EVENT_ADAPTER.validate_python(envelope.payload)
            events.append(event.model_copy(update={"seq": envelope.seq, "at": envelope.at}))
    return events, last


class CaseStore:
    """Opens, reads and appends to cases kept on an :class:`EventStore`.

    Args:
        events: The backend (``InMemoryEventStore``, ``SqliteEventStore``, Firestore, ...).
        clock: Wall-clock seconds, stamped on each event's ``at``.
    """

    def __init__(self, events: EventStore, *, clock: Callable[[], float] = time.time) -> None:
        self._events = events
        self._clock = clock

    async def open(
        self,
        case_id: str,
        commission: AnyCommission,
        *,
        frontier: Iterable[str] = (),
        subject: dict[str, JsonValue] | None = None,
    ) -> CaseState:
        """Open a case at revision 0, or return it if it was opened the same way.

        Raises:
            CaseConflictError: The id is taken by another case definition or by an execution.
        """
        opened = CaseOpened(
            case_id=case_id,
            commission=commission,
            frontier=tuple(frontier),
            subject=subject or {},
        )
        header = ExecutionStarted(
            execution_id=stream_id(case_id), flow=CASE_FLOW, input={"case_id": case_id}
        )
        _, first = await self._events.create(header)
        if first.flow != CASE_FLOW:
            raise CaseConflictError(f"{stream_id(case_id)!r} is an execution of {first.flow!r}")
        for _ in range(_RETRIES):
            events, last = _decode(await self._events.read(stream_id(case_id)))
            if events:
                return self._same_case(events, opened, last)
            try:
                await self._write(case_id, last, [opened], StatusChange("suspended"))
            except CaseConflictError:
                continue
        raise CaseConflictError(f"case {case_id!r} could not be opened: the stream kept moving")

    @staticmethod
    def _same_case(events: list[CaseEvent], opened: CaseOpened, last: int) -> CaseState:
        stored = events[0]
        keep = {"seq", "at"}
        if not isinstance(stored, CaseOpened) or stored.model_dump(
            exclude=keep
        ) != opened.model_dump(exclude=keep):
            raise CaseConflictError(f"case {opened.case_id!r} exists with another definition")
        return fold_case(events).model_copy(update={"seq": last})

    async def load(self, case_id: str) -> CaseState:
        """The case, folded from its stream.

        Raises:
            CaseNotFoundError: No such case.
        """
        try:
            raw = await self._events.read(stream_id(case_id))
        except UnknownExecutionError:
            raise CaseNotFoundError(f"unknown case {case_id!r}") from None
        events, last = _decode(raw)
        if not events:
            raise CaseNotFoundError(f"case {case_id!r} was never opened")
        return fold_case(events).model_copy(update={"seq": last})

    async def refresh(self, state: CaseState) -> CaseState:
        """``state`` brought up to date with the events appended after it."""
        raw = await self._events.read(stream_id(state.case_id), after_seq=state.seq)
        if not raw:
            return state
        events, last = _decode(raw)
        return fold_case(events, state).model_copy(update={"seq": last})

    async def history(self, case_id: str) -> list[CaseEvent]:
        """Every event of the case, in order."""
        try:
            return _decode(await self._events.read(stream_id(case_id)))[0]
        except UnknownExecutionError:
            raise CaseNotFoundError(f"unknown case {case_id!r}") from None

    async def append(
        self, state: CaseState, events: Sequence[CaseEvent], *, status: StatusChange | None = None
    ) -> CaseState:
        """Append ``events`` if the case is still at ``state``; return the new state.

        Raises:
            CaseConflictError: Something was appended after ``state``; nothing was written.
        """
        at = self._clock()
        stamped = [
            event.model_copy(update={"seq": state.seq + offset, "at": at})
            for offset, event in enumerate(events, start=1)
        ]
        try:
            new_state = fold_case(stamped, state)  # an invalid transition fails before writing
        except ValueError as exc:
            raise CommissionError(str(exc)) from exc
        await self._write(state.case_id, state.seq, stamped, status)
        return new_state

    async def _write(
        self,
        case_id: str,
        expected_seq: int,
        events: Sequence[CaseEvent],
        status: StatusChange | None,
    ) -> None:
        at = self._clock()
        envelopes = [
            ExecutionResumed(
                seq=expected_seq + offset,
                at=at,
                on=f"{_ON_PREFIX}{event.type}",
                correlation_key=f"{case_id}#{expected_seq + offset}",
                payload=event.model_dump(mode="json", exclude={"seq", "at"}),
            )
            for offset, event in enumerate(events, start=1)
        ]
        # Every writer of a case is a peer, none a holder: an append that ends the case must
        # collide with the others' (fenced, it never rides a store's execution document).
        fenced = status is not None
        request = AppendRequest(stream_id(case_id), expected_seq, envelopes, status, fence=fenced)
        try:
            await self._events.append(request)
        except AppendConflictError as exc:
            raise CaseConflictError(f"case {case_id!r} moved: {exc.message}") from exc

    async def update(
        self,
        case_id: str,
        build: Callable[[CaseState], Sequence[CaseEvent]],
        *,
        status: StatusChange | None = None,
    ) -> CaseState:
        """Append what ``build`` derives from the current state, retrying if the case moves.

        ``build`` may raise :class:`CaseConflictError` when its precondition no longer holds.
        """
        state = await self.load(case_id)
        for _ in range(_RETRIES):
            events = build(state)  # a failed precondition propagates; only races retry
            try:
                return await self.append(state, events, status=status)
            except CaseConflictError:
                state = await self.refresh(state)
        raise CaseConflictError(f"case {case_id!r} kept moving; gave up after {_RETRIES} tries")

    async def assign(self, case_id: str, assignee: str) -> CaseState:
        """Assign the case's draft commission to ``assignee``."""
        return await self.update(case_id, lambda _: [CommissionAssigned(assignee=assignee)])

    async def close(self, case_id: str, reason: str = "") -> CaseState:
        """Close the commission: nothing is invoked under it again."""
        return await self.update(
            case_id,
            lambda _: [CommissionClosed(reason=reason)],
            status=StatusChange("completed"),
        )

    async def revise(
        self,
        case_id: str,
        *,
        expected_revision: int,
        frontier: Iterable[str] | None = None,
        reason: str = "",
        by: str = "embedder",
    ) -> CaseState:
        """Move the case to the next revision (the embedder changed it), fenced on a revision.

        Args:
            case_id: The case.
            expected_revision: The revision the caller saw; another one is a conflict.
            frontier: The new frontier; by default the current one.
            reason: Why the case changed.
            by: Who changed it.

        Raises:
            CaseConflictError: The case is not at ``expected_revision``.
        """

        def build(state: CaseState) -> list[CaseEvent]:
            if state.revision != expected_revision:
                raise CaseConflictError(
                    f"case {case_id!r} is at revision {state.revision}, not {expected_revision}"
                )
            new = state.frontier if frontier is None else tuple(frontier)
            return [CaseRevised(frontier=new, reason=reason, by=by)]

        return await self.update(case_id, build)
