"""``SqliteLeaseSet``: queue leases in the SQLite file of the event store, exact across every
process that opens it (each decision is one ``BEGIN IMMEDIATE`` transaction, so two
processes never both see room for the last lease). Calls run on a thread: a lock held by
another process never stalls the event loop."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import uuid
from collections.abc import Callable
from pathlib import Path

from loom.store.leases import (
    GRANT,
    Admitted,
    DedupHolder,
    LeaseRequest,
    LeaseSet,
    QueueDepth,
    QueueLimits,
    Waiter,
    admit_shard,
    admits,
    choose,
    is_new_grant,
    owned_elsewhere,
    rate_window,
    shard_limits,
    waits_behind,
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
CREATE TABLE IF NOT EXISTS queue_queued (
    queue TEXT NOT NULL, holder TEXT NOT NULL, partition_key TEXT, since REAL NOT NULL,
    shard INTEGER NOT NULL, flow TEXT, PRIMARY KEY (queue, holder));
CREATE INDEX IF NOT EXISTS queue_queued_by_shard ON queue_queued (queue, shard, since);
CREATE TABLE IF NOT EXISTS queue_dedup (
    queue TEXT NOT NULL, dedup TEXT NOT NULL, holder TEXT NOT NULL, since REAL NOT NULL,
    PRIMARY KEY (queue, dedup));
"""
# Columns a table made by an older release lacks: (table, column, declaration).
_ADDED = (
    ("queue_leases", "owner", "TEXT NOT NULL DEFAULT ''"),
    ("queue_leases", "shard", "INTEGER NOT NULL DEFAULT 0"),
    ("queue_grants", "shard", "INTEGER NOT NULL DEFAULT 0"),
    ("queue_queued", "priority", "INTEGER NOT NULL DEFAULT 0"),
)


class SqliteLeaseSet(LeaseSet):
    """See the module docstring and :class:`~loom.store.leases.LeaseSet`."""

    def __init__(self, path: str | Path, busy_timeout: float = 30.0) -> None:
        self.path = Path(path)
        self.busy_timeout = busy_timeout
        self._ready = False
        self._migrating = threading.Lock()

    def _connect(self) -> sqlite3.Connection:
        con = sqlite3.connect(self.path, timeout=self.busy_timeout, isolation_level=None)
        if not self._ready:
            with self._migrating:  # (this process's first calls run on several threads)
                if not self._ready:
                    con.executescript(_SCHEMA)
                    con.execute("BEGIN IMMEDIATE")  # (and other processes: one migrates)
                    _add_columns(con)
                    con.execute("COMMIT")
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

    async def take(self, request: LeaseRequest) -> bool:
        """See :class:`~loom.store.leases.LeaseSet`."""
        return bool(await self._run("taking a queue lease", _take, request))

    async def release(self, queue: str, holder: str, owner: str) -> None:
        """See :class:`~loom.store.leases.LeaseSet`."""
        await self._run("releasing a queue lease", _release, queue, holder, owner)

    async def wait(self, queue: str, holder: str, now: float) -> None:
        """See :class:`~loom.store.leases.LeaseSet`."""
        await self._run("recording a queue wait", _wait, queue, holder, now)

    async def enqueue(self, request: LeaseRequest) -> None:
        """See :class:`~loom.store.leases.LeaseSet`."""
        await self._run("recording a queue wait", _enqueue, request)

    async def admit(
        self, queue: str, shard: int, limits: QueueLimits, now: float, most: int = 100
    ) -> Admitted:
        """See :class:`~loom.store.leases.LeaseSet`."""
        found = await self._run("admitting from a queue", _admit, queue, shard, limits, now, most)
        assert isinstance(found, Admitted)
        return found

    async def deduplicate(
        self, queue: str, dedup_id: str, holder: str, now: float, replaces: str | None = None
    ) -> DedupHolder:
        """See :class:`~loom.store.leases.LeaseSet`."""
        args = (queue, dedup_id, holder, now, replaces)
        found = await self._run("holding a deduplication id", _deduplicate, *args)
        assert isinstance(found, DedupHolder)
        return found

    async def forget(self, queue: str, dedup_id: str, holder: str) -> None:
        """See :class:`~loom.store.leases.LeaseSet`."""
        await self._run("dropping a deduplication id", _forget, queue, dedup_id, holder)

    async def depth(self, queue: str, now: float) -> QueueDepth:
        """See :class:`~loom.store.leases.LeaseSet`."""
        found = await self._run("reading a queue's depth", _depth, queue, now)
        assert isinstance(found, QueueDepth)
        return found


def _add_columns(con: sqlite3.Connection) -> None:
    """Give tables made by an older release the columns added since (leases taken before
    owners have the empty owner, which only an owner-less caller's release drops; before
    admit shards, everything was shard 0)."""
    for table, column, declaration in _ADDED:
        columns = [row[1] for row in con.execute(f"PRAGMA table_info({table})")]
        if column not in columns:
            con.execute(f"ALTER TABLE {table} ADD COLUMN {column} {declaration}")


def _prune(con: sqlite3.Connection, queue: str, now: float) -> None:
    con.execute("DELETE FROM queue_leases WHERE queue = ? AND expires <= ?", (queue, now))


def _live(con: sqlite3.Connection, queue: str, shard: int) -> dict[str, str | None]:
    rows = con.execute(
        "SELECT holder, partition_key FROM queue_leases WHERE queue = ? AND shard = ?",
        (queue, shard),
    )
    return {h: p for h, p in rows}


def _recent(con: sqlite3.Connection, queue: str, shard: int, now: float, rate: float | None):
    con.execute(
        "DELETE FROM queue_grants WHERE queue = ? AND shard = ? AND at <= ?",
        (queue, shard, now - rate_window(rate)),
    )
    rows = con.execute(
        "SELECT at FROM queue_grants WHERE queue = ? AND shard = ?", (queue, shard)
    ).fetchall()
    return [float(t) for (t,) in rows]


def _mine(con: sqlite3.Connection, r: LeaseRequest) -> tuple[str, int] | None:
    row = con.execute(
        "SELECT owner, shard FROM queue_leases WHERE queue = ? AND holder = ?", (r.queue, r.holder)
    ).fetchone()
    return None if row is None else (str(row[0]), int(row[1]))


def _hold(con: sqlite3.Connection, r: LeaseRequest, shard: int, owner: str, ttl: float) -> None:
    con.execute(
        "INSERT OR REPLACE INTO queue_leases "
        "(queue, holder, partition_key, expires, owner, shard) VALUES (?, ?, ?, ?, ?, ?)",
        (r.queue, r.holder, r.partition, r.now + ttl, owner, shard),
    )
    con.execute("DELETE FROM queue_waiting WHERE queue = ? AND holder = ?", (r.queue, r.holder))
    con.execute("DELETE FROM queue_queued WHERE queue = ? AND holder = ?", (r.queue, r.holder))


def _acquire(con: sqlite3.Connection, r: LeaseRequest) -> bool:
    _prune(con, r.queue, r.now)
    mine = _mine(con, r)
    if owned_elsewhere(r, None if mine is None else mine[0]):
        return False
    shard = admit_shard(r) if mine is None else mine[1]
    rate = shard_limits(QueueLimits.of(r), shard).rate
    live = _live(con, r.queue, shard)
    if not admits(r, live, _recent(con, r.queue, shard, r.now, rate)):
        return False
    if is_new_grant(r, live) and waits_behind(r, _queued(con, r.queue, shard), live):
        return False
    if is_new_grant(r, live):
        con.execute(
            "INSERT INTO queue_grants (queue, at, shard) VALUES (?, ?, ?)", (r.queue, r.now, shard)
        )
    _hold(con, r, shard, r.owner, r.ttl)
    return True


def _take(con: sqlite3.Connection, r: LeaseRequest) -> bool:
    _prune(con, r.queue, r.now)
    mine = _mine(con, r)
    if mine is None or owned_elsewhere(r, mine[0]):
        return False
    _hold(con, r, mine[1], r.owner, r.ttl)
    return True


def _release(con: sqlite3.Connection, queue: str, holder: str, owner: str) -> None:
    con.execute(
        "DELETE FROM queue_leases WHERE queue = ? AND holder = ? AND owner = ?",
        (queue, holder, owner),
    )


def _wait(con: sqlite3.Connection, queue: str, holder: str, now: float) -> None:
    con.execute("INSERT OR IGNORE INTO queue_waiting VALUES (?, ?, ?)", (queue, holder, now))


def _enqueue(con: sqlite3.Connection, r: LeaseRequest) -> None:
    con.execute(
        "INSERT OR IGNORE INTO queue_queued "
        "(queue, holder, partition_key, since, shard, flow, priority) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        (r.queue, r.holder, r.partition, r.now, admit_shard(r), r.flow, r.priority),
    )


def _queued(con: sqlite3.Connection, queue: str, shard: int) -> list[Waiter]:
    rows = con.execute(
        "SELECT holder, partition_key, since, flow, priority FROM queue_queued "
        "WHERE queue = ? AND shard = ? ORDER BY priority, since, holder",
        (queue, shard),
    ).fetchall()
    return [Waiter(h, p, float(t), f, int(k)) for h, p, t, f, k in rows]


def _deduplicate(
    con: sqlite3.Connection, queue: str, dedup: str, holder: str, now: float, replaces: str | None
) -> DedupHolder:
    row = con.execute(
        "SELECT holder, since FROM queue_dedup WHERE queue = ? AND dedup = ?", (queue, dedup)
    ).fetchone()
    if row is None or row[0] == replaces:
        con.execute(
            "INSERT OR REPLACE INTO queue_dedup VALUES (?, ?, ?, ?)", (queue, dedup, holder, now)
        )
        return DedupHolder(holder, now)
    return DedupHolder(str(row[0]), float(row[1]))


def _forget(con: sqlite3.Connection, queue: str, dedup: str, holder: str) -> None:
    con.execute(
        "DELETE FROM queue_dedup WHERE queue = ? AND dedup = ? AND holder = ?",
        (queue, dedup, holder),
    )


def _admit(
    con: sqlite3.Connection, queue: str, shard: int, limits: QueueLimits, now: float, most: int
) -> Admitted:
    _prune(con, queue, now)
    mine = shard_limits(limits, shard)
    waiters = _queued(con, queue, shard)
    live = _live(con, queue, shard)
    recent = _recent(con, queue, shard, now, mine.rate)
    granted, again = choose(waiters, live, recent, mine, now, most)
    for w in granted:
        owner = f"{GRANT}{uuid.uuid4().hex}"
        request = LeaseRequest(
            queue, w.holder, now, limits.grant_ttl, partition=w.partition, owner=owner
        )
        _hold(con, request, shard, owner, limits.grant_ttl)
        con.execute(
            "INSERT INTO queue_grants (queue, at, shard) VALUES (?, ?, ?)", (queue, now, shard)
        )
    left = len(waiters) - len(granted)
    if left and again is None:
        (soonest,) = con.execute(
            "SELECT MIN(expires) FROM queue_leases WHERE queue = ? AND shard = ?", (queue, shard)
        ).fetchone()
        again = None if soonest is None else float(soonest)
    return Admitted(granted, left, again if left else None)


def _depth(con: sqlite3.Connection, queue: str, now: float) -> QueueDepth:
    (live,) = con.execute(
        "SELECT COUNT(*) FROM queue_leases WHERE queue = ? AND expires > ?", (queue, now)
    ).fetchone()
    (waiting,) = con.execute(
        "SELECT COUNT(*) FROM (SELECT holder FROM queue_waiting WHERE queue = ? UNION "
        "SELECT holder FROM queue_queued WHERE queue = ?) w WHERE NOT EXISTS (SELECT 1 FROM "
        "queue_leases l WHERE l.queue = ? AND l.holder = w.holder AND l.expires > ?)",
        (queue, queue, queue, now),
    ).fetchone()
    return QueueDepth(int(live), int(waiting))
