"""Queues' deduplication ids in Firestore (:meth:`loom.store.leases.LeaseSet.deduplicate`):
``loom_queues/{queue}/dedup/{digest of the id}`` holds ``h`` (the holder), ``since`` and
``id``; each change is a transaction on that one document, independent of every lease."""

from __future__ import annotations

from typing import Any, Final

from google.api_core import exceptions as gexc
from google.cloud import firestore
from google.cloud.firestore_v1.async_transaction import AsyncTransaction, async_transactional

from loom.errors import StoreUnavailableError
from loom.store.leases import DedupHolder
from loom_gcp._firestore_io import translate
from loom_gcp._firestore_queue_docs import hid

ATTEMPTS: Final = 5  # contended past this: the caller's to retry (503)


class FirestoreDedup:
    """Deduplication ids of the queues under ``collection``."""

    def __init__(self, client: firestore.AsyncClient, collection: str) -> None:
        self._client = client
        self._collection = collection

    def _ref(self, queue: str, dedup_id: str) -> Any:
        queues: Any = self._client.collection(self._collection)
        return queues.document(queue).collection("dedup").document(hid(dedup_id))

    async def _run(self, what: str, body: Any) -> Any:
        try:
            return await body(self._client.transaction(max_attempts=ATTEMPTS))
        except ValueError as exc:  # the client's "failed to commit" after its attempts
            raise StoreUnavailableError(
                f"Firestore: {what} stayed contended, retry later: {exc}",
                details={"reason": "contention"},
            ) from exc
        except gexc.GoogleAPIError as exc:
            raise translate(exc, what) from exc

    async def deduplicate(
        self, queue: str, dedup_id: str, holder: str, now: float, replaces: str | None
    ) -> DedupHolder:
        """See :meth:`loom.store.leases.LeaseSet.deduplicate`."""
        ref = self._ref(queue, dedup_id)

        @async_transactional
        async def body(txn: AsyncTransaction) -> DedupHolder:
            snap = await ref.get(transaction=txn)
            doc: dict[str, Any] | None = snap.to_dict() if snap.exists else None
            if doc is None or doc.get("h") == replaces:
                txn.set(ref, {"h": holder, "since": now, "id": dedup_id})
                return DedupHolder(holder, now)
            return DedupHolder(str(doc["h"]), float(doc["since"]))

        found = await self._run("holding a deduplication id", body)
        assert isinstance(found, DedupHolder)
        return found

    async def forget(self, queue: str, dedup_id: str, holder: str) -> None:
        """See :meth:`loom.store.leases.LeaseSet.forget`."""
        ref = self._ref(queue, dedup_id)

        @async_transactional
        async def body(txn: AsyncTransaction) -> None:
            snap = await ref.get(transaction=txn)
            if snap.exists and (snap.to_dict() or {}).get("h") == holder:
                txn.delete(ref)

        await self._run("dropping a deduplication id", body)
