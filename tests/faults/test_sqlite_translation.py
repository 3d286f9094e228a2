"""``SqliteEventStore`` lets no ``sqlite3`` error out: each becomes a ``StoreError`` with the
cause chained, and a failed write writes nothing. Run in-loop and off-loop (served)."""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from pathlib import Path

import pytest

from loom.errors import ConfigurationError, StoreError, StoreUnavailableError
from loom.events import EffectCompleted, ExecutionStarted
from loom.store.base import AppendRequest, Snapshot
from loom.store.sqlite import SqliteEventStore


def started_event(eid: str) -> ExecutionStarted:
    return ExecutionStarted(execution_id=eid, flow="f", input={"n": 1})


def step_event(seq: int) -> EffectCompleted:
    return EffectCompleted(seq=seq, step_id=str(seq), effect="fx", output=seq, at=1.0)


@contextlib.asynccontextmanager
async def sqlite_store(mode: str, tmp_path: Path, first: str) -> AsyncGenerator[SqliteEventStore]:
    """A store on ``loom.db`` in ``tmp_path``, ``mode`` ``in-loop`` or ``off-loop``, with
    execution ``first`` created (a short busy timeout: a held lock fails fast)."""
    s = SqliteEventStore(tmp_path / "loom.db", busy_timeout=0.1)
    if mode == "off-loop":
        s.serve_off_loop()
    await s.create(started_event(first))
    try:
        yield s
    finally:
        await s.aclose()


@pytest.fixture(params=["in-loop", "off-loop"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SqliteEventStore]:
    async with sqlite_store(request.param, tmp_path, "e1") as s:
        yield s


@pytest.fixture
def other(store: SqliteEventStore) -> Iterator[sqlite3.Connection]:
    """Another connection to the same file, as another process would have."""
    con = sqlite3.connect(store.path, isolation_level=None)
    yield con
    con.close()


def _unavailable(exc: pytest.ExceptionInfo[StoreError], reason: str) -> None:
    assert isinstance(exc.value, StoreUnavailableError)
    assert exc.value.details["reason"] == reason
    assert isinstance(exc.value.__cause__, sqlite3.Error)


async def test_writes_under_a_foreign_lock_are_unavailable_and_write_nothing(
    store: SqliteEventStore, other: sqlite3.Connection
) -> None:
    other.execute("BEGIN IMMEDIATE")
    with pytest.raises(StoreError) as created:
        await store.create(started_event("e2"))
    _unavailable(created, "busy")
    with pytest.raises(StoreError) as appended:
        await store.append(AppendRequest("e1", 1, [step_event(2)]))
    _unavailable(appended, "busy")
    with pytest.raises(StoreError) as snap:
        await store.save_snapshot("e1", Snapshot(1, "{}"))
    _unavailable(snap, "busy")
    started = time.monotonic()
    with pytest.raises(StoreError) as pinged:
        await store.ping()
    _unavailable(pinged, "busy")
    assert time.monotonic() - started < 5.0  # the check is bounded, not the 30 s default
    assert [e.seq for e in await store.read("e1")] == [1]  # reads go on under the lock
    other.execute("ROLLBACK")
    assert [s.execution_id for s in await store.list()] == ["e1"]
    assert (await store.load("e1")).snapshot is None
    assert await store.append(AppendRequest("e1", 1, [step_event(2)])) == 2  # the fault cleared


async def test_reads_of_a_broken_database_are_store_errors(
    store: SqliteEventStore, other: sqlite3.Connection
) -> None:
    other.execute("DROP TABLE events")
    other.execute("DROP TABLE executions")
    calls = [
        store.load("e1"),
        store.read("e1"),
        store.summary("e1"),
        store.list(),
        store.append(AppendRequest("e1", 1, [step_event(2)])),
    ]
    for call in calls:
        with pytest.raises(StoreError) as caught:
            await call
        assert isinstance(caught.value.__cause__, sqlite3.Error), caught.value


def test_a_database_that_cannot_be_created_is_unavailable(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(StoreUnavailableError) as caught:
        SqliteEventStore(tmp_path / "file" / "loom.db")
    assert caught.value.details["reason"] == "cannot_open"
    assert isinstance(caught.value.__cause__, OSError)


def test_the_busy_timeout_comes_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOOM_SQLITE_BUSY_TIMEOUT", "2.5")
    assert SqliteEventStore(tmp_path / "a.db").busy_timeout == 2.5
    monkeypatch.setenv("LOOM_SQLITE_BUSY_TIMEOUT", "soon")
    with pytest.raises(ConfigurationError, match="LOOM_SQLITE_BUSY_TIMEOUT"):
        SqliteEventStore(tmp_path / "b.db")
