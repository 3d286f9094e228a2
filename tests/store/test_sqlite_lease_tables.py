"""The SQLite lease tables of an older release are brought up to date in place: a lease taken
before owners or admit shards still counts, and a release by its (empty) owner frees it."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from loom.store.leases import LeaseRequest
from loom.store.sqlite_leases import SqliteLeaseSet

T = 1_800_000_000.0


def test_a_lease_of_an_older_release_still_counts(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    con = sqlite3.connect(db)
    con.executescript(
        "CREATE TABLE queue_leases (queue TEXT NOT NULL, holder TEXT NOT NULL, "
        "partition_key TEXT, expires REAL NOT NULL, PRIMARY KEY (queue, holder));"
        "CREATE TABLE queue_grants (queue TEXT NOT NULL, at REAL NOT NULL);"
        f"INSERT INTO queue_leases VALUES ('q', 'old', NULL, {T + 60});"
    )
    con.commit()
    con.close()
    leases = SqliteLeaseSet(db)

    async def scenario() -> None:
        # Several first calls at once: one of them migrates the tables.
        got = await asyncio.gather(
            *(
                leases.acquire(LeaseRequest("q", f"h{i}", T, 30.0, limit=2, owner="o"))
                for i in range(4)
            )
        )
        assert sum(got) == 1  # the old lease holds one of the two slots
        assert (await leases.depth("q", T)).in_flight == 2
        await leases.release("q", "old", "")  # a lease from before owners: the empty owner
        assert await leases.acquire(LeaseRequest("q", "next", T, 30.0, limit=2, owner="o"))

    asyncio.run(scenario())
    columns = {row[1] for row in sqlite3.connect(db).execute("PRAGMA table_info(queue_leases)")}
    assert {"owner", "shard"} <= columns
