"""The ``EventStore`` SPI: per-execution, gap-free, append-only logs plus snapshots.

Contract (every backend passes ``tests/contracts/test_event_store.py`` unchanged):

* ``create`` writes ``ExecutionStarted`` as seq 1 if the execution does not exist, and is
  idempotent: for an existing id it writes nothing and returns the stored first event, so the
  caller can tell a repeat from a conflict. ``create(started, then)`` also writes ``then``
  (events numbered ``2, 3, …``, e.g. the first claim) in the same atomic write, only when
  this call creates the execution: for an existing id nothing of ``then`` is written.
* ``append`` is the linearization point. It succeeds only if the log ends exactly at
  ``expected_seq``; otherwise it raises :class:`~loom.errors.AppendConflictError` and writes
  nothing. The events must be numbered ``expected_seq + 1, expected_seq + 2, …``. When it
  returns, the events are durable (for SQLite: fsync'd). Either all of a batch is written or
  none of it.
* Nothing follows a terminal event (``ExecutionCompleted``, ``ExecutionFailed``,
  ``ExecutionCancelled``). An append to a log whose last event is terminal raises
  :class:`~loom.errors.LogEndedError` (an ``AppendConflictError``: callers reload and decide
  again) and writes nothing, however the log's end was written (an append, ``create``'s
  ``then``, Firestore's end on the execution document) and whoever appends (the holder, a
  control call, a takeover claim, another process). A batch with a terminal event anywhere
  but last is refused with ``ValueError`` (a caller bug). A batch ending with a terminal
  event leaves the status finished: its own (``completed``, ``failed``, ``cancelled``)
  unless the request names another finished one (:func:`settled_status`).
* An append may carry ``snapshot``, the state after its events; a store whose
  ``keeps_append_snapshots`` is true keeps it exactly as ``save_snapshot`` would, in the same
  write (so a snapshot taken where an execute call ends costs no write of its own); other
  stores ignore it and the caller saves snapshots itself.
* ``load`` returns the newest snapshot (if any) and every event after it, in order.
  ``read`` returns events after a given seq, in order, for history and audit.
* ``save_snapshot`` stores a state derived from the log at ``seq``; a snapshot is never ahead
  of the log (``seq`` greater than the last seq is refused) and an older snapshot never
  replaces a newer one.
* ``list`` answers from execution summaries (status, wake time), never by reading events.
* ``scan`` walks the summaries with given statuses in execution-id order, one page at a
  time (keyset pagination): a walk visits every execution whose status stays in the set
  while it runs, however many there are, holding one page in memory.
* ``load_many`` answers exactly what ``load`` of each id would, in the order asked.
* A summary carries the flow version recorded at the start (``"1"`` for executions created
  before versions were recorded).
* ``list`` orders by ``(created_at, execution_id)``, newest first unless ``oldest_first``, and
  ``after`` (a row's :attr:`ExecutionSummary.cursor`) resumes strictly after that row, so a
  caller can page through every execution however many there are.
* ``browse`` answers an operator's filtered listing (status, flow, creation time, id
  prefix) newest first by ``(created_at, execution_id)``, paged like ``list``;
  ``count_by_status`` counts executions per status (optionally of one flow), every status
  present as a key. Both answer from summaries; the defaults (:mod:`loom.store.browse`)
  walk ``list``/``scan``, and a store with matching indexes answers directly.
* ``delete_execution`` removes an execution with its events and snapshots; afterwards the
  id is unknown and ``create`` starts it anew. ``purge`` deletes, oldest first and a bounded
  batch at a time, finished executions last updated before a time; it is idempotent and
  resumable (what was deleted stays deleted, what was not is found by the next call).
* ``shard_count`` says over how many shards (:mod:`loom.shards`) the store splits its
  executions (1: it does not), fixed for the store's life; ``list_shard`` and ``purge``
  with a ``shard`` answer for the executions of one shard alone, so the callers that walk
  every execution (the sweeper, the purge) can work shard by shard, in parallel. ``list``
  and ``browse`` answer across every shard.
* Unknown execution ids raise :class:`~loom.errors.UnknownExecutionError`.
* Execution ids follow the one rule of :mod:`loom.ids`: every method refuses another id with
  :class:`~loom.errors.InvalidExecutionIdError` before any I/O, and a valid id is stored and
  returned byte for byte.
* Every other failure of the backend (its driver's exceptions, a full disk, a lock held too
  long, an unreachable service) is raised as a :class:`~loom.errors.StoreError` with the
  cause chained, :class:`~loom.errors.StoreUnavailableError` when a retry may succeed; a
  failed write writes nothing.
* ``leases`` gives the queue leases (:class:`~loom.store.leases.LeaseSet`, its own contract)
  shared by every process that opens the same store; ``inbox`` the inboxes of fan-in
  deliveries (:class:`~loom.store.inbox.Inbox`, its own contract), or ``None``.
* ``ping`` is a cheap check that the store can answer now (for a readiness probe); it
  raises :class:`~loom.errors.StoreError` when it cannot. The caller bounds its time.

The values the SPI takes and gives (``AppendRequest``, ``LoadedLog``, ``ExecutionSummary``…)
and the append checks every backend makes are in :mod:`loom.store.records`, exported here too.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Any

from loom.errors import ConfigurationError
from loom.events import Event, ExecutionStarted
from loom.scope import off_scope_methods
from loom.store.browse import BrowseQuery, browse_by_listing, count_by_scanning
from loom.store.inbox import Inbox
from loom.store.leases import LeaseSet
from loom.store.records import (
    ENDING_STATUS,
    FINISHED,
    LIVE_STATUSES,
    STATUSES,
    AppendRequest,
    ExecutionSummary,
    ListCursor,
    LoadedLog,
    OnDelete,
    PurgeReport,
    Snapshot,
    StatusChange,
    check_numbering,
    check_then,
    page_after,
    settled_status,
)
from loom.store.schedule_store import ScheduleStore
from loom.telemetry import trace_store_methods

# The SPI's values live in loom.store.records; they are exported from here too, where
# backends and callers have always imported them.
__all__ = [
    "ENDING_STATUS",
    "FINISHED",
    "LIVE_STATUSES",
    "STATUSES",
    "AppendRequest",
    "EventStore",
    "ExecutionSummary",
    "ListCursor",
    "LoadedLog",
    "OnDelete",
    "PurgeReport",
    "Snapshot",
    "StatusChange",
    "check_numbering",
    "check_then",
    "page_after",
    "settled_status",
]


class EventStore(abc.ABC):
    """Per-execution event logs with optimistic appends. See the module docstring.

    Attributes:
        snapshot_min_tail: Events after the last snapshot worth a new snapshot when an execute
            call ends. Cheap local reads favour long tails; billed reads favour short ones.
        max_append_events: The most events one append may carry (``None``: no limit). A
            longer append is refused with :class:`~loom.errors.StoreLimitError`; the session
            writes long runs of decisions ahead in appends of this size instead.
        keeps_append_snapshots: Whether ``append`` keeps ``AppendRequest.snapshot``.
        max_batch_bytes: Most bytes of event JSON one append may carry (``None``: no limit),
            so a caller gathering events knows when to write them.
        max_event_bytes: Most bytes of JSON one event may have (``None``: no limit of its
            own), so a caller holding an event back knows the store would take it.
    """

    snapshot_min_tail: int = 64
    max_append_events: int | None = None
    keeps_append_snapshots: bool = False
    max_batch_bytes: int | None = None
    max_event_bytes: int | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        off_scope_methods(cls)  # a backend's calls take no flow step ids (loom.scope)
        trace_store_methods(cls)  # every backend's operations get OpenTelemetry spans

    @abc.abstractmethod
    async def create(
        self, started: ExecutionStarted, then: Sequence[Event] = ()
    ) -> tuple[bool, ExecutionStarted]:
        """Write ``started`` as seq 1 unless the execution exists.

        Args:
            started: The first event.
            then: Events numbered ``2, 3, …`` (``at`` set), written in the same atomic write
                as ``started`` when this call creates the execution, and not at all when it
                exists. The status stays ``running``, unless ``then`` ends with a terminal
                event (see :func:`settled_status`).

        Raises:
            ValueError: ``then`` is not numbered from 2.

        Returns:
            ``(created, stored)``: whether this call created it, and the stored first event.
        """

    @abc.abstractmethod
    async def append(self, request: AppendRequest) -> int:
        """Append events if the log ends at ``request.expected_seq``; return the new last seq.

        Raises:
            AppendConflictError: The log does not end at ``expected_seq``.
            LogEndedError: It does, with a terminal event (nothing may follow it).
            UnknownExecutionError: No such execution.
        """

    @abc.abstractmethod
    async def load(self, execution_id: str) -> LoadedLog:
        """The newest snapshot and every event after it."""

    async def load_many(self, execution_ids: Sequence[str]) -> list[LoadedLog]:
        """``load`` for several executions, in the order given (a bulk read for walks such as
        the replay check; a store may answer it in fewer round trips). Default: one ``load``
        each.

        Raises:
            UnknownExecutionError: One of the executions does not exist.
        """
        return [await self.load(execution_id) for execution_id in execution_ids]

    @abc.abstractmethod
    async def read(self, execution_id: str, after_seq: int = 0) -> list[Event]:
        """Every event with ``seq > after_seq``, in order."""

    async def read_page(self, execution_id: str, after_seq: int, limit: int) -> list[Event]:
        """At most ``limit`` events with ``seq > after_seq``, in order (a page of the log for
        a reader; ``GET /executions/{id}`` pages its history with it).

        Default: :meth:`read`, cut to ``limit``; a store that can stop early overrides it.
        """
        return (await self.read(execution_id, after_seq))[:limit]

    @abc.abstractmethod
    async def save_snapshot(self, execution_id: str, snapshot: Snapshot) -> None:
        """Store a snapshot; ignored if a newer one is stored; refused if ahead of the log."""

    @abc.abstractmethod
    async def summary(self, execution_id: str) -> ExecutionSummary:
        """The summary row of one execution."""

    @abc.abstractmethod
    async def list(
        self,
        status: str | None = None,
        *,
        due_before: float | None = None,
        limit: int = 1000,
        oldest_first: bool = False,
        after: ListCursor | None = None,
    ) -> list[ExecutionSummary]:
        """Summaries filtered by status and by ``wake_at <= due_before``.

        Args:
            status: Only this status.
            due_before: Only executions whose ``wake_at`` is at or before this time.
            limit: At most this many rows.
            oldest_first: Order by ``(created_at, execution_id)`` ascending instead of
                descending.
            after: Only rows strictly after this cursor in that order.
        """

    @abc.abstractmethod
    async def delete_execution(self, execution_id: str) -> bool:
        """Delete an execution with its events and snapshots; False if there was none.

        Meant for finished executions (retention). Other store objects over the same data
        must still accept the id started again afterwards.
        """

    async def shard_count(self) -> int:
        """Over how many shards the store splits its executions (see the module docstring).

        Default: 1, the whole store is shard 0.
        """
        return 1

    async def upkeep(self) -> dict[str, int]:
        """Maintenance the store needs now and then (the sweep calls it): what it did.

        Default: nothing. (Firestore gives the executions of an upgraded database their
        shard, once.)
        """
        return {}

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
        """``list`` of the executions of one shard (same arguments and order).

        Default: shard 0 is the whole store, any other is empty.
        """
        if shard != 0:
            return []
        return await self.list(
            status, due_before=due_before, limit=limit, oldest_first=oldest_first, after=after
        )

    async def purge(
        self,
        finished_before: float,
        *,
        limit: int = 100,
        after: ListCursor | None = None,
        on_delete: OnDelete | None = None,
        shard: int | None = None,
    ) -> PurgeReport:
        """Delete finished executions last updated before ``finished_before``.

        Looks at up to ``limit`` executions, oldest first, from ``after`` on. Executions
        created at or after ``finished_before`` cannot qualify, so the scan ends there.

        Args:
            finished_before: Epoch seconds; executions finished later are kept.
            limit: Executions looked at in this call (the batch bound).
            after: The previous report's cursor, to continue a scan.
            on_delete: Awaited with each id before it is deleted (e.g. to delete its blobs
                first: once the execution is gone nothing would find them). If it raises,
                the execution is kept and the error propagates.
            shard: Only the executions of this shard (``None``: every execution).
        """
        if shard is None:
            page = await self.list(limit=limit, oldest_first=True, after=after)
        else:
            page = await self.list_shard(shard, limit=limit, oldest_first=True, after=after)
        purged: list[str] = []
        for scanned, row in enumerate(page):
            if row.created_at >= finished_before:
                return PurgeReport(purged, scanned, None)
            if row.status in FINISHED and row.updated_at < finished_before:
                if on_delete is not None:
                    await on_delete(row.execution_id)
                await self.delete_execution(row.execution_id)
                purged.append(row.execution_id)
        cursor = page[-1].cursor if len(page) == limit else None
        return PurgeReport(purged, len(page), cursor)

    @abc.abstractmethod
    async def scan(
        self, statuses: Sequence[str], *, after: str | None = None, limit: int = 500
    ) -> list[ExecutionSummary]:
        """One page of summaries whose status is in ``statuses``, by execution id ascending.

        Args:
            statuses: The statuses wanted (e.g. :data:`LIVE_STATUSES`).
            after: Start after this execution id (the last id of the previous page).
            limit: Page size; a page shorter than ``limit`` is the last.
        """

    async def browse(self, query: BrowseQuery) -> list[ExecutionSummary]:
        """One page of summaries matching ``query``, newest first (see the module docstring).

        Default: walks ``list`` and filters in memory.
        """
        return await browse_by_listing(self, query)

    async def count_by_status(self, *, flow: str | None = None) -> dict[str, int]:
        """How many executions (of ``flow``, if given) have each of :data:`STATUSES`.

        Default: walks ``scan``; a store that can count on an index overrides it.
        """
        return await count_by_scanning(self, STATUSES, flow)

    async def aclose(self) -> None:  # noqa: B027 - optional hook, most stores hold nothing
        """Release connections. Default: nothing to release."""

    def leases(self) -> LeaseSet:
        """The queue leases kept beside this store's logs (:mod:`loom.store.leases`), shared
        by every process that opens the same store.

        Raises:
            ConfigurationError: The store keeps no leases (a wrapper must delegate this:
                leases private to one process would not bound the others).
        """
        raise ConfigurationError(
            f"{type(self).__name__} keeps no queue leases; queues need a store that does"
        )

    def schedules(self) -> ScheduleStore:
        """The schedule records kept beside this store's logs
        (:mod:`loom.store.schedule_store`), shared by every process that opens the store.

        Raises:
            ConfigurationError: The store keeps none (a wrapper must delegate this).
        """
        raise ConfigurationError(
            f"{type(self).__name__} keeps no schedules; schedules made at run time need a "
            "store that does"
        )

    def inbox(self) -> Inbox | None:
        """The inboxes kept beside this store's logs (:mod:`loom.store.inbox`), shared by
        every process that opens the same store; ``None`` when it keeps none (deliveries
        then append to the log directly)."""
        return None

    async def ping(self) -> None:
        """Check that the store answers now (readiness); raise ``StoreError`` if it cannot.

        Default: a one-row ``list``. Backends override it with something cheaper or stricter.
        """
        await self.list(limit=1)

    def serve_off_loop(self) -> None:  # noqa: B027 - optional hook, most stores never block
        """From now on, never block the calling event loop (a served worker calls this).

        Default: nothing to do, for stores whose calls are truly asynchronous. A store that
        makes blocking calls moves them to threads of its own.
        """
