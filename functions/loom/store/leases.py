"""The ``LeaseSet`` SPI: per-queue leases that bound how much work runs at once, everywhere.

Contract (every backend passes ``tests/contracts/test_lease_set.py`` unchanged):

* ``acquire(request)`` grants ``request.holder`` a lease on ``request.queue`` until
  ``now + ttl`` and returns True only if, atomically with the grant, all of these hold among
  the queue's *live* leases (``expires`` after ``now``), the holder's own excluded: fewer
  than ``limit`` (when given); none with the same ``partition`` (when given); and, for a new
  grant, fewer than ``rate`` grants in the second before ``now`` (when given; a rate below
  one counts over ``1 / rate`` seconds, see :func:`rate_window`). Otherwise it
  grants nothing and returns False. Processes calling it at once over one store never
  exceed a limit.
* Acquiring again while holding a live lease renews it (its own lease not counted, and not
  a new grant for the rate), so a retried call is not refused by itself.
* ``release(queue, holder)`` drops the holder's lease; releasing a lease that is not there
  is a no-op. A holder that dies without releasing holds its lease until it expires.
* ``wait(queue, holder, now)`` records that ``holder`` waits for a lease (a grant forgets
  it); ``depth(queue, now)`` answers the live leases and the holders still waiting.
* Every failure of the backend is a :class:`~loom.errors.StoreError` with the cause chained.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class LeaseRequest:
    """What :meth:`LeaseSet.acquire` is asked.

    Attributes:
        queue: The queue's name.
        holder: Who holds the lease (an execution id: one lease per execution).
        now: The caller's clock, epoch seconds.
        ttl: Seconds the lease lasts unless released or renewed.
        limit: At most this many live leases on the queue.
        partition: At most one live lease per partition key.
        rate: At most this many new grants per second on the queue.
    """

    queue: str
    holder: str
    now: float
    ttl: float
    limit: int | None = None
    partition: str | None = None
    rate: float | None = None


@dataclass(slots=True)
class QueueDepth:
    """How busy a queue is: leases live now, and holders waiting for one."""

    in_flight: int = 0
    waiting: int = 0


def admits(request: LeaseRequest, live: dict[str, str | None], recent: list[float]) -> bool:
    """Whether ``request`` fits among the ``live`` leases (holder → partition) and the
    ``recent`` grant times, for backends that decide in memory inside their transaction."""
    others = {h: p for h, p in live.items() if h != request.holder}
    if request.limit is not None and len(others) >= request.limit:
        return False
    if request.partition is not None and request.partition in others.values():
        return False
    if request.rate is None or request.holder in live:
        return True  # a renewal is not a new grant
    window = rate_window(request.rate)
    within = sum(1 for t in recent if request.now - window < t <= request.now)
    return within < request.rate * window


def rate_window(rate: float | None) -> float:
    """Seconds over which ``rate`` counts grants: one second, or ``1 / rate`` below one per
    second (0.5 is one grant in any two seconds, not one a second)."""
    return 1.0 if rate is None or rate >= 1.0 else 1.0 / rate


def is_new_grant(request: LeaseRequest, live: dict[str, str | None]) -> bool:
    """Whether granting ``request`` counts against the rate (it is not a renewal)."""
    return request.holder not in live


class LeaseSet(abc.ABC):
    """Per-queue leases; see the module docstring."""

    @abc.abstractmethod
    async def acquire(self, request: LeaseRequest) -> bool:
        """Grant or renew ``request.holder``'s lease if the queue's limits allow it."""

    @abc.abstractmethod
    async def release(self, queue: str, holder: str) -> None:
        """Drop ``holder``'s lease on ``queue`` (a no-op if it has none)."""

    @abc.abstractmethod
    async def wait(self, queue: str, holder: str, now: float) -> None:
        """Record that ``holder`` waits for a lease on ``queue``."""

    @abc.abstractmethod
    async def depth(self, queue: str, now: float) -> QueueDepth:
        """Live leases and waiting holders of ``queue``."""


@dataclass(slots=True)
class _Lease:
    partition: str | None
    expires: float


@dataclass
class _Queue:
    leases: dict[str, _Lease] = field(default_factory=dict[str, _Lease])
    waiting: set[str] = field(default_factory=set[str])
    grants: list[float] = field(default_factory=list[float])


class InMemoryLeaseSet(LeaseSet):
    """Leases in this process's memory: exact within one process, shared with no other."""

    def __init__(self) -> None:
        self._queues: dict[str, _Queue] = {}

    async def acquire(self, request: LeaseRequest) -> bool:
        """See :class:`LeaseSet` (no ``await`` inside: atomic on the event loop)."""
        q = self._queues.setdefault(request.queue, _Queue())
        q.leases = {h: lease for h, lease in q.leases.items() if lease.expires > request.now}
        live = {h: lease.partition for h, lease in q.leases.items()}
        if not admits(request, live, q.grants):
            return False
        if is_new_grant(request, live):
            keep = request.now - rate_window(request.rate)
            q.grants = [t for t in q.grants if t > keep] + [request.now]
        q.leases[request.holder] = _Lease(request.partition, request.now + request.ttl)
        q.waiting.discard(request.holder)
        return True

    async def release(self, queue: str, holder: str) -> None:
        """See :class:`LeaseSet`."""
        self._queues.get(queue, _Queue()).leases.pop(holder, None)

    async def wait(self, queue: str, holder: str, now: float) -> None:
        """See :class:`LeaseSet`."""
        self._queues.setdefault(queue, _Queue()).waiting.add(holder)

    async def depth(self, queue: str, now: float) -> QueueDepth:
        """See :class:`LeaseSet`."""
        q = self._queues.get(queue, _Queue())
        live = sum(1 for lease in q.leases.values() if lease.expires > now)
        return QueueDepth(live, len(q.waiting - set(q.leases)))
