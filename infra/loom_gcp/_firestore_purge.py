"""The Firestore event store's purge: finished executions found by index, deleted in parallel.

A purge call reads only finished executions: per shard and finished status, the query
``shard == s AND status == x AND created_at < cutoff ORDER BY created_at, id`` (the index
``(shard, status, created_at)``), the streams merged oldest first. Running executions are
never read, and the scan ends by itself at the cutoff.

Each execution is deleted with two round trips whatever its size: the keys of its
``events``, ``snapshots`` and ``inbox`` documents are listed at once, then one commit
deletes them with the execution document (several commits, the execution document last,
past Firestore's 500 writes). Several executions are deleted at once; the ``on_delete`` hook
(the blobs) runs first for each, in order, so an execution whose blobs could not be deleted
is kept.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from typing import Any, Final, cast

from google.cloud.firestore_v1 import FieldFilter
from google.cloud.firestore_v1.async_collection import AsyncCollectionReference
from google.cloud.firestore_v1.async_document import AsyncDocumentReference

from loom.shards import merge_shards
from loom.store.base import FINISHED, ExecutionSummary, ListCursor, OnDelete, PurgeReport
from loom_gcp._firestore_docs import MAX_COMMIT_WRITES, SUMMARY_FIELDS, summary_from_fields
from loom_gcp._firestore_io import CountedDocs
from loom_gcp._firestore_retention import ordered_by_creation
from loom_gcp._firestore_writes import delete_all, delete_tree

SUBCOLLECTIONS: Final = ("events", "snapshots", "inbox")
PARALLEL: Final = 16  # executions deleted at once by one purge call
_STATUSES: Final = tuple(sorted(FINISHED))


async def purge(
    io: CountedDocs,
    executions: Any,
    shards: Iterable[int],
    finished_before: float,
    *,
    limit: int,
    after: ListCursor | None,
    on_delete: OnDelete | None,
) -> PurgeReport:
    """See :meth:`~loom.store.base.EventStore.purge` and the module docstring."""
    streams = [(s, status) for s in shards for status in _STATUSES]

    async def fetch(index: int, cursor: ListCursor | None, n: int) -> list[ExecutionSummary]:
        shard, status = streams[index]
        q = executions.where(filter=FieldFilter("shard", "==", shard))
        q = q.where(filter=FieldFilter("status", "==", status))
        q = q.where(filter=FieldFilter("created_at", "<", finished_before))
        q = ordered_by_creation(q, True, cursor)
        async with io.call("purge"):
            docs = await io.query(q.select(SUMMARY_FIELDS).limit(n))
        return [summary_from_fields(d.id, d.to_dict() or {}) for d in docs]

    page = await merge_shards(len(streams), fetch, lambda r: r.cursor, limit, after=after)
    due = [r.execution_id for r in page if r.updated_at < finished_before]
    cursor = page[-1].cursor if len(page) == limit else None
    ready: list[str] = []
    try:
        for eid in due:  # the hook first, in order: a failure keeps that execution
            if on_delete is not None:
                await on_delete(eid)
            ready.append(eid)
    finally:
        await delete_many(io, [executions.document(eid) for eid in ready])
    return PurgeReport(ready, len(page), cursor)


async def delete_many(io: CountedDocs, refs: Sequence[AsyncDocumentReference]) -> None:
    """Delete executions with everything under them, :data:`PARALLEL` at a time."""
    gate = asyncio.Semaphore(PARALLEL)

    async def one(ref: AsyncDocumentReference) -> None:
        async with gate:
            await delete_execution_tree(io, ref)

    await asyncio.gather(*(one(r) for r in refs))


async def delete_execution_tree(io: CountedDocs, execution: AsyncDocumentReference) -> None:
    """Delete one execution document and its subcollections in as few commits as Firestore
    allows (one, up to 499 documents under it)."""
    name = f"{execution.id!r}"
    async with io.call(f"delete {name}"):
        found = await asyncio.gather(*(_keys(io, execution, sub) for sub in SUBCOLLECTIONS))
        refs = [r for keys in found for r in keys]
        if all(len(keys) < MAX_COMMIT_WRITES for keys in found) and len(refs) < MAX_COMMIT_WRITES:
            await delete_all(io, [*refs, execution])
            return
    await delete_tree(io, execution, name)  # a big one: page by page, the document last


async def _keys(
    io: CountedDocs, execution: AsyncDocumentReference, sub: str
) -> list[AsyncDocumentReference]:
    children = cast(AsyncCollectionReference, execution.collection(sub))
    docs = await io.query(children.select([]).limit(MAX_COMMIT_WRITES))
    return [cast(AsyncDocumentReference, d.reference) for d in docs]
