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
  it); ``depth(queue, now)`` answers the live leases (grants included) and the holders
  still waiting.
* Every failure of the backend is a :class:`~loom.errors.StoreError` with the cause chained.

Priority (a waiter's ``priority``, lower first; 0 by default):

* ``admit`` grants the shard's waiting holders by ``(priority, since, holder)``;
  ``acquire`` grants no new lease to a request while a holder that could be granted now
  (not leased, its partition free) waits in the shard ahead of it (:func:`waits_behind`),
  so a newcomer never overtakes a waiting holder of a better priority.

Deduplication ids (a queue's, held by one execution at a time):

* ``deduplicate(queue, dedup_id, holder, now, replaces=None)`` makes ``holder`` hold the
  id atomically when nobody holds it, ``holder`` does already (keeping its ``since``), or
  ``replaces`` does; otherwise it changes nothing. It answers who holds it after the call.
* ``forget(queue, dedup_id, holder)`` drops the id if ``holder`` holds it (else a no-op).

Admission in batches (the queue's waiting executions are granted by an *admitter*, not by
polling):

* ``enqueue(request)`` records that ``request.holder`` waits for a lease, with its
  partition, in the queue's *admit shard* :func:`admit_shard` (a holder already waiting
  keeps its place).
* ``admit(queue, shard, limits, now, most)`` grants, atomically, up to ``most`` of the
  shard's waiting holders, oldest first, each a lease owned by nobody yet (a *grant*,
  :func:`is_grant`) lasting ``limits.grant_ttl``, within the shard's part of the queue's
  limits (:func:`shard_limits`: the shards' parts add up to the queue's limits, so the
  queue's are never exceeded), never a partition already leased, never a holder that
  holds a lease; a grant is a new grant for the rate. Granted holders stop waiting. It
  answers them (to be woken) and when another pass could grant more.
* A grant counts as a live lease. ``take(request)`` turns the holder's live grant into a
  lease owned by ``request.owner`` (only one owner gets it), or renews the lease
  ``request.owner`` (or ``request.replaces``) holds; it never makes a new grant, so it
  touches no state shared by the queue. ``acquire`` takes a grant the same way.
* ``batched``: whether new grants should come from ``admit`` alone (``acquire``
  contends on state every grant of the queue shares); ``admit_interval``: the seconds
  between two admit passes of one shard worth waiting for, so a pass grants a batch.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from loom.scope import off_scope_methods
from loom.shards import shard_of

GRANT: Final = "granted:"
"""How a grant's owner starts: a lease the admitter made that no call has taken yet."""
DEFAULT_GRANT_TTL: Final = 30.0


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
        shards: The queue's admit shards (see :func:`admit_shard`).
        flow: The holder's flow, kept with a wait so an admitter can wake it by name.
        priority: The holder's priority among the queue's waiters (lower first).
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
    shards: int = field(default=1, kw_only=True)
    flow: str | None = field(default=None, kw_only=True)
    priority: int = field(default=0, kw_only=True)


@dataclass(frozen=True, slots=True)
class QueueLimits:
    """A queue's limits, as an admit pass applies them.

    Attributes:
        limit: At most this many live leases (grants included).
        rate: At most this many new grants per second.
        grant_ttl: Seconds a grant waits for its holder to take it before it lapses.
        shards: Admit shards the queue's waiting holders are split over.
    """

    limit: int | None = None
    rate: float | None = None
    grant_ttl: float = DEFAULT_GRANT_TTL
    shards: int = 1

    @classmethod
    def of(cls, request: LeaseRequest) -> QueueLimits:
        """The limits a request names."""
        return cls(request.limit, request.rate, shards=request.shards)


@dataclass(frozen=True, slots=True)
class Waiter:
    """A holder waiting for a lease (what ``enqueue`` recorded)."""

    holder: str
    partition: str | None
    since: float
    flow: str | None = None
    priority: int = 0

    def order(self) -> tuple[int, float, str]:
        """Where it stands among waiters: by priority (lower first), then oldest first."""
        return (self.priority, self.since, self.holder)


@dataclass(frozen=True, slots=True)
class DedupHolder:
    """Who holds a queue's deduplication id, since when (epoch seconds)."""

    holder: str
    since: float


@dataclass(frozen=True, slots=True)
class Admitted:
    """What one :meth:`LeaseSet.admit` pass did.

    Attributes:
        granted: The holders granted, oldest waiter first (wake them).
        waiting: Holders of the shard still waiting after the pass.
        again_at: When another pass could grant more without a release first (a rate
            window or a lease expiring), if any holder still waits.
    """

    granted: list[Waiter] = field(default_factory=list[Waiter])
    waiting: int = 0
    again_at: float | None = None


@dataclass(slots=True)
class QueueDepth:
    """How busy a queue is: leases live now, and holders waiting for one."""

    in_flight: int = 0
    waiting: int = 0


def is_grant(owner: str | None) -> bool:
    """Whether a lease's owner is a grant no call has taken yet."""
    return owner is not None and owner.startswith(GRANT)


def owned_elsewhere(request: LeaseRequest, owner: str | None) -> bool:
    """Whether the holder's live lease, owned by ``owner`` (``None``: it has none), belongs
    to another call than ``request``'s: that call runs the holder, so nothing is granted.
    A grant belongs to no call yet: the first to take it owns it."""
    if owner is None or is_grant(owner):
        return False
    return owner not in (request.owner, request.replaces)


def admits(request: LeaseRequest, live: dict[str, str | None], recent: list[float]) -> bool:
    """Whether ``request`` fits among the ``live`` leases (holder → partition) and the
    ``recent`` grant times, for backends that decide in memory inside their transaction
    (after :func:`owned_elsewhere` said the holder's own lease, if any, is the caller's).
    ``live`` and ``recent`` are those of the request's admit shard."""
    limits = shard_limits(QueueLimits.of(request), admit_shard(request))
    others = {h: p for h, p in live.items() if h != request.holder}
    if limits.limit is not None and len(others) >= limits.limit:
        return False
    if request.partition is not None and request.partition in others.values():
        return False
    if limits.rate is None or request.holder in live:
        return True  # a renewal is not a new grant
    window = rate_window(limits.rate)
    within = sum(1 for t in recent if request.now - window < t <= request.now)
    return within < limits.rate * window


def rate_window(rate: float | None) -> float:
    """Seconds over which ``rate`` counts grants: one second, or ``1 / rate`` below one per
    second (0.5 is one grant in any two seconds, not one a second)."""
    return 1.0 if rate is None or rate >= 1.0 else 1.0 / rate


def is_new_grant(request: LeaseRequest, live: dict[str, str | None]) -> bool:
    """Whether granting ``request`` counts against the rate (it is not a renewal)."""
    return request.holder not in live


def effective_shards(limits: QueueLimits) -> int:
    """Admit shards actually used: never more than the limit, nor than the whole grants a
    second the rate allows, so every shard's part of each is at least one."""
    shards = max(1, limits.shards)
    if limits.limit is not None:
        shards = min(shards, max(1, limits.limit))
    if limits.rate is not None:
        shards = min(shards, max(1, math.floor(limits.rate)))
    return shards


def admit_shard(request: LeaseRequest) -> int:
    """The admit shard of a request: by its partition key (so one shard decides a key's
    exclusion), else by its holder."""
    shards = effective_shards(QueueLimits.of(request))
    return shard_of(request.partition or request.holder, shards) if shards > 1 else 0


def _part(total: int, shards: int, shard: int) -> int:
    return total // shards + (1 if shard < total % shards else 0)


def shard_limits(limits: QueueLimits, shard: int) -> QueueLimits:
    """The part of the queue's limits one admit shard applies: the shards' parts add up to
    the queue's (a rate of ``r`` a second splits ``ceil(r)`` grants a second, which the
    queue's own rule admits; a rate below one stays on one shard)."""
    shards = effective_shards(limits)
    if shards == 1:
        return QueueLimits(limits.limit, limits.rate, limits.grant_ttl, 1)
    limit = None if limits.limit is None else _part(limits.limit, shards, shard)
    rate = None if limits.rate is None else float(_part(math.ceil(limits.rate), shards, shard))
    return QueueLimits(limit, rate, limits.grant_ttl, 1)


def choose(
    waiters: Sequence[Waiter],
    live: dict[str, str | None],
    recent: Sequence[float],
    limits: QueueLimits,
    now: float,
    most: int,
) -> tuple[list[Waiter], float | None]:
    """Which of one shard's ``waiters`` a pass grants, oldest first, among the shard's
    ``live`` leases (holder → partition, grants included) and ``recent`` grant times, within
    ``limits`` (the shard's part: :func:`shard_limits`); and when a later pass could grant
    more without a release (the rate's next free moment), if any waiter is left.

    The pure decision every backend makes inside its own transaction.
    """
    granted: list[Waiter] = []
    used = {p for p in live.values() if p is not None}
    count = len(live)
    window = rate_window(limits.rate)
    times = sorted(t for t in recent if now - window < t <= now)
    blocked_by_rate = False
    for w in sorted(waiters, key=Waiter.order):
        if len(granted) >= most:
            break
        if w.holder in live:
            continue
        if limits.limit is not None and count >= limits.limit:
            break
        if w.partition is not None and w.partition in used:
            continue
        if limits.rate is not None and len(times) >= limits.rate * window:
            blocked_by_rate = True
            break
        granted.append(w)
        count += 1
        times.append(now)
        if w.partition is not None:
            used.add(w.partition)
    left = any(w not in granted and w.holder not in live for w in waiters)
    again = (times[0] + window) if left and blocked_by_rate and times else None
    return granted, again


def waits_behind(
    request: LeaseRequest, waiters: Sequence[Waiter], live: dict[str, str | None]
) -> bool:
    """Whether a waiter of ``request``'s shard that could be granted now (no lease, its
    partition free) stands ahead of it (``request``'s own place if it waits, else a
    newcomer's): then ``acquire`` grants it nothing new, the admitter grants that waiter."""
    mine = next((w for w in waiters if w.holder == request.holder), None)
    place = (
        mine or Waiter(request.holder, request.partition, request.now, None, request.priority)
    ).order()
    used = {p for p in live.values() if p is not None}
    return any(
        w.order() < place
        and w.holder not in live
        and (w.partition is None or w.partition not in used)
        for w in waiters
        if w.holder != request.holder
    )


class LeaseSet(abc.ABC):
    """Per-queue leases; see the module docstring.

    Attributes:
        batched: New grants should come from :meth:`admit` passes alone.
        admit_interval: Seconds between two admit passes of one shard worth waiting for.
    """

    batched: bool = False
    admit_interval: float = 0.0

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

    @abc.abstractmethod
    async def take(self, request: LeaseRequest) -> bool:
        """Take the holder's live grant for ``request.owner``, or renew its own lease;
        never a new grant (see the module docstring)."""

    @abc.abstractmethod
    async def enqueue(self, request: LeaseRequest) -> None:
        """Record that ``request.holder`` waits for a lease, in its admit shard."""

    @abc.abstractmethod
    async def admit(
        self, queue: str, shard: int, limits: QueueLimits, now: float, most: int = 100
    ) -> Admitted:
        """Grant a batch of the shard's waiting holders (see the module docstring)."""

    @abc.abstractmethod
    async def deduplicate(
        self, queue: str, dedup_id: str, holder: str, now: float, replaces: str | None = None
    ) -> DedupHolder:
        """Hold ``dedup_id`` for ``holder`` if free (or held by it, or by ``replaces``);
        who holds it now (see the module docstring)."""

    @abc.abstractmethod
    async def forget(self, queue: str, dedup_id: str, holder: str) -> None:
        """Drop ``dedup_id`` if ``holder`` holds it (else a no-op)."""


__all__ = [
    "GRANT",
    "Admitted",
    "DedupHolder",
    "LeaseRequest",
    "LeaseSet",
    "QueueDepth",
    "QueueLimits",
    "Waiter",
    "admit_shard",
    "admits",
    "choose",
    "effective_shards",
    "is_grant",
    "is_new_grant",
    "owned_elsewhere",
    "rate_window",
    "shard_limits",
    "waits_behind",
]
