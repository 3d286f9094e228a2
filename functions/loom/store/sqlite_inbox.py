"""``SqliteInbox``: inboxes (:mod:`loom.store.inbox`) in the SQLite file of the event store,
shared by every process that opens it; each call one transaction, on a thread."""

from __future__ import annotations

import json
import sqlite3

from loom.shards import shard_of
from loom.store.inbox import Inbox, InboxItem
from loom.store.sqlite_tables import SqliteTable

_SCHEMA = """
CREATE TABLE IF NOT EXISTS inbox (
    execution_id TEXT NOT NULL, key TEXT NOT NULL, kind TEXT NOT NULL, body TEXT NOT NULL,
    at REAL NOT NULL, PRIMARY KEY (execution_id, key));
"""


class SqliteInbox(SqliteTable, Inbox):
    """See the module docstring and :class:`~loom.store.inbox.Inbox`."""

    schema = _SCHEMA

    async def post(self, execution_id: str, item: InboxItem) -> bool:
        """See :class:`~loom.store.inbox.Inbox`."""
        row = (execution_id, item.key, item.kind, json.dumps(item.body), item.at)
        done = await self._run("posting to an inbox", _post, row)
        return bool(done)

    async def items(self, execution_id: str, limit: int = 500) -> list[InboxItem]:
        """See :class:`~loom.store.inbox.Inbox`."""
        rows = await self._run("reading an inbox", _items, execution_id, limit)
        assert isinstance(rows, list)
        return [InboxItem(k, kind, json.loads(b), float(at)) for k, kind, b, at in rows]  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]

    async def remove(self, execution_id: str, keys: list[str]) -> None:
        """See :class:`~loom.store.inbox.Inbox`."""
        await self._run("emptying an inbox", _remove, execution_id, keys)

    async def stranded(self, before: float, shard: int, shards: int, limit: int = 500) -> list[str]:
        """See :class:`~loom.store.inbox.Inbox`."""
        ids = await self._run("reading inboxes", _older, before)
        assert isinstance(ids, list)
        found = sorted(str(e) for e in ids if shard_of(str(e), shards) == shard)  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
        return found[:limit]


def _post(con: sqlite3.Connection, row: tuple[object, ...]) -> bool:
    return con.execute("INSERT OR IGNORE INTO inbox VALUES (?, ?, ?, ?, ?)", row).rowcount == 1


def _items(con: sqlite3.Connection, execution_id: str, limit: int) -> list[tuple[object, ...]]:
    return con.execute(
        "SELECT key, kind, body, at FROM inbox WHERE execution_id = ? ORDER BY at, key LIMIT ?",
        (execution_id, limit),
    ).fetchall()


def _remove(con: sqlite3.Connection, execution_id: str, keys: list[str]) -> None:
    con.executemany(
        "DELETE FROM inbox WHERE execution_id = ? AND key = ?", [(execution_id, k) for k in keys]
    )


def _older(con: sqlite3.Connection, before: float) -> list[object]:
    rows = con.execute("SELECT DISTINCT execution_id FROM inbox WHERE at < ?", (before,))
    return [r[0] for r in rows]


def drop_inbox(con: sqlite3.Connection, execution_id: str) -> None:
    """Delete an execution's inbox inside the caller's transaction (``delete_execution``),
    if the file has inboxes at all."""
    exists = con.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='inbox'")
    if exists.fetchone() is not None:
        con.execute("DELETE FROM inbox WHERE execution_id=?", (execution_id,))
