"""``FirestoreEventStore``: the serverless event store (``firestore://PROJECT/DATABASE``).

Layout:

* ``executions/{id}``: flow, status, ``last_seq`` (as of the last status change), created/
  updated times, ``wake_at``, ``parked_reason``, ``expire_at`` (a TTL field, set when the
  execution ends), the start event (``start``, its JSON string) with the events ``create``
  wrote beside it (``head``), the events of the append that finished the execution
  (``end``; see :mod:`loom_gcp._firestore_fence`) and the snapshot pointer, or a small
  snapshot itself (``snapshot_inline``, written by the append that stops an execute call).
  ``list`` queries only these documents, and reads only their summary fields.
* ``executions/{id}/events/{first_seq:010d}``: one *page* per append, holding all its events
  (``seq``, ``last`` and ``bodies``, the events' JSON strings), cut at 1 MiB; see
  :mod:`loom_gcp._firestore_pages`, which also reads the previous layout (one document per
  event, the start event in ``0000000001``).
* ``executions/{id}/snapshots/{seq:010d}.{token}.{part}``: a zlib-compressed snapshot state
  cut into parts under 1 MiB; the execution document names the current one.

``create`` writes one document; an append one page (more only past 1 MiB), plus the
execution document when the status changes (an append that finishes the execution rides
that update instead, fenced by a precondition: one document), and reads nothing on the hot
path. The batch
``create()``s the pages, so an existing one fails it: the log did not end at
``expected_seq`` (every log end a writer can have loaded is a page end, so two writers at
the same ``expected_seq`` create the same page). That check alone misses an
``expected_seq`` *ahead* of the log or inside a page, so the store also needs to know that a
page ends at ``expected_seq``. Pages are immutable and never deleted while an execution
runs, so that stays true: the store remembers the highest page end it has seen (it wrote it,
or loaded it) and only looks the page up when it has not. The runtime always loads before
it appends, so that read never happens on the hot path.

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

Commits stay within Firestore's limits by construction: an event over 1 MiB or a commit over
about 10 MiB (its pages and the execution document) is refused before anything is written (an append
is all or nothing: all its pages are one commit). A snapshot too big for one commit is
written in several: its parts first, unreferenced and so invisible, then the execution
document's pointer in the last commit, then the old parts are deleted. Parts of a swap
that fails half-way are left unreferenced until the execution is deleted.

Retention: :meth:`~loom.store.base.EventStore.purge` (from the retention job) deletes finished
executions with their events and snapshots. Firestore TTL on ``expire_at`` is only a
backstop: it deletes the execution document alone. What it leaves is older than the next
execution document of that id: readers leave it out and delete it (see
:mod:`loom_gcp._firestore_pages`).

The class is assembled from parts, one module each: appends
(:mod:`loom_gcp._firestore_append`), loads and snapshots (:mod:`loom_gcp._firestore_load`),
and the state and reads they share (:mod:`loom_gcp._firestore_core`); this module holds the
constructor and the rest of the SPI (create, summaries and listings, deletes, health).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import cast
from urllib.parse import unquote, urlparse

from google.api_core.retry import AsyncRetry
from google.cloud import firestore
from google.cloud.firestore_v1.async_batch import AsyncWriteBatch

from loom.errors import ConfigurationError, StoreError
from loom.events import Event, ExecutionStarted
from loom.ids import check_execution_id
from loom.store.base import (
    ExecutionSummary,
    LoadedLog,
    check_then,
    settled_status,
)
from loom_gcp._firestore_append import FirestoreAppends
from loom_gcp._firestore_cache import LogCache, LogEnds
from loom_gcp._firestore_docs import (
    MAX_COMMIT_BYTES,
    MAX_DOC_BYTES,
    check_commit,
    new_execution_fields,
    status_fields,
    summary_from_fields,
    timestamp_seconds,
)
from loom_gcp._firestore_fence import Stamps
from loom_gcp._firestore_io import (
    DEFAULT_DEADLINE,
    DEFAULT_TIMEOUT,
    CallPolicy,
    Collision,
    CountedDocs,
    default_retry,
    url_knobs,
)
from loom_gcp._firestore_listing import FirestoreListings
from loom_gcp._firestore_load import FirestoreLoads
from loom_gcp._firestore_pages import newest_page, with_start
from loom_gcp._firestore_retention import (
    clear_older,
    clear_orphan,
    ttl_from_env,
)
from loom_gcp._firestore_shards import (
    DEFAULT_SHARDS,
    ShardLayout,
    shard_field,
)
from loom_gcp._firestore_writes import delete_tree
from loom_gcp.firestore_inbox import FirestoreInbox
from loom_gcp.firestore_leases import FirestoreLeaseSet
from loom_gcp.firestore_schedules import FirestoreScheduleStore


class FirestoreEventStore(FirestoreAppends, FirestoreLoads, FirestoreListings):
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
        shards: How many shards a new database gets (``loom_meta/layout`` keeps the count
            of an existing one; see :mod:`loom_gcp._firestore_shards`).
    """

    # Reads are billed per document: a snapshot (one write or two) beats re-reading more than
    # a handful of events on every later execute call.
    snapshot_min_tail = 8
    # Bytes a snapshot writes per commit: Firestore's limit, with a margin.
    snapshot_commit_bytes = MAX_COMMIT_BYTES
    # An append is pages of up to 1 MiB each, so a commit's limits (500 writes, 10 MiB:
    # ``check_commit``) bound it by bytes, not by its 500 writes. The count is there for the
    # strict journal, which writes a flow's pending decisions ahead in chunks of this many:
    # 5,000 small decisions stay far under 10 MiB.
    max_append_events = 5_000
    # A snapshot taken where an execute call ends rides the append's status write.
    keeps_append_snapshots = True
    # Event bytes a batched session gathers for one commit, within Firestore's 10 MiB.
    max_batch_bytes = MAX_COMMIT_BYTES - 1_000_000
    # An event has a page document to itself at most (1 MiB, with the page's own fields).
    max_event_bytes = MAX_DOC_BYTES - 16_384

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
        shards: int = DEFAULT_SHARDS,
    ) -> None:
        policy = CallPolicy(timeout, deadline, retry or default_retry())
        self._owns_client = client is None
        self._client = client or firestore.AsyncClient(project=project, database=database)
        self._executions = self._client.collection("executions")
        self._retention = retention
        self._known = LogEnds(known_executions)
        self._attempts = attempts
        self._io = CountedDocs(self._client, policy)
        self._cache = LogCache()
        self._stamps = Stamps(known_executions)
        self._layout = ShardLayout(self._io, shards)

    @classmethod
    def from_url(cls, url: str) -> FirestoreEventStore:
        """Build a store from ``firestore://PROJECT/DATABASE[?timeout=S&deadline=S]``.

        The database defaults to ``(default)``; ``firestore:///`` takes the project from the
        environment. ``timeout`` and ``deadline`` are seconds (see the class), ``shards``
        the shard count of a new database (``?shards=64``); ``LOOM_TTL_DAYS`` sets the TTL
        backstop (see :func:`ttl_from_env`).
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
            shards=_shards_knob(url, knobs),
        )

    @property
    def ops(self) -> dict[str, int]:
        """Documents read, written and deleted so far (billing units), for benchmarks."""
        return dict(self._io.ops)

    def reset_ops(self) -> None:
        """Start counting document operations from zero."""
        self._io.reset()

    # -- the SPI ----------------------------------------------------------------------------

    async def create(
        self, started: ExecutionStarted, then: Sequence[Event] = ()
    ) -> tuple[bool, ExecutionStarted]:
        eid = check_execution_id(started.execution_id)
        check_then(eid, then)
        first = started.model_copy(update={"seq": 1})
        bodies = [e.model_dump_json() for e in [first, *then]]
        body = bodies[0]
        fields = new_execution_fields(started.flow, time.time(), started.flow_version)
        fields.update(shard_field(eid, await self.shard_count()))
        fields["last_seq"] = len(bodies)
        ended = settled_status(then, None)
        if ended is not None:  # ``then`` ends the log: the execution is born finished
            fields.update(status_fields(ended, len(bodies), self._retention))
        fields, pages = with_start(fields, bodies)
        if fields.get("expire_at") is not None:  # born finished: its pages expire with it
            pages = [(doc_id, {**page, "expire_at": fields["expire_at"]}) for doc_id, page in pages]
        check_commit(f"create {eid!r}", [(eid, fields), *pages], other_writes=0)

        def build() -> tuple[AsyncWriteBatch, int]:
            batch = self._client.batch()
            batch.create(self._exec_ref(eid), fields)
            for doc_id, page in pages:  # a start too big to ride the execution document
                batch.create(self._events(eid).document(doc_id), page)
            return batch, 0

        async with self._io.call(f"create {eid!r}"):
            try:
                results = await self._io.commit(build)
            except Collision as collision:
                self._cache.drop(eid)
                self._stamps.drop(eid)
                if await clear_orphan(self._io, self._exec_ref(eid)):
                    self._known.drop(eid)
                    return await self.create(started, then)
                return await self._stored_start(eid, body, collision.maybe_ours)
        closed = ended is not None
        self._stamps.wrote(eid, results, 0, False, len(bodies), closed)
        # A reused id: whatever an older log reached is void.
        self._known.reset(eid, len(bodies), closed)
        home = int(pages[-1][1]["seq"]) if pages else 0
        self._cache.put(eid, LoadedLog(None, [first, *then]), bodies[-1], home)
        return True, first

    async def _stored_start(
        self, execution_id: str, body: str, maybe_ours: bool
    ) -> tuple[bool, ExecutionStarted]:
        page = await self._page_holding(execution_id, 1)
        if page is None:
            raise StoreError(f"execution {execution_id!r} exists without its first event")
        events = page.events_after(0, execution_id)
        event = events[0]
        assert isinstance(event, ExecutionStarted)
        # With events written beside it, 1 is no end.
        self._note(execution_id, page.last, page.ends_log)
        if self._cache.get(execution_id) is None:
            self._cache.put(execution_id, LoadedLog(None, events), page.bodies[-1], page.home)
        return maybe_ours and page.bodies[0] == body, event

    async def summary(self, execution_id: str) -> ExecutionSummary:
        async with self._io.call(f"summary of {execution_id!r}"):
            doc = await self._exec_snap(execution_id)
            fields = doc.to_dict() or {}
            # Events appended since the last status change are not on the execution
            # document: the newest page says where the log ends.
            events, after = self._events(execution_id), int(fields["last_seq"])
            created = cast("datetime | None", doc.create_time)
            newest, orphans = await newest_page(self._io, events, after, created)
            if orphans and created is not None:  # TTL leftovers hid the log's own end
                await clear_older(self._io, self._exec_ref(execution_id), created)
                newest, _ = await newest_page(self._io, events, after, created)
        if newest is None:
            return summary_from_fields(execution_id, fields)
        self._note(execution_id, newest.last, newest.ends_log)
        updated = timestamp_seconds(newest.created)
        return summary_from_fields(execution_id, fields, last_seq=newest.last, updated_at=updated)

    async def delete_execution(self, execution_id: str) -> bool:
        """Delete an execution with its events and snapshots (see :func:`delete_tree`)."""
        self._forget(execution_id)
        return await delete_tree(self._io, self._exec_ref(execution_id), f"{execution_id!r}")

    def leases(self) -> FirestoreLeaseSet:
        """Queue leases in this database, shared by every instance (``loom_queues``)."""
        found: FirestoreLeaseSet | None = getattr(self, "_lease_set", None)
        if found is None:
            found = self._lease_set = FirestoreLeaseSet(self._client)
        return found

    def schedules(self) -> FirestoreScheduleStore:
        """Schedule records in this database (``loom_schedules``)."""
        found: FirestoreScheduleStore | None = getattr(self, "_schedule_store", None)
        if found is None:
            found = self._schedule_store = FirestoreScheduleStore(self._client)
        return found

    def inbox(self) -> FirestoreInbox:
        """Inboxes under the execution documents (``executions/{id}/inbox``)."""
        found: FirestoreInbox | None = getattr(self, "_inbox", None)
        if found is None:
            found = self._inbox = FirestoreInbox(self._client, self.shard_count)
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


def _shards_knob(url: str, knobs: dict[str, float]) -> int:
    raw = knobs.get("shards", float(DEFAULT_SHARDS))
    if raw != int(raw) or not 1 <= raw <= 1024:
        raise ConfigurationError(f"shards in {url!r} must be a whole number from 1 to 1024")
    return int(raw)
