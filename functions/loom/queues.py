"""Queues: executions started on a named queue run within its concurrency and rate limits.

Declared on the app, and used when starting::

    app.queue("emails", concurrency=10, rate_per_second=5)
    await runtime.start("send", value, queue=QueueRef("emails", partition_key="cust-42"))

(``loom start --queue emails --partition-key cust-42``, ``POST /executions`` with ``queue``
and ``partition_key``). Each execute call of such an execution first takes a lease from the
store's :class:`~loom.store.leases.LeaseSet`, shared by every worker instance over the same
store: at most ``concurrency`` leases live at once, at most ``rate_per_second`` new ones per
second, and at most one per partition key, so the executions of one key run one at a time
while other keys go on. The lease is held for the execute call (a suspended execution frees
its slot) and released when it ends. While the call runs, the lease is renewed every third
of ``lease_ttl`` (default 60 s), so a long call keeps its slot, and a worker that dies
without releasing holds it only until ``lease_ttl`` passes after its last renewal.

An execute call that finds no room claims nothing and runs nothing: it records the wait and
re-dispatches the execution a second or so later (a Cloud Tasks task locally a timer), then
returns, so waiting holds no request. ``loom queues`` and ``GET /queues`` show each queue's
leases in flight and executions waiting.
"""

from __future__ import annotations

import asyncio
import logging
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from loom import events as ev
from loom.errors import ConfigurationError, InputError, StoreError
from loom.fold import _HEAD, ExecutionState  # pyright: ignore[reportPrivateUsage]
from loom.store.leases import LeaseRequest, QueueDepth

if TYPE_CHECKING:
    from loom.app import Loom
    from loom.runtime import Runtime
    from loom.wire import ExecutionResult

log = logging.getLogger("loom")
DEFAULT_LEASE_TTL: Final = 60.0
RETRY_AFTER: Final = (0.5, 1.5)  # seconds before a waiting execution asks again (jittered)


@dataclass(frozen=True, slots=True)
class QueueDef:
    """A declared queue.

    Attributes:
        name: The queue's name.
        concurrency: At most this many executions of the queue run at once (None: no limit).
        rate_per_second: At most this many start running per second (None: no limit).
        lease_ttl: Seconds a lease outlives a worker that died holding it.
    """

    name: str
    concurrency: int | None = None
    rate_per_second: float | None = None
    lease_ttl: float = DEFAULT_LEASE_TTL


@dataclass(frozen=True, slots=True)
class QueueRef:
    """Where a start goes: a declared queue, and a partition key serializing its executions."""

    name: str
    partition_key: str | None = None


def queue_ref(name: str | None, partition_key: str | None) -> QueueRef | None:
    """The :class:`QueueRef` of a start's ``queue``/``partition_key`` options, if any.

    Raises:
        InputError: A partition key without a queue.
    """
    if name is None:
        if partition_key is not None:
            raise InputError(
                "a partition key needs a queue", details={"partition_key": partition_key}
            )
        return None
    return QueueRef(name, partition_key)


def declare(
    registry: dict[str, QueueDef],
    name: str,
    *,
    concurrency: int | None = None,
    rate_per_second: float | None = None,
    lease_ttl: float = DEFAULT_LEASE_TTL,
) -> QueueDef:
    """Register a queue (what ``Loom.queue`` does).

    Raises:
        ConfigurationError: A name used twice or unusable as a document id, or a limit that
            is not positive.
    """
    if name in registry:
        raise ConfigurationError(f"queue {name!r} is declared twice")
    if not name or "/" in name or name.startswith(".") or len(name) > 200:
        raise ConfigurationError(f"queue name {name!r} must be 1-200 chars, no '/', no leading '.'")
    for what, value in (("concurrency", concurrency), ("rate_per_second", rate_per_second)):
        if value is not None and value <= 0:
            raise ConfigurationError(f"queue {name!r}: {what} must be positive, not {value}")
    if lease_ttl <= 0:
        raise ConfigurationError(f"queue {name!r}: lease_ttl must be positive")
    registry[name] = QueueDef(name, concurrency, rate_per_second, lease_ttl)
    return registry[name]


def started_fields(app: Loom, queue: QueueRef | None) -> dict[str, Any]:
    """The ``ExecutionStarted`` fields of a start on ``queue``.

    Raises:
        InputError: The queue is not declared.
    """
    if queue is None:
        return {}
    if queue.name not in app.queues:
        names = ", ".join(sorted(app.queues)) or "none"
        raise InputError(
            f"unknown queue {queue.name!r} (declared: {names})", details={"queue": queue.name}
        )
    return {"queue": queue.name, "partition_key": queue.partition_key}


def _request(
    runtime: Runtime, state: ExecutionState, q: QueueDef, owner: str, replaces: str | None = None
) -> LeaseRequest:
    return LeaseRequest(
        q.name,
        state.execution_id,
        runtime.clock(),
        q.lease_ttl,
        limit=q.concurrency,
        partition=state.partition_key,
        rate=q.rate_per_second,
        owner=owner,
        replaces=replaces,
    )


def _queue(runtime: Runtime, state: ExecutionState) -> QueueDef | None:
    if state.queue is None:
        return None
    # A queue no longer declared runs unlimited rather than never (said in the log line).
    return runtime.app.queues.get(state.queue) or QueueDef(state.queue)


# The renewal of each lease this process holds, by its owner (the claim's holder): a
# second call of the same execution in this process has renewals of its own, if any.
_HEARTBEATS: dict[str, tuple[asyncio.Event, asyncio.Task[None]]] = {}


async def admit(runtime: Runtime, state: ExecutionState, owner: str) -> bool:
    """Take the execution's lease for ``owner`` (the claim about to run it), renewed until
    released; True when it may run now (or has no queue).

    The lease of a claim in ``state`` that is no longer live (its call died holding it) is
    taken over; a live lease of another call is not: that call runs the execution.
    """
    q = _queue(runtime, state)
    if q is None:
        return True
    dead = state.claim["holder"] if state.claim is not None else None  # (checked not live)
    if not await runtime.store.leases().acquire(_request(runtime, state, q, owner, dead)):
        return False
    stop = asyncio.Event()
    beat = asyncio.ensure_future(_renew(runtime, state, q, owner, stop))
    _HEARTBEATS[owner] = (stop, beat)
    return True


async def _renew(
    runtime: Runtime, state: ExecutionState, q: QueueDef, owner: str, stop: asyncio.Event
) -> None:
    """Renew the lease every third of its ttl, so it outlives the call but not a dead worker."""
    while True:
        try:
            await asyncio.wait_for(stop.wait(), q.lease_ttl / 3)
            return
        except TimeoutError:
            pass
        try:
            if not await runtime.store.leases().acquire(_request(runtime, state, q, owner)):
                log.warning("queue lease of %s on %r lapsed", state.execution_id, q.name)
        except StoreError as exc:  # the next beat tries again, before the lease lapses
            log.warning("queue lease of %s not renewed: %s", state.execution_id, exc)


async def _stop_heartbeat(owner: str) -> None:
    """Stop the renewals, waiting out one in flight (never cancelled: a renewal landing
    after the release would take the slot again)."""
    found = _HEARTBEATS.pop(owner, None)
    if found is not None:
        found[0].set()
        await found[1]


async def release(runtime: Runtime, state: ExecutionState, owner: str) -> None:
    """Give back the lease ``owner`` took for the execution, at the end of its call (a
    lease another call holds stays with it).

    A release that fails (the store unavailable past its retries) is logged, not raised: the
    execution's outcome is already written, and the lease frees itself when it expires.
    """
    if state.queue is None:
        return
    await _stop_heartbeat(owner)
    try:
        await runtime.store.leases().release(state.queue, state.execution_id, owner)
    except StoreError as exc:
        log.warning(
            "queue lease of %s on %r not released (it expires by itself): %s",
            state.execution_id,
            state.queue,
            exc,
        )


async def defer(runtime: Runtime, state: ExecutionState) -> ExecutionResult:
    """Record the wait and dispatch the execution again a little later; report it."""
    assert state.queue is not None
    now = runtime.clock()
    await runtime.store.leases().wait(state.queue, state.execution_id, now)
    later = now + random.uniform(*RETRY_AFTER)
    dispatch_id = f"{state.execution_id}:{state.last_seq}:queued@{int(later * 10)}"
    await runtime._dispatch(state.execution_id, state.flow, "timer", dispatch_id, not_before=later)  # pyright: ignore[reportPrivateUsage]
    return await runtime.report(state, include_state=False)


async def depths(runtime: Runtime) -> dict[str, QueueDepth]:
    """In-flight and waiting counts of every declared queue."""
    leases = runtime.store.leases()
    now = runtime.clock()
    return {name: await leases.depth(name, now) for name in runtime.app.queues}


# -- fold handler ----------------------------------------------------------------------------

_before = _HEAD["ExecutionStarted"]


def _started(s: ExecutionState, e: ev.ExecutionStarted) -> None:
    _before(s, e)
    s.queue, s.partition_key = e.queue, e.partition_key


_HEAD["ExecutionStarted"] = _started
