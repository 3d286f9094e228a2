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
from loom.store.sqlite_schema import SUMMARY_COLUMNS

Row = tuple[str, int, str]

INSERT_EVENT = "INSERT INTO events VALUES (?,?,?)"
# The conditional UPDATE is the expected_seq check, and the check that the log has not
# ended: one statement, not three. A log that ends leaves its row finished (the store sets
# the status of a terminal append: ``settled_status``), so the last event is read only for
# a finished row (a commission's closed case stream is finished and goes on).
_OPEN = (
    " AND (status NOT IN ('completed','failed','cancelled') OR NOT EXISTS (SELECT 1 FROM events"
    " WHERE execution_id=executions.id AND seq=executions.last_seq AND json_extract(body,'$.type')"
    " IN ('ExecutionCompleted','ExecutionFailed','ExecutionCancelled')))"
)
_ADVANCE = "UPDATE executions SET last_seq=?, updated_at=? WHERE id=? AND last_seq=?" + _OPEN
_ADVANCE_STATUS = (
    "UPDATE executions SET last_seq=?, updated_at=?, status=?, wake_at=?, parked_reason=?"
    " WHERE id=? AND last_seq=?" + _OPEN
)
# An older snapshot never replaces a newer one.
KEEP_SNAPSHOT = (
    "INSERT INTO snapshots VALUES (?,?,?) ON CONFLICT(execution_id) DO UPDATE"
    " SET seq=excluded.seq, state=excluded.state WHERE excluded.seq > snapshots.seq"
)
_INSERT_EXECUTION = f"INSERT INTO executions ({SUMMARY_COLUMNS}) VALUES (?,?,?,?,?,?,NULL,NULL,?)"


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
        if con.execute(*self._advance(time.time())).rowcount != 1:
            _refuse(con, self.key, self.expected)
        if len(self.rows) == 1:  # the common case: ``execute`` costs less than ``executemany``
            con.execute(INSERT_EVENT, self.rows[0])
        else:
            con.executemany(INSERT_EVENT, self.rows)
        if self.snapshot is not None:
            con.execute(KEEP_SNAPSHOT, (self.key, self.new_last, self.snapshot))
        return self.new_last

    def _advance(self, now: float) -> tuple[str, tuple[object, ...]]:
        status = self.status
        if status is None:
            return _ADVANCE, (self.new_last, now, self.key, self.expected)
        return _ADVANCE_STATUS, (
            self.new_last,
            now,
            status.status,
            status.wake_at,
            status.parked_reason,
            self.key,
            self.expected,
        )

    @classmethod
    def apply_many(cls, con: sqlite3.Connection, batch: list[Self]) -> list[int] | None:
        now = time.time()  # one clock reading: the batch is one transaction
        plain = [(a.new_last, now, a.key, a.expected) for a in batch if a.status is None]
        matched = con.executemany(_ADVANCE, plain).rowcount if plain else 0
        if len(plain) < len(batch):
            changes = [a._advance(now)[1] for a in batch if a.status is not None]
            matched += con.executemany(_ADVANCE_STATUS, changes).rowcount
        if matched != len(batch):  # (executemany sums its rows' counts)
            return None  # a conflict or an unknown execution: one by one refuses it alone
        con.executemany(INSERT_EVENT, [row for a in batch for row in a.rows])
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


def _refuse(con: sqlite3.Connection, eid: str, expected: int) -> NoReturn:
    row = con.execute("SELECT last_seq FROM executions WHERE id=?", (eid,)).fetchone()
    if row is None:
        raise UnknownExecutionError(f"unknown execution {eid!r}")
    if row[0] == expected:  # the seq matched: ``_OPEN`` refused it
        raise LogEndedError(f"log of {eid!r} ends with a terminal event at {expected}")
    raise AppendConflictError(f"log of {eid!r} ends at {row[0]}, not {expected}")
