"""Loads and snapshots of the Firestore event store.

Kept apart from :mod:`loom_gcp.firestore` because reading a log is its own protocol: the
execution document names the newest snapshot, the events after it are the pages from the one
holding the next seq on, a log this store has seen is only read past what it saw
(:mod:`loom_gcp._firestore_cache`), and a snapshot replaced while it is read is read again.
Snapshots live here because they exist to make loads cheap, and a snapshot's save checks the
log the same way a load reads it.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, Literal, cast

from loom.errors import StoreError, UnknownExecutionError
from loom.events import TERMINAL_TYPES, Event
from loom.store.base import LoadedLog, Snapshot
from loom_gcp._firestore_cache import CachedLog
from loom_gcp._firestore_core import FirestoreCore
from loom_gcp._firestore_docs import (
    SnapshotPointer,
    encode_snapshot,
    event_doc_id,
    inline_snapshot,
    snapshot_page,
    snapshot_seq,
)
from loom_gcp._firestore_io import Doc
from loom_gcp._firestore_pages import (
    Tail,
    Where,
    end_page,
    held_pages,
    page_holding,
    read_after,
)
from loom_gcp._firestore_retention import clear_older
from loom_gcp._firestore_writes import read_state, swap_in


class FirestoreLoads(FirestoreCore):
    """``load``, ``load_many``, ``read`` and ``save_snapshot`` of
    :class:`~loom_gcp.firestore.FirestoreEventStore`."""

    async def load(self, execution_id: str) -> LoadedLog:
        """The newest snapshot and the events after it. The execution document says which
        snapshot is newest; when this store already holds that snapshot and the log before
        it, only the events after what it saw are read (see :mod:`loom_gcp._firestore_cache`).
        """
        async with self._io.call(f"load {execution_id!r}"):
            # A snapshot saved between reading the pointer and its parts deletes the old
            # parts; reading the pointer again finds the new ones.
            for _ in range(self._attempts):
                loaded = await self._load_from(execution_id, await self._exec_snap(execution_id))
                if loaded is not None:
                    return loaded
        raise StoreError(f"snapshot of {execution_id!r} kept changing while loading")

    async def _load_from(self, execution_id: str, doc: Doc) -> LoadedLog | None:
        """``load`` given the execution document; None if its snapshot was replaced since."""
        fields = doc.to_dict() or {}
        known = await self._load_cached(execution_id, doc, fields)
        if known is not None:
            return known
        snapshot = await self._snapshot_of(execution_id, fields)
        if snapshot is False:
            return None
        base = snapshot.seq if snapshot else 0
        page = snapshot_page(fields) if snapshot else None
        # The boundary page pays when the tail is likely empty (the snapshot was taken at
        # the document's last status change): it lets the log be remembered.
        check = page is not None and int(fields.get("last_seq") or 0) == base
        tail = await self._read_after(execution_id, doc, Where(base, page, check))
        if tail is None:  # the page ending at the snapshot is gone: read without it
            tail = await self._read_after(execution_id, doc, Where(base))
        events, last = (tail.events, tail.last) if tail else ([], None)
        body, home = (last.bodies[-1], last.home) if last else (None, 0)
        self._cache.put(execution_id, LoadedLog(snapshot, events), body, home)
        if snapshot is not None and last is None:  # exact: see ``_read_after``
            self._read_end(execution_id, doc, snapshot.seq, None)
        return LoadedLog(snapshot, events)

    async def _load_cached(
        self, execution_id: str, doc: Doc, fields: Mapping[str, Any]
    ) -> LoadedLog | None:
        """The remembered log and what follows it, if it is still the log (and its snapshot
        the newest); None otherwise."""
        cached = self._cache.get(execution_id)
        if cached is None:
            return None
        if snapshot_seq(fields) > (cached.snapshot.seq if cached.snapshot else 0):
            self._cache.drop(execution_id)  # a newer snapshot: read it
            return None
        if _ends_with_its_end(fields, cached):
            return cached.loaded()
        where = Where(cached.last_seq, cached.last_page, check=True)
        tail = await self._read_after(execution_id, doc, where)
        if tail is None or tail.base_body != cached.last_body:
            self._cache.drop(execution_id)  # purged and started again: not the same log
            return None
        loaded = LoadedLog(cached.snapshot, cached.events + tail.events)
        if tail.events and tail.last is not None:
            body, home = tail.last.bodies[-1], tail.last.home
            self._cache.extend(execution_id, cached.last_seq, tail.events, body, home)
        return loaded

    async def _snapshot_of(
        self, execution_id: str, doc: Mapping[str, Any]
    ) -> Snapshot | Literal[False] | None:
        """The snapshot the execution document names; False if its parts were replaced."""
        inline = inline_snapshot(doc)
        if inline is not None:
            self._note(execution_id, inline.seq)  # written by an append: a page end
            return inline
        pointer = SnapshotPointer.from_fields(doc)
        if pointer is None:
            return None
        state = await read_state(self._io, self._snapshot_refs(execution_id, pointer))
        if state is None:
            return False
        if snapshot_page(doc) is not None:
            self._note(execution_id, pointer.seq)
        return Snapshot(pointer.seq, state)

    async def _read_after(self, execution_id: str, doc: Doc, where: Where) -> Tail | None:
        """:func:`read_after` with the execution document's start event and creation time;
        deletes orphans it met, and remembers where the log ends (exactly: an id purged and
        started again has a shorter log than the one this store object may remember)."""
        created = cast("datetime | None", doc.create_time)
        where = replace(where, held=held_pages(doc.to_dict() or {}), created=created)
        tail = await read_after(self._io, self._events(execution_id), where, execution_id)
        if tail is not None and tail.orphans and created is not None:
            await clear_older(self._io, self._exec_ref(execution_id), created)
        if tail is not None and tail.last is not None:
            self._read_end(execution_id, doc, tail.last.last, tail.last.ends_log)
        return tail

    def _read_end(self, execution_id: str, doc: Doc, seq: int, terminal: bool | None) -> None:
        """Remember where a load found the log's end: exactly, lower ends included (an id
        purged and started again has a shorter log than this store may remember), unless
        the store has since seen a newer execution document than the one this load read.
        Then one of its own writes (an end on the document, a fenced claim) landed while
        the load ran, and the load's end is old news: forgetting the newer end would let
        an append below it pass for one at the log's end."""
        stamp = self._stamps.get(execution_id)
        read_at = cast("datetime | None", doc.update_time)
        if stamp is not None and read_at is not None and stamp.at > read_at:
            self._note(execution_id, seq, terminal)
        else:
            self._known.reset(execution_id, seq, terminal)

    async def load_many(self, execution_ids: Sequence[str]) -> list[LoadedLog]:
        """The execution documents in one round trip, then per execution what ``load`` reads
        after its document (its snapshot, and one query for the pages after it), all at once.
        Billed reads are those of ``load``.
        """
        refs = [self._exec_ref(eid) for eid in execution_ids]
        async with self._io.call("load_many"):
            docs = await self._io.get_all(refs)
            return list(
                await asyncio.gather(
                    *(
                        self._load_known(eid, docs.get(ref.path))
                        for eid, ref in zip(execution_ids, refs, strict=True)
                    )
                )
            )

    async def _load_known(self, execution_id: str, doc: Doc | None) -> LoadedLog:
        if doc is None or not doc.exists:
            raise UnknownExecutionError(f"unknown execution {execution_id!r}")
        self._saw(execution_id, doc)
        loaded = await self._load_from(execution_id, doc)
        return await self.load(execution_id) if loaded is None else loaded

    async def read(self, execution_id: str, after_seq: int = 0) -> list[Event]:
        """The events after ``after_seq``: the execution document (it may hold the start
        event, and says which pages are orphans) and the pages from the one holding
        ``after_seq + 1`` on."""
        async with self._io.call(f"read {execution_id!r}"):
            doc = await self._exec_snap(execution_id)
            tail = await self._read_after(execution_id, doc, Where(max(after_seq, 0)))
        return tail.events if tail else []

    async def save_snapshot(self, execution_id: str, snapshot: Snapshot) -> None:
        if snapshot.seq < 1:
            raise ValueError(f"snapshot at {snapshot.seq}: seqs start at 1")
        parts = encode_snapshot(snapshot.state)
        part_id = f"{event_doc_id(snapshot.seq)}.{secrets.token_hex(4)}"
        async with self._io.call(f"snapshot of {execution_id!r}"):
            # The execution document first: its age tells TTL leftovers from the log (one
            # could hold ``seq`` beyond the log's end), and the first swap's precondition.
            doc = await self._exec_snap(execution_id)
            page = await self._require_seq(execution_id, snapshot.seq, doc)
            pointer = SnapshotPointer(snapshot.seq, part_id, len(parts), page)
            for _ in range(self._attempts):
                if await self._swap_snapshot(execution_id, doc, pointer, parts):
                    self._cache.rebase(execution_id, snapshot)
                    return
                doc = await self._exec_snap(execution_id)
        raise StoreError(f"snapshot of {execution_id!r}: too much contention")

    async def _require_seq(self, execution_id: str, seq: int, doc: Doc) -> int | None:
        """Refuse a snapshot ahead of the log; the first seq of the page ending at ``seq``
        (0: the execution document), or None when ``seq`` is inside a page."""
        cached = self._cache.get(execution_id)
        if cached is not None and cached.last_seq == seq:
            return cached.last_page
        created = cast("datetime | None", doc.create_time)
        held = [p for p in held_pages(doc.to_dict() or {}) if p.holds(seq)]
        page = held[0] if held else None
        page = page or await page_holding(self._io, self._events(execution_id), seq, created)
        if page is None:
            raise ValueError(f"snapshot at {seq} is ahead of the log of {execution_id!r}")
        self._note(execution_id, page.last, page.ends_log)
        return page.home if page.last == seq else None

    async def _swap_snapshot(
        self, execution_id: str, doc: Doc, pointer: SnapshotPointer, parts: list[bytes]
    ) -> bool:
        """Point the execution at a new snapshot unless it has a newer one.

        Returns False when the execution document (``doc``, as just read) changed under us
        (try again). The ``last_update_time`` precondition makes the swap safe without a
        transaction; appends never wait for it.
        """
        fields = doc.to_dict() or {}
        if snapshot_seq(fields) >= pointer.seq:
            return True
        self._stamps.drop(execution_id)  # the swap writes the execution document
        old = SnapshotPointer.from_fields(fields)
        new = (pointer, self._snapshot_refs(execution_id, pointer), parts)
        stale = self._snapshot_refs(execution_id, old) if old else []
        return await swap_in(self._io, doc, new, stale, self.snapshot_commit_bytes)


def _ends_with_its_end(fields: Mapping[str, Any], cached: CachedLog) -> bool:
    """Whether the remembered log ends with the end the execution document holds, a
    terminal event: then no query is needed (docs/adr/0087). Nothing is appended after a
    terminal event, so no page follows it; the end's stored body is the one remembered, so
    this is the same execution, not one purged and started again; and no fenced append
    moved the document's ``last_seq`` past it."""
    end = end_page(fields)
    if end is None or end.last != cached.last_seq or end.bodies[-1] != cached.last_body:
        return False
    if int(fields.get("last_seq") or 0) > end.last or not cached.events:
        return False
    return cached.events[-1].type in TERMINAL_TYPES
