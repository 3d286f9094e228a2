"""``SqliteScheduleStore``: schedule records in the SQLite file of the event store, shared by
every process that opens it (each write is one ``BEGIN IMMEDIATE`` transaction, conditioned
on the version it read). Calls run on a thread: a lock held by another process never stalls
the event loop."""

from __future__ import annotations

import sqlite3

from loom.store.schedule_store import ScheduleRecord, ScheduleStore, check_version
from loom.store.sqlite_tables import SqliteTable

_SCHEMA = """
CREATE TABLE IF NOT EXISTS schedules (
    name TEXT PRIMARY KEY, version INTEGER NOT NULL, body TEXT NOT NULL);
"""


class SqliteScheduleStore(SqliteTable, ScheduleStore):
    """See the module docstring and :class:`~loom.store.schedule_store.ScheduleStore`."""

    schema = _SCHEMA

    async def get(self, name: str) -> ScheduleRecord | None:
        """See :class:`~loom.store.schedule_store.ScheduleStore`."""
        found = await self._run("reading a schedule", _get, name)
        return found if isinstance(found, ScheduleRecord) else None

    async def list(self) -> list[ScheduleRecord]:
        """See :class:`~loom.store.schedule_store.ScheduleStore`."""
        found = await self._run("listing schedules", _list)
        assert isinstance(found, list)
        return [r for r in found if isinstance(r, ScheduleRecord)]  # pyright: ignore[reportUnknownVariableType]

    async def put(self, record: ScheduleRecord, expected: int | None) -> bool:
        """See :class:`~loom.store.schedule_store.ScheduleStore`."""
        check_version(record, expected)
        return bool(await self._run("writing a schedule", _put, record, expected))

    async def delete(self, name: str, expected: int) -> bool:
        """See :class:`~loom.store.schedule_store.ScheduleStore`."""
        return bool(await self._run("deleting a schedule", _delete, name, expected))


def _get(con: sqlite3.Connection, name: str) -> ScheduleRecord | None:
    row = con.execute("SELECT body FROM schedules WHERE name = ?", (name,)).fetchone()
    return None if row is None else ScheduleRecord.from_json(row[0])


def _list(con: sqlite3.Connection) -> list[ScheduleRecord]:
    rows = con.execute("SELECT body FROM schedules ORDER BY name").fetchall()
    return [ScheduleRecord.from_json(body) for (body,) in rows]


def _version(con: sqlite3.Connection, name: str) -> int | None:
    row = con.execute("SELECT version FROM schedules WHERE name = ?", (name,)).fetchone()
    return None if row is None else int(row[0])


def _put(con: sqlite3.Connection, record: ScheduleRecord, expected: int | None) -> bool:
    if _version(con, record.name) != expected:
        return False
    con.execute(
        "INSERT OR REPLACE INTO schedules (name, version, body) VALUES (?, ?, ?)",
        (record.name, record.version, record.to_json()),
    )
    return True


def _delete(con: sqlite3.Connection, name: str, expected: int) -> bool:
    if _version(con, name) != expected:
        return False
    con.execute("DELETE FROM schedules WHERE name = ?", (name,))
    return True


__all__ = ["SqliteScheduleStore"]
