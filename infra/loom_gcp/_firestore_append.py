"""Appends of the Firestore event store: pages, or an end riding the execution document.

Kept apart from :mod:`loom_gcp.firestore` because an append is the store's hot path and its
subtlest protocol: which documents one append writes, under which preconditions, and how a
conflict is told from a retried commit of our own (see :mod:`loom_gcp._firestore_fence` for
the riding end and :mod:`loom_gcp._firestore_pages` for the pages). The store knows a page
ends at ``expected_seq`` before it writes (:meth:`FirestoreAppends._require_log_end`); the
runtime loads before it appends, so that check reads nothing on the hot path.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from typing import Any

from google.api_core import exceptions as gexc
from google.cloud.firestore_v1.async_batch import AsyncWriteBatch

from loom.errors import AppendConflictError, LogEndedError, StoreError, UnknownExecutionError
from loom.events import TERMINAL_TYPES
from loom.store.base import AppendRequest, Snapshot, check_numbering, settled_status
from loom_gcp._firestore_core import FirestoreCore
from loom_gcp._firestore_docs import check_commit, inline_snapshot_fields, status_fields
from loom_gcp._firestore_fence import Stamp, end_fields, is_our_end, may_ride
from loom_gcp._firestore_io import Collision
from loom_gcp._firestore_pages import bodies_pages, stored_equal, terminal_body
from loom_gcp._firestore_shards import shard_field


class FirestoreAppends(FirestoreCore):
    """``append`` of :class:`~loom_gcp.firestore.FirestoreEventStore`."""

    async def append(self, request: AppendRequest) -> int:
        check_numbering(request)
        eid, expected, count = request.execution_id, request.expected_seq, len(request.events)
        if not count:
            raise ValueError("an append needs at least one event")
        status = settled_status(request.events, request.status)
        if status is not request.status:  # a terminal event the caller sent no status with
            request = AppendRequest(
                eid, expected, request.events, status, request.snapshot, request.fence
            )
        new_last = expected + count
        bodies = [e.model_dump_json() for e in request.events]
        if request.status is not None and self._layout.known is None:
            await self.shard_count()  # (read once per store: the status update carries it)
        stamp = self._stamps.get(eid)
        known, open_end = self._known.get(eid), self._known.terminal_at(eid, expected) is False
        if may_ride(request, bodies, known, open_end, stamp):
            assert stamp is not None
            if await self._append_end(request, bodies, stamp):
                return new_last
        return await self._append_pages(request, bodies)

    async def _append_pages(self, request: AppendRequest, bodies: list[str]) -> int:
        """The append as pages (and the execution document, when its status changes or the
        append is fenced)."""
        eid, expected = request.execution_id, request.expected_seq
        new_last = expected + len(bodies)
        pages = bodies_pages(expected + 1, bodies)
        last_page = pages[-1][1]
        update = self._exec_update(request, new_last, last_page["seq"])
        if update.get("expire_at") is not None:  # the end: its pages expire with it (TTL)
            pages = [
                (doc_id, {**fields, "expire_at": update["expire_at"]}) for doc_id, fields in pages
            ]
        if request.fence:  # a riding end that lands after this commit must fail
            update = update or {"last_seq": new_last, "updated_at": time.time()}
        check_commit(f"append to {eid!r}", pages + [("execution", update)] * bool(update), 0)
        option: Any = None

        def build() -> tuple[AsyncWriteBatch, int]:
            batch = self._client.batch()
            for doc_id, fields in pages:
                batch.create(self._events(eid).document(doc_id), fields)
            if update:
                batch.update(self._exec_ref(eid), update, option=option)
            return batch, 0

        async with self._io.call(f"append to {eid!r}"):
            if request.fence:
                option = await self._fence_option(eid, expected)
            await self._require_log_end(eid, expected)
            try:
                results = await self._io.commit(build)
            except Collision as collision:
                if not (
                    collision.maybe_ours and await stored_equal(self._io, self._events(eid), pages)
                ):
                    self._cache.drop(eid)
                    self._stamps.drop(eid)
                    raise AppendConflictError(
                        f"log of {eid!r} does not end at {expected}"
                    ) from None
                results = []
            except gexc.NotFound:
                raise UnknownExecutionError(f"unknown execution {eid!r}") from None
        before = self._stamps.get(eid)
        if update and before is not None:  # the document's end (if any) is unchanged
            ends = request.events[-1].type in TERMINAL_TYPES
            self._stamps.wrote(eid, results, len(pages), before.ended, new_last, ends)
        elif update:
            self._stamps.drop(eid)
        await self._appended(request, last_page["bodies"][-1], last_page["seq"], update)
        return new_last

    async def _fence_option(self, execution_id: str, expected: int) -> Any:
        """The precondition of a fenced append at ``expected``: the execution document as
        last seen, when that version says the log had neither gone past ``expected`` nor
        ended (:meth:`Stamp.fences`); else the document is read now, and the append is
        refused when it still says so.

        Raises:
            LogEndedError: The log has ended.
            AppendConflictError: The log has gone past ``expected``.
        """
        stamp = self._stamps.get(execution_id)
        if stamp is None or not stamp.fences(expected):
            await self._exec_snap(execution_id)
            stamp = self._stamps.get(execution_id)
        if stamp is None:
            return None
        if stamp.closed:
            raise LogEndedError(f"log of {execution_id!r} has ended at {stamp.reached}")
        if stamp.reached > expected:
            raise AppendConflictError(f"log of {execution_id!r} goes past {expected}")
        return self._client.write_option(last_update_time=stamp.at)

    async def _append_end(self, request: AppendRequest, bodies: list[str], stamp: Stamp) -> bool:
        """Write the events on the execution document with its status; False when the
        precondition failed and the end is not there: the caller writes a page instead."""
        eid, expected = request.execution_id, request.expected_seq
        new_last = expected + len(bodies)
        update = {**self._exec_update(request, new_last, 0), **end_fields(expected + 1, bodies)}
        option = self._client.write_option(last_update_time=stamp.at)

        def build() -> tuple[AsyncWriteBatch, int]:
            batch = self._client.batch()
            batch.update(self._exec_ref(eid), update, option=option)
            return batch, 0

        async with self._io.call(f"append to {eid!r}"):
            try:
                results = await self._io.commit(build)
            except Collision as collision:
                self._stamps.drop(eid)
                fields = await self._exec_doc(eid)
                ours = is_our_end(fields, expected + 1, bodies)
                if ours is None:
                    return False  # a stale stamp, or a fenced append: a page decides
                if not (ours and collision.maybe_ours):
                    self._cache.drop(eid)
                    raise AppendConflictError(f"log of {eid!r} has ended elsewhere") from None
                results = []
            except gexc.NotFound:
                raise UnknownExecutionError(f"unknown execution {eid!r}") from None
        ends = request.events[-1].type in TERMINAL_TYPES
        self._stamps.wrote(eid, results, 0, True, new_last, ends)
        await self._appended(request, bodies[-1], 0, update)
        return True

    async def _appended(
        self, request: AppendRequest, body: str, page: int, update: Mapping[str, Any]
    ) -> None:
        """Remember a written append (its end, its events), and keep its snapshot."""
        eid, new_last = request.execution_id, request.expected_seq + len(request.events)
        self._note(eid, new_last, request.events[-1].type in TERMINAL_TYPES)
        self._cache.extend(eid, request.expected_seq, request.events, body, page)
        if request.snapshot is None:
            return
        if "snapshot_seq" in update:  # it rode the execution-document write
            self._cache.rebase(eid, Snapshot(new_last, request.snapshot))
        else:  # too big to ride: the usual swap, after the append. The events are
            # written: a failed snapshot (a shortcut only) must not report them unwritten.
            with contextlib.suppress(StoreError):
                await self.save_snapshot(eid, Snapshot(new_last, request.snapshot))

    def _exec_update(self, request: AppendRequest, new_last: int, page: int) -> dict[str, Any]:
        """The execution-document update riding an append: a status change, and the
        append's snapshot when the document is written anyway and the snapshot fits."""
        if request.status is None:
            return {}
        fields = status_fields(request.status, new_last, self._retention)
        # (an execution written before shards gets its shard with its next status change;
        # ``append`` read the count before it got here)
        shards = self._layout.known
        assert shards is not None
        fields.update(shard_field(request.execution_id, shards))
        if request.snapshot is not None:
            fields.update(inline_snapshot_fields(new_last, request.snapshot, page) or {})
        return fields

    async def _require_log_end(self, execution_id: str, expected: int) -> None:
        """Refuse unless event ``expected`` exists, is not terminal and, as far as we know,
        is the last.

        A remembered seq past ``expected`` is checked before it refuses: an id purged and
        started again elsewhere has a shorter log than this object saw, and refusing on
        memory alone would refuse every append to it (a conflict loop) until restart.
        Whether event ``expected`` is terminal is known without a read when the store wrote
        or read it last (the runtime loads before it appends); else its page is read.
        """
        known = self._known.get(execution_id)
        if known > expected:
            if await self._page_holding(execution_id, expected + 1) is not None:
                raise AppendConflictError(f"log of {execution_id!r} goes past {expected}")
            self._known.drop(execution_id)  # stale: the log is shorter than we saw
            known = 0
        if expected < 1:  # seq 1 is written by ``create`` only
            await self._exec_doc(execution_id)
            raise AppendConflictError(f"log of {execution_id!r} already has its first event")
        terminal = self._known.terminal_at(execution_id, expected)
        if known != expected or terminal is None:
            page = await self._page_holding(execution_id, expected)
            if page is None:
                await self._exec_doc(execution_id)  # UnknownExecutionError if there is none
                raise AppendConflictError(f"log of {execution_id!r} does not reach {expected}")
            terminal = terminal_body(page.body_at(expected))
            self._note(execution_id, page.last, page.ends_log)
            if page.last > expected:  # inside a page: no page id collides, refuse here
                raise AppendConflictError(f"log of {execution_id!r} goes past {expected}")
        if terminal:  # (else a page end: the append's first page would collide)
            raise LogEndedError(f"log of {execution_id!r} ends with a terminal event")
