"""The state a Firestore event store shares between its parts, and where a log ends.

:class:`~loom_gcp.firestore.FirestoreEventStore` is assembled from parts, each in its own
module so none grows past what one reader can hold: appends
(:mod:`loom_gcp._firestore_append`), loads and snapshots (:mod:`loom_gcp._firestore_load`)
and the rest of the SPI (:mod:`loom_gcp.firestore`). This module holds what they all use:
the store's state (declared here, set by the store's constructor), the document references
(every document path goes through :meth:`FirestoreCore._exec_ref`), what the store remembers
of where each log ends, and the reads of the execution document and of the page holding an
event.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, cast

from google.cloud import firestore
from google.cloud.firestore_v1.async_collection import AsyncCollectionReference
from google.cloud.firestore_v1.async_document import AsyncDocumentReference

from loom.errors import UnknownExecutionError
from loom.ids import check_execution_id
from loom.store.base import EventStore
from loom_gcp._firestore_cache import LogCache, LogEnds
from loom_gcp._firestore_docs import SnapshotPointer
from loom_gcp._firestore_fence import Stamps
from loom_gcp._firestore_io import CountedDocs, Doc
from loom_gcp._firestore_pages import Page, end_page, held_pages, page_holding
from loom_gcp._firestore_shards import ShardLayout


class FirestoreCore(EventStore):
    """The state and shared reads of :class:`~loom_gcp.firestore.FirestoreEventStore`.

    Not a store by itself: the store's constructor sets these attributes.
    """

    _owns_client: bool
    _client: firestore.AsyncClient
    _executions: AsyncCollectionReference
    _retention: timedelta
    # The highest page end seen per execution (see ``_note``), least recently used first.
    _known: LogEnds
    _attempts: int
    _io: CountedDocs
    _cache: LogCache
    _stamps: Stamps
    _layout: ShardLayout
    snapshot_commit_bytes: int

    # -- references and accounting ----------------------------------------------------------

    def _exec_ref(self, execution_id: str) -> AsyncDocumentReference:
        # Every document path goes through here: an id the rule refuses ("a/b/c" would
        # address a document of another collection) never reaches the client.
        return self._executions.document(check_execution_id(execution_id))

    def _events(self, execution_id: str) -> AsyncCollectionReference:
        return cast(AsyncCollectionReference, self._exec_ref(execution_id).collection("events"))

    def _snapshot_refs(
        self, execution_id: str, pointer: SnapshotPointer
    ) -> list[AsyncDocumentReference]:
        snapshots = cast(
            AsyncCollectionReference, self._exec_ref(execution_id).collection("snapshots")
        )
        return [snapshots.document(part_id) for part_id in pointer.part_ids()]

    def _saw(self, execution_id: str, doc: Doc) -> None:
        """Remember the execution document as read: its update time (the precondition of
        a riding end or a fenced append), and where an end on it ends (an append below
        that must not pass for one at the log's end)."""
        self._stamps.seen(execution_id, doc)
        end = end_page(doc.to_dict() or {}) if doc.exists else None
        if end is not None:
            self._note(execution_id, end.last, end.ends_log)

    def _note(self, execution_id: str, seq: int, terminal: bool | None = None) -> None:
        """Remember that a page of the execution ends at ``seq`` (a fact that stays true),
        and whether the event there is terminal, if known."""
        self._known.note(execution_id, seq, terminal)

    async def shard_count(self) -> int:
        """The database's shard count (``loom_meta/layout``, read once)."""
        return await self._layout.count()

    def _forget(self, execution_id: str) -> None:
        """Drop what the store remembers of a log that is deleted."""
        self._known.drop(execution_id)
        self._cache.drop(execution_id)
        self._stamps.drop(execution_id)

    # -- reads of the execution document and of the page holding an event ---------------

    async def _exec_snap(self, execution_id: str) -> Doc:
        doc = await self._io.get(self._exec_ref(execution_id))
        self._saw(execution_id, doc)
        if not doc.exists:
            raise UnknownExecutionError(f"unknown execution {execution_id!r}")
        return doc

    async def _exec_doc(self, execution_id: str) -> dict[str, Any]:
        return (await self._exec_snap(execution_id)).to_dict() or {}

    async def _page_holding(self, execution_id: str, seq: int) -> Page | None:
        """The page holding event ``seq``, if there is one: a page document, or a run of
        events on the execution document (the start, read first for seq 1; an end, read
        only when no page document holds ``seq``)."""
        if seq > 1:
            page = await page_holding(self._io, self._events(execution_id), seq, None)
            if page is not None:
                return page
        doc = await self._io.get(self._exec_ref(execution_id))
        self._saw(execution_id, doc)
        if not doc.exists:
            return None
        held = [p for p in held_pages(doc.to_dict() or {}) if p.holds(seq)]
        if held or seq > 1:
            return held[0] if held else None
        return await page_holding(self._io, self._events(execution_id), seq, None)
