"""The SQLite file deleted or replaced under a running store, on disk.

Fault: ``rm loom.db`` (with its ``-wal`` and ``-shm``) or ``mv other.db loom.db`` while a
process has the database open. Its connections keep the unlinked file: before the fix every
write still committed into it and was acknowledged, and was lost with it (nothing at the
path ever held it).

Promise checked: once per write transaction the store compares the file its connection has
open with the file at the path; when they differ the write fails with
``StoreUnavailableError`` (``reason="replaced"``, naming the path), nothing acknowledged,
on every write path (group-committed appends and creates, snapshots, deletes, the health
check), in-loop and on the writer thread; no connection opened later creates an empty
database in place of a deleted one. A served worker answers 503 naming the path.
"""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from loom.errors import StoreUnavailableError
from loom.store import AppendRequest, SqliteEventStore
from loom.store.base import Snapshot
from tests.faults import harness as h
from tests.faults.test_sqlite_translation import sqlite_store, started_event, step_event


@pytest.fixture(params=["in-loop", "off-loop"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SqliteEventStore]:
    async with sqlite_store(request.param, tmp_path, "e1") as s:
        yield s


def _delete(db: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)


def _replace(db: Path) -> None:
    """``mv other.db loom.db``: another database (a copy, so it even has the schema)."""
    other = db.with_name("other.db")
    with sqlite3.connect(db) as source, sqlite3.connect(other) as target:
        source.backup(target)
    other.replace(db)


def _events_at(db: Path, eid: str) -> int:
    with sqlite3.connect(db) as con:
        return con.execute("SELECT count(*) FROM events WHERE execution_id=?", (eid,)).fetchone()[0]


def _refused(exc: StoreUnavailableError, db: Path) -> None:
    assert exc.code == "store_unavailable" and exc.details["reason"] == "replaced"
    assert str(db) in exc.message and exc.details["path"] == str(db)


@pytest.mark.parametrize("fault", [_delete, _replace], ids=["deleted", "replaced"])
async def test_a_write_into_a_file_no_longer_at_the_path_is_refused(
    store: SqliteEventStore, fault: Callable[[Path], None]
) -> None:
    db = store.path
    assert await store.append(AppendRequest("e1", 1, [step_event(2)])) == 2
    fault(db)
    writes = [
        store.append(AppendRequest("e1", 2, [step_event(3)])),
        store.create(started_event("e2")),
        store.save_snapshot("e1", Snapshot(2, "{}")),
        store.delete_execution("e1"),
        store.ping(),
    ]
    for write in writes:
        with pytest.raises(StoreUnavailableError) as refused:
            await write
        _refused(refused.value, db)
    if fault is _delete:
        assert not db.exists(), "a connection recreated an empty database at the path"
    else:
        assert _events_at(db, "e1") == 2  # the file at the path: nothing after the fault
        assert _events_at(db, "e2") == 0


@pytest.mark.parametrize("fault", [_delete, _replace], ids=["deleted", "replaced"])
async def test_a_file_deleted_while_a_group_commits_fails_the_group(
    store: SqliteEventStore, fault: Callable[[Path], None]
) -> None:
    """The check before the transaction passed; the file went while the group's statements
    ran: the ``COMMIT`` lands in the unlinked file, so the group is failed, not
    acknowledged (a request that deletes the file stands in for another process)."""
    db = store.path

    def insert_then_lose_the_file(con: sqlite3.Connection) -> int:
        con.execute("INSERT INTO events VALUES ('e-1', 2, '{}')")
        fault(db)
        return 2

    group = store._group  # pyright: ignore[reportPrivateUsage]
    writer = store._writer  # pyright: ignore[reportPrivateUsage]
    with pytest.raises(StoreUnavailableError) as refused:
        await group.submit(insert_then_lose_the_file, 0, "append", writer)
    _refused(refused.value, db)


async def test_concurrent_appends_in_one_group_are_all_refused(tmp_path: Path) -> None:
    store = SqliteEventStore(tmp_path / "loom.db")
    store.serve_off_loop()
    try:
        for i in range(8):
            await store.create(started_event(f"g-{i}"))
        _delete(store.path)
        appends = [store.append(AppendRequest(f"g-{i}", 1, [step_event(2)])) for i in range(8)]
        results = await asyncio.gather(*appends, return_exceptions=True)
        assert all(isinstance(r, StoreUnavailableError) for r in results), results
        for result in results:
            assert isinstance(result, StoreUnavailableError)
            _refused(result, store.path)
    finally:
        await store.aclose()


async def test_the_unchanged_file_takes_writes_from_every_thread(tmp_path: Path) -> None:
    """No false alarm: a file renamed nowhere keeps taking writes, in-loop and off-loop,
    and a new store on the same path reads them."""
    store = SqliteEventStore(tmp_path / "loom.db")
    await store.create(started_event("n-1"))
    await store.append(AppendRequest("n-1", 1, [step_event(2)]))
    store.serve_off_loop()
    await store.append(AppendRequest("n-1", 2, [step_event(3)]))
    await store.ping()
    await store.aclose()
    again = SqliteEventStore(tmp_path / "loom.db")
    try:
        assert [e.seq for e in await again.read("n-1")] == [1, 2, 3]
    finally:
        await again.aclose()


@pytest.mark.slow
def test_a_served_worker_answers_503_naming_the_path(tmp_path: Path) -> None:
    db = tmp_path / "data" / "loom.db"
    env = h.env_for(tmp_path, f"sqlite:///{db}")
    with h.served(tmp_path, env) as base:
        body = {"flow": "fault.catching", "input": {"effect": "side.idempotent"}}
        first = h.call(base, "POST", "/executions", {**body, "execution_id": "w-1"})
        assert first.status == 200, first.body
        _delete(db)
        answer = h.call(base, "POST", "/executions", {**body, "execution_id": "w-2"})
        assert answer.status == 503 and answer.body["code"] == "store_unavailable", answer.body
        assert str(db) in answer.body["message"]
        assert int(answer.headers["Retry-After"]) >= 1
        health = h.call(base, "GET", "/health")
        assert health.status == 503, health.body
    assert not db.exists()
    shutil.rmtree(tmp_path / "data", ignore_errors=True)
