"""``SqliteEventStore``: the embedded default, one file on disk.

WAL mode with ``synchronous=FULL``: every append is one transaction whose commit fsyncs the
WAL before ``append`` returns. Several processes may share the file; ``BEGIN IMMEDIATE`` takes
the write lock up front so the ``expected_seq`` check and the insert are one atomic step.

Calls run on the caller's thread without an executor hop: a commit costs ~0.2 ms, less than a
thread hand-off would add (ADR 0002). Each thread gets its own connection, so a threaded
HTTP server can share one store object.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from loom.errors import AppendConflictError, StoreError, UnknownExecutionError
from loom.events import EVENT_ADAPTER, Event, ExecutionStarted
from loom.store.base import (
    AppendRequest,
    EventStore,
    ExecutionSummary,
    LoadedLog,
    Snapshot,
    check_numbering,
)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS executions (
    id TEXT PRIMARY KEY,
    flow TEXT NOT NULL,
    status TEXT NOT NULL,
    last_seq INTEGER NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    wake_at REAL,
    parked_reason TEXT,
    flow_version TEXT NOT NULL DEFAULT '1'
);
CREATE INDEX IF NOT EXISTS executions_status ON executions(status, created_at);
CREATE INDEX IF NOT EXISTS executions_wake ON executions(wake_at) WHERE wake_at IS NOT NULL;
CREATE TABLE IF NOT EXISTS events (
    execution_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (execution_id, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS snapshots (
    execution_id TEXT PRIMARY KEY,
    seq INTEGER NOT NULL,
    state TEXT NOT NULL
);
"""

_SUMMARY_COLUMNS = (
    "id, flow, status, last_seq, created_at, updated_at, wake_at, parked_reason, flow_version"
)


def _migrate(con: sqlite3.Connection) -> None:
    """Bring a database created by an older release up to the current schema."""
    columns = {row[1] for row in con.execute("PRAGMA table_info(executions)")}
    if "flow_version" not in columns:
        # Executions created before versions were recorded all started on version "1".
        with contextlib.suppress(sqlite3.OperationalError):  # another process just added it
            con.execute("ALTER TABLE executions ADD COLUMN flow_version TEXT NOT NULL DEFAULT '1'")


class SqliteEventStore(EventStore):
    """An event store in one SQLite file (``sqlite:///path``)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._con().executescript(_SCHEMA)
        _migrate(self._con())

    def _con(self) -> sqlite3.Connection:
        con: sqlite3.Connection | None = getattr(self._local, "con", None)
        if con is None:
            con = sqlite3.connect(
                self.path, isolation_level=None, timeout=30.0, check_same_thread=False
            )
            con.execute("PRAGMA journal_mode=WAL")
            con.execute("PRAGMA synchronous=FULL")
            self._local.con = con
            with self._lock:
                self._all.append(con)
        return con

    async def create(self, started: ExecutionStarted) -> tuple[bool, ExecutionStarted]:
        con = self._con()
        first = started.model_copy(update={"seq": 1})
        now = time.time()
        con.execute("BEGIN IMMEDIATE")
        try:
            row = con.execute(
                "SELECT body FROM events WHERE execution_id=? AND seq=1", (started.execution_id,)
            ).fetchone()
            if row is not None:
                con.execute("ROLLBACK")
                stored = EVENT_ADAPTER.validate_json(row[0])
                assert isinstance(stored, ExecutionStarted)
                return False, stored
            con.execute(
                f"INSERT INTO executions ({_SUMMARY_COLUMNS}) VALUES (?,?,?,?,?,?,NULL,NULL,?)",
                (started.execution_id, started.flow, "running", 1, now, now, started.flow_version),
            )
            con.execute(
                "INSERT INTO events VALUES (?,?,?)",
                (started.execution_id, 1, first.model_dump_json()),
            )
            con.execute("COMMIT")
        except BaseException:
            if con.in_transaction:
                con.execute("ROLLBACK")
            raise
        return True, first

    async def append(self, request: AppendRequest) -> int:
        check_numbering(request)
        con = self._con()
        eid, expected = request.execution_id, request.expected_seq
        rows = [(eid, e.seq, e.model_dump_json()) for e in request.events]
        new_last = expected + len(rows)
        con.execute("BEGIN IMMEDIATE")
        try:
            # The conditional UPDATE is the expected_seq check: one statement, not two.
            if self._advance(con, eid, expected, new_last, request).rowcount != 1:
                self._refuse(con, eid, expected)
            con.executemany("INSERT INTO events VALUES (?,?,?)", rows)
            con.execute("COMMIT")
        except sqlite3.Error as exc:
            con.execute("ROLLBACK")
            raise StoreError(f"append to {eid!r} failed: {exc}") from exc
        except BaseException:
            con.execute("ROLLBACK")
            raise
        return new_last

    @staticmethod
    def _advance(
        con: sqlite3.Connection, eid: str, expected: int, new_last: int, request: AppendRequest
    ) -> sqlite3.Cursor:
        status = request.status
        if status is None:
            return con.execute(
                "UPDATE executions SET last_seq=?, updated_at=? WHERE id=? AND last_seq=?",
                (new_last, time.time(), eid, expected),
            )
        return con.execute(
            "UPDATE executions SET last_seq=?, updated_at=?, status=?, wake_at=?,"
            " parked_reason=? WHERE id=? AND last_seq=?",
            (
                new_last,
                time.time(),
                status.status,
                status.wake_at,
                status.parked_reason,
                eid,
                expected,
            ),
        )

    @staticmethod
    def _refuse(con: sqlite3.Connection, eid: str, expected: int) -> NoReturn:
        row = con.execute("SELECT last_seq FROM executions WHERE id=?", (eid,)).fetchone()
        if row is None:
            raise UnknownExecutionError(f"unknown execution {eid!r}")
        raise AppendConflictError(f"log of {eid!r} ends at {row[0]}, not {expected}")

    def _events(self, execution_id: str, after_seq: int) -> list[Event]:
        cur = self._con().execute(
            "SELECT body FROM events WHERE execution_id=? AND seq>? ORDER BY seq",
            (execution_id, after_seq),
        )
        return [EVENT_ADAPTER.validate_json(body) for (body,) in cur]

    def _require(self, execution_id: str) -> None:
        row = self._con().execute("SELECT 1 FROM executions WHERE id=?", (execution_id,)).fetchone()
        if row is None:
            raise UnknownExecutionError(f"unknown execution {execution_id!r}")

    async def load(self, execution_id: str) -> LoadedLog:
        con = self._con()
        # One read transaction, so the snapshot and the tail are consistent.
        con.execute("BEGIN")
        try:
            self._require(execution_id)
            row = con.execute(
                "SELECT seq, state FROM snapshots WHERE execution_id=?", (execution_id,)
            ).fetchone()
            snapshot = Snapshot(row[0], row[1]) if row else None
            events = self._events(execution_id, snapshot.seq if snapshot else 0)
        finally:
            con.execute("COMMIT")
        return LoadedLog(snapshot, events)

    async def read(self, execution_id: str, after_seq: int = 0) -> list[Event]:
        self._require(execution_id)
        return self._events(execution_id, after_seq)

    async def save_snapshot(self, execution_id: str, snapshot: Snapshot) -> None:
        con = self._con()
        con.execute("BEGIN IMMEDIATE")
        try:
            row = con.execute(
                "SELECT last_seq FROM executions WHERE id=?", (execution_id,)
            ).fetchone()
            if row is None:
                raise UnknownExecutionError(f"unknown execution {execution_id!r}")
            if snapshot.seq > row[0]:
                raise ValueError(f"snapshot at {snapshot.seq} is ahead of the log ({row[0]})")
            con.execute(
                "INSERT INTO snapshots VALUES (?,?,?) ON CONFLICT(execution_id) DO UPDATE"
                " SET seq=excluded.seq, state=excluded.state WHERE excluded.seq > snapshots.seq",
                (execution_id, snapshot.seq, snapshot.state),
            )
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise

    async def summary(self, execution_id: str) -> ExecutionSummary:
        row = (
            self._con()
            .execute(f"SELECT {_SUMMARY_COLUMNS} FROM executions WHERE id=?", (execution_id,))
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
    ) -> list[ExecutionSummary]:
        clauses: list[str] = []
        args: list[object] = []
        if status is not None:
            clauses.append("status=?")
            args.append(status)
        if due_before is not None:
            clauses.append("wake_at IS NOT NULL AND wake_at<=?")
            args.append(due_before)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        cur = self._con().execute(
            f"SELECT {_SUMMARY_COLUMNS} FROM executions {where} ORDER BY created_at DESC LIMIT ?",
            (*args, limit),
        )
        return [ExecutionSummary(*row) for row in cur]

    async def scan(
        self, statuses: Sequence[str], *, after: str | None = None, limit: int = 500
    ) -> list[ExecutionSummary]:
        marks = ",".join("?" * len(statuses)) or "NULL"
        cur = self._con().execute(
            f"SELECT {_SUMMARY_COLUMNS} FROM executions WHERE status IN ({marks}) AND id > ?"
            " ORDER BY id LIMIT ?",
            (*statuses, after if after is not None else "", limit),
        )
        return [ExecutionSummary(*row) for row in cur]

    async def aclose(self) -> None:
        with self._lock:
            for con in self._all:
                con.close()
            self._all.clear()
        self._local = threading.local()
