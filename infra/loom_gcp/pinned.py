"""Wrappers that run every call of an event store (and of its inbox, schedule store and
lease set) on one background loop, the process loop by default.

The Firestore store's async client is bound to the event loop that first uses it; pinned,
it serves callers on any loop (a script's ``asyncio.run``, a test). :mod:`loom_gcp.bootstrap`
pins the Firestore store it builds, and exports these names too.
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

from loom.events import Event, ExecutionStarted
from loom.store.base import (
    AppendRequest,
    EventStore,
    ExecutionSummary,
    ListCursor,
    LoadedLog,
    OnDelete,
    PurgeReport,
    Snapshot,
)
from loom.store.browse import BrowseQuery
from loom.store.inbox import Inbox, InboxItem
from loom.store.leases import (
    Admitted,
    DedupHolder,
    LeaseRequest,
    LeaseSet,
    QueueDepth,
    QueueLimits,
)
from loom.store.schedule_store import ScheduleRecord, ScheduleStore
from loom.workers.loop import PROCESS_LOOP, BackgroundLoop

T = TypeVar("T")


class PinnedEventStore(EventStore):
    """An :class:`EventStore` whose calls all run on one background loop.

    Args:
        inner: The store (e.g. ``FirestoreEventStore``), used only from ``loop``.
        loop: The loop it is pinned to.
    """

    def __init__(self, inner: EventStore, loop: BackgroundLoop = PROCESS_LOOP) -> None:
        self.inner = inner
        self.loop = loop
        self.snapshot_min_tail = inner.snapshot_min_tail

    async def _on_loop(self, coro: Coroutine[Any, Any, T]) -> T:
        if self.loop.owns_current():
            return await coro
        return await asyncio.wrap_future(self.loop.submit(coro))

    async def create(
        self, started: ExecutionStarted, then: Sequence[Event] = ()
    ) -> tuple[bool, ExecutionStarted]:
        return await self._on_loop(self.inner.create(started, then))

    async def append(self, request: AppendRequest) -> int:
        return await self._on_loop(self.inner.append(request))

    async def load(self, execution_id: str) -> LoadedLog:
        return await self._on_loop(self.inner.load(execution_id))

    async def load_many(self, execution_ids: Sequence[str]) -> builtins.list[LoadedLog]:
        return await self._on_loop(self.inner.load_many(execution_ids))

    async def read(self, execution_id: str, after_seq: int = 0) -> builtins.list[Event]:
        return await self._on_loop(self.inner.read(execution_id, after_seq))

    async def save_snapshot(self, execution_id: str, snapshot: Snapshot) -> None:
        await self._on_loop(self.inner.save_snapshot(execution_id, snapshot))

    async def summary(self, execution_id: str) -> ExecutionSummary:
        return await self._on_loop(self.inner.summary(execution_id))

    async def list(
        self,
        status: str | None = None,
        *,
        due_before: float | None = None,
        limit: int = 1000,
        oldest_first: bool = False,
        after: ListCursor | None = None,
    ) -> builtins.list[ExecutionSummary]:
        return await self._on_loop(
            self.inner.list(
                status, due_before=due_before, limit=limit, oldest_first=oldest_first, after=after
            )
        )

    async def delete_execution(self, execution_id: str) -> bool:
        return await self._on_loop(self.inner.delete_execution(execution_id))

    async def scan(
        self, statuses: Sequence[str], *, after: str | None = None, limit: int = 500
    ) -> builtins.list[ExecutionSummary]:
        return await self._on_loop(self.inner.scan(statuses, after=after, limit=limit))

    async def shard_count(self) -> int:
        return await self._on_loop(self.inner.shard_count())

    async def list_shard(
        self,
        shard: int,
        status: str | None = None,
        *,
        due_before: float | None = None,
        limit: int = 1000,
        oldest_first: bool = False,
        after: ListCursor | None = None,
    ) -> builtins.list[ExecutionSummary]:
        return await self._on_loop(
            self.inner.list_shard(
                shard,
                status,
                due_before=due_before,
                limit=limit,
                oldest_first=oldest_first,
                after=after,
            )
        )

    async def purge(
        self,
        finished_before: float,
        *,
        limit: int = 100,
        after: ListCursor | None = None,
        on_delete: OnDelete | None = None,
        shard: int | None = None,
    ) -> PurgeReport:
        # (``on_delete`` runs on the store's loop too: blob stores call their clients on threads)
        return await self._on_loop(
            self.inner.purge(
                finished_before, limit=limit, after=after, on_delete=on_delete, shard=shard
            )
        )

    async def browse(self, query: BrowseQuery) -> builtins.list[ExecutionSummary]:
        return await self._on_loop(self.inner.browse(query))

    async def count_by_status(self, *, flow: str | None = None) -> dict[str, int]:
        return await self._on_loop(self.inner.count_by_status(flow=flow))

    async def upkeep(self) -> dict[str, int]:
        return await self._on_loop(self.inner.upkeep())

    async def aclose(self) -> None:
        await self._on_loop(self.inner.aclose())

    async def ping(self) -> None:
        """The inner store's readiness check, on its loop."""
        await self._on_loop(self.inner.ping())

    def inbox(self) -> Inbox | None:
        """The inner store's inboxes, their calls on the same loop."""
        inner = self.inner.inbox()
        if inner is None:
            return None
        found: Inbox | None = getattr(self, "_inbox", None)
        if found is None:
            found = self._inbox = PinnedInbox(inner, self)
        return found

    def schedules(self) -> ScheduleStore:
        """The inner store's schedule records, their calls on the same loop."""
        found: ScheduleStore | None = getattr(self, "_schedule_store", None)
        if found is None:
            found = self._schedule_store = PinnedScheduleStore(self.inner.schedules(), self)
        return found

    def leases(self) -> LeaseSet:
        """The inner store's queue leases, their calls on the same loop."""
        found: LeaseSet | None = getattr(self, "_lease_set", None)
        if found is None:
            found = self._lease_set = PinnedLeaseSet(self.inner.leases(), self)
        return found


class PinnedInbox(Inbox):
    """An :class:`Inbox` whose calls run on its pinned store's loop."""

    def __init__(self, inner: Inbox, store: PinnedEventStore) -> None:
        self.inner = inner
        self.store = store
        self.wake_interval = inner.wake_interval

    async def post(self, execution_id: str, item: InboxItem) -> bool:
        """See :class:`Inbox`."""
        return await self.store._on_loop(self.inner.post(execution_id, item))  # pyright: ignore[reportPrivateUsage]

    async def items(self, execution_id: str, limit: int = 500) -> builtins.list[InboxItem]:
        """See :class:`Inbox`."""
        return await self.store._on_loop(self.inner.items(execution_id, limit))  # pyright: ignore[reportPrivateUsage]

    async def remove(self, execution_id: str, keys: builtins.list[str]) -> None:
        """See :class:`Inbox`."""
        await self.store._on_loop(self.inner.remove(execution_id, keys))  # pyright: ignore[reportPrivateUsage]

    async def stranded(
        self, before: float, shard: int, shards: int, limit: int = 500
    ) -> builtins.list[str]:
        """See :class:`Inbox`."""
        return await self.store._on_loop(self.inner.stranded(before, shard, shards, limit))  # pyright: ignore[reportPrivateUsage]


class PinnedScheduleStore(ScheduleStore):
    """A :class:`ScheduleStore` whose calls run on its pinned store's loop."""

    def __init__(self, inner: ScheduleStore, store: PinnedEventStore) -> None:
        self.inner = inner
        self.store = store

    async def get(self, name: str) -> ScheduleRecord | None:
        """See :class:`ScheduleStore`."""
        return await self.store._on_loop(self.inner.get(name))  # pyright: ignore[reportPrivateUsage]

    async def list(self) -> builtins.list[ScheduleRecord]:
        """See :class:`ScheduleStore`."""
        return await self.store._on_loop(self.inner.list())  # pyright: ignore[reportPrivateUsage]

    async def put(self, record: ScheduleRecord, expected: int | None) -> bool:
        """See :class:`ScheduleStore`."""
        return await self.store._on_loop(self.inner.put(record, expected))  # pyright: ignore[reportPrivateUsage]

    async def delete(self, name: str, expected: int) -> bool:
        """See :class:`ScheduleStore`."""
        return await self.store._on_loop(self.inner.delete(name, expected))  # pyright: ignore[reportPrivateUsage]


class PinnedLeaseSet(LeaseSet):
    """A :class:`LeaseSet` whose calls run on its pinned store's loop."""

    def __init__(self, inner: LeaseSet, store: PinnedEventStore) -> None:
        self.inner = inner
        self.store = store
        self.batched = inner.batched
        self.admit_interval = inner.admit_interval

    async def take(self, request: LeaseRequest) -> bool:
        """See :class:`LeaseSet`."""
        return await self.store._on_loop(self.inner.take(request))  # pyright: ignore[reportPrivateUsage]

    async def enqueue(self, request: LeaseRequest) -> None:
        """See :class:`LeaseSet`."""
        await self.store._on_loop(self.inner.enqueue(request))  # pyright: ignore[reportPrivateUsage]

    async def admit(
        self, queue: str, shard: int, limits: QueueLimits, now: float, most: int = 100
    ) -> Admitted:
        """See :class:`LeaseSet`."""
        return await self.store._on_loop(self.inner.admit(queue, shard, limits, now, most))  # pyright: ignore[reportPrivateUsage]

    async def acquire(self, request: LeaseRequest) -> bool:
        """See :class:`LeaseSet`."""
        return await self.store._on_loop(self.inner.acquire(request))  # pyright: ignore[reportPrivateUsage]

    async def release(self, queue: str, holder: str, owner: str) -> None:
        """See :class:`LeaseSet`."""
        await self.store._on_loop(self.inner.release(queue, holder, owner))  # pyright: ignore[reportPrivateUsage]

    async def wait(self, queue: str, holder: str, now: float) -> None:
        """See :class:`LeaseSet`."""
        await self.store._on_loop(self.inner.wait(queue, holder, now))  # pyright: ignore[reportPrivateUsage]

    async def depth(self, queue: str, now: float) -> QueueDepth:
        """See :class:`LeaseSet`."""
        return await self.store._on_loop(self.inner.depth(queue, now))  # pyright: ignore[reportPrivateUsage]

    async def deduplicate(
        self, queue: str, dedup_id: str, holder: str, now: float, replaces: str | None = None
    ) -> DedupHolder:
        """See :class:`LeaseSet`."""
        held = self.inner.deduplicate(queue, dedup_id, holder, now, replaces)
        return await self.store._on_loop(held)  # pyright: ignore[reportPrivateUsage]

    async def forget(self, queue: str, dedup_id: str, holder: str) -> None:
        """See :class:`LeaseSet`."""
        await self.store._on_loop(self.inner.forget(queue, dedup_id, holder))  # pyright: ignore[reportPrivateUsage]
