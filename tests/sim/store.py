"""One worker's view of the shared store: latency, outages, lost answers, and death.

All workers share one :class:`~loom.store.memory.InMemoryEventStore` (the reference backend:
its appends are conditioned on the log's last seq exactly as SQLite's ``UPDATE … WHERE
last_seq=?`` and Firestore's ``create()`` preconditions are). Each worker reaches it through
its own :class:`SimStore`, which makes every call a round trip:

1. the request travels (latency, or an outage: :class:`~loom.errors.StoreUnavailableError`
   before anything is applied);
2. the shared store applies it in one step (it never awaits, so the step is atomic);
3. the answer travels back (latency, or, for a write, a lost answer: the write applied and
   the caller gets ``StoreUnavailableError`` all the same, as a commit whose connection
   dropped does).

Append conflicts are not made up: the contract says a conflict means the log moved, and the
workers, the clients and the operator move it often enough (a conflict on a log that did
not move would be a store bug, not a fault to survive).

A worker killed while its call is on the way stays suspended there: the call may or may not
have applied, exactly the uncertainty a crash leaves. Events are copied on the way in, as a
store that serializes them would, so a caller that renumbers an event object it keeps
(after an error) can never rewrite the log. Summaries are stamped with the virtual clock
(``tests.sim.patches``).

Queue leases (``store.leases()``) go through :class:`SimLeases`: latency only. A lease call
that failed or stalled would let a live holder's lease lapse, which bounds nothing by
design; the simulator checks that the engine keeps leases, not that leases survive outages.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

from loom.errors import StoreUnavailableError
from loom.events import Event, ExecutionStarted
from loom.store.base import (
    AppendRequest,
    EventStore,
    ExecutionSummary,
    ListCursor,
    LoadedLog,
    Snapshot,
)
from loom.store.leases import (
    Admitted,
    DedupHolder,
    LeaseRequest,
    LeaseSet,
    QueueDepth,
    QueueLimits,
)
from loom.store.memory import InMemoryEventStore
from loom.store.schedule_store import ScheduleStore

if TYPE_CHECKING:
    from tests.sim.world import World

T = TypeVar("T")

WRITES = frozenset({"create", "append", "save_snapshot", "delete_execution"})


class SimStore(EventStore):
    """``raw`` as seen by worker ``worker`` of ``world`` (see the module docstring)."""

    def __init__(self, world: World, raw: InMemoryEventStore, worker: str) -> None:
        self.world, self.raw, self.worker = world, raw, worker
        self.keeps_append_snapshots = raw.keeps_append_snapshots
        self.snapshot_min_tail = raw.snapshot_min_tail
        self.max_append_events = raw.max_append_events
        self._leases = SimLeases(world, raw.leases())

    def _call(self, op: str, apply: Callable[[], Awaitable[T]], about: str = "-") -> Awaitable[T]:
        return self.world.faults.round_trip(self.worker, op, apply, about)

    def leases(self) -> LeaseSet:
        return self._leases

    def schedules(self) -> ScheduleStore:
        return self.raw.schedules()

    async def create(
        self, started: ExecutionStarted, then: Sequence[Event] = ()
    ) -> tuple[bool, ExecutionStarted]:
        first, rest = started.model_copy(), [e.model_copy() for e in then]
        return await self._call("create", lambda: self.raw.create(first, rest), first.execution_id)

    async def append(self, request: AppendRequest) -> int:
        copied = replace(request, events=[e.model_copy() for e in request.events])
        return await self._call("append", lambda: self.raw.append(copied), copied.execution_id)

    async def load(self, execution_id: str) -> LoadedLog:
        return await self._call("load", lambda: self.raw.load(execution_id), execution_id)

    async def load_many(self, execution_ids: Sequence[str]) -> list[LoadedLog]:
        return await self._call("load", lambda: self.raw.load_many(execution_ids))

    async def read(self, execution_id: str, after_seq: int = 0) -> list[Event]:
        return await self._call(
            "read", lambda: self.raw.read(execution_id, after_seq), execution_id
        )

    async def save_snapshot(self, execution_id: str, snapshot: Snapshot) -> None:
        await self._call(
            "save_snapshot", lambda: self.raw.save_snapshot(execution_id, snapshot), execution_id
        )

    async def summary(self, execution_id: str) -> ExecutionSummary:
        return await self._call("summary", lambda: self.raw.summary(execution_id), execution_id)

    async def list(
        self,
        status: str | None = None,
        *,
        due_before: float | None = None,
        limit: int = 1000,
        oldest_first: bool = False,
        after: ListCursor | None = None,
    ) -> list[ExecutionSummary]:
        kw: dict[str, Any] = {"due_before": due_before, "limit": limit}
        kw.update(oldest_first=oldest_first, after=after)
        return await self._call("list", lambda: self.raw.list(status, **kw))

    async def delete_execution(self, execution_id: str) -> bool:
        return await self._call("delete_execution", lambda: self.raw.delete_execution(execution_id))

    async def scan(
        self, statuses: Sequence[str], *, after: str | None = None, limit: int = 500
    ) -> list[ExecutionSummary]:
        return await self._call("scan", lambda: self.raw.scan(statuses, after=after, limit=limit))


class SimLeases(LeaseSet):
    """The shared lease set behind latency (never an outage: see the module docstring).

    With ``admission="batched"`` it says so (``batched``, an admit pass a second), as
    Firestore's does: the engine then takes every new lease from an admit pass.
    """

    def __init__(self, world: World, raw: LeaseSet) -> None:
        self.world, self.raw = world, raw
        if world.config.admission == "batched":
            self.batched, self.admit_interval = True, 1.0

    async def _call(self, apply: Callable[[], Awaitable[T]]) -> T:
        await self.world.faults.lease_latency()
        result = await apply()
        await self.world.faults.lease_latency()
        return result

    async def acquire(self, request: LeaseRequest) -> bool:
        granted = await self._call(lambda: self._acquire(request))
        return granted

    async def _acquire(self, request: LeaseRequest) -> bool:
        granted = await self.raw.acquire(request)
        self.world.note(
            f"lease {request.queue} {request.holder} {'granted' if granted else 'refused'}"
        )
        return granted

    async def release(self, queue: str, holder: str, owner: str) -> None:
        await self._call(lambda: self._release(queue, holder, owner))

    async def _release(self, queue: str, holder: str, owner: str) -> None:
        await self.raw.release(queue, holder, owner)
        self.world.note(f"lease {queue} {holder} released by {owner}")

    async def wait(self, queue: str, holder: str, now: float) -> None:
        await self._call(lambda: self.raw.wait(queue, holder, now))

    async def depth(self, queue: str, now: float) -> QueueDepth:
        return await self._call(lambda: self.raw.depth(queue, now))

    async def take(self, request: LeaseRequest) -> bool:
        return await self._call(lambda: self._take(request))

    async def deduplicate(
        self, queue: str, dedup_id: str, holder: str, now: float, replaces: str | None = None
    ) -> DedupHolder:
        return await self._call(
            lambda: self.raw.deduplicate(queue, dedup_id, holder, now, replaces)
        )

    async def forget(self, queue: str, dedup_id: str, holder: str) -> None:
        await self._call(lambda: self.raw.forget(queue, dedup_id, holder))

    async def _take(self, request: LeaseRequest) -> bool:
        taken = await self.raw.take(request)
        self.world.note(
            f"lease {request.queue} {request.holder} {'taken' if taken else 'not taken'}"
        )
        return taken

    async def enqueue(self, request: LeaseRequest) -> None:
        await self._call(lambda: self.raw.enqueue(request))

    async def admit(
        self, queue: str, shard: int, limits: QueueLimits, now: float, most: int = 100
    ) -> Admitted:
        return await self._call(lambda: self._admit(queue, shard, limits, now, most))

    async def _admit(
        self, queue: str, shard: int, limits: QueueLimits, now: float, most: int
    ) -> Admitted:
        done = await self.raw.admit(queue, shard, limits, now, most)
        granted = " ".join(w.holder for w in done.granted) or "none"
        self.world.note(f"admit {queue}/{shard} granted {granted}")
        return done


class Faults:
    """Draws the latency and the failures of store calls (see :class:`SimConfig
    <tests.sim.config.SimConfig>`); a scenario adds its own with :meth:`script`."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.rng = world.rng("faults")
        self.scripted: dict[tuple[str, str, int], tuple[float, float]] = {}
        # A scenario's own timing: (worker, op, execution) -> (before, after) or None.
        self.timing: Callable[[str, str, str], tuple[float, float] | None] | None = None
        self.calls: dict[tuple[str, str], int] = {}
        self._client_tasks: set[asyncio.Future[None]] = set()

    def script(self, worker: str, op: str, nth: int, before: float = 0.0, after: float = 0.0):
        """Make worker ``worker``'s ``nth`` call of ``op`` (1-based) take ``before`` seconds
        to apply and ``after`` seconds to answer."""
        self.scripted[(worker, op, nth)] = (before, after)

    async def round_trip(
        self, worker: str, op: str, apply: Callable[[], Awaitable[T]], about: str = "-"
    ) -> T:
        """Worker ``worker``'s call ``op`` (``about`` an execution): the way there, ``apply``
        (atomic), the way back."""
        n = self.calls[(worker, op)] = self.calls.get((worker, op), 0) + 1
        scripted = self.scripted.get((worker, op, n))
        if scripted is None and self.timing is not None:
            scripted = self.timing(worker, op, about)
        chaos, cfg = self.world.chaos, self.world.config
        if scripted is not None:
            await asyncio.sleep(scripted[0])
        else:
            failed = chaos and self.rng.random() < cfg.unavailable_rate
            await asyncio.sleep(self._latency())
            if failed:
                self.world.note(f"{op} {about} failed before it applied")
                raise StoreUnavailableError(f"sim: {op} failed before it applied")
        result = await apply()  # (the memory store never awaits: applied in this step)
        self.spawn_client_task()
        if scripted is not None:
            await asyncio.sleep(scripted[1])
            return result
        lost = op in WRITES and chaos and self.rng.random() < cfg.lost_answer_rate
        await asyncio.sleep(self._latency())
        if lost:
            self.world.note(f"{op} {about} applied, and its answer was lost")
            raise StoreUnavailableError(f"sim: {op} applied, and its answer was lost")
        return result

    def _latency(self) -> float:
        cfg, rng = self.world.config, self.rng
        if rng.random() < cfg.instant_rate:
            return 0.0  # (``asyncio.sleep(0)`` still yields: a round trip is an await)
        if self.world.chaos and rng.random() < cfg.stall_rate:
            return rng.uniform(0.5, 1.0) * cfg.stall_seconds
        return rng.expovariate(1.0 / cfg.latency) if cfg.latency > 0 else 0.0

    async def lease_latency(self) -> None:
        await asyncio.sleep(min(self._latency(), 0.5))

    def spawn_client_task(self) -> None:
        """Start a short task where the store was called from, as some clients do."""
        cfg = self.world.config
        if cfg.client_task_rate and self.rng.random() < cfg.client_task_rate:
            task = asyncio.ensure_future(asyncio.sleep(0))
            self._client_tasks.add(task)
            task.add_done_callback(self._client_tasks.discard)
