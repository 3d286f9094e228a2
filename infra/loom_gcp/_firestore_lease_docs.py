"""The documents of :class:`~loom_gcp.firestore_leases.FirestoreLeaseSet` (laid out in
:mod:`loom_gcp._firestore_queue_docs`): references to a queue's shard, holder, queued and
freed documents, reads of them by reference inside a transaction and by query before one,
and this process's per-loop locks, by which callers on one event loop take turns per
document. The transactions and their retries are the lease set's own.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any, Final, cast

from google.api_core import exceptions as gexc
from google.cloud import firestore
from google.cloud.firestore_v1.async_document import AsyncDocumentReference
from google.cloud.firestore_v1.async_transaction import AsyncTransaction

from loom.store.leases import Waiter
from loom_gcp._firestore_io import translate
from loom_gcp._firestore_queue_docs import hid

COLLECTION: Final = "loom_queues"
MARKERS: Final = 100  # freed markers one settle reads

Doc = dict[str, Any]


class FirestoreLeaseDocs:
    """The lease set's references, reads and per-loop locks (see the module docstring).

    Args:
        client: The Firestore client.
    """

    def __init__(self, client: firestore.AsyncClient) -> None:
        self._client = client
        self._locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, asyncio.Lock]]
        self._locks = weakref.WeakKeyDictionary()

    def _queue(self, queue: str) -> Any:
        return self._client.collection(COLLECTION).document(queue)

    def _shard(self, queue: str, shard: int) -> AsyncDocumentReference:
        return cast(
            AsyncDocumentReference, self._queue(queue).collection("shards").document(str(shard))
        )

    def _holder(self, queue: str, holder: str) -> AsyncDocumentReference:
        return cast(
            AsyncDocumentReference, self._queue(queue).collection("leases").document(hid(holder))
        )

    def _under(self, queue: str, shard: int, name: str) -> Any:
        return cast(Any, self._shard(queue, shard)).collection(name)

    def _waiting(self, queue: str, holder: str) -> AsyncDocumentReference:
        return cast(
            AsyncDocumentReference, self._queue(queue).collection("waiting").document(holder)
        )

    def _lock(self, key: str) -> asyncio.Lock:
        """This loop's lock for ``key`` (an asyncio lock only ever serves one loop)."""
        per_loop = self._locks.setdefault(asyncio.get_running_loop(), {})
        return per_loop.setdefault(key, asyncio.Lock())

    def _txn(self) -> AsyncTransaction:
        return self._client.transaction(max_attempts=1)  # the retries (with backoff) are ours

    async def _read(
        self, txn: AsyncTransaction, refs: list[AsyncDocumentReference]
    ) -> dict[str, Doc | None]:
        """Documents by reference inside ``txn``: path → fields (``None``: missing)."""
        found: dict[str, Doc | None] = {}
        if refs:
            # (the client's own: ``AsyncTransaction.get_all`` awaits an async generator)
            async for snap in self._client.get_all(refs, transaction=txn):
                found[snap.reference.path] = (snap.to_dict() or {}) if snap.exists else None
        return found

    async def _query(self, what: str, query: Any) -> list[Any]:
        try:
            return [d async for d in query.stream()]
        except gexc.GoogleAPIError as exc:
            raise translate(exc, what) from exc

    async def _freed(self, queue: str, shard: int) -> list[Any]:
        return await self._query(
            "reading released leases", self._under(queue, shard, "freed").limit(MARKERS)
        )


def field_of(doc: Any, name: str) -> str:
    """Field ``name`` of a document snapshot, as text."""
    fields: dict[str, Any] = doc.to_dict() or {}
    return str(fields.get(name))


def holder_of(doc: Any) -> str:
    """The holder a document snapshot names (its ``h``)."""
    return field_of(doc, "h")


def waiter_of(fields: dict[str, Any]) -> Waiter:
    """The waiter a queued document's fields describe."""
    since, priority = float(fields["since"]), int(fields.get("r") or 0)
    return Waiter(str(fields["h"]), fields.get("p"), since, fields.get("flow"), priority)


def rank(priority: int, since: float) -> str:
    """A queued document's ``rk``: ordered as strings as ``(priority, since)`` is (one
    single-field index orders the waiters, no composite one)."""
    return f"{priority:010d}:{since:020.6f}"
