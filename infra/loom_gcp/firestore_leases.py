"""``FirestoreLeaseSet``: queue leases in Firestore, exact across every worker instance.

One document per queue (``loom_queues/{queue}``) holds its live leases, its grant times of the
last second and its waiting holders; every decision is one read-modify-write transaction on
that document, so concurrent instances never both take the last lease (Firestore retries a
transaction that lost a race; it then sees the winner's lease). The cost of that exactness:
grants on one queue are serialized on one document, which Firestore sustains at about one
write per second with bursts above (latency grows under heavier contention). That suits queues
whose executions start at up to a few per second; a busier queue would need its leases
sharded.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

from google.api_core import exceptions as gexc
from google.cloud import firestore
from google.cloud.firestore_v1.async_document import AsyncDocumentReference
from google.cloud.firestore_v1.async_transaction import AsyncTransaction, async_transactional
from google.cloud.firestore_v1.field_path import FieldPath

from loom.errors import StoreUnavailableError
from loom.store.leases import LeaseRequest, LeaseSet, QueueDepth, admits, is_new_grant
from loom_gcp._firestore_io import translate

COLLECTION = "loom_queues"


class FirestoreLeaseSet(LeaseSet):
    """See the module docstring and :class:`~loom.store.leases.LeaseSet`."""

    def __init__(self, client: firestore.AsyncClient) -> None:
        self._client = client
        # One transaction per queue at a time from this process: racing transactions on one
        # document only abort each other (the emulator's locks time out), so callers of one
        # process queue up here and only instances contend in Firestore.
        self._locks: dict[str, asyncio.Lock] = {}

    def _ref(self, queue: str) -> AsyncDocumentReference:
        return cast(AsyncDocumentReference, self._client.collection(COLLECTION).document(queue))

    async def _change(self, queue: str, what: str, change: Any) -> Any:
        @async_transactional
        async def body(txn: AsyncTransaction) -> Any:
            ref = self._ref(queue)
            snap = await ref.get(transaction=txn)
            data: dict[str, Any] = snap.to_dict() or {} if snap.exists else {}
            result, new = change(data)
            if new is not None:
                txn.set(ref, new)
            return result

        lock = self._locks.setdefault(queue, asyncio.Lock())
        try:
            async with lock:
                return await body(self._client.transaction(max_attempts=20))
        except gexc.GoogleAPIError as exc:
            raise translate(exc, what) from exc
        except ValueError as exc:  # the client gave up retrying a contended transaction
            raise StoreUnavailableError(
                f"Firestore: {what} failed, retry later: {exc}", details={"reason": "contention"}
            ) from exc

    async def acquire(self, request: LeaseRequest) -> bool:
        """See :class:`~loom.store.leases.LeaseSet`."""

        def change(data: dict[str, Any]) -> tuple[bool, dict[str, Any] | None]:
            leases = {h: v for h, v in data.get("leases", {}).items() if v["e"] > request.now}
            grants = [t for t in data.get("grants", []) if t > request.now - 1.0]
            live = {h: v.get("p") for h, v in leases.items()}
            if not admits(request, live, grants):
                return False, None
            if is_new_grant(request, live):
                grants.append(request.now)
            leases[request.holder] = {"p": request.partition, "e": request.now + request.ttl}
            waiting = {h: t for h, t in data.get("waiting", {}).items() if h != request.holder}
            return True, {"leases": leases, "grants": grants, "waiting": waiting}

        return bool(await self._change(request.queue, "acquiring a queue lease", change))

    async def release(self, queue: str, holder: str) -> None:
        """See :class:`~loom.store.leases.LeaseSet` (one field delete: no transaction, so a
        release never contends with the grants)."""
        await self._update(queue, holder, "leases", firestore.DELETE_FIELD, "releasing a lease")

    async def wait(self, queue: str, holder: str, now: float) -> None:
        """See :class:`~loom.store.leases.LeaseSet` (one field write, no transaction)."""
        await self._update(queue, holder, "waiting", now, "recording a queue wait")

    async def _update(self, queue: str, holder: str, where: str, value: Any, what: str) -> None:
        path = FieldPath(where, holder).to_api_repr()
        try:
            await self._ref(queue).set({where: {holder: value}}, merge=[path])
        except gexc.GoogleAPIError as exc:
            raise translate(exc, what) from exc

    async def depth(self, queue: str, now: float) -> QueueDepth:
        """See :class:`~loom.store.leases.LeaseSet`."""
        try:
            snap = await self._ref(queue).get()
        except gexc.GoogleAPIError as exc:
            raise translate(exc, "reading a queue's depth") from exc
        data: dict[str, Any] = snap.to_dict() or {} if snap.exists else {}
        leases: dict[str, Any] = data.get("leases", {})
        live = [h for h, v in leases.items() if v["e"] > now]
        waiting = [h for h in data.get("waiting", {}) if h not in leases]
        return QueueDepth(len(live), len(waiting))
