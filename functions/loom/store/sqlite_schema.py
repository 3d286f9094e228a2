"""The tables of ``SqliteEventStore`` and how an older database is brought up to date."""

from __future__ import annotations

import contextlib
import sqlite3

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

SUMMARY_COLUMNS = (
    "id, flow, status, last_seq, created_at, updated_at, wake_at, parked_reason, flow_version"
)


def migrate(con: sqlite3.Connection) -> None:
    """Bring a database created by an older release up to the current schema."""
    columns = {row[1] for row in con.execute("PRAGMA table_info(executions)")}
    if "flow_version" not in columns:
        # Executions created before versions were recorded all started on version "1".
        with contextlib.suppress(sqlite3.OperationalError):  # another process just added it
            con.execute("ALTER TABLE executions ADD COLUMN flow_version TEXT NOT NULL DEFAULT '1'")
