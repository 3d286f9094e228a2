"""Queues: executions started on a named queue run within its concurrency and rate limits.

Declared on the app, and used when starting::

    app.queue("emails", concurrency=10, rate_per_second=5, worker_concurrency=2)
    await runtime.start("send", value, queue=QueueRef("emails", partition_key="cust-42"))

(``loom start --queue emails --partition-key cust-42``, ``POST /executions`` with ``queue``
and ``partition_key``; a start's priority, deduplication id, delay and timeout from dequeue:
:mod:`loom.primitives.queue_options`). Each execute call of such an execution first holds a
lease from the store's :class:`~loom.store.leases.LeaseSet`, shared by every worker over the
same store: at most ``concurrency`` live at once, ``rate_per_second`` new ones a second, one
per partition key. The lease is held for the execute call (a suspended execution frees its
slot), renewed every third of ``lease_ttl`` (60 s) while it runs, and released when it ends;
a worker that dies holds it until ``lease_ttl`` passes after its last renewal. A call whose
lease may have lapsed (not renewed in time: the store or the process stalled) checks before
each effect starts, and renews it then: when it did lapse, the call starts nothing more,
gives its claim back and the execution waits in its queue again (ADR 0113).

An execute call that finds no room claims and runs nothing. Where the dispatcher carries
jobs (Cloud Tasks, ``loom serve``), the execution *waits in the queue*: its wait is recorded
(:meth:`~loom.store.leases.LeaseSet.enqueue`) and an *admit pass* of its shard is scheduled
(:func:`run_admit_job`, one per shard and interval), which grants a batch of waiters by
priority, then oldest first, and wakes each; every release schedules a pass too. On a store
whose grants contend (``LeaseSet.batched``, Firestore) every new lease comes from a pass;
elsewhere a call takes a free slot at once unless a better waiter could take it. A waiting
execution is re-dispatched once per ``lease_ttl`` as a safety net (ADR 0096). Without such
a dispatcher, a refused call re-dispatches itself a second or so later. ``loom queues`` and
``GET /queues`` show each queue's leases in flight and executions waiting.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from loom import events as ev
from loom.errors import StoreError
from loom.kernel import jobs
from loom.kernel.fold import ExecutionState
from loom.kernel.primitive import Admission, Primitive
from loom.primitives import queue_options as qo
from loom.primitives.queue_defs import (
    DEFAULT_LEASE_TTL,
    MAX_SHARDS,
    QueueDef,
    declare,
    declared,
    started_fields,
)
from loom.primitives.queue_options import QueueRef, queue_ref
from loom.store.leases import (
    LeaseRequest,
    LeaseSet,
    QueueDepth,
    admit_shard,
)

if TYPE_CHECKING:
    from loom.kernel.runtime import Runtime
    from loom.wire import ExecutionResult

__all__ = [
    "DEFAULT_LEASE_TTL",
    "MAX_SHARDS",
    "PRIMITIVE",
    "QueueDef",
    "QueueRef",
    "declare",
    "declared",
    "depths",
    "queue_ref",
    "run_admit_job",
    "started_fields",
]

log = logging.getLogger("loom")
RETRY_AFTER: Final = (0.5, 1.5)  # seconds before a waiting execution asks again (jittered)
ADMIT_MOST: Final = 100  # grants one admit pass makes at most


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
        shards=q.shards,
        flow=state.flow,
        priority=qo.priority_of(state),
    )


def _queue(runtime: Runtime, state: ExecutionState) -> QueueDef | None:
    if state.queue is None:
        return None
    # A queue no longer declared runs unlimited rather than never (said in the log line).
    return declared(runtime.app).get(state.queue) or QueueDef(state.queue)


@dataclass(slots=True)
class _Grant:
    """A lease this process holds for a call, and how long it surely holds.

    ``valid_until`` counts from the clock read *before* the taking or renewing request
    went out (the store counts its expiry from that same reading), so a renewal answered
    late never makes a lease look longer than the store keeps it.
    """

    stop: asyncio.Event
    valid_until: float
    lapsed: bool = False
    beat: asyncio.Task[None] | None = None


# The lease of each call this process runs, by its owner (the claim's holder): a second
# call of the same execution in this process has a grant of its own, if any.
_GRANTS: dict[str, _Grant] = {}


async def admit(runtime: Runtime, state: ExecutionState, owner: str) -> bool:
    """Take the execution's lease for ``owner`` (the claim about to run it), renewed until
    released; True when it may run now (or has no queue).

    The lease of a claim in ``state`` that is no longer live (its call died holding it) is
    taken over; a live lease of another call is not: that call runs the execution.
    """
    q = _queue(runtime, state)
    if q is None:
        return True
    if _delayed(runtime, state):
        return False
    if not qo.take_worker_slot(runtime, q.name, q.worker_concurrency):
        await _hand_back(runtime, state, q, owner)
        return False
    dead = state.claim["holder"] if state.claim is not None else None  # (checked not live)
    leases = runtime.store.leases()
    request = _request(runtime, state, q, owner, dead)
    # Where passes admit and grants contend, a call only takes what a pass granted it.
    try:
        passes = _passes_only(runtime, leases)
        got = await (leases.take(request) if passes else leases.acquire(request))
    except BaseException:
        qo.give_worker_slot(runtime, q.name)
        raise
    if not got:
        qo.give_worker_slot(runtime, q.name)
        return False
    grant = _GRANTS[owner] = _Grant(asyncio.Event(), request.now + q.lease_ttl)
    grant.beat = asyncio.ensure_future(_renew(runtime, state, q, owner, grant))
    return True


def _delayed(runtime: Runtime, state: ExecutionState) -> bool:
    at = qo.not_before(state)
    return at is not None and at > runtime.clock()


async def _hand_back(runtime: Runtime, state: ExecutionState, q: QueueDef, owner: str) -> None:
    """This worker runs as many of ``q`` as it may: a grant woken here goes back to the
    queue (taken and released at once), for a pass a moment later to grant elsewhere."""
    leases = runtime.store.leases()
    if jobs.carries_jobs(runtime) and await leases.take(_request(runtime, state, q, owner)):
        await leases.release(q.name, state.execution_id, owner)


async def _renew(
    runtime: Runtime, state: ExecutionState, q: QueueDef, owner: str, grant: _Grant
) -> None:
    """Renew the lease every third of its ttl, so it outlives the call but not a dead
    worker; stop once it lapsed (the call stops before its next effect, see :func:`holds`)."""
    while not grant.lapsed:
        try:
            await asyncio.wait_for(grant.stop.wait(), q.lease_ttl / 3)
            return
        except TimeoutError:
            pass
        await _renew_once(runtime, state, q, owner, grant)


async def _renew_once(
    runtime: Runtime, state: ExecutionState, q: QueueDef, owner: str, grant: _Grant
) -> None:
    """One renewal; a store failure leaves the lease as it was (the next beat tries
    again, and until then it holds only while it surely did)."""
    leases = runtime.store.leases()
    request = _request(runtime, state, q, owner)
    renew = leases.take if _passes_only(runtime, leases) else leases.acquire
    try:
        renewed = await renew(request)
    except StoreError as exc:
        log.warning("queue lease of %s not renewed: %s", state.execution_id, exc)
        return
    if renewed:
        grant.valid_until = max(grant.valid_until, request.now + q.lease_ttl)
    elif not grant.lapsed:
        grant.lapsed = True
        log.warning("queue lease of %s on %r lapsed", state.execution_id, q.name)


def holds(runtime: Runtime, state: ExecutionState, owner: str) -> Awaitable[bool] | None:
    """Whether the call ``owner`` still holds its lease, before one of its effects starts
    (``Admission.holds``): ``None`` while it surely does for a third of its ttl more; else
    a renewal made now, answering whether the lease holds after it.

    A lease renewed too late (the store or this process stalled past its ttl) may be
    another execution's slot by now: its call must start nothing more, or the queue would
    run more than its concurrency.
    """
    grant = _GRANTS.get(owner)
    if grant is None:
        return None
    q = _queue(runtime, state)
    if q is None or (not grant.lapsed and grant.valid_until - runtime.clock() > q.lease_ttl / 3):
        return None
    return _renewed(runtime, state, q, owner, grant)


async def _renewed(
    runtime: Runtime, state: ExecutionState, q: QueueDef, owner: str, grant: _Grant
) -> bool:
    if not grant.lapsed:
        await _renew_once(runtime, state, q, owner, grant)
    return not grant.lapsed and grant.valid_until > runtime.clock()


async def _stop_heartbeat(owner: str) -> None:
    """Stop the renewals, waiting out one in flight (never cancelled: a renewal landing
    after the release would take the slot again)."""
    grant = _GRANTS.pop(owner, None)
    if grant is not None:
        grant.stop.set()
        if grant.beat is not None:
            await grant.beat


async def release(runtime: Runtime, state: ExecutionState, owner: str) -> None:
    """Give back the lease ``owner`` took for the execution, at the end of its call (a
    lease another call holds stays with it).

    A release that fails (the store unavailable past its retries) is logged, not raised: the
    execution's outcome is already written, and the lease frees itself when it expires.
    """
    q = _queue(runtime, state)
    if q is None:
        return
    await _stop_heartbeat(owner)
    qo.give_worker_slot(runtime, q.name)
    try:
        await runtime.store.leases().release(q.name, state.execution_id, owner)
        if jobs.carries_jobs(runtime):  # hand the slot on
            await schedule_admit(runtime, q, _shard(runtime, state, q), runtime.clock())
    except StoreError as exc:
        log.warning(
            "queue lease of %s on %r not released (it expires by itself): %s",
            state.execution_id,
            q.name,
            exc,
        )


async def defer(runtime: Runtime, state: ExecutionState) -> ExecutionResult:
    """Record the wait and arrange to be run again (see the module docstring); report it."""
    q = _queue(runtime, state)
    assert q is not None
    now = runtime.clock()
    leases = runtime.store.leases()
    at = qo.not_before(state)
    if at is not None and at > now:  # delayed: a durable timer, not a place in the queue
        later = at
    elif jobs.carries_jobs(runtime):
        await leases.enqueue(_request(runtime, state, q, "-"))
        full = (
            q.worker_concurrency is not None
            and qo.worker_running(runtime, q.name) >= q.worker_concurrency
        )
        # (A worker at its own limit: the next pass a moment later, not at once, or its
        # grant would come straight back here.)
        await schedule_admit(runtime, q, _shard(runtime, state, q), now + (1.0 if full else 0.0))
        later = now + q.lease_ttl  # the safety net: a wake lost, a grant lapsed
    else:
        await leases.wait(q.name, state.execution_id, now)
        later = now + random.uniform(*RETRY_AFTER)
    dispatch_id = f"{state.execution_id}:{state.last_seq}:queued@{int(later * 10)}"
    await runtime._dispatch(state.execution_id, state.flow, "timer", dispatch_id, not_before=later)  # pyright: ignore[reportPrivateUsage]
    return await runtime.report(state, include_state=False)


def _passes_only(runtime: Runtime, leases: LeaseSet) -> bool:
    """Whether new leases come from admit passes alone (see the module docstring)."""
    return leases.batched and jobs.carries_jobs(runtime)


def _shard(runtime: Runtime, state: ExecutionState, q: QueueDef) -> int:
    return admit_shard(_request(runtime, state, q, "-"))


async def schedule_admit(runtime: Runtime, q: QueueDef, shard: int, after: float) -> None:
    """Have an admit pass of ``q``'s ``shard`` run at the first interval boundary after
    ``after`` (one job per shard and interval: every caller of the same interval asks for
    the same one); without an interval, at ``after`` (at once when it is past)."""
    interval = runtime.store.leases().admit_interval
    if interval > 0:
        at: float | None = (math.floor(after / interval) + 1) * interval
        key = f"{q.name}/{shard}@{at:.3f}"
    else:  # nothing to batch (a pass that finds nothing to grant is cheap)
        at = after if after > runtime.clock() else None
        key = f"{q.name}/{shard}@{after!r}:{random.getrandbits(32):08x}"
    job = jobs.Job("admit", key, {"queue": q.name, "shard": shard}, shard=shard)
    await jobs.enqueue(runtime, job, not_before=at)


async def run_admit_job(runtime: Runtime, job: jobs.Job) -> dict[str, Any]:
    """An admit pass (the ``admit`` job): grant a batch, wake each execution granted, and
    schedule the next pass when executions still wait and one could grant more."""
    name, shard = str(job.args["queue"]), int(job.args["shard"])
    q = declared(runtime.app).get(name) or QueueDef(name)
    leases = runtime.store.leases()
    now = runtime.clock()
    done = await leases.admit(name, shard, q.limits(), now, ADMIT_MOST)
    inline = runtime.dispatcher is not None and runtime.dispatcher.inline
    for w in done.granted:
        dispatch_id = f"{w.holder}:granted@{now!r}"
        # An inline dispatcher would run each woken execution in this pass, one after the
        # other: a moment later, each runs in a task of its own.
        later = runtime.clock() + 0.01 if inline else None
        await runtime._dispatch(w.holder, w.flow or "", "resume", dispatch_id, not_before=later)  # pyright: ignore[reportPrivateUsage]
    if done.waiting and (done.granted or done.again_at is not None):
        await schedule_admit(runtime, q, shard, max(now, done.again_at or now))
    return {"queue": name, "shard": shard, "granted": len(done.granted), "waiting": done.waiting}


class QueueAdmission(Admission):
    """A queue's lease, taken before an execution on a queue is claimed (the kernel's
    ``Admission`` hook): see the module docstring."""

    def applies(self, state: ExecutionState) -> bool:
        return state.queue is not None

    async def admit(self, rt: Runtime, state: ExecutionState, owner: str) -> bool:
        return await admit(rt, state, owner)

    async def release(self, rt: Runtime, state: ExecutionState, owner: str) -> None:
        await release(rt, state, owner)

    async def defer(self, rt: Runtime, state: ExecutionState) -> ExecutionResult:
        return await defer(rt, state)

    def holds(self, rt: Runtime, state: ExecutionState, owner: str) -> Awaitable[bool] | None:
        return holds(rt, state, owner)

    def on_claim(self, rt: Runtime, state: ExecutionState, now: float) -> list[ev.Event]:
        return qo.on_claim(state, now)


async def depths(runtime: Runtime) -> dict[str, QueueDepth]:
    """In-flight and waiting counts of every declared queue."""
    leases = runtime.store.leases()
    now = runtime.clock()
    return {name: await leases.depth(name, now) for name in declared(runtime.app)}


# -- fold handler ----------------------------------------------------------------------------


def _started(s: ExecutionState, e: ev.ExecutionStarted) -> None:
    s.queue, s.partition_key = e.queue, e.partition_key
    qo.started(s, e)


PRIMITIVE = Primitive(
    "queues",
    head={"ExecutionStarted": _started, "ExecutionDequeued": qo.dequeued},
    admission=QueueAdmission(),
    jobs={"admit": run_admit_job},
    follow_up=qo.release_dedup,
    follows_up=qo.holds_dedup,
)
