"""The ``LeaseSet`` SPI: per-queue leases that bound how much work runs at once, everywhere.

Contract (every backend passes ``tests/contracts/test_lease_set.py`` unchanged):

* A lease is one holder's (an execution: one lease per execution) on one queue, and it
  belongs to the *owner* that took it (the claim, one ``execute`` call, that runs the
  execution meanwhile). Only its owner renews or releases it: a second call delivered the
  same execution can neither free the slot the first one runs in nor run beside it.
* ``acquire(request)`` grants ``request.holder`` a lease on ``request.queue`` owned by
  ``request.owner`` until ``now + ttl`` and returns True only if, atomically with the grant,
  all of these hold among the queue's *live* leases (``expires`` after ``now``): the
  holder has none owned by another owner (unless that owner is ``request.replaces``, a
  claim known to be dead, whose lease is taken over); and, the holder's own excluded, fewer
  than ``limit`` (when given); none with the same ``partition`` (when given); and, for a new
  grant, fewer than ``rate`` grants in the second before ``now`` (when given; a rate below
  one counts over ``1 / rate`` seconds, see :func:`rate_window`). Otherwise it
  grants nothing and returns False. Processes calling it at once over one store never
  exceed a limit.
* Acquiring again while the same owner holds a live lease renews it (its own lease not
  counted, and not a new grant for the rate), so a retried call is not refused by itself;
  a takeover is not a new grant either.
* ``release(queue, holder, owner)`` drops the holder's lease if ``owner`` owns it; releasing
  a lease that is not there, or that another owner holds, is a no-op. An owner that dies
  without releasing holds its lease until it expires (or a call taking over its claim
  replaces it).
* ``wait(queue, holder, now)`` records that ``holder`` waits for a lease (a grant forgets
  it); ``depth(queue, now)`` answers the live leases and the holders still waiting.
* Every failure of the backend is a :class:`~loom.errors.StoreError` with the cause chained.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any

from loom.scope import off_scope_methods


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
        owner: Who takes it: the claim that will run the holder (one ``execute`` call).
        replaces: An owner known to be dead (a claim no longer live) whose lease on the
            holder, if it is still there, this one takes over.
    """

    queue: str
    holder: str
    now: float
    ttl: float
    limit: int | None = None
    partition: str | None = None
    rate: float | None = None
    owner: str = field(kw_only=True)
    replaces: str | None = field(default=None, kw_only=True)


@dataclass(slots=True)
class QueueDepth:
    """How busy a queue is: leases live now, and holders waiting for one."""

    in_flight: int = 0
    waiting: int = 0


def owned_elsewhere(request: LeaseRequest, owner: str | None) -> bool:
    """Whether the holder's live lease, owned by ``owner`` (``None``: it has none), belongs
    to another call than ``request``'s: that call runs the holder, so nothing is granted."""
    return owner is not None and owner not in (request.owner, request.replaces)


def admits(request: LeaseRequest, live: dict[str, str | None], recent: list[float]) -> bool:
    """Whether ``request`` fits among the ``live`` leases (holder → partition) and the
    ``recent`` grant times, for backends that decide in memory inside their transaction
    (after :func:`owned_elsewhere` said the holder's own lease, if any, is the caller's)."""
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

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        off_scope_methods(cls)  # a backend's calls take no flow step ids (loom.scope)

    @abc.abstractmethod
    async def acquire(self, request: LeaseRequest) -> bool:
        """Grant or renew ``request.holder``'s lease if the queue's limits allow it."""

    @abc.abstractmethod
    async def release(self, queue: str, holder: str, owner: str) -> None:
        """Drop ``holder``'s lease on ``queue`` if ``owner`` owns it (else a no-op)."""

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
    owner: str


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
        mine = q.leases.get(request.holder)
        if owned_elsewhere(request, None if mine is None else mine.owner):
            return False
        live = {h: lease.partition for h, lease in q.leases.items()}
        if not admits(request, live, q.grants):
            return False
        if is_new_grant(request, live):
            keep = request.now - rate_window(request.rate)
            q.grants = [t for t in q.grants if t > keep] + [request.now]
        expires = request.now + request.ttl
        q.leases[request.holder] = _Lease(request.partition, expires, request.owner)
        q.waiting.discard(request.holder)
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

    async def depth(self, queue: str, now: float) -> QueueDepth:
        """See :class:`LeaseSet`."""
        q = self._queues.get(queue, _Queue())
        live = sum(1 for lease in q.leases.values() if lease.expires > now)
        return QueueDepth(live, len(q.waiting - set(q.leases)))
