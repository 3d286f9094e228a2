"""``FirestoreLeaseSet``: queue leases in Firestore, exact across every worker instance,
with no document written by every grant and release.

The documents are those of :mod:`loom_gcp._firestore_queue_docs` (referenced and read by
:mod:`loom_gcp._firestore_lease_docs`). Who writes what:

* **An admit pass** (one per admit shard and interval, :mod:`loom.queues`) is one
  transaction on the shard document: it settles it (drops the leases released since, read
  from their freed markers, and those lapsed), grants a batch of the oldest queued holders
  within the shard's part of the limits, writes each grant's holder document, deletes their
  queued documents and the markers it read. One write of the shard document per pass,
  however many it grants: the shard document never sees more than one write per interval.
* **Taking a grant, renewing, releasing** write only the holder's own document (and a
  freed marker), in a transaction on that document alone: independent of every other
  holder's.
* **Waiting** creates the holder's queued document, independent too.
* ``acquire`` (a grant decided on the spot, for callers without an admitter) is a
  transaction on the shard document like an admit pass: exact, but serialized with every
  other grant of that shard.

Queries (the freed markers, the queued holders) run before the transaction, which then
reads the documents they named by reference: a query inside a transaction would lock
whole collections on the emulator, and transactions read by reference stay small.

Contention on a shard document (concurrent ``acquire`` calls, two admit passes at once) is
retried here with jittered exponential backoff, each attempt bounded in time, within an
overall budget; past it the call fails with
:class:`~loom.errors.StoreUnavailableError` (the caller's delivery is retried). Callers of
one process on one event loop take turns per shard document (an :class:`asyncio.Lock` per
loop, queue and shard), so only instances contend in Firestore.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeVar, cast

from google.api_core import exceptions as gexc
from google.cloud import firestore
from google.cloud.firestore_v1 import FieldFilter
from google.cloud.firestore_v1.async_document import AsyncDocumentReference
from google.cloud.firestore_v1.async_transaction import AsyncTransaction, async_transactional

from loom.errors import StoreUnavailableError
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
    effective_shards,
    is_grant,
    is_new_grant,
    owned_elsewhere,
    rate_window,
    shard_limits,
    waits_behind,
)
from loom_gcp._firestore_dedup import FirestoreDedup
from loom_gcp._firestore_io import translate
from loom_gcp._firestore_lease_docs import (
    COLLECTION,
    FirestoreLeaseDocs,
    field_of,
    holder_of,
    rank,
    waiter_of,
)
from loom_gcp._firestore_queue_docs import (
    ShardState,
    hid,
    holder_fields,
    is_live,
    marker_id,
)

ATTEMPT_TIMEOUT: Final = 10.0  # seconds one transaction attempt may take
BUDGET: Final = 30.0  # seconds all attempts of one change may take
BACKOFF: Final = (0.05, 2.0)  # first and longest pause between attempts (jittered)
ADMIT_MOST: Final = 150  # grants one pass makes (2 writes each, within 500 per commit)
QUEUED_PAGE: Final = 400  # queued holders one pass looks at
UNRANKED_PAGE: Final = 50  # queued holders of an older release (no rank) one pass looks at
_RETRIED = (gexc.Aborted, gexc.DeadlineExceeded, gexc.ServiceUnavailable, TimeoutError)

log = logging.getLogger("loom")
T = TypeVar("T")


class FirestoreLeaseSet(FirestoreLeaseDocs, LeaseSet):
    """See the module docstring and :class:`~loom.store.leases.LeaseSet`."""

    batched = True
    admit_interval = 1.0  # the shard document's one write a second

    def __init__(self, client: firestore.AsyncClient) -> None:
        super().__init__(client)
        self._dedup = FirestoreDedup(client, COLLECTION)

    # -- transactions, retried --------------------------------------------------------------

    async def _retried(self, what: str, lock: str, attempt: Callable[[], Awaitable[T]]) -> T:
        """Run ``attempt`` (one transaction) until it commits, with backoff, within the
        budget; callers of this loop take turns on ``lock``."""
        try:
            async with asyncio.timeout(BUDGET), self._lock(lock):
                return await self._attempts(what, attempt)
        except TimeoutError as exc:
            # The budget ran out while waiting for this process's lock or mid-attempt:
            # the same answer as contention (503, retry later), never a bare timeout.
            raise _gave_up(what, exc) from exc

    @staticmethod
    async def _attempts(what: str, attempt: Callable[[], Awaitable[T]]) -> T:
        deadline = time.monotonic() + BUDGET
        pause = BACKOFF[0]
        while True:
            try:
                async with asyncio.timeout(ATTEMPT_TIMEOUT):
                    return await attempt()
            except (*_RETRIED, ValueError) as exc:
                if time.monotonic() + pause >= deadline:
                    raise _gave_up(what, exc) from exc
            except gexc.GoogleAPIError as exc:
                raise translate(exc, what) from exc
            await asyncio.sleep(random.uniform(0, pause))
            pause = min(pause * 2, BACKOFF[1])

    # -- the SPI ----------------------------------------------------------------------------

    async def take(self, request: LeaseRequest) -> bool:
        """See :class:`~loom.store.leases.LeaseSet` (the holder's document alone)."""
        ref = self._holder(request.queue, request.holder)

        @async_transactional
        async def body(txn: AsyncTransaction) -> bool:
            doc = (await self._read(txn, [ref]))[ref.path]
            if (
                doc is None
                or not is_live(doc, request.now)
                or owned_elsewhere(request, doc.get("o"))
            ):
                return False
            txn.update(ref, {"o": request.owner, "e": request.now + request.ttl})
            return True

        key = f"{request.queue}/h/{request.holder}"
        return await self._retried("taking a queue lease", key, lambda: body(self._txn()))

    async def release(self, queue: str, holder: str, owner: str) -> None:
        """See :class:`~loom.store.leases.LeaseSet` (the holder's document, and a freed
        marker for the next settle)."""
        ref = self._holder(queue, holder)

        @async_transactional
        async def body(txn: AsyncTransaction) -> None:
            doc = (await self._read(txn, [ref]))[ref.path]
            if doc is None or doc.get("o") != owner:
                return  # not there, or another call's: that call releases it
            txn.delete(ref)
            grant = str(doc.get("g") or "")
            marker = self._under(queue, int(doc.get("k") or 0), "freed").document(
                marker_id(holder, grant)
            )
            txn.set(marker, {"h": holder, "g": grant})

        await self._retried(
            "releasing a queue lease", f"{queue}/h/{holder}", lambda: body(self._txn())
        )

    async def wait(self, queue: str, holder: str, now: float) -> None:
        """See :class:`~loom.store.leases.LeaseSet` (its own document: no contention)."""
        try:
            await self._waiting(queue, holder).set({"since": now})
        except gexc.GoogleAPIError as exc:
            raise translate(exc, "recording a queue wait") from exc

    async def enqueue(self, request: LeaseRequest) -> None:
        """See :class:`~loom.store.leases.LeaseSet` (created once: a holder keeps its place)."""
        shard = admit_shard(request)
        ref = self._under(request.queue, shard, "queued").document(hid(request.holder))
        fields = {
            "h": request.holder,
            "p": request.partition,
            "since": request.now,
            "flow": request.flow,
            "r": request.priority,
            "rk": rank(request.priority, request.now),
        }
        try:
            await ref.create(fields)
        except gexc.Conflict:
            return  # waiting already, since earlier
        except gexc.GoogleAPIError as exc:
            raise translate(exc, "recording a queue wait") from exc

    async def admit(
        self, queue: str, shard: int, limits: QueueLimits, now: float, most: int = 100
    ) -> Admitted:
        """See :class:`~loom.store.leases.LeaseSet` and the module docstring."""
        most = min(most, ADMIT_MOST)
        markers = await self._freed(queue, shard)
        waiters = await self._queued(queue, shard)
        part = shard_limits(limits, shard)
        window = rate_window(part.rate)
        sref = self._shard(queue, shard)

        @async_transactional
        async def body(txn: AsyncTransaction) -> Admitted:
            state = await self._settled(txn, queue, sref, markers, now)
            granted, again = choose(waiters, state.live(), state.grants, part, now, most)
            for w in granted:
                grant = uuid.uuid4().hex
                expires = now + limits.grant_ttl
                state.hold(w.holder, w.partition, expires, grant)
                state.grants.append(now)
                owner = f"{GRANT}{grant}"
                txn.set(
                    self._holder(queue, w.holder),
                    holder_fields(w.holder, w.partition, owner, expires, grant, shard),
                )
                txn.delete(self._under(queue, shard, "queued").document(hid(w.holder)))
            if state.changed:
                txn.set(sref, state.fields(now, window))
            for m in markers:
                txn.delete(m.reference)
            left = len(waiters) - len(granted)
            if left and again is None:
                expiring = [float(v["e"]) for v in state.leases.values()]
                again = min(expiring) if expiring else None
            return Admitted(granted, left, again if left else None)

        return await self._retried(
            "admitting from a queue", f"{queue}/{shard}", lambda: body(self._txn())
        )

    async def _queued(self, queue: str, shard: int) -> list[Waiter]:
        """The shard's first waiting holders by rank (priority, then since), and the oldest
        queued by an older release, which wrote no rank."""
        under = self._under(queue, shard, "queued")
        what = "reading a queue's waiting holders"
        ranked = await self._query(what, under.order_by("rk").limit(QUEUED_PAGE))
        oldest = await self._query(what, under.order_by("since").limit(UNRANKED_PAGE))
        found = {d.id: waiter_of(d.to_dict() or {}) for d in [*ranked, *oldest]}
        return sorted(found.values(), key=Waiter.order)

    async def _settled(
        self,
        txn: AsyncTransaction,
        queue: str,
        sref: AsyncDocumentReference,
        markers: list[Any],
        now: float,
    ) -> ShardState:
        """The shard document, settled inside ``txn`` (see :class:`ShardState.settle`),
        the holder documents of lapsed leases deleted."""
        data = (await self._read(txn, [sref]))[sref.path] or {}
        state = ShardState.of(data)
        freed = {hid(holder_of(m)): field_of(m, "g") for m in markers}
        expired = [self._holder(queue, h) for h in state.expired(now)]
        found = await self._read(txn, expired)
        holders = {cast(str, ref.id): found.get(ref.path) for ref in expired}
        for holder in state.settle(freed, holders, now):
            txn.delete(self._holder(queue, holder))
        return state

    async def acquire(self, request: LeaseRequest) -> bool:
        """See :class:`~loom.store.leases.LeaseSet` (a transaction on the shard document)."""
        shard = admit_shard(request)
        markers = await self._freed(request.queue, shard)
        queued = await self._queued(request.queue, shard)
        sref = self._shard(request.queue, shard)
        href = self._holder(request.queue, request.holder)
        window = rate_window(shard_limits(QueueLimits.of(request), shard).rate)

        @async_transactional
        async def body(txn: AsyncTransaction) -> bool:
            mine = (await self._read(txn, [href]))[href.path]
            mine = mine if is_live(mine, request.now) else None
            owner = None if mine is None else mine.get("o")
            if owned_elsewhere(request, owner):
                return False
            state = await self._settled(txn, request.queue, sref, markers, request.now)
            if mine is not None and (is_grant(owner) or owner in (request.owner, request.replaces)):
                grant, k = str(mine.get("g")), int(mine.get("k") or shard)  # renewal or take
            else:
                live = state.live()
                live.pop(request.holder, None)  # a lapsed entry of its own is no lease
                if not admits(request, live, state.grants):
                    return False
                if is_new_grant(request, live) and waits_behind(request, queued, live):
                    return False
                grant, k = uuid.uuid4().hex, shard
                if is_new_grant(request, live):
                    state.grants.append(request.now)
                state.hold(request.holder, request.partition, request.now + request.ttl, grant)
            expires = request.now + request.ttl
            txn.set(
                href,
                holder_fields(request.holder, request.partition, request.owner, expires, grant, k),
            )
            if state.changed:
                txn.set(sref, state.fields(request.now, window))
            for m in markers:
                txn.delete(m.reference)
            txn.delete(self._under(request.queue, shard, "queued").document(hid(request.holder)))
            txn.delete(self._waiting(request.queue, request.holder))
            return True

        key = f"{request.queue}/{shard}"
        return bool(await self._retried("acquiring a queue lease", key, lambda: body(self._txn())))

    async def deduplicate(
        self, queue: str, dedup_id: str, holder: str, now: float, replaces: str | None = None
    ) -> DedupHolder:
        """See :class:`~loom.store.leases.LeaseSet` (:mod:`loom_gcp._firestore_dedup`)."""
        return await self._dedup.deduplicate(queue, dedup_id, holder, now, replaces)

    async def forget(self, queue: str, dedup_id: str, holder: str) -> None:
        """See :class:`~loom.store.leases.LeaseSet`."""
        await self._dedup.forget(queue, dedup_id, holder)

    async def depth(self, queue: str, now: float) -> QueueDepth:
        """See :class:`~loom.store.leases.LeaseSet`: live holder documents; queued and
        waiting holders without one."""
        leases = self._queue(queue).collection("leases")
        live_docs = await self._query(
            "reading a queue's depth", leases.where(filter=FieldFilter("e", ">", now))
        )
        live = {holder_of(d) for d in live_docs}
        waiting: set[str] = set()
        shards = await self._query(
            "reading a queue's depth", self._queue(queue).collection("shards").select([])
        )
        for k in {int(d.id) for d in shards} | {0}:
            queued = await self._query(
                "reading a queue's depth", self._under(queue, k, "queued").select(["h"])
            )
            waiting |= {holder_of(d) for d in queued}
        legacy = await self._query(
            "reading a queue's depth", self._queue(queue).collection("waiting").select([])
        )
        waiting |= {d.id for d in legacy}
        return QueueDepth(len(live), len(waiting - live))


def _gave_up(what: str, exc: BaseException) -> StoreUnavailableError:
    return StoreUnavailableError(
        f"Firestore: {what} failed after retrying for {BUDGET:.0f} s "
        f"(the queue's document is contended), retry later: {exc!r}",
        details={"reason": "contention"},
    )


__all__ = ["COLLECTION", "FirestoreLeaseSet", "effective_shards"]
