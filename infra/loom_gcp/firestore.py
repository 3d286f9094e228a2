"""``FirestoreEventStore``: the serverless event store (``firestore://PROJECT/DATABASE``).

Layout:

* ``executions/{id}``: flow, status, ``last_seq`` (as of the last status change), created/
  updated times, ``wake_at``, ``parked_reason``, ``expire_at`` (a TTL field, set when the
  execution ends) and the snapshot pointer, or a small snapshot itself (``snapshot_inline``,
  written by the append that stops an execute call). ``list`` queries only these documents,
  and reads only their summary fields.
* ``executions/{id}/events/{seq:010d}``: one document per event (``seq``, ``type``, ``at``
  and ``body``, the event's JSON string).
* ``executions/{id}/snapshots/{seq:010d}.{token}.{part}``: a zlib-compressed snapshot state
  cut into parts under 1 MiB; the execution document names the current one.

Appends cost one document write per event and no read on the hot path. The batch
``create()``s the event documents, so an existing one fails it: the log did not end at
``expected_seq``. That check alone misses an ``expected_seq`` *ahead* of the log (creating
``expected_seq + 1`` would leave a gap), so the store also needs to know that event
``expected_seq`` exists. Events are immutable and never deleted while an execution runs, so
"event N exists" never becomes false: the store remembers the highest seq it has seen (it
wrote it, or loaded it) and only reads document ``expected_seq`` when it has not seen it.
The runtime always loads before it appends, so that read never happens on the hot path.

A store remembers the logs it has read or written (:mod:`loom_gcp._firestore_cache`): a later
load reads the execution document and only the events it has not seen.

The execution document is written only on ``create``, on appends that carry a
:class:`~loom.store.base.StatusChange`, and on snapshots; so its ``last_seq`` lags between
status changes. ``summary`` makes it exact with one extra query; ``list`` does not.

Commits are retried by the store, not the client, so it knows when an earlier attempt of the
same call may have committed (UNAVAILABLE, DEADLINE_EXCEEDED): only then does a conflict on
documents holding exactly our content count as success. A plain repeat of an append is a
conflict, as on the other backends.

Every RPC runs under a deadline and a google-api-core retry policy (see
:mod:`loom_gcp._firestore_io`): one attempt at most ``timeout`` seconds, one store call at most
``deadline`` seconds, set in the URL (``firestore://P/D?timeout=5&deadline=20``) or the
constructor. A call that cannot finish in time raises
:class:`~loom.errors.StoreUnavailableError`; it never hangs.

Commits stay within Firestore's limits by construction: an append over 500 writes, a
document over 1 MiB or a commit over about 10 MiB is refused before anything is written
(an append is all or nothing, so it is never split). A snapshot too big for one commit is
written in several: its parts first, unreferenced and so invisible, then the execution
document's pointer in the last commit, then the old parts are deleted. Parts of a swap
that fails half-way are left unreferenced until the execution is deleted.

Retention: :meth:`~loom.store.base.EventStore.purge` (from the retention job) deletes finished
executions with their events and snapshots. Firestore TTL on ``expire_at`` is only a
backstop: it deletes the execution document alone, and a start of the same id afterwards
first clears the leftover events and snapshots (see :mod:`loom_gcp._firestore_retention`).
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Literal, cast
from urllib.parse import unquote, urlparse

from google.api_core import exceptions as gexc
from google.api_core.retry import AsyncRetry
from google.cloud import firestore
from google.cloud.firestore_v1 import FieldFilter
from google.cloud.firestore_v1.async_batch import AsyncWriteBatch
from google.cloud.firestore_v1.async_collection import AsyncCollectionReference
from google.cloud.firestore_v1.async_document import AsyncDocumentReference
from google.cloud.firestore_v1.async_query import AsyncQuery
from google.cloud.firestore_v1.field_path import FieldPath

from loom.errors import AppendConflictError, ConfigurationError, StoreError, UnknownExecutionError
from loom.events import Event, ExecutionStarted
from loom.ids import check_execution_id
from loom.store.base import (
    STATUSES,
    AppendRequest,
    EventStore,
    ExecutionSummary,
    ListCursor,
    LoadedLog,
    Snapshot,
    check_numbering,
    page_after,
)
from loom.store.browse import BrowseQuery
from loom_gcp._firestore_browse import browse, browse_prefix, count_by_status
from loom_gcp._firestore_cache import LogCache
from loom_gcp._firestore_docs import (
    MAX_COMMIT_BYTES,
    MAX_COMMIT_WRITES,
    SUMMARY_FIELDS,
    SnapshotPointer,
    check_commit,
    encode_snapshot,
    event_doc_id,
    event_fields,
    event_from_fields,
    inline_snapshot,
    inline_snapshot_fields,
    new_execution_fields,
    snapshot_seq,
    status_fields,
    summary_from_fields,
    timestamp_seconds,
)
from loom_gcp._firestore_io import (
    DEFAULT_DEADLINE,
    DEFAULT_TIMEOUT,
    CallPolicy,
    Collision,
    CountedDocs,
    Doc,
    default_retry,
    url_knobs,
)
from loom_gcp._firestore_retention import clear_orphan, ordered_by_creation, ttl_from_env
from loom_gcp._firestore_writes import delete_all, delete_page, read_state, swap_in
from loom_gcp.firestore_leases import FirestoreLeaseSet


class FirestoreEventStore(EventStore):
    """An :class:`EventStore` on Firestore (native mode). See the module docstring.

    Args:
        client: A client to use (the store does not close it). Default: a new
            ``AsyncClient`` for ``project`` and ``database``, closed by :meth:`aclose`.
        project: Google Cloud project id; default from the environment.
        database: Firestore database id.
        retention: How long a finished execution is kept: its ``expire_at`` TTL field.
        timeout: Seconds one RPC attempt may take.
        deadline: Seconds one store call may take, retries included (keep it well under
            the request timeout of whatever calls the worker).
        retry: Which errors are retried, with which backoff (default: transient ones,
            50 ms doubling to 1 s); its own timeout is replaced by ``deadline``.
        attempts: Rounds of a load or snapshot swap that met a concurrent snapshot.
        known_executions: How many executions' last seen seq the store remembers.
    """

    # Reads are billed per document: a snapshot (one write or two) beats re-reading more than
    # a handful of events on every later execute call.
    snapshot_min_tail = 8
    # Bytes a snapshot writes per commit: Firestore's limit, with a margin.
    snapshot_commit_bytes = MAX_COMMIT_BYTES
    # One commit: the events, and the execution document when the status changes.
    max_append_events = MAX_COMMIT_WRITES - 1
    # A snapshot taken where an execute call ends rides the append's status write.
    keeps_append_snapshots = True
    # Event bytes a batched session gathers for one commit, within Firestore's 10 MiB.
    max_batch_bytes = MAX_COMMIT_BYTES - 1_000_000

    def __init__(
        self,
        client: firestore.AsyncClient | None = None,
        *,
        project: str | None = None,
        database: str = "(default)",
        retention: timedelta = timedelta(days=30),
        timeout: float = DEFAULT_TIMEOUT,
        deadline: float = DEFAULT_DEADLINE,
        retry: AsyncRetry | None = None,
        attempts: int = 5,
        known_executions: int = 10_000,
    ) -> None:
        policy = CallPolicy(timeout, deadline, retry or default_retry())
        self._owns_client = client is None
        self._client = client or firestore.AsyncClient(project=project, database=database)
        self._executions = self._client.collection("executions")
        self._retention = retention
        self._known: OrderedDict[str, int] = OrderedDict()
        self._known_max = known_executions
        self._attempts = attempts
        self._io = CountedDocs(self._client, policy)
        self._cache = LogCache()

    @classmethod
    def from_url(cls, url: str) -> FirestoreEventStore:
        """Build a store from ``firestore://PROJECT/DATABASE[?timeout=S&deadline=S]``.

        The database defaults to ``(default)``; ``firestore:///`` takes the project from the
        environment. ``timeout`` and ``deadline`` are seconds (see the class);
        ``LOOM_TTL_DAYS`` sets the TTL backstop (see :func:`ttl_from_env`).
        """
        parts = urlparse(url)
        if parts.scheme != "firestore":
            raise ConfigurationError(f"not a firestore:// URL: {url!r}")
        database = unquote(parts.path.strip("/")) or "(default)"
        if "/" in database:
            raise ConfigurationError(f"expected firestore://PROJECT/DATABASE, got {url!r}")
        knobs = url_knobs(url)
        return cls(
            project=parts.netloc or None,
            database=database,
            timeout=knobs.get("timeout", DEFAULT_TIMEOUT),
            deadline=knobs.get("deadline", DEFAULT_DEADLINE),
            retention=ttl_from_env(),
        )

    @property
    def ops(self) -> dict[str, int]:
        """Documents read, written and deleted so far (billing units), for benchmarks."""
        return dict(self._io.ops)

    def reset_ops(self) -> None:
        """Start counting document operations from zero."""
        self._io.reset()

    # -- the SPI ----------------------------------------------------------------------------

    async def create(self, started: ExecutionStarted) -> tuple[bool, ExecutionStarted]:
        eid = check_execution_id(started.execution_id)
        first = started.model_copy(update={"seq": 1})
        fields = event_fields(first)
        check_commit(f"create {eid!r}", [(event_doc_id(1), fields)], other_writes=1)

        def build() -> tuple[AsyncWriteBatch, int]:
            batch = self._client.batch()
            batch.create(
                self._exec_ref(eid),
                new_execution_fields(started.flow, time.time(), started.flow_version),
            )
            batch.create(self._event_ref(eid, 1), fields)
            return batch, 0

        async with self._io.call(f"create {eid!r}"):
            try:
                await self._io.commit(build)
            except Collision as collision:
                self._cache.drop(eid)
                if await clear_orphan(self._io, self._exec_ref(eid)):
                    self._known.pop(eid, None)
                    return await self.create(started)
                return await self._stored_start(eid, fields, collision.maybe_ours)
        self._known[eid] = 1  # a reused id: whatever an older log reached is void
        self._note(eid, 1)
        self._cache.put(eid, LoadedLog(None, [first]), fields["body"])
        return True, first

    async def append(self, request: AppendRequest) -> int:
        check_numbering(request)
        if not request.events:
            raise ValueError("an append needs at least one event")
        eid, expected = request.execution_id, request.expected_seq
        new_last = expected + len(request.events)
        docs = [event_fields(e) for e in request.events]
        update = self._exec_update(request, new_last)
        written: list[tuple[str, Mapping[str, Any]]] = [(event_doc_id(d["seq"]), d) for d in docs]
        check_commit(f"append to {eid!r}", written + [("execution", update)] * bool(update), 0)

        def build() -> tuple[AsyncWriteBatch, int]:
            batch = self._client.batch()
            for fields in docs:
                batch.create(self._event_ref(eid, fields["seq"]), fields)
            if update:
                batch.update(self._exec_ref(eid), update)
            return batch, 0

        async with self._io.call(f"append to {eid!r}"):
            await self._require_log_end(eid, expected)
            try:
                await self._io.commit(build)
            except Collision as collision:
                if not (collision.maybe_ours and await self._stored_equal(eid, docs)):
                    self._cache.drop(eid)
                    raise AppendConflictError(
                        f"log of {eid!r} does not end at {expected}"
                    ) from None
            except gexc.NotFound:
                raise UnknownExecutionError(f"unknown execution {eid!r}") from None
        self._note(eid, new_last)
        self._cache.extend(eid, expected, request.events, docs[-1]["body"])
        if request.snapshot is not None:
            if "snapshot_seq" in update:
                self._cache.rebase(eid, Snapshot(new_last, request.snapshot))
            else:  # too big to ride: the usual swap, after the append
                await self.save_snapshot(eid, Snapshot(new_last, request.snapshot))
        return new_last

    def _exec_update(self, request: AppendRequest, new_last: int) -> dict[str, Any]:
        """The execution-document update riding an append: a status change, and the
        append's snapshot when the document is written anyway and the snapshot fits."""
        if request.status is None:
            return {}
        fields = status_fields(request.status, new_last, self._retention)
        if request.snapshot is not None:
            fields.update(inline_snapshot_fields(new_last, request.snapshot) or {})
        return fields

    async def load(self, execution_id: str) -> LoadedLog:
        """The newest snapshot and the events after it. The execution document says which
        snapshot is newest; when this store already holds that snapshot and the log before
        it, only the events after what it saw are read (see :mod:`loom_gcp._firestore_cache`).
        """
        async with self._io.call(f"load {execution_id!r}"):
            # A snapshot saved between reading the pointer and its parts deletes the old
            # parts; reading the pointer again finds the new ones.
            for _ in range(self._attempts):
                doc = await self._exec_doc(execution_id)
                known = await self._load_cached(execution_id, doc)
                if known is not None:
                    return known
                snapshot = await self._snapshot_of(execution_id, doc)
                if snapshot is False:
                    continue
                base = snapshot.seq if snapshot else 0
                # The boundary event pays when the tail is likely empty (the snapshot was
                # taken at the document's last status change): it lets the log be remembered.
                boundary = int(doc.get("last_seq") or 0) == base
                tail = await self._tail(execution_id, base, boundary)
                events, body = (tail[0], tail[2]) if tail else ([], None)
                self._cache.put(execution_id, LoadedLog(snapshot, events), body)
                if snapshot is not None and not events:  # exact: see ``_events_after``
                    self._known[execution_id] = snapshot.seq
                    self._note(execution_id, snapshot.seq)
                return LoadedLog(snapshot, events)
        raise StoreError(f"snapshot of {execution_id!r} kept changing while loading")

    async def _load_cached(self, execution_id: str, doc: Mapping[str, Any]) -> LoadedLog | None:
        """The remembered log and what follows it, if it is still the log (and its snapshot
        the newest); None otherwise."""
        cached = self._cache.get(execution_id)
        if cached is None:
            return None
        if snapshot_seq(doc) > (cached.snapshot.seq if cached.snapshot else 0):
            self._cache.drop(execution_id)  # a newer snapshot: read it
            return None
        tail = await self._tail(execution_id, cached.last_seq)
        if tail is None or tail[1] != cached.last_body:
            self._cache.drop(execution_id)  # purged and started again: not the same log
            return None
        loaded = LoadedLog(cached.snapshot, cached.events + tail[0])
        if tail[0] and tail[2] is not None:
            self._cache.extend(execution_id, cached.last_seq, tail[0], tail[2])
        return loaded

    async def _snapshot_of(
        self, execution_id: str, doc: Mapping[str, Any]
    ) -> Snapshot | Literal[False] | None:
        """The snapshot the execution document names; False if its parts were replaced."""
        inline = inline_snapshot(doc)
        if inline is not None:
            self._note(execution_id, inline.seq)
            return inline
        pointer = SnapshotPointer.from_fields(doc)
        if pointer is None:
            return None
        state = await read_state(self._io, self._snapshot_refs(execution_id, pointer))
        if state is None:
            return False
        self._note(execution_id, pointer.seq)
        return Snapshot(pointer.seq, state)

    async def _tail(
        self, execution_id: str, base: int, boundary: bool = True
    ) -> tuple[list[Event], str | None, str | None] | None:
        """The events after ``base``, and the stored bodies of event ``base`` (with
        ``boundary``) and of the last event read (``None`` when unknown).

        With ``boundary`` the query starts at event ``base`` itself, which proves the log is
        the one ``base`` came from: ``None`` when that event is missing. A query is billed one
        read even when it finds nothing, so the boundary is free when the tail is empty, and
        one read more when it is not.
        """
        op = ">=" if boundary and base > 0 else ">"
        query = self._events(execution_id).where(filter=FieldFilter("seq", op, base))
        docs = await self._io.query(query.order_by("seq"))
        first = None
        if op == ">=":
            if not docs or int(docs[0].get("seq")) != base:
                return None
            first, docs = str(docs[0].get("body")), docs[1:]
        events = [event_from_fields(d.to_dict() or {}) for d in docs]
        if events:
            self._known[execution_id] = events[-1].seq
            self._note(execution_id, events[-1].seq)
        return events, first, str(docs[-1].get("body")) if docs else first

    async def load_many(self, execution_ids: Sequence[str]) -> list[LoadedLog]:
        """Point reads instead of one query per execution: the execution documents in one
        round trip, then per execution its snapshot parts and its events up to one past the
        document's ``last_seq`` in another. That last document is the probe: missing, the log
        ends at ``last_seq`` (logs are gap-free); present, the tail is queried as in ``load``.
        Billed reads are those of ``load`` (the probe replaces the query's minimum read).
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
        fields = doc.to_dict() or {}
        snapshot = await self._snapshot_of(execution_id, fields)
        if snapshot is False:  # replaced since the document was read
            return await self.load(execution_id)
        base = snapshot.seq if snapshot else 0
        end = max(int(fields["last_seq"]), base)
        refs = [self._event_ref(execution_id, seq) for seq in range(base + 1, end + 2)]
        found = await self._io.get_all(refs)
        snaps = [found.get(ref.path) for ref in refs]
        if any(s is None or not s.exists for s in snaps[:-1]):
            return await self.load(execution_id)  # purged or changed under us: the slow way
        events = [event_from_fields(s.to_dict() or {}) for s in snaps[:-1] if s is not None]
        probe = snaps[-1]
        if probe is not None and probe.exists:
            events.append(event_from_fields(probe.to_dict() or {}))
            events += await self._events_after(execution_id, end + 1)
        if events:
            self._note(execution_id, events[-1].seq)
        return LoadedLog(snapshot, events)

    async def read(self, execution_id: str, after_seq: int = 0) -> list[Event]:
        async with self._io.call(f"read {execution_id!r}"):
            events = await self._events_after(execution_id, after_seq)
            if not events:
                await self._exec_doc(execution_id)
        return events

    async def save_snapshot(self, execution_id: str, snapshot: Snapshot) -> None:
        if snapshot.seq < 1:
            raise ValueError(f"snapshot at {snapshot.seq}: seqs start at 1")
        parts = encode_snapshot(snapshot.state)
        pointer = SnapshotPointer(
            snapshot.seq, f"{event_doc_id(snapshot.seq)}.{secrets.token_hex(4)}", len(parts)
        )
        async with self._io.call(f"snapshot of {execution_id!r}"):
            await self._require_seq(execution_id, snapshot.seq)
            for _ in range(self._attempts):
                if await self._swap_snapshot(execution_id, pointer, parts):
                    self._cache.rebase(execution_id, snapshot)
                    return
        raise StoreError(f"snapshot of {execution_id!r}: too much contention")

    async def summary(self, execution_id: str) -> ExecutionSummary:
        async with self._io.call(f"summary of {execution_id!r}"):
            fields = await self._exec_doc(execution_id)
            # Events appended since the last status change are not on the execution
            # document: the newest event document says where the log ends.
            query = (
                self._events(execution_id)
                .where(filter=FieldFilter("seq", ">", int(fields["last_seq"])))
                .order_by("seq", direction=firestore.Query.DESCENDING)
                .limit(1)
            )
            tail = await self._io.query(query)
        if not tail:
            return summary_from_fields(execution_id, fields)
        newest: Doc = tail[0]
        last = int(newest.get("seq"))
        self._note(execution_id, last)
        created = cast("datetime | None", newest.create_time)
        updated = timestamp_seconds(created)
        return summary_from_fields(execution_id, fields, last_seq=last, updated_at=updated)

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

        With ``due_before`` the query takes the ``limit`` earliest due (what a sweeper wants)
        and orders those; otherwise Firestore orders and pages by ``(created_at, id)``.
        """
        query: AsyncQuery = self._executions  # type: ignore[assignment]
        if status is not None:
            query = query.where(filter=FieldFilter("status", "==", status))
        if due_before is not None:
            query = query.where(filter=FieldFilter("wake_at", "<=", due_before)).order_by("wake_at")
        else:
            query = ordered_by_creation(query, oldest_first, after)
        async with self._io.call("list"):
            docs = await self._io.query(query.select(SUMMARY_FIELDS).limit(limit))
        rows = [summary_from_fields(d.id, d.to_dict() or {}) for d in docs]
        return page_after(rows, after, oldest_first, limit)

    async def browse(self, query: BrowseQuery) -> list[ExecutionSummary]:
        """One indexed query, or the ids from the prefix on (``loom_gcp._firestore_browse``)."""
        if query.id_prefix:
            return await browse_prefix(self._io, self._executions, query)
        return await browse(self._io, self._executions, query)

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

    async def delete_execution(self, execution_id: str) -> bool:
        """Delete an execution with its events and snapshots.

        Deletes a page of at most 500 documents per commit, each page a store call of its
        own (under its own deadline), the execution document last.
        """
        self._known.pop(execution_id, None)
        self._cache.drop(execution_id)
        exec_ref = self._exec_ref(execution_id)
        async with self._io.call(f"delete {execution_id!r}"):
            existed = (await self._io.get(exec_ref)).exists
        for name in ("events", "snapshots"):
            children = cast(AsyncCollectionReference, exec_ref.collection(name))
            query = children.select([]).limit(MAX_COMMIT_WRITES)
            while True:
                async with self._io.call(f"delete {execution_id!r}"):
                    if not await delete_page(self._io, query):
                        break
        async with self._io.call(f"delete {execution_id!r}"):
            await delete_all(self._io, [exec_ref])
        return existed

    def leases(self) -> FirestoreLeaseSet:
        """Queue leases in this database, shared by every instance (``loom_queues``)."""
        found: FirestoreLeaseSet | None = getattr(self, "_lease_set", None)
        if found is None:
            found = self._lease_set = FirestoreLeaseSet(self._client)
        return found

    async def ping(self) -> None:
        """Read one (missing) document, within one RPC timeout: a readiness check.

        Raises:
            StoreUnavailableError: Firestore did not answer in time, or not successfully.
        """
        ref = self._client.collection("loom_health").document("ping")
        async with self._io.call("ping", deadline=self._io.policy.timeout):
            await self._io.get(ref)

    async def aclose(self) -> None:
        if self._owns_client:
            # ``AsyncClient.close`` leaves the gRPC channel open; close the transport itself.
            await self._client._firestore_api.transport.close()  # pyright: ignore[reportPrivateUsage]

    # -- references and accounting ----------------------------------------------------------

    def _exec_ref(self, execution_id: str) -> AsyncDocumentReference:
        # Every document path goes through here: an id the rule refuses ("a/b/c" would
        # address a document of another collection) never reaches the client.
        return self._executions.document(check_execution_id(execution_id))

    def _events(self, execution_id: str) -> AsyncCollectionReference:
        return cast(AsyncCollectionReference, self._exec_ref(execution_id).collection("events"))

    def _event_ref(self, execution_id: str, seq: int) -> AsyncDocumentReference:
        return self._events(execution_id).document(event_doc_id(seq))

    def _snapshot_refs(
        self, execution_id: str, pointer: SnapshotPointer
    ) -> list[AsyncDocumentReference]:
        snapshots = cast(
            AsyncCollectionReference, self._exec_ref(execution_id).collection("snapshots")
        )
        return [snapshots.document(part_id) for part_id in pointer.part_ids()]

    def _known_seq(self, execution_id: str) -> int:
        return self._known.get(execution_id, 0)

    def _note(self, execution_id: str, seq: int) -> None:
        """Remember that event ``seq`` of the execution exists (a fact that stays true)."""
        if seq > self._known.get(execution_id, 0):
            self._known[execution_id] = seq
        if execution_id in self._known:
            self._known.move_to_end(execution_id)
        while len(self._known) > self._known_max:
            self._known.popitem(last=False)

    # -- helpers of the SPI methods ---------------------------------------------------------

    async def _exec_doc(self, execution_id: str) -> dict[str, Any]:
        doc = await self._io.get(self._exec_ref(execution_id))
        if not doc.exists:
            raise UnknownExecutionError(f"unknown execution {execution_id!r}")
        return doc.to_dict() or {}

    async def _require_log_end(self, execution_id: str, expected: int) -> None:
        """Refuse unless event ``expected`` exists and, as far as we know, is the last.

        A remembered seq past ``expected`` is checked before it refuses: an id purged and
        started again elsewhere has a shorter log than this object saw, and refusing on
        memory alone would refuse every append to it (a conflict loop) until restart.
        """
        known = self._known_seq(execution_id)
        if known > expected:
            if (await self._io.get(self._event_ref(execution_id, expected + 1))).exists:
                raise AppendConflictError(f"log of {execution_id!r} goes past {expected}")
            self._known.pop(execution_id, None)  # stale: the log is shorter than we saw
            known = 0
        if expected < 1:  # seq 1 is written by ``create`` only
            await self._exec_doc(execution_id)
            raise AppendConflictError(f"log of {execution_id!r} already has its first event")
        if known == expected:
            return
        if (await self._io.get(self._event_ref(execution_id, expected))).exists:
            self._note(execution_id, expected)
            return
        await self._exec_doc(execution_id)  # UnknownExecutionError if there is no execution
        raise AppendConflictError(f"log of {execution_id!r} does not reach {expected}")

    async def _require_seq(self, execution_id: str, seq: int) -> None:
        """Refuse a snapshot ahead of the log."""
        if self._known_seq(execution_id) >= seq:
            return
        if (await self._io.get(self._event_ref(execution_id, seq))).exists:
            self._note(execution_id, seq)
            return
        await self._exec_doc(execution_id)
        raise ValueError(f"snapshot at {seq} is ahead of the log of {execution_id!r}")

    async def _stored_start(
        self, execution_id: str, fields: Mapping[str, Any], maybe_ours: bool
    ) -> tuple[bool, ExecutionStarted]:
        doc = await self._io.get(self._event_ref(execution_id, 1))
        if not doc.exists:
            raise StoreError(f"execution {execution_id!r} exists without its first event")
        stored = doc.to_dict() or {}
        event = event_from_fields(stored)
        assert isinstance(event, ExecutionStarted)
        self._note(execution_id, 1)
        if self._cache.get(execution_id) is None:
            self._cache.put(execution_id, LoadedLog(None, [event]), stored.get("body"))
        return maybe_ours and stored.get("body") == fields["body"], event

    async def _stored_equal(self, execution_id: str, docs: list[dict[str, Any]]) -> bool:
        """Whether every event document of the batch exists with exactly our content."""
        refs = [self._event_ref(execution_id, d["seq"]) for d in docs]
        stored = await self._io.get_all(refs)
        for ref, fields in zip(refs, docs, strict=True):
            snap = stored.get(ref.path)
            if snap is None or not snap.exists or snap.get("body") != fields["body"]:
                return False
        return True

    async def _events_after(self, execution_id: str, after_seq: int) -> list[Event]:
        query = (
            self._events(execution_id)
            .where(filter=FieldFilter("seq", ">", after_seq))
            .order_by("seq")
        )
        docs = await self._io.query(query)
        events = [event_from_fields(d.to_dict() or {}) for d in docs]
        if events:
            # Exact, not just "at least": an id purged and started again has a shorter log
            # than the one this store object may remember.
            self._known[execution_id] = events[-1].seq
            self._note(execution_id, events[-1].seq)
        return events

    async def _swap_snapshot(
        self, execution_id: str, pointer: SnapshotPointer, parts: list[bytes]
    ) -> bool:
        """Point the execution at a new snapshot unless it has a newer one.

        Returns False when the execution document changed under us (try again). The
        ``last_update_time`` precondition makes the swap safe without a transaction; appends
        never wait for it.
        """
        doc = await self._io.get(self._exec_ref(execution_id))
        if not doc.exists:
            raise UnknownExecutionError(f"unknown execution {execution_id!r}")
        fields = doc.to_dict() or {}
        if snapshot_seq(fields) >= pointer.seq:
            return True
        old = SnapshotPointer.from_fields(fields)
        new = (pointer, self._snapshot_refs(execution_id, pointer), parts)
        stale = self._snapshot_refs(execution_id, old) if old else []
        return await swap_in(self._io, doc, new, stale, self.snapshot_commit_bytes)
