"""``InMemoryEventStore``: the reference backend, for tests and ``loom.testing``."""

from __future__ import annotations

import heapq
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from loom.errors import AppendConflictError, LogEndedError, UnknownExecutionError
from loom.events import TERMINAL_TYPES, Event, ExecutionStarted
from loom.ids import check_execution_id
from loom.store.base import (
    AppendRequest,
    EventStore,
    ExecutionSummary,
    ListCursor,
    LoadedLog,
    Snapshot,
    StatusChange,
    check_numbering,
    check_then,
    page_after,
    settled_status,
)
from loom.store.inbox import InMemoryInbox
from loom.store.memory_leases import InMemoryLeaseSet
from loom.store.schedule_store import InMemoryScheduleStore


@dataclass(slots=True)
class _Log:
    summary: ExecutionSummary
    events: list[Event] = field(default_factory=list[Event])
    snapshot: Snapshot | None = None


def _advanced(s: ExecutionSummary, last_seq: int, change: StatusChange | None) -> ExecutionSummary:
    """``s`` after an append to ``last_seq``; built directly, as ``dataclasses.replace``
    costs several times more on a path every append takes."""
    c = change or s
    return ExecutionSummary(
        s.execution_id,
        s.flow,
        c.status,
        last_seq,
        s.created_at,
        time.time(),
        c.wake_at,
        c.parked_reason,
        s.flow_version,
    )


class InMemoryEventStore(EventStore):
    """Keeps every log in a dict. Appends are atomic because nothing here awaits."""

    keeps_append_snapshots = True

    def __init__(self) -> None:
        self._logs: dict[str, _Log] = {}
        self._leases = InMemoryLeaseSet()
        self._inbox = InMemoryInbox()
        self._schedules = InMemoryScheduleStore()

    def leases(self) -> InMemoryLeaseSet:
        """Queue leases in memory, like the logs."""
        return self._leases

    def schedules(self) -> InMemoryScheduleStore:
        """Schedule records in memory, like the logs."""
        return self._schedules

    def inbox(self) -> InMemoryInbox:
        """Inboxes in memory, like the logs."""
        return self._inbox

    def _log(self, execution_id: str) -> _Log:
        check_execution_id(execution_id)
        try:
            return self._logs[execution_id]
        except KeyError:
            raise UnknownExecutionError(f"unknown execution {execution_id!r}") from None

    async def create(
        self, started: ExecutionStarted, then: Sequence[Event] = ()
    ) -> tuple[bool, ExecutionStarted]:
        existing = self._logs.get(check_execution_id(started.execution_id))
        check_then(started.execution_id, then)
        if existing is not None:
            first = existing.events[0]
            assert isinstance(first, ExecutionStarted)
            return False, first
        now = time.time()
        first = started.model_copy(update={"seq": 1})
        ended = settled_status(then, None)
        summary = ExecutionSummary(
            started.execution_id,
            started.flow,
            "running" if ended is None else ended.status,
            1 + len(then),
            now,
            now,
            flow_version=started.flow_version,
        )
        self._logs[started.execution_id] = _Log(summary, [first, *then])
        return True, first

    async def append(self, request: AppendRequest) -> int:
        log = self._log(request.execution_id)
        last = log.summary.last_seq
        if last != request.expected_seq:
            raise AppendConflictError(
                f"log of {request.execution_id!r} ends at {last}, not {request.expected_seq}"
            )
        if log.events[-1].type in TERMINAL_TYPES:
            raise LogEndedError(
                f"log of {request.execution_id!r} ends with {log.events[-1].type} at {last}: "
                "nothing may follow"
            )
        check_numbering(request)
        log.events.extend(request.events)
        new_last = last + len(request.events)
        log.summary = _advanced(
            log.summary, new_last, settled_status(request.events, request.status)
        )
        if request.snapshot is not None:
            log.snapshot = Snapshot(new_last, request.snapshot)
        return new_last

    async def load(self, execution_id: str) -> LoadedLog:
        log = self._log(execution_id)
        after = log.snapshot.seq if log.snapshot else 0
        return LoadedLog(log.snapshot, log.events[after:])

    async def read(self, execution_id: str, after_seq: int = 0) -> list[Event]:
        return list(self._log(execution_id).events[after_seq:])

    async def save_snapshot(self, execution_id: str, snapshot: Snapshot) -> None:
        log = self._log(execution_id)
        if snapshot.seq > log.summary.last_seq:
            raise ValueError(f"snapshot at {snapshot.seq} is ahead of the log")
        if log.snapshot is None or log.snapshot.seq < snapshot.seq:
            log.snapshot = snapshot

    async def summary(self, execution_id: str) -> ExecutionSummary:
        return self._log(execution_id).summary

    async def list(
        self,
        status: str | None = None,
        *,
        due_before: float | None = None,
        limit: int = 1000,
        oldest_first: bool = False,
        after: ListCursor | None = None,
    ) -> list[ExecutionSummary]:
        rows = [log.summary for log in self._logs.values()]
        if status is not None:
            rows = [r for r in rows if r.status == status]
        if due_before is not None:
            rows = [r for r in rows if r.wake_at is not None and r.wake_at <= due_before]
        return page_after(rows, after, oldest_first, limit)

    async def delete_execution(self, execution_id: str) -> bool:
        self._inbox.drop(execution_id)
        return self._logs.pop(execution_id, None) is not None

    async def scan(
        self, statuses: Sequence[str], *, after: str | None = None, limit: int = 500
    ) -> list[ExecutionSummary]:
        wanted = set(statuses)
        rows = [
            log.summary
            for eid, log in self._logs.items()
            if log.summary.status in wanted and (after is None or eid > after)
        ]
        return heapq.nsmallest(limit, rows, key=lambda r: r.execution_id)
