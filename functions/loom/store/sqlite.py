"""``SqliteEventStore``: the embedded default, one file on disk.

WAL mode with ``synchronous=FULL``: every append is one transaction whose commit fsyncs the
WAL before ``append`` returns. The WAL is kept across closes and preallocated, so commits
overwrite written space instead of growing the file (:mod:`loom.store.sqlite_wal`). Several processes may share the file; ``BEGIN IMMEDIATE`` takes
the write lock up front so the ``expected_seq`` check and the insert are one atomic step.

By default calls run on the caller's thread without an executor hop: a commit costs ~0.2 ms,
less than a thread hand-off would add (ADR 0002), which is what the embedded CLI wants. A
served worker calls :meth:`SqliteEventStore.serve_off_loop`: from then on writes run on one
writer thread and reads on a small pool, so a lock held by another process blocks those
threads, never the event loop that answers other requests (ADR 0013). Each thread has its
own connection (:mod:`loom.store.sqlite_connections`).

Every ``sqlite3`` error is translated here into a :class:`~loom.errors.StoreError` with the
cause chained: busy or locked past the busy timeout, disk full, read-only and cannot-open
become :class:`~loom.errors.StoreUnavailableError` (retryable). So does a write after the
file was deleted or replaced under the process (``reason="replaced"``): checked once per
write transaction, it would otherwise be acknowledged into the unlinked file and lost.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path

from loom.errors import UnknownExecutionError
from loom.events import TERMINAL_TYPES, Event, ExecutionStarted, event_to_json
from loom.ids import check_execution_id
from loom.store import sqlite_browse
from loom.store.base import (
    STATUSES,
    AppendRequest,
    EventStore,
    ExecutionSummary,
    ListCursor,
    LoadedLog,
    Snapshot,
    check_numbering,
    check_then,
    settled_status,
)
from loom.store.browse import BrowseQuery
from loom.store.sqlite_connections import SqliteConnections
from loom.store.sqlite_faults import (
    busy_timeout_from_env,
    check_sizes,
    guard,
    max_event_bytes_from_env,
    rollback,
    translate,
)
from loom.store.sqlite_group import GroupCommitter
from loom.store.sqlite_inbox import SqliteInbox, drop_inbox
from loom.store.sqlite_leases import SqliteLeaseSet
from loom.store.sqlite_schedules import SqliteScheduleStore
from loom.store.sqlite_schema import SUMMARY_COLUMNS, prepare
from loom.store.sqlite_writes import KEEP_SNAPSHOT, Append, Create, last_seq
from loom.store.unreadable import parse_events

_PING_BUSY_MS = 1000  # a readiness check waits this long for the write lock, not 30 s


class SqliteEventStore(SqliteConnections, EventStore):
    """An event store in one SQLite file (``sqlite:///path``).

    Args:
        path: The database file; its directory is created if missing.
        busy_timeout: Seconds a write waits for another connection's lock before it fails
            with :class:`~loom.errors.StoreUnavailableError` (default
            ``LOOM_SQLITE_BUSY_TIMEOUT`` or 30).
        max_event_bytes: The largest event (its JSON) an append or create takes; a larger
            one is refused with :class:`~loom.errors.StoreLimitError`, nothing written
            (default ``LOOM_SQLITE_MAX_EVENT_BYTES`` or SQLite's own 1 GB).

    Raises:
        StoreUnavailableError: The file cannot be created, opened or initialised.
    """

    # A snapshot taken where an execute call ends rides that append (same transaction,
    # same fsync) instead of committing a transaction of its own afterwards.
    keeps_append_snapshots = True

    def __init__(
        self,
        path: str | Path,
        *,
        busy_timeout: float | None = None,
        max_event_bytes: int | None = None,
    ) -> None:
        super().__init__(
            Path(path), busy_timeout_from_env() if busy_timeout is None else busy_timeout
        )
        self.max_event_bytes = max_event_bytes or max_event_bytes_from_env()
        self._group = GroupCommitter(self._write_con, self._forget, self._check_file)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise translate(exc, f"creating the directory of {self.path}") from exc
        self._init()

    @guard("opening the database")
    def _init(self) -> None:
        con = self._con()
        prepare(con, self._where, sqlite_browse.INDEXES)

    def leases(self) -> SqliteLeaseSet:
        """Queue leases in this database file, shared by every process that opens it."""
        found: SqliteLeaseSet | None = getattr(self, "_lease_set", None)
        if found is None:
            found = self._lease_set = SqliteLeaseSet(self.path, self.busy_timeout)
        return found

    def schedules(self) -> SqliteScheduleStore:
        """Schedule records in this database file, shared by every process that opens it."""
        found: SqliteScheduleStore | None = getattr(self, "_schedule_store", None)
        if found is None:
            found = self._schedule_store = SqliteScheduleStore(self.path, self.busy_timeout)
        return found

    def inbox(self) -> SqliteInbox:
        """Inboxes in this database file, shared by every process that opens it."""
        found: SqliteInbox | None = getattr(self, "_inbox", None)
        if found is None:
            found = self._inbox = SqliteInbox(self.path, self.busy_timeout)
        return found

    def serve_off_loop(self) -> None:
        """Run writes on one writer thread and reads on a small pool from now on."""
        self._serve_off_loop()

    async def create(
        self, started: ExecutionStarted, then: Sequence[Event] = ()
    ) -> tuple[bool, ExecutionStarted]:
        check_execution_id(started.execution_id)
        check_then(started.execution_id, then)
        first = started.model_copy(update={"seq": 1})
        eid = started.execution_id
        rows = [(eid, e.seq, event_to_json(e)) for e in [first, *then]]
        check_sizes("create", eid, [row[2] for row in rows], self.max_event_bytes)
        ended = settled_status(then, None)
        status = "running" if ended is None else ended.status
        create = Create(first, rows, time.time(), status)
        return await self._group.queue(create, 0, "create", self._writer)

    async def append(self, request: AppendRequest) -> int:
        """Append in the next group commit (``sqlite_group``); return once it is fsync'd."""
        eid, expected, events = request.execution_id, request.expected_seq, request.events
        check_execution_id(eid)
        if len(events) == 1 and events[0].seq == expected + 1:  # one event: no loops to run
            body = event_to_json(events[0])
            rows, size = [(eid, events[0].seq, body)], len(body)
        else:
            check_numbering(request)
            rows = [(eid, e.seq, event_to_json(e)) for e in events]
            size = sum([len(row[2]) for row in rows])
        limit = self.max_event_bytes
        if limit is not None and size * 4 > limit:  # else no event can be over (check_sizes)
            check_sizes("append to", eid, [row[2] for row in rows], limit)
        snapshot = request.snapshot
        if snapshot is not None:
            size += len(snapshot)
        status = request.status
        if events and events[-1].type in TERMINAL_TYPES:  # (a lookup: every append runs it)
            status = settled_status(events, status)
        write = Append(eid, expected, rows, status, snapshot)
        return await self._group.queue(write, size, "append", self._writer)

    def _events(self, execution_id: str, after_seq: int) -> list[Event]:
        cur = self._con().execute(
            "SELECT body FROM events WHERE execution_id=? AND seq>? ORDER BY seq",
            (execution_id, after_seq),
        )
        # A body this release cannot parse is a store error naming it (loom.store.unreadable).
        return parse_events([body for (body,) in cur], after_seq + 1, execution_id)

    def _require(self, execution_id: str) -> None:
        row = self._con().execute("SELECT 1 FROM executions WHERE id=?", (execution_id,)).fetchone()
        if row is None:
            raise UnknownExecutionError(f"unknown execution {execution_id!r}")

    async def load(self, execution_id: str) -> LoadedLog:
        check_execution_id(execution_id)
        return await self._run(False, self._load, execution_id)

    @guard("load")
    def _load(self, execution_id: str) -> LoadedLog:
        con = self._con()
        # One read transaction, so the snapshot and the tail are consistent.
        try:
            con.execute("BEGIN")
            self._require(execution_id)
            row = con.execute(
                "SELECT seq, state FROM snapshots WHERE execution_id=?", (execution_id,)
            ).fetchone()
            snapshot = Snapshot(row[0], row[1]) if row else None
            events = self._events(execution_id, snapshot.seq if snapshot else 0)
        finally:
            rollback(con)  # nothing was written: ending the read is all this does
        return LoadedLog(snapshot, events)

    async def read(self, execution_id: str, after_seq: int = 0) -> list[Event]:
        check_execution_id(execution_id)
        return await self._run(False, self._read, execution_id, after_seq)

    @guard("read")
    def _read(self, execution_id: str, after_seq: int) -> list[Event]:
        self._require(execution_id)
        return self._events(execution_id, after_seq)

    async def save_snapshot(self, execution_id: str, snapshot: Snapshot) -> None:
        check_execution_id(execution_id)
        await self._run(True, self._save_snapshot, execution_id, snapshot)

    @guard("save_snapshot")
    def _save_snapshot(self, execution_id: str, snapshot: Snapshot) -> None:
        def body(con: sqlite3.Connection) -> None:
            last = last_seq(con, execution_id)
            if last is None:
                raise UnknownExecutionError(f"unknown execution {execution_id!r}")
            if snapshot.seq > last:
                raise ValueError(f"snapshot at {snapshot.seq} is ahead of the log ({last})")
            con.execute(KEEP_SNAPSHOT, (execution_id, snapshot.seq, snapshot.state))

        self._write(body)

    async def summary(self, execution_id: str) -> ExecutionSummary:
        check_execution_id(execution_id)
        return await self._run(False, self._summary, execution_id)

    @guard("summary")
    def _summary(self, execution_id: str) -> ExecutionSummary:
        row = (
            self._con()
            .execute(f"SELECT {SUMMARY_COLUMNS} FROM executions WHERE id=?", (execution_id,))
            .fetchone()
        )
        if row is None:
            raise UnknownExecutionError(f"unknown execution {execution_id!r}")
        return ExecutionSummary(*row)

    async def list(
        self,
        status: str | None = None,
        *,
        due_before: float | None = None,
        limit: int = 1000,
        oldest_first: bool = False,
        after: ListCursor | None = None,
    ) -> list[ExecutionSummary]:
        return await self._run(False, self._list, status, due_before, limit, oldest_first, after)

    @guard("list")
    def _list(
        self,
        status: str | None,
        due_before: float | None,
        limit: int,
        oldest_first: bool,
        after: ListCursor | None,
    ) -> list[ExecutionSummary]:
        rows = sqlite_browse.list_rows(
            self._con(), SUMMARY_COLUMNS, status, due_before, limit, oldest_first, after
        )
        return [ExecutionSummary(*row) for row in rows]

    async def browse(self, query: BrowseQuery) -> list[ExecutionSummary]:
        return await self._run(False, self._browse, query)

    @guard("browse")
    def _browse(self, query: BrowseQuery) -> list[ExecutionSummary]:
        rows = sqlite_browse.browse_rows(self._con(), SUMMARY_COLUMNS, query)
        return [ExecutionSummary(*row) for row in rows]

    async def count_by_status(self, *, flow: str | None = None) -> dict[str, int]:
        counts = await self._run(False, self._count, flow)
        return {status: counts.get(status, 0) for status in STATUSES} | counts

    @guard("count")
    def _count(self, flow: str | None) -> dict[str, int]:
        return sqlite_browse.count_rows(self._con(), flow)

    async def delete_execution(self, execution_id: str) -> bool:
        """Delete the execution's row, events and snapshot in one transaction."""
        return await self._run(True, self._delete_execution, execution_id)

    @guard("delete_execution")
    def _delete_execution(self, execution_id: str) -> bool:
        def body(con: sqlite3.Connection) -> bool:
            gone = con.execute("DELETE FROM executions WHERE id=?", (execution_id,)).rowcount
            con.execute("DELETE FROM events WHERE execution_id=?", (execution_id,))
            con.execute("DELETE FROM snapshots WHERE execution_id=?", (execution_id,))
            drop_inbox(con, execution_id)
            return gone == 1

        return self._write(body)

    async def ping(self) -> None:
        """Take the write lock and write, then roll back: refuses a read-only or unopenable
        file, and a lock held by another connection for longer than a second."""
        await self._run(False, self._ping)

    @guard("health check")
    def _ping(self) -> None:
        con = self._write_con()  # (a replaced file: not ready)
        con.execute(f"PRAGMA busy_timeout={_PING_BUSY_MS}")
        try:
            con.execute("BEGIN IMMEDIATE")
            version = con.execute("PRAGMA user_version").fetchone()[0]
            # A write, rolled back: with a kept WAL a read-only file grants the lock itself.
            con.execute(f"PRAGMA user_version={int(version)}")
        finally:
            rollback(con)
            con.execute(f"PRAGMA busy_timeout={int(self.busy_timeout * 1000)}")

    async def scan(
        self, statuses: Sequence[str], *, after: str | None = None, limit: int = 500
    ) -> list[ExecutionSummary]:
        return await self._run(False, self._scan, tuple(statuses), after, limit)

    @guard("scan")
    def _scan(
        self, statuses: tuple[str, ...], after: str | None, limit: int
    ) -> list[ExecutionSummary]:
        rows = sqlite_browse.scan_rows(self._con(), SUMMARY_COLUMNS, statuses, after, limit)
        return [ExecutionSummary(*row) for row in rows]

    async def aclose(self) -> None:
        self._close()
