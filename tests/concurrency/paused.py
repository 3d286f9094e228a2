"""``PausedLoads``: an event store that holds chosen loads until the test lets them go.

Racing writers are made to race on purpose: each writer loads the log, the test holds the
load's answer (the writer now decides from that state) while another writer moves the log
on, then lets the first one go. The store delegates everything else to the real store it
wraps, so conditional appends behave exactly as that backend's do.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from loom.events import Event, ExecutionStarted
from loom.store.base import (
    AppendRequest,
    EventStore,
    ExecutionSummary,
    ListCursor,
    LoadedLog,
    Snapshot,
)
from loom.store.leases import LeaseSet
from loom.store.schedule_store import ScheduleStore


class PausedLoads(EventStore):
    """Delegates to ``inner``; :meth:`hold` makes the next loads of one execution wait."""

    def __init__(self, inner: EventStore) -> None:
        self.inner = inner
        self.snapshot_min_tail = inner.snapshot_min_tail
        self.max_append_events = inner.max_append_events
        self.keeps_append_snapshots = inner.keeps_append_snapshots
        self.max_batch_bytes = inner.max_batch_bytes
        self.max_event_bytes = inner.max_event_bytes
        self._held: dict[str, int] = {}
        self._arrived: dict[str, list[asyncio.Event]] = {}
        self.go = asyncio.Event()
        self.all_arrived = asyncio.Event()

    def hold(self, execution_id: str, loads: int = 1) -> None:
        """Hold the next ``loads`` loads of ``execution_id`` until :attr:`go` is set;
        :attr:`all_arrived` is set once all of them have loaded."""
        self._held[execution_id] = loads
        self.go.clear()
        self.all_arrived.clear()

    async def load(self, execution_id: str) -> LoadedLog:
        loaded = await self.inner.load(execution_id)
        left = self._held.get(execution_id, 0)
        if left:
            self._held[execution_id] = left - 1
            if left == 1:
                self.all_arrived.set()
            await self.go.wait()
        return loaded

    async def create(
        self, started: ExecutionStarted, then: Sequence[Event] = ()
    ) -> tuple[bool, ExecutionStarted]:
        return await self.inner.create(started, then)

    async def append(self, request: AppendRequest) -> int:
        return await self.inner.append(request)

    async def read(self, execution_id: str, after_seq: int = 0) -> list[Event]:
        return await self.inner.read(execution_id, after_seq)

    async def save_snapshot(self, execution_id: str, snapshot: Snapshot) -> None:
        await self.inner.save_snapshot(execution_id, snapshot)

    async def summary(self, execution_id: str) -> ExecutionSummary:
        return await self.inner.summary(execution_id)

    async def list(
        self,
        status: str | None = None,
        *,
        due_before: float | None = None,
        limit: int = 1000,
        oldest_first: bool = False,
        after: ListCursor | None = None,
    ) -> list[ExecutionSummary]:
        return await self.inner.list(
            status, due_before=due_before, limit=limit, oldest_first=oldest_first, after=after
        )

    async def delete_execution(self, execution_id: str) -> bool:
        return await self.inner.delete_execution(execution_id)

    async def scan(
        self, statuses: Sequence[str], *, after: str | None = None, limit: int = 500
    ) -> list[ExecutionSummary]:
        return await self.inner.scan(statuses, after=after, limit=limit)

    def leases(self) -> LeaseSet:
        return self.inner.leases()

    def schedules(self) -> ScheduleStore:
        return self.inner.schedules()
