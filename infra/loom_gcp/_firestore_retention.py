"""Retention helpers of the Firestore event store: listing order, the TTL backstop, and
clearing what a TTL deletion left behind. Kept apart from :mod:`loom_gcp.firestore` and its
append and load parts (``_firestore_append``, ``_firestore_load``) so those hold the
append/load protocol.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import cast

from google.api_core import exceptions as gexc
from google.cloud import firestore
from google.cloud.firestore_v1.async_batch import AsyncWriteBatch
from google.cloud.firestore_v1.async_collection import AsyncCollectionReference
from google.cloud.firestore_v1.async_document import AsyncDocumentReference
from google.cloud.firestore_v1.async_query import AsyncQuery
from google.cloud.firestore_v1.field_path import FieldPath

from loom.errors import ConfigurationError
from loom.store.base import ListCursor
from loom_gcp._firestore_io import Collision, CountedDocs, Doc

DEFAULT_TTL_DAYS = 37
_DELETE_BATCH = 400  # writes per commit stay under Firestore's 500


async def clear_orphan(io: CountedDocs, execution: AsyncDocumentReference) -> bool:
    """Delete what a TTL deletion left of an execution: events without their document.

    Firestore TTL removes only the execution document, so a start of the same id meets the
    old seq 1. Each leftover is deleted only if unchanged since it was read, so a concurrent
    start that cleared it and wrote a new log first is never undone (its batch fails and the
    caller sees the new execution instead).

    Returns:
        Whether leftovers were found and deleted (start again); False when the execution
        document exists (a real repeat or conflict), or another start got there first.
    """
    if (await io.get(execution)).exists:
        return False
    leftovers: list[Doc] = []
    for name in ("events", "snapshots"):
        sub = cast(AsyncCollectionReference, execution.collection(name))
        leftovers += await io.query(sub.select([]))
    if not leftovers:
        return False
    for start in range(0, len(leftovers), _DELETE_BATCH):
        if not await _delete_unchanged(io, leftovers[start : start + _DELETE_BATCH]):
            return False  # someone else cleared it and started anew: theirs stands
    return True


async def clear_older(
    io: CountedDocs, execution: AsyncDocumentReference, created: datetime
) -> None:
    """Delete events and snapshot parts created before the execution document: what a TTL
    deletion left of an earlier execution of the same id (the start event now rides the
    execution document, so a new start no longer collides with them)."""
    leftovers: list[Doc] = []
    for name in ("events", "snapshots"):
        sub = cast(AsyncCollectionReference, execution.collection(name))
        docs = await io.query(sub.select([]))
        leftovers += [d for d in docs if d.create_time is not None and d.create_time < created]
    for start in range(0, len(leftovers), _DELETE_BATCH):
        await _delete_unchanged(io, leftovers[start : start + _DELETE_BATCH])


async def _delete_unchanged(io: CountedDocs, docs: list[Doc]) -> bool:
    """Delete documents that were not written since read; False if any was."""

    def build() -> tuple[AsyncWriteBatch, int]:
        batch = io.client.batch()
        for doc in docs:
            when = cast("datetime | None", doc.update_time)
            option = io.client.write_option(last_update_time=when)
            batch.delete(doc.reference, option=option)
        return batch, len(docs)

    try:
        await io.commit(build)
    except (gexc.FailedPrecondition, gexc.NotFound, Collision):
        return False
    return True


def ttl_from_env(env: Mapping[str, str] | None = None) -> timedelta:
    """``LOOM_TTL_DAYS`` (default 37): when Firestore's TTL may delete an execution document.

    TTL deletes only that document, leaving events, snapshots and blobs to no one; so it is a
    backstop set later than the purge's retention (30 days by default), which deletes all of
    it first.

    Raises:
        ConfigurationError: Not a positive number of days.
    """
    raw = (os.environ if env is None else env).get("LOOM_TTL_DAYS") or str(DEFAULT_TTL_DAYS)
    try:
        days = float(raw)
    except ValueError:
        days = 0.0
    if days <= 0:
        raise ConfigurationError(f"LOOM_TTL_DAYS must be a positive number of days, got {raw!r}")
    return timedelta(days=days)


def ordered_by_creation(
    query: AsyncQuery, oldest_first: bool, after: ListCursor | None
) -> AsyncQuery:
    """Order by ``(created_at, document id)`` and start after ``after``."""
    direction = firestore.Query.ASCENDING if oldest_first else firestore.Query.DESCENDING
    query = query.order_by("created_at", direction=direction).order_by(
        FieldPath.document_id(), direction=direction
    )
    if after is not None:
        query = query.start_after({"created_at": after[0], FieldPath.document_id(): after[1]})
    return query
