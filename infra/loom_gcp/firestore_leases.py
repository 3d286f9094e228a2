"""``FirestoreLeaseSet``: queue leases in Firestore, exact across every worker instance.

One document per queue (``loom_queues/{queue}``) holds its live leases and its grant times of
the last second; every grant and every release is one read-modify-write transaction on that
document, so concurrent instances never both take the last lease. Waiting holders are kept
apart, one small document each (``loom_queues/{queue}/waiting/{holder}``), so recording a
wait never contends with the grants.

Contention: Firestore (and, more harshly, its emulator, whose pessimistic locks time out)
aborts transactions that race on one document. Each change is therefore retried here with
jittered exponential backoff, each attempt bounded in time, within an overall budget; past
it the call fails with :class:`~loom.errors.StoreUnavailableError` (the caller's delivery is
retried) instead of waiting unboundedly. Callers of one process on one event loop take turns
per queue (an :class:`asyncio.Lock` per loop and queue, never shared between loops, held only
while this process's own transaction runs), so only instances contend in Firestore.

The cost of that exactness: grants on one queue are serialized on one document, which
Firestore sustains at about one write per second with bursts above (latency grows under
heavier contention). That suits queues whose executions start at up to a few per second; a
busier queue would need its leases sharded.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import weakref
from collections.abc import Callable
from typing import Any, Final, cast

from google.api_core import exceptions as gexc
from google.cloud import firestore
from google.cloud.firestore_v1.async_document import AsyncDocumentReference
from google.cloud.firestore_v1.async_transaction import AsyncTransaction, async_transactional

from loom.errors import StoreUnavailableError
from loom.store.leases import (
    LeaseRequest,
    LeaseSet,
    QueueDepth,
    admits,
    is_new_grant,
    owned_elsewhere,
    rate_window,
)
from loom_gcp._firestore_io import translate

COLLECTION: Final = "loom_queues"
ATTEMPT_TIMEOUT: Final = 10.0  # seconds one transaction attempt may take
BUDGET: Final = 30.0  # seconds all attempts of one change may take
BACKOFF: Final = (0.05, 2.0)  # first and longest pause between attempts (jittered)
_RETRIED = (gexc.Aborted, gexc.DeadlineExceeded, gexc.ServiceUnavailable, TimeoutError)

log = logging.getLogger("loom")
Change = Callable[[dict[str, Any]], tuple[Any, dict[str, Any] | None]]


class FirestoreLeaseSet(LeaseSet):
    """See the module docstring and :class:`~loom.store.leases.LeaseSet`."""

    def __init__(self, client: firestore.AsyncClient) -> None:
        self._client = client
        self._locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, asyncio.Lock]]
        self._locks = weakref.WeakKeyDictionary()

    def _ref(self, queue: str) -> AsyncDocumentReference:
        return self._client.collection(COLLECTION).document(queue)

    def _waiting_ref(self, queue: str, holder: str) -> AsyncDocumentReference:
        waiting = cast(Any, self._ref(queue)).collection("waiting")
        return cast(AsyncDocumentReference, waiting.document(holder))

    def _lock(self, queue: str) -> asyncio.Lock:
        """This loop's lock for ``queue`` (an asyncio lock only ever serves one loop)."""
        per_loop = self._locks.setdefault(asyncio.get_running_loop(), {})
        return per_loop.setdefault(queue, asyncio.Lock())

    async def _change(self, queue: str, what: str, change: Change, *also: str) -> Any:
        """Run ``change`` on the queue's document in a transaction, retried with backoff;
        ``also`` names waiting holders whose documents the same transaction deletes."""
        try:
            async with asyncio.timeout(BUDGET):  # a lock never waited on past the budget
                async with self._lock(queue):
                    return await self._retried(queue, what, change, also)
        except TimeoutError as exc:
            # The budget ran out while waiting for this process's lock or mid-attempt:
            # the same answer as contention (503, retry later), never a bare timeout.
            raise self._gave_up(what, exc) from exc

    async def _retried(self, queue: str, what: str, change: Change, also: tuple[str, ...]) -> Any:
        deadline = time.monotonic() + BUDGET
        pause = BACKOFF[0]
        while True:
            try:
                async with asyncio.timeout(ATTEMPT_TIMEOUT):
                    return await self._attempt(queue, change, also)
            except (*_RETRIED, ValueError) as exc:
                if time.monotonic() + pause >= deadline:
                    raise self._gave_up(what, exc) from exc
            except gexc.GoogleAPIError as exc:
                raise translate(exc, what) from exc
            await asyncio.sleep(random.uniform(0, pause))
            pause = min(pause * 2, BACKOFF[1])

    async def _attempt(self, queue: str, change: Change, also: tuple[str, ...]) -> Any:
        @async_transactional
        async def body(txn: AsyncTransaction) -> Any:
            ref = self._ref(queue)
            snap = await ref.get(transaction=txn)
            result, new = change((snap.to_dict() or {}) if snap.exists else {})
            if new is not None:
                txn.set(ref, new)
                for holder in also:
                    txn.delete(self._waiting_ref(queue, holder))
            return result

        # One attempt per transaction: the retries (with backoff) are ours.
        return await body(self._client.transaction(max_attempts=1))

    @staticmethod
    def _gave_up(what: str, exc: BaseException) -> StoreUnavailableError:
        return StoreUnavailableError(
            f"Firestore: {what} failed after retrying for {BUDGET:.0f} s "
            f"(the queue's document is contended), retry later: {exc!r}",
            details={"reason": "contention"},
        )

    async def acquire(self, request: LeaseRequest) -> bool:
        """See :class:`~loom.store.leases.LeaseSet`."""

        def change(data: dict[str, Any]) -> tuple[bool, dict[str, Any] | None]:
            leases = {h: v for h, v in data.get("leases", {}).items() if v["e"] > request.now}
            mine = leases.get(request.holder)
            if owned_elsewhere(request, None if mine is None else mine.get("o", "")):
                return False, None
            keep = request.now - rate_window(request.rate)
            grants = [t for t in data.get("grants", []) if t > keep]
            live = {h: v.get("p") for h, v in leases.items()}
            if not admits(request, live, grants):
                return False, None
            if is_new_grant(request, live):
                grants.append(request.now)
            lease = {"p": request.partition, "e": request.now + request.ttl, "o": request.owner}
            leases[request.holder] = lease
            return True, {"leases": leases, "grants": grants}

        what = "acquiring a queue lease"
        return bool(await self._change(request.queue, what, change, request.holder))

    async def release(self, queue: str, holder: str, owner: str) -> None:
        """See :class:`~loom.store.leases.LeaseSet` (a transaction too: on the emulator a
        plain write to a document locked by a transaction times out rather than waits)."""

        def change(data: dict[str, Any]) -> tuple[None, dict[str, Any] | None]:
            leases: dict[str, Any] = dict(data.get("leases", {}))
            lease = leases.get(holder)
            if lease is None or lease.get("o", "") != owner:
                return None, None  # not there, or another call's: that call releases it
            del leases[holder]
            return None, {**data, "leases": leases}

        await self._change(queue, "releasing a queue lease", change)

    async def wait(self, queue: str, holder: str, now: float) -> None:
        """See :class:`~loom.store.leases.LeaseSet` (its own document: no contention)."""
        try:
            await self._waiting_ref(queue, holder).set({"since": now})
        except gexc.GoogleAPIError as exc:
            raise translate(exc, "recording a queue wait") from exc

    async def depth(self, queue: str, now: float) -> QueueDepth:
        """See :class:`~loom.store.leases.LeaseSet`."""
        try:
            snap = await self._ref(queue).get()
            docs = cast(Any, self._ref(queue)).collection("waiting").stream()
            waiting: list[str] = [d.id async for d in docs]
        except gexc.GoogleAPIError as exc:
            raise translate(exc, "reading a queue's depth") from exc
        data: dict[str, Any] = (snap.to_dict() or {}) if snap.exists else {}
        leases: dict[str, Any] = data.get("leases", {})
        live = [h for h, v in leases.items() if v["e"] > now]
        return QueueDepth(len(live), len([h for h in waiting if h not in leases]))
