"""Listings, scans and the purge of the Firestore event store, shard by shard.

Kept apart from :mod:`loom_gcp.firestore` (the constructor, ``create``, summaries, deletes)
so each module stays readable: everything here reads many execution documents at once,
through the indexes Terraform declares, all of which lead with ``shard``
(:mod:`loom_gcp._firestore_shards`).
"""

from __future__ import annotations

from collections.abc import Sequence

from google.cloud.firestore_v1 import FieldFilter
from google.cloud.firestore_v1.async_query import AsyncQuery
from google.cloud.firestore_v1.field_path import FieldPath

from loom.store.base import STATUSES, ExecutionSummary, ListCursor, OnDelete, PurgeReport
from loom.store.browse import BrowseQuery
from loom_gcp._firestore_browse import browse_prefix, count_by_status
from loom_gcp._firestore_core import FirestoreCore
from loom_gcp._firestore_docs import SUMMARY_FIELDS, summary_from_fields
from loom_gcp._firestore_purge import purge
from loom_gcp._firestore_shards import (
    backfill_shards,
    browse_all_shards,
    list_all_shards,
    list_one_shard,
)


class FirestoreListings(FirestoreCore):
    """``list``, ``list_shard``, ``browse``, ``count_by_status``, ``scan`` and ``purge`` of
    :class:`~loom_gcp.firestore.FirestoreEventStore`."""

    async def list(
        self,
        status: str | None = None,
        *,
        due_before: float | None = None,
        limit: int = 1000,
        oldest_first: bool = False,
        after: ListCursor | None = None,
    ) -> list[ExecutionSummary]:
        """Summaries from execution documents only; ``last_seq`` is as of the last status change.

        One query per shard, merged (:mod:`loom_gcp._firestore_shards`). With ``due_before``
        the ``limit`` earliest due (what a sweeper wants) are taken and ordered; otherwise
        rows come in ``(created_at, id)`` order.
        """
        return await list_all_shards(
            self._io,
            self._executions,
            await self.shard_count(),
            status,
            due_before=due_before,
            limit=limit,
            oldest_first=oldest_first,
            after=after,
        )

    async def list_shard(
        self,
        shard: int,
        status: str | None = None,
        *,
        due_before: float | None = None,
        limit: int = 1000,
        oldest_first: bool = False,
        after: ListCursor | None = None,
    ) -> list[ExecutionSummary]:
        """``list`` of one shard: one query, served by an index leading with ``shard``."""
        if not 0 <= shard < await self.shard_count():
            return []
        return await list_one_shard(
            self._io,
            self._executions,
            shard,
            status,
            due_before=due_before,
            limit=limit,
            oldest_first=oldest_first,
            after=after,
        )

    async def backfill_shards(self) -> int:
        """Give execution documents written before shards existed their ``shard`` field
        (after upgrading a deployment; idempotent); how many it updated."""
        updated = await backfill_shards(self._io, self._executions, await self.shard_count())
        await self._layout.backfilled()
        return updated

    async def upkeep(self) -> dict[str, int]:
        """The sweep's store maintenance: the shard backfill of an upgraded database, once."""
        if not await self._layout.backfill_pending():
            return {}
        return {"shards_backfilled": await self.backfill_shards()}

    async def browse(self, query: BrowseQuery) -> list[ExecutionSummary]:
        """One indexed query per shard, merged; or the ids from the prefix on
        (``loom_gcp._firestore_browse``)."""
        if query.id_prefix:
            return await browse_prefix(self._io, self._executions, query)
        return await browse_all_shards(self._io, self._executions, await self.shard_count(), query)

    async def count_by_status(self, *, flow: str | None = None) -> dict[str, int]:
        """One ``COUNT`` aggregation per status (see ``loom_gcp._firestore_browse``)."""
        return await count_by_status(self._io, self._executions, STATUSES, flow)

    async def scan(
        self, statuses: Sequence[str], *, after: str | None = None, limit: int = 500
    ) -> list[ExecutionSummary]:
        """A page of execution documents by id (the status filter is served by the automatic
        single-field index; ``in`` takes up to 30 values, far more than there are statuses)."""
        if not statuses:
            return []
        query: AsyncQuery = self._executions.where(  # type: ignore[assignment]
            filter=FieldFilter("status", "in", list(statuses))
        ).order_by(FieldPath.document_id())
        if after is not None:
            query = query.start_after({FieldPath.document_id(): self._exec_ref(after)})
        async with self._io.call("scan"):
            docs = await self._io.query(query.select(SUMMARY_FIELDS).limit(limit))
        return [summary_from_fields(d.id, d.to_dict() or {}) for d in docs]

    async def purge(
        self,
        finished_before: float,
        *,
        limit: int = 100,
        after: ListCursor | None = None,
        on_delete: OnDelete | None = None,
        shard: int | None = None,
    ) -> PurgeReport:
        """Finished executions only, found by index and deleted in parallel
        (:mod:`loom_gcp._firestore_purge`)."""
        count = await self.shard_count()
        shards = range(count) if shard is None else [shard] if 0 <= shard < count else []
        report = await purge(
            self._io,
            self._executions,
            shards,
            finished_before,
            limit=limit,
            after=after,
            on_delete=on_delete,
        )
        for eid in report.purged:
            self._forget(eid)
        return report
