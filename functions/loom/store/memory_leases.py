"""``InMemoryLeaseSet``: queue leases in this process's memory (see :mod:`loom.store.leases`).

Exact within one process, shared with no other: every method decides without an ``await``,
so each is atomic on the event loop.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from loom.store.leases import (
    GRANT,
    Admitted,
    DedupHolder,
    LeaseRequest,
    LeaseSet,
    QueueDepth,
    QueueLimits,
    Waiter,
    admit_shard,
    admits,
    choose,
    is_new_grant,
    owned_elsewhere,
    rate_window,
    shard_limits,
    waits_behind,
)


@dataclass(slots=True)
class _Lease:
    partition: str | None
    expires: float
    owner: str
    shard: int = 0


@dataclass
class _Queue:
    leases: dict[str, _Lease] = field(default_factory=dict[str, _Lease])
    waiting: set[str] = field(default_factory=set[str])
    queued: dict[str, tuple[int, Waiter]] = field(default_factory=dict[str, tuple[int, Waiter]])
    grants: dict[int, list[float]] = field(default_factory=dict[int, list[float]])
    dedup: dict[str, DedupHolder] = field(default_factory=dict[str, DedupHolder])

    def prune(self, now: float) -> None:
        self.leases = {h: lease for h, lease in self.leases.items() if lease.expires > now}

    def live(self, shard: int) -> dict[str, str | None]:
        return {h: x.partition for h, x in self.leases.items() if x.shard == shard}

    def granted(self, shard: int, now: float, rate: float | None) -> None:
        keep = now - rate_window(rate)
        self.grants[shard] = [t for t in self.grants.get(shard, []) if t > keep] + [now]


class InMemoryLeaseSet(LeaseSet):
    """Leases in this process's memory: exact within one process, shared with no other."""

    def __init__(self) -> None:
        self._queues: dict[str, _Queue] = {}

    def _queue(self, name: str, now: float) -> _Queue:
        q = self._queues.setdefault(name, _Queue())
        q.prune(now)
        return q

    async def acquire(self, request: LeaseRequest) -> bool:
        """See :class:`LeaseSet`."""
        q = self._queue(request.queue, request.now)
        mine = q.leases.get(request.holder)
        if owned_elsewhere(request, None if mine is None else mine.owner):
            return False
        shard = admit_shard(request) if mine is None else mine.shard
        live = q.live(shard)
        if not admits(request, live, q.grants.get(shard, [])):
            return False
        queued = [w for k, w in q.queued.values() if k == shard]
        if is_new_grant(request, live) and waits_behind(request, queued, live):
            return False
        if is_new_grant(request, live):
            q.granted(shard, request.now, shard_limits(QueueLimits.of(request), shard).rate)
        self._hold(q, request, shard)
        return True

    def _hold(self, q: _Queue, request: LeaseRequest, shard: int) -> None:
        expires = request.now + request.ttl
        q.leases[request.holder] = _Lease(request.partition, expires, request.owner, shard)
        q.waiting.discard(request.holder)
        q.queued.pop(request.holder, None)

    async def take(self, request: LeaseRequest) -> bool:
        """See :class:`LeaseSet`."""
        q = self._queue(request.queue, request.now)
        mine = q.leases.get(request.holder)
        if mine is None or owned_elsewhere(request, mine.owner):
            return False
        self._hold(q, request, mine.shard)
        return True

    async def release(self, queue: str, holder: str, owner: str) -> None:
        """See :class:`LeaseSet`."""
        leases = self._queues.get(queue, _Queue()).leases
        lease = leases.get(holder)
        if lease is not None and lease.owner == owner:
            del leases[holder]

    async def wait(self, queue: str, holder: str, now: float) -> None:
        """See :class:`LeaseSet`."""
        self._queues.setdefault(queue, _Queue()).waiting.add(holder)

    async def enqueue(self, request: LeaseRequest) -> None:
        """See :class:`LeaseSet`."""
        q = self._queues.setdefault(request.queue, _Queue())
        if request.holder not in q.queued:
            waiter = Waiter(
                request.holder, request.partition, request.now, request.flow, request.priority
            )
            q.queued[request.holder] = (admit_shard(request), waiter)

    async def admit(
        self, queue: str, shard: int, limits: QueueLimits, now: float, most: int = 100
    ) -> Admitted:
        """See :class:`LeaseSet`."""
        q = self._queue(queue, now)
        mine = shard_limits(limits, shard)
        waiters = [w for k, w in q.queued.values() if k == shard]
        live = q.live(shard)
        granted, again = choose(waiters, live, q.grants.get(shard, []), mine, now, most)
        for w in granted:
            owner = f"{GRANT}{uuid.uuid4().hex}"
            q.leases[w.holder] = _Lease(w.partition, now + limits.grant_ttl, owner, shard)
            q.queued.pop(w.holder, None)
            q.granted(shard, now, mine.rate)
        left = len(waiters) - len(granted)
        if left and again is None:
            expiring = [x.expires for x in q.leases.values() if x.shard == shard]
            again = min(expiring) if expiring else None
        return Admitted(granted, left, again if left else None)

    async def deduplicate(
        self, queue: str, dedup_id: str, holder: str, now: float, replaces: str | None = None
    ) -> DedupHolder:
        """See :class:`LeaseSet`."""
        held = self._queues.setdefault(queue, _Queue()).dedup
        found = held.get(dedup_id)
        if found is None or found.holder == replaces:
            held[dedup_id] = DedupHolder(holder, now)
        return held[dedup_id]

    async def forget(self, queue: str, dedup_id: str, holder: str) -> None:
        """See :class:`LeaseSet`."""
        held = self._queues.get(queue, _Queue()).dedup
        if dedup_id in held and held[dedup_id].holder == holder:
            del held[dedup_id]

    async def depth(self, queue: str, now: float) -> QueueDepth:
        """See :class:`LeaseSet`."""
        q = self._queues.get(queue, _Queue())
        live = {h for h, lease in q.leases.items() if lease.expires > now}
        waiting = (q.waiting | set(q.queued)) - live
        return QueueDepth(len(live), len(waiting))


__all__ = ["InMemoryLeaseSet"]
