"""The tables of ``SqliteEventStore`` and how an older database is brought up to date.

An append writes the page of ``events`` its row goes to, and nothing else unless the status
changes (docs/adr/0086): the log's end and the time of its last event are read from the
events themselves (:data:`SUMMARY_COLUMNS`), so the ``executions`` row is written by a
create and by appends that change the status, wake time or parked reason. Its stored
``last_seq`` and ``updated_at`` are those of its last write: they lag the log, never lead
it, and a summary takes the larger of the two. A database created by an older release
keeps its tables as they are (an ``executions`` table with a rowid, whose rows the same
statements read and write); new files get the clustered one.
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
from pathlib import Path

from loom.store.sqlite_faults import rollback
from loom.store.sqlite_wal import preallocate, wal_short

SCHEMA = """
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
) WITHOUT ROWID;
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

# The columns ``create`` writes (and the order ``ExecutionSummary`` takes them in).
COLUMNS = "id, flow, status, last_seq, created_at, updated_at, wake_at, parked_reason, flow_version"
# The log's end and its last event's time, from the events (one seek each, on the key).
LAST_SEQ = (
    "max(last_seq, ifnull((SELECT max(seq) FROM events WHERE execution_id=executions.id), 0))"
)
# (A body that is not JSON, or whose ``at`` is not a number, counts for nothing: a summary
# never fails, nor turns into text, because of one stored event.)
_AT = (
    "CASE WHEN json_valid(body) THEN CASE json_type(body, '$.at')"
    " WHEN 'real' THEN json_extract(body, '$.at')"
    " WHEN 'integer' THEN json_extract(body, '$.at') END END"
)
UPDATED_AT = (
    f"max(updated_at, ifnull((SELECT {_AT} FROM events"
    " WHERE execution_id=executions.id ORDER BY seq DESC LIMIT 1), 0))"
)
SUMMARY_COLUMNS = (
    f"id, flow, status, {LAST_SEQ}, created_at, {UPDATED_AT}, wake_at, parked_reason, flow_version"
)


def prepare(con: sqlite3.Connection, path: Path, indexes: str) -> None:
    """Create what a new file lacks (the tables, ``indexes``), in one transaction and one
    fsync, with the WAL preallocated under its write lock (:mod:`loom.store.sqlite_wal`);
    then :func:`migrate`. A file that has them all and a WAL long enough takes no lock."""
    script = SCHEMA + indexes
    names = {str(row[0]) for row in con.execute("SELECT name FROM sqlite_master")}
    if set(re.findall(r"EXISTS (\w+)", script)) <= names and not wal_short(con, path):
        migrate(con)
        return
    try:
        con.execute("BEGIN IMMEDIATE")
        preallocate(con, path)
        for statement in script.split(";"):
            con.execute(statement)  # (``executescript`` would commit first)
        con.execute("COMMIT")
    except sqlite3.OperationalError:  # read-only, say: each statement alone, as before
        rollback(con)
        con.executescript(script)
    migrate(con)


def migrate(con: sqlite3.Connection) -> None:
    """Bring a database created by an older release up to the current schema."""
    columns = {row[1] for row in con.execute("PRAGMA table_info(executions)")}
    if "flow_version" not in columns:
        # Executions created before versions were recorded all started on version "1".
        with contextlib.suppress(sqlite3.OperationalError):  # another process just added it
            con.execute("ALTER TABLE executions ADD COLUMN flow_version TEXT NOT NULL DEFAULT '1'")
