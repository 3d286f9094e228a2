"""``FirestoreScheduleStore``: schedule records (:mod:`loom.store.schedule_store`) as
documents ``loom_schedules/{digest of the name}`` holding ``name``, ``version`` and ``body``
(the record's JSON). A write is a transaction on that one document, conditioned on the
version it read; listing is one query of a small collection."""

from __future__ import annotations

import hashlib
from typing import Any, Final

from google.api_core import exceptions as gexc
from google.cloud import firestore
from google.cloud.firestore_v1.async_document import AsyncDocumentReference
from google.cloud.firestore_v1.async_transaction import AsyncTransaction, async_transactional

from loom.errors import StoreUnavailableError
from loom.store.schedule_store import ScheduleRecord, ScheduleStore, check_version
from loom_gcp._firestore_io import translate

COLLECTION: Final = "loom_schedules"
ATTEMPTS: Final = 5  # a transaction contended past this is the caller's to retry (503)


def doc_id(name: str) -> str:
    """The document id of the schedule ``name`` (any name makes a valid id)."""
    return hashlib.sha256(name.encode("utf-8")).hexdigest()[:40]


class FirestoreScheduleStore(ScheduleStore):
    """See the module docstring and :class:`~loom.store.schedule_store.ScheduleStore`."""

    def __init__(self, client: firestore.AsyncClient) -> None:
        self._client = client

    def _ref(self, name: str) -> AsyncDocumentReference:
        return self._client.collection(COLLECTION).document(doc_id(name))

    async def get(self, name: str) -> ScheduleRecord | None:
        """See :class:`~loom.store.schedule_store.ScheduleStore`."""
        try:
            snap = await self._ref(name).get()
        except gexc.GoogleAPIError as exc:
            raise translate(exc, "reading a schedule") from exc
        return _record(snap.to_dict()) if snap.exists else None

    async def list(self) -> list[ScheduleRecord]:
        """See :class:`~loom.store.schedule_store.ScheduleStore`."""
        try:
            docs = [d async for d in self._client.collection(COLLECTION).stream()]
        except gexc.GoogleAPIError as exc:
            raise translate(exc, "listing schedules") from exc
        found = [_record(d.to_dict()) for d in docs]
        return sorted((r for r in found if r is not None), key=lambda r: r.name)

    async def _write(self, name: str, expected: int | None, fields: dict[str, Any] | None) -> bool:
        ref = self._ref(name)

        @async_transactional
        async def body(txn: AsyncTransaction) -> bool:
            snap = await ref.get(transaction=txn)
            version = int((snap.to_dict() or {}).get("version") or 0) if snap.exists else None
            if version != expected:
                return False
            if fields is None:
                txn.delete(ref)
            else:
                txn.set(ref, fields)
            return True

        try:
            return bool(await body(self._client.transaction(max_attempts=ATTEMPTS)))
        except ValueError as exc:  # the client's "failed to commit" after its attempts
            raise StoreUnavailableError(
                f"Firestore: writing schedule {name!r} stayed contended, retry later: {exc}",
                details={"reason": "contention"},
            ) from exc
        except gexc.GoogleAPIError as exc:
            raise translate(exc, "writing a schedule") from exc

    async def put(self, record: ScheduleRecord, expected: int | None) -> bool:
        """See :class:`~loom.store.schedule_store.ScheduleStore` (a transaction)."""
        check_version(record, expected)
        fields = {"name": record.name, "version": record.version, "body": record.to_json()}
        return await self._write(record.name, expected, fields)

    async def delete(self, name: str, expected: int) -> bool:
        """See :class:`~loom.store.schedule_store.ScheduleStore` (a transaction)."""
        return await self._write(name, expected, None)


def _record(fields: dict[str, Any] | None) -> ScheduleRecord | None:
    body = (fields or {}).get("body")
    return ScheduleRecord.from_json(str(body)) if body else None


__all__ = ["COLLECTION", "FirestoreScheduleStore"]
