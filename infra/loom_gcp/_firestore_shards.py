"""Shards of the Firestore event store: the layout document, and listings that fan out.

Every execution document carries ``shard`` (:func:`loom.shards.shard_of` of its id), and
every ordered composite index Terraform declares on ``executions`` leads with it, so the
inserts of a busy deployment land at the tail of ``n`` index ranges, not of one (Firestore
sustains about 500 inserts a second at the tail of one range of monotonic values). A
listing ordered by creation or by wake time runs one query per shard and merges them
(:func:`loom.shards.merge_shards`); the sweeper and the purge work shard by shard.

How many shards a database has is decided once, by the first store that writes to it, and
kept in ``loom_meta/layout`` (``{"shards": n}``): a store opened later with another count
uses the recorded one (an execution's shard must never move). Reading it costs one read per
store object, once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import Any, Final

from google.api_core import exceptions as gexc
from google.cloud.firestore_v1 import FieldFilter
from google.cloud.firestore_v1.async_batch import AsyncWriteBatch
from google.cloud.firestore_v1.field_path import FieldPath

from loom.errors import StoreError
from loom.shards import check_shards, merge_shards, shard_of
from loom.store.base import ExecutionSummary, ListCursor, page_after
from loom.store.browse import BrowseQuery
from loom_gcp._firestore_docs import SUMMARY_FIELDS, summary_from_fields
from loom_gcp._firestore_io import Collision, CountedDocs
from loom_gcp._firestore_retention import ordered_by_creation

log = logging.getLogger("loom")

DEFAULT_SHARDS: Final = 16
LAYOUT: Final = ("loom_meta", "layout")
_BACKFILL_PAGE = 400


class ShardLayout:
    """The shard count of one database, read (or recorded) once per store object.

    Its I/O is counted apart from the store's (``FirestoreEventStore.ops`` counts what the
    executions cost; this read happens once per process).
    """

    def __init__(self, io: CountedDocs, wanted: int) -> None:
        self._io = CountedDocs(io.client, io.policy)
        self.wanted = check_shards(wanted)
        self._known: int | None = None

    @property
    def known(self) -> int | None:
        """The count, once :meth:`count` has read it."""
        return self._known

    def _ref(self) -> Any:
        return self._io.client.collection(LAYOUT[0]).document(LAYOUT[1])

    async def count(self) -> int:
        """The database's shard count (recorded by the first store that asked).

        A database that already holds executions when its layout is first recorded (a
        deployment upgraded from a release before shards) is marked ``backfill``: its
        execution documents get their shard from :meth:`backfill_pending`'s caller.
        """
        if self._known is not None:
            return self._known
        ref = self._ref()
        async with self._io.call("read the shard layout"):
            doc = await self._io.get(ref)
            if not doc.exists:
                older = self._io.client.collection("executions").select([]).limit(1)
                layout = {"shards": self.wanted, "backfill": bool(await self._io.query(older))}

                def build() -> tuple[AsyncWriteBatch, int]:
                    batch = self._io.client.batch()
                    batch.create(ref, layout)
                    return batch, 0

                with contextlib.suppress(Collision):  # another store recorded it first
                    await self._io.commit(build)
                doc = await self._io.get(ref)
        found = int((doc.to_dict() or {}).get("shards") or self.wanted)
        if found != self.wanted:
            log.warning(
                "this Firestore database has %d shards; the store asked for %d and uses %d "
                "(an execution's shard never changes)",
                found,
                self.wanted,
                found,
            )
        self._known = check_shards(found)
        return self._known

    async def backfill_pending(self) -> bool:
        """Whether execution documents from before shards may still lack their shard."""
        async with self._io.call("read the shard layout"):
            doc = await self._io.get(self._ref())
        return bool((doc.to_dict() or {}).get("backfill"))

    async def backfilled(self) -> None:
        """Record that every execution document has its shard."""
        async with self._io.call("record the shard layout"):
            await self._ref().update({"backfill": False})


def shard_field(execution_id: str, shards: int) -> dict[str, int]:
    """The ``shard`` field of a new execution document."""
    return {"shard": shard_of(execution_id, shards)}


def _shard_query(executions: Any, shard: int, status: str | None) -> Any:
    q = executions.where(filter=FieldFilter("shard", "==", shard))
    if status is not None:
        q = q.where(filter=FieldFilter("status", "==", status))
    return q


async def list_one_shard(
    io: CountedDocs,
    executions: Any,
    shard: int,
    status: str | None,
    *,
    due_before: float | None,
    limit: int,
    oldest_first: bool,
    after: ListCursor | None,
) -> list[ExecutionSummary]:
    """``list`` of one shard: by ``(shard, status, created_at)``, or by wake time."""
    q = _shard_query(executions, shard, status)
    if due_before is not None:
        q = q.where(filter=FieldFilter("wake_at", "<=", due_before)).order_by("wake_at")
        async with io.call("list"):
            docs = await io.query(q.select(SUMMARY_FIELDS).limit(limit))
        rows = [summary_from_fields(d.id, d.to_dict() or {}) for d in docs]
        return page_after(rows, after, oldest_first, limit)
    q = ordered_by_creation(q, oldest_first, after)
    async with io.call("list"):
        docs = await io.query(q.select(SUMMARY_FIELDS).limit(limit))
    return [summary_from_fields(d.id, d.to_dict() or {}) for d in docs]


async def list_all_shards(
    io: CountedDocs,
    executions: Any,
    shards: int,
    status: str | None,
    *,
    due_before: float | None,
    limit: int,
    oldest_first: bool,
    after: ListCursor | None,
) -> list[ExecutionSummary]:
    """``list`` across every shard, merged (see :func:`loom.shards.merge_shards`)."""
    if due_before is not None:
        # The ``limit`` earliest due of each shard hold the ``limit`` earliest due of all.
        pages = await asyncio.gather(
            *(
                list_one_shard(
                    io,
                    executions,
                    s,
                    status,
                    due_before=due_before,
                    limit=limit,
                    oldest_first=oldest_first,
                    after=None,
                )
                for s in range(shards)
            )
        )
        rows = [r for page in pages for r in page]
        soonest = sorted(rows, key=lambda r: (r.wake_at or 0.0, r.execution_id))[:limit]
        return page_after(soonest, after, oldest_first, limit)

    async def fetch(shard: int, cursor: ListCursor | None, n: int) -> list[ExecutionSummary]:
        return await list_one_shard(
            io,
            executions,
            shard,
            status,
            due_before=None,
            limit=n,
            oldest_first=oldest_first,
            after=cursor,
        )

    return await merge_shards(
        shards, fetch, lambda r: r.cursor, limit, descending=not oldest_first, after=after
    )


async def browse_all_shards(
    io: CountedDocs, executions: Any, shards: int, query: BrowseQuery
) -> list[ExecutionSummary]:
    """An operator's listing across every shard, newest first, merged.

    Each shard's query has equality on ``shard`` (and ``flow``, ``status``) and a range on
    ``created_at``, ordered by ``(created_at, id)`` descending: served by the composite
    indexes ``(shard, [flow,] [status,] created_at desc)`` Terraform declares.
    """

    async def fetch(shard: int, cursor: ListCursor | None, n: int) -> list[ExecutionSummary]:
        q: Any = executions.where(filter=FieldFilter("shard", "==", shard))
        for name, value in (("flow", query.flow), ("status", query.status)):
            if value is not None:
                q = q.where(filter=FieldFilter(name, "==", value))
        if query.created_from is not None:
            q = q.where(filter=FieldFilter("created_at", ">=", query.created_from))
        if query.created_before is not None:
            q = q.where(filter=FieldFilter("created_at", "<", query.created_before))
        q = ordered_by_creation(q, False, cursor)
        async with io.call("browse"):
            docs = await io.query(q.select(SUMMARY_FIELDS).limit(n))
        return [summary_from_fields(d.id, d.to_dict() or {}) for d in docs]

    return await merge_shards(
        shards, fetch, lambda r: r.cursor, query.limit, descending=True, after=query.after
    )


async def backfill_shards(io: CountedDocs, executions: Any, shards: int) -> int:
    """Give every execution document written before shards its ``shard`` field.

    Pages through the collection by id (a read per document); each document lacking the
    field is updated only if it still exists. Idempotent and safe beside running workers:
    it never changes another field. Returns how many documents it updated.
    """
    updated = 0
    after: Any = None
    while True:
        q = executions.order_by(FieldPath.document_id())
        if after is not None:
            q = q.start_after({FieldPath.document_id(): after})
        async with io.call("backfill shards"):
            docs = await io.query(q.select(["shard"]).limit(_BACKFILL_PAGE))
        missing = [d for d in docs if d.exists and (d.to_dict() or {}).get("shard") is None]
        if missing:
            updated += await _set_shards(io, missing, shards)
        if len(docs) < _BACKFILL_PAGE:
            return updated
        after = docs[-1].reference


async def _set_shards(io: CountedDocs, docs: Sequence[Any], shards: int) -> int:
    def build() -> tuple[AsyncWriteBatch, int]:
        batch = io.client.batch()
        for d in docs:  # (an update requires the document to exist)
            batch.update(d.reference, shard_field(d.id, shards))
        return batch, 0

    try:
        async with io.call("backfill shards"):
            await io.commit(build)
    except (Collision, StoreError) as exc:
        if not isinstance(exc, Collision) and not isinstance(exc.__cause__, gexc.NotFound):
            raise
        if len(docs) == 1:
            return 0  # deleted meanwhile (a purge): nothing to backfill
        # One was deleted meanwhile: do them one by one, skipping the gone.
        return sum([await _set_shards(io, [d], shards) for d in docs])
    return len(docs)
