"""The statements of a ``SqliteEventStore`` append or create, one request or many at once.

Each request is an object the group committer (:mod:`loom.store.sqlite_group`) calls with
the connection to apply it alone. A group of requests for distinct executions is applied
instead by kind, a few ``executemany`` statements for the whole group (one ``UPDATE`` and
one ``INSERT`` for plain appends), which spares two statements' worth of Python per
request. Whenever one request of such a batch would be refused (a conflict, an unknown
execution, a create of an existing id, a broken constraint), ``apply_many`` says so and the
committer rolls the batch back and applies the requests one by one, which refuses exactly
that request: the batch changes what an append costs, never its outcome.
"""

from __future__ import annotations

import sqlite3
import time
from typing import NoReturn, Self

from loom.errors import AppendConflictError, LogEndedError, UnknownExecutionError
from loom.events import EVENT_ADAPTER, ExecutionStarted
from loom.store.base import StatusChange
from loom.store.sqlite_requests import Batch
from loom.store.sqlite_schema import COLUMNS

Row = tuple[str, int, str]

INSERT_EVENT = "INSERT INTO events VALUES (?,?,?)"
# The first event's insert is the expected_seq check: it inserts only where the log ends at
# ``expected`` (an unknown execution has no events), so an append writes no other row. It is
# also the check that the log has not ended: a log that ends leaves its row finished (the
# store sets the status of a terminal append: ``settled_status``), so the last event is
# read only for a finished row (a commission's closed case stream is finished and goes on).
_INSERT_NEXT = (
    "INSERT INTO events SELECT ?,?,? WHERE (SELECT max(seq) FROM events WHERE execution_id=?) = ?"
    " AND NOT EXISTS (SELECT 1 FROM executions WHERE id=? AND status IN"
    " ('completed','failed','cancelled') AND EXISTS (SELECT 1 FROM events WHERE execution_id=?"
    " AND seq=? AND json_extract(body,'$.type') IN"
    " ('ExecutionCompleted','ExecutionFailed','ExecutionCancelled')))"
)
_STATUS = (
    "UPDATE executions SET last_seq=?, updated_at=?, status=?, wake_at=?, parked_reason=?"
    " WHERE id=?"
)
# An older snapshot never replaces a newer one.
KEEP_SNAPSHOT = (
    "INSERT INTO snapshots VALUES (?,?,?) ON CONFLICT(execution_id) DO UPDATE"
    " SET seq=excluded.seq, state=excluded.state WHERE excluded.seq > snapshots.seq"
)
_INSERT_EXECUTION = f"INSERT INTO executions ({COLUMNS}) VALUES (?,?,?,?,?,?,NULL,NULL,?)"


class Append(Batch):
    """One append, checked and serialized: ``rows`` follow ``expected`` in the log of ``key``."""

    __slots__ = ("expected", "new_last", "rows", "snapshot", "status")

    def __init__(
        self,
        key: str,
        expected: int,
        rows: list[Row],
        status: StatusChange | None,
        snapshot: str | None,
    ) -> None:
        self.key = key
        self.expected = expected
        self.new_last = expected + len(rows)
        self.rows = rows
        self.status = status
        self.snapshot = snapshot

    def __call__(self, con: sqlite3.Connection) -> int:
        eid, rows = self.key, self.rows
        first = rows[0]
        if con.execute(_INSERT_NEXT, self._next(first)).rowcount != 1:
            _refuse(con, eid, self.expected)
        if len(rows) > 1:
            con.executemany(INSERT_EVENT, rows[1:])
        if self.status is not None:
            con.execute(_STATUS, self._status(time.time()))
        if self.snapshot is not None:
            con.execute(KEEP_SNAPSHOT, (eid, self.new_last, self.snapshot))
        return self.new_last

    def _next(self, first: Row) -> tuple[object, ...]:
        """The parameters of ``_INSERT_NEXT`` for the append's first event."""
        eid, expected = self.key, self.expected
        return (eid, first[1], first[2], eid, expected, eid, eid, expected)

    def _status(self, now: float) -> tuple[object, ...]:
        status = self.status
        assert status is not None
        return (self.new_last, now, status.status, status.wake_at, status.parked_reason, self.key)

    @classmethod
    def apply_many(cls, con: sqlite3.Connection, batch: list[Self]) -> list[int] | None:
        firsts = [a._next(a.rows[0]) for a in batch]
        if con.executemany(_INSERT_NEXT, firsts).rowcount != len(batch):  # (a sum of counts)
            return None  # a conflict or an unknown execution: one by one refuses it alone
        rest = [row for a in batch if len(a.rows) > 1 for row in a.rows[1:]]
        if rest:
            con.executemany(INSERT_EVENT, rest)
        now = time.time()  # one clock reading: the batch is one transaction
        changes = [a._status(now) for a in batch if a.status is not None]
        if changes:
            con.executemany(_STATUS, changes)
        snapshots = [(a.key, a.new_last, a.snapshot) for a in batch if a.snapshot is not None]
        if snapshots:
            con.executemany(KEEP_SNAPSHOT, snapshots)
        return [a.new_last for a in batch]


class Create(Batch):
    """One create: ``first`` (seq 1) and the events after it, unless ``key`` exists;
    ``status``: ``running``, or finished when those events end the log."""

    __slots__ = ("first", "now", "rows", "status")

    def __init__(
        self, first: ExecutionStarted, rows: list[Row], now: float, status: str = "running"
    ) -> None:
        self.key = first.execution_id
        self.first = first
        self.rows = rows
        self.now = now
        self.status = status

    def __call__(self, con: sqlite3.Connection) -> tuple[bool, ExecutionStarted]:
        row = con.execute(
            "SELECT body FROM events WHERE execution_id=? AND seq=1", (self.key,)
        ).fetchone()
        if row is not None:
            stored = EVENT_ADAPTER.validate_json(row[0])
            assert isinstance(stored, ExecutionStarted)
            return False, stored
        con.execute(_INSERT_EXECUTION, self._summary())
        con.executemany(INSERT_EVENT, self.rows)
        return True, self.first

    def _summary(self) -> tuple[object, ...]:
        first = self.first
        return (
            self.key,
            first.flow,
            self.status,
            len(self.rows),
            self.now,
            self.now,
            first.flow_version,
        )

    @classmethod
    def apply_many(
        cls, con: sqlite3.Connection, batch: list[Self]
    ) -> list[tuple[bool, ExecutionStarted]]:
        # An existing id breaks the primary key (sqlite3.IntegrityError): the committer
        # then applies the group one by one, where that create answers with the stored start.
        con.executemany(_INSERT_EXECUTION, [c._summary() for c in batch])
        con.executemany(INSERT_EVENT, [row for c in batch for row in c.rows])
        return [(True, c.first) for c in batch]


def last_seq(con: sqlite3.Connection, eid: str) -> int | None:
    """Where the log of ``eid`` ends; ``None`` for an unknown execution."""
    if con.execute("SELECT 1 FROM executions WHERE id=?", (eid,)).fetchone() is None:
        return None
    row = con.execute("SELECT max(seq) FROM events WHERE execution_id=?", (eid,)).fetchone()
    return int(row[0] or 0)


def _refuse(con: sqlite3.Connection, eid: str, expected: int) -> NoReturn:
    last = last_seq(con, eid)
    if last is None:
        raise UnknownExecutionError(f"unknown execution {eid!r}")
    if last == expected:  # the seq matched: the log's end refused it
        raise LogEndedError(f"log of {eid!r} ends with a terminal event at {expected}")
    raise AppendConflictError(f"log of {eid!r} ends at {last}, not {expected}")
