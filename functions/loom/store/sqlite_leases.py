"""``SqliteLeaseSet``: queue leases in the SQLite file of the event store, exact across every
process that opens it (each decision is one ``BEGIN IMMEDIATE`` transaction, so two
processes never both see room for the last lease). Calls run on a thread: a lock held by
another process never stalls the event loop."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from pathlib import Path

from loom.store.leases import (
    LeaseRequest,
    LeaseSet,
    QueueDepth,
    admits,
    is_new_grant,
    owned_elsewhere,
    rate_window,
)
from loom.store.sqlite_faults import translate

_SCHEMA = """
CREATE TABLE IF NOT EXISTS queue_leases (
    queue TEXT NOT NULL, holder TEXT NOT NULL, partition_key TEXT, expires REAL NOT NULL,
    owner TEXT NOT NULL DEFAULT '', PRIMARY KEY (queue, holder));
CREATE TABLE IF NOT EXISTS queue_grants (queue TEXT NOT NULL, at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS queue_grants_by_queue ON queue_grants (queue, at);
CREATE TABLE IF NOT EXISTS queue_waiting (
    queue TEXT NOT NULL, holder TEXT NOT NULL, since REAL NOT NULL,
    PRIMARY KEY (queue, holder));
"""


class SqliteLeaseSet(LeaseSet):
    """See the module docstring and :class:`~loom.store.leases.LeaseSet`."""

    def __init__(self, path: str | Path, busy_timeout: float = 30.0) -> None:
        self.path = Path(path)
        self.busy_timeout = busy_timeout
        self._ready = False

    def _connect(self) -> sqlite3.Connection:
        con = sqlite3.connect(self.path, timeout=self.busy_timeout, isolation_level=None)
        if not self._ready:
            con.executescript(_SCHEMA)
            _add_owners(con)
            self._ready = True
        return con

    async def _run(self, what: str, body: Callable[..., object], *args: object) -> object:
        def call() -> object:
            try:
                con = self._connect()
                try:
                    con.execute("BEGIN IMMEDIATE")
                    result = body(con, *args)
                    con.execute("COMMIT")
                    return result
                finally:
                    con.close()
            except (sqlite3.Error, OSError) as exc:
                raise translate(exc, what) from exc

        return await asyncio.to_thread(call)

    async def acquire(self, request: LeaseRequest) -> bool:
        """See :class:`~loom.store.leases.LeaseSet`."""
        return bool(await self._run("acquiring a queue lease", _acquire, request))

    async def release(self, queue: str, holder: str, owner: str) -> None:
        """See :class:`~loom.store.leases.LeaseSet`."""
        await self._run("releasing a queue lease", _release, queue, holder, owner)

    async def wait(self, queue: str, holder: str, now: float) -> None:
        """See :class:`~loom.store.leases.LeaseSet`."""
        await self._run("recording a queue wait", _wait, queue, holder, now)

    async def depth(self, queue: str, now: float) -> QueueDepth:
        """See :class:`~loom.store.leases.LeaseSet`."""
        found = await self._run("reading a queue's depth", _depth, queue, now)
        assert isinstance(found, QueueDepth)
        return found


def _add_owners(con: sqlite3.Connection) -> None:
    """Give a lease table made by an older release its ``owner`` column (leases taken
    before it have the empty owner, which only an owner-less caller's release drops)."""
    columns = [row[1] for row in con.execute("PRAGMA table_info(queue_leases)")]
    if "owner" not in columns:
        con.execute("ALTER TABLE queue_leases ADD COLUMN owner TEXT NOT NULL DEFAULT ''")


def _acquire(con: sqlite3.Connection, r: LeaseRequest) -> bool:
    con.execute("DELETE FROM queue_leases WHERE queue = ? AND expires <= ?", (r.queue, r.now))
    con.execute(
        "DELETE FROM queue_grants WHERE queue = ? AND at <= ?",
        (r.queue, r.now - rate_window(r.rate)),
    )
    rows = con.execute(
        "SELECT holder, partition_key, owner FROM queue_leases WHERE queue = ?", (r.queue,)
    ).fetchall()
    owners: dict[str, str] = {h: o for h, _, o in rows}
    if owned_elsewhere(r, owners.get(r.holder)):
        return False
    live: dict[str, str | None] = {h: p for h, p, _ in rows}
    recent = [t for (t,) in con.execute("SELECT at FROM queue_grants WHERE queue = ?", (r.queue,))]
    if not admits(r, live, recent):
        return False
    if is_new_grant(r, live):
        con.execute("INSERT INTO queue_grants VALUES (?, ?)", (r.queue, r.now))
    con.execute(
        "INSERT OR REPLACE INTO queue_leases (queue, holder, partition_key, expires, owner) "
        "VALUES (?, ?, ?, ?, ?)",
        (r.queue, r.holder, r.partition, r.now + r.ttl, r.owner),
    )
    con.execute("DELETE FROM queue_waiting WHERE queue = ? AND holder = ?", (r.queue, r.holder))
    return True


def _release(con: sqlite3.Connection, queue: str, holder: str, owner: str) -> None:
    con.execute(
        "DELETE FROM queue_leases WHERE queue = ? AND holder = ? AND owner = ?",
        (queue, holder, owner),
    )


def _wait(con: sqlite3.Connection, queue: str, holder: str, now: float) -> None:
    con.execute("INSERT OR IGNORE INTO queue_waiting VALUES (?, ?, ?)", (queue, holder, now))


def _depth(con: sqlite3.Connection, queue: str, now: float) -> QueueDepth:
    (live,) = con.execute(
        "SELECT COUNT(*) FROM queue_leases WHERE queue = ? AND expires > ?", (queue, now)
    ).fetchone()
    (waiting,) = con.execute(
        "SELECT COUNT(*) FROM queue_waiting w WHERE queue = ? AND NOT EXISTS (SELECT 1 FROM "
        "queue_leases l WHERE l.queue = w.queue AND l.holder = w.holder)",
        (queue,),
    ).fetchone()
    return QueueDepth(int(live), int(waiting))
