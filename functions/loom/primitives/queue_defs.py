"""Declared queues: ``Loom.queue`` declares one (:func:`declare`, checked once), a start on
one records its queue, partition key and options in ``ExecutionStarted``
(:func:`started_fields`). What running on a queue means: :mod:`loom.primitives.queues`,
which exports these names too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, cast

from loom.errors import ConfigurationError, InputError
from loom.primitives import queue_options as qo
from loom.primitives.queue_options import QueueRef
from loom.store.leases import DEFAULT_GRANT_TTL, QueueLimits

if TYPE_CHECKING:
    from loom.kernel.app import App

DEFAULT_LEASE_TTL: Final = 60.0
MAX_SHARDS: Final = 64


@dataclass(frozen=True, slots=True)
class QueueDef:
    """A declared queue.

    Attributes:
        name: The queue's name.
        concurrency: At most this many executions of the queue run at once (None: no limit).
        rate_per_second: At most this many start running per second (None: no limit).
        lease_ttl: Seconds a lease outlives a worker that died holding it.
        shards: Admit shards: the queue's waiting executions and limits are split over
            this many, each admitted by its own pass (for queues granting more than a
            shard's passes can: one write a second each on Firestore). Partition keys
            stay exact (a key always lands in the same shard); the limits are split, so a
            full shard waits while another may have room.
        worker_concurrency: At most this many run at once on one worker (one runtime),
            besides ``concurrency`` (:mod:`loom.primitives.queue_options`).
    """

    name: str
    concurrency: int | None = None
    rate_per_second: float | None = None
    lease_ttl: float = DEFAULT_LEASE_TTL
    shards: int = 1
    worker_concurrency: int | None = None

    def limits(self) -> QueueLimits:
        """The limits an admit pass applies."""
        grant_ttl = min(DEFAULT_GRANT_TTL, self.lease_ttl)
        return QueueLimits(self.concurrency, self.rate_per_second, grant_ttl, self.shards)


def declare(
    registry: dict[str, QueueDef],
    name: str,
    *,
    concurrency: int | None = None,
    rate_per_second: float | None = None,
    lease_ttl: float = DEFAULT_LEASE_TTL,
    shards: int = 1,
    worker_concurrency: int | None = None,
) -> QueueDef:
    """Register a queue (what ``Loom.queue`` does).

    Raises:
        ConfigurationError: A name used twice or unusable as a document id, a limit that
            is not positive, or a shard count outside 1 to 64.
    """
    if name in registry:
        raise ConfigurationError(f"queue {name!r} is declared twice")
    if not name or "/" in name or name.startswith(".") or len(name) > 200:
        raise ConfigurationError(f"queue name {name!r} must be 1-200 chars, no '/', no leading '.'")
    limits = (
        ("concurrency", concurrency),
        ("rate_per_second", rate_per_second),
        ("worker_concurrency", worker_concurrency),
    )
    for what, value in limits:
        if value is not None and value <= 0:
            raise ConfigurationError(f"queue {name!r}: {what} must be positive, not {value}")
    if lease_ttl <= 0:
        raise ConfigurationError(f"queue {name!r}: lease_ttl must be positive")
    if isinstance(shards, bool) or not 1 <= shards <= MAX_SHARDS:
        raise ConfigurationError(
            f"queue {name!r}: shards must be 1 to {MAX_SHARDS}, not {shards!r}"
        )
    registry[name] = QueueDef(
        name, concurrency, rate_per_second, lease_ttl, shards, worker_concurrency
    )
    return registry[name]


def started_fields(app: App, queue: QueueRef | None, now: float = 0.0) -> dict[str, Any]:
    """The ``ExecutionStarted`` fields of a start on ``queue`` at ``now``.

    Raises:
        InputError: The queue is not declared, or an option is bad
            (:func:`loom.primitives.queue_options.options`).
    """
    if queue is None:
        return {}
    if queue.name not in declared(app):
        names = ", ".join(sorted(declared(app))) or "none"
        raise InputError(
            f"unknown queue {queue.name!r} (declared: {names})", details={"queue": queue.name}
        )
    found: dict[str, Any] = {"queue": queue.name, "partition_key": queue.partition_key}
    given = qo.options(
        priority=queue.priority,
        deduplication_id=queue.deduplication_id,
        delay=queue.delay,
        not_before=queue.not_before,
        timeout=queue.timeout,
        now=now,
    )
    return {**found, "queue_options": given} if given else found


def declared(app: App) -> dict[str, QueueDef]:
    """The queues declared on ``app`` (``Loom.queue``), by name."""
    return cast("dict[str, QueueDef]", app.declared.setdefault("queues", {}))
