"""The SQLite store's WAL and the pages an append writes (docs/adr/0085, 0086).

Counted from the outside, in the files on disk: the WAL's size (kept, preallocated, never
grown by ordinary commits) and the frames of its current generation (the pages each commit
wrote). A database laid out by the previous release still opens, reads and appends.
"""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from loom import EffectContext, FlowContext, Loom
from loom.events import EffectCompleted, ExecutionStarted
from loom.runtime import Runtime
from loom.store import AppendRequest, SqliteEventStore, StatusChange
from loom.store.sqlite_wal import persist_wal, wal_bytes
from tests.store.test_sqlite_group_commit import wal_commits

ROOT = Path(__file__).resolve().parents[2]
KEPT = wal_bytes(4096)


def _started(eid: str) -> ExecutionStarted:
    return ExecutionStarted(execution_id=eid, flow="f", input={"n": 1})


def _step(seq: int) -> EffectCompleted:
    return EffectCompleted(seq=seq, step_id=str(seq), effect="fx", output=seq, at=float(seq))


def wal_frames(db: Path) -> int:
    """Frames (pages) of the WAL's current generation."""
    data = Path(f"{db}-wal").read_bytes()
    salts, count, offset = data[16:24], 0, 32
    while offset + 24 + 4096 <= len(data) and data[offset + 8 : offset + 16] == salts:
        count += 1
        offset += 24 + 4096
    return count


def wal_size(db: Path) -> int:
    return Path(f"{db}-wal").stat().st_size


def _other_process_appends(db: Path) -> None:
    subprocess.run(
        [sys.executable, "-c", _OTHER_PROCESS, str(db)], check=True, cwd=ROOT, timeout=60
    )


def _wal_inode(db: Path) -> int:
    return Path(f"{db}-wal").stat().st_ino


def _kept_here(tmp_path: Path) -> None:
    con = sqlite3.connect(tmp_path / "probe.db")
    try:
        if not persist_wal(con, tmp_path / "probe.db"):
            pytest.skip("this Python's sqlite3 offers no handle for the persistent-WAL control")
    finally:
        con.close()


async def test_a_new_store_preallocates_its_wal(tmp_path: Path) -> None:
    store = SqliteEventStore(tmp_path / "loom.db")
    assert wal_size(store.path) == KEPT
    await store.aclose()


async def test_the_wal_is_kept_when_the_store_closes(tmp_path: Path) -> None:
    _kept_here(tmp_path)
    store = SqliteEventStore(tmp_path / "loom.db")
    await store.create(_started("e1"))
    await store.aclose()
    assert wal_size(store.path) == KEPT


async def test_commits_cycle_through_the_kept_wal(tmp_path: Path) -> None:
    """A thousand commits (several checkpoints' worth of pages) never grow the file."""
    store = SqliteEventStore(tmp_path / "loom.db")
    await store.create(_started("e1"))
    for seq in range(2, 1002):
        await store.append(AppendRequest("e1", seq - 1, [_step(seq)]))
    assert wal_size(store.path) == KEPT
    assert [e.seq for e in await store.read("e1", 998)] == [999, 1000, 1001]
    await store.aclose()


_OTHER_PROCESS = """
import asyncio, sys
from loom.events import EffectCompleted
from loom.store import AppendRequest, SqliteEventStore

async def main() -> None:
    store = SqliteEventStore(sys.argv[1])
    for seq in range(2, 52):
        step = EffectCompleted(seq=seq, step_id=str(seq), effect="fx", output=seq, at=1.0)
        await store.append(AppendRequest("e1", seq - 1, [step]))
    await store.aclose()

asyncio.run(main())
"""


@pytest.mark.slow
async def test_a_new_process_writes_into_the_wal_the_last_one_kept(tmp_path: Path) -> None:
    _kept_here(tmp_path)
    store = SqliteEventStore(tmp_path / "loom.db")
    await store.create(_started("e1"))
    await store.aclose()
    inode = _wal_inode(store.path)
    _other_process_appends(store.path)
    assert (_wal_inode(store.path), wal_size(store.path)) == (inode, KEPT)  # kept, not grown
    again = SqliteEventStore(store.path)
    assert (await again.summary("e1")).last_seq == 51
    await again.aclose()


async def test_a_plain_append_writes_one_page(tmp_path: Path) -> None:
    """The event's page and nothing else: the executions row is not rewritten."""
    store = SqliteEventStore(tmp_path / "loom.db")
    await store.create(_started("e1"))
    before = wal_frames(store.path)
    await store.append(AppendRequest("e1", 1, [_step(2)]))
    assert wal_frames(store.path) - before == 1
    summary = await store.summary("e1")
    assert (summary.last_seq, summary.updated_at) == (2, max(summary.created_at, 2.0))
    await store.aclose()


async def test_a_status_change_writes_the_executions_row_too(tmp_path: Path) -> None:
    store = SqliteEventStore(tmp_path / "loom.db")
    await store.create(_started("e1"))
    before = wal_frames(store.path)
    change = StatusChange("suspended", wake_at=9.0)
    await store.append(AppendRequest("e1", 1, [_step(2)], change))
    # The event's page, the row's page, the status and wake-time indexes' pages.
    assert wal_frames(store.path) - before == 4
    [row] = await store.list("suspended", due_before=10.0)
    assert (row.execution_id, row.last_seq, row.wake_at) == ("e1", 2, 9.0)
    await store.aclose()


app = Loom("pages")


@app.effect("noop")
async def noop(ctx: EffectContext, n: int) -> int:
    return n


@app.flow("steps")
async def steps(ctx: FlowContext, n: int) -> int:
    for i in range(n):
        await ctx.execute(noop, i)
    return n


async def test_a_sequential_strict_flow_writes_under_two_pages_a_step(tmp_path: Path) -> None:
    store = SqliteEventStore(tmp_path / "loom.db")
    store._con().execute("PRAGMA wal_autocheckpoint=0")  # pyright: ignore[reportPrivateUsage]
    runtime = Runtime(app, store)
    await runtime.start("steps", 3, execution_id="warm")
    frames, commits = wal_frames(store.path), wal_commits(store.path)
    await runtime.start("steps", 100, execution_id="counted")
    frames, commits = wal_frames(store.path) - frames, wal_commits(store.path) - commits
    assert commits == 101  # the start with its claim, 99 steps, the last step with the end
    assert frames / commits < 2.0  # 2.6 when every append rewrote the executions row
    await store.aclose()


# The tables as the release before this one created them (a rowid executions table whose
# last_seq and updated_at every append kept current).
_PREVIOUS_SCHEMA = """
CREATE TABLE executions (
    id TEXT PRIMARY KEY, flow TEXT NOT NULL, status TEXT NOT NULL, last_seq INTEGER NOT NULL,
    created_at REAL NOT NULL, updated_at REAL NOT NULL, wake_at REAL, parked_reason TEXT,
    flow_version TEXT NOT NULL DEFAULT '1'
);
CREATE INDEX executions_status ON executions(status, created_at);
CREATE INDEX executions_wake ON executions(wake_at) WHERE wake_at IS NOT NULL;
CREATE TABLE events (
    execution_id TEXT NOT NULL, seq INTEGER NOT NULL, body TEXT NOT NULL,
    PRIMARY KEY (execution_id, seq)
) WITHOUT ROWID;
CREATE TABLE snapshots (execution_id TEXT PRIMARY KEY, seq INTEGER NOT NULL, state TEXT NOT NULL);
"""


async def test_a_database_of_the_previous_release_reads_and_appends(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    with sqlite3.connect(db) as con:
        con.executescript(_PREVIOUS_SCHEMA)
        con.execute("INSERT INTO executions VALUES ('e1','f','running',2,5.0,7.0,NULL,NULL,'1')")
        for seq, event in enumerate([_started("e1"), _step(2)], start=1):
            body = event.model_copy(update={"seq": seq}).model_dump_json()
            con.execute("INSERT INTO events VALUES ('e1', ?, ?)", (seq, body))
    store = SqliteEventStore(db)
    assert (await store.summary("e1")).last_seq == 2
    await store.append(AppendRequest("e1", 2, [_step(3)]))
    await store.append(AppendRequest("e1", 3, [_step(4)], StatusChange("completed")))
    [row] = await store.list("completed")
    assert (row.execution_id, row.last_seq, row.created_at) == ("e1", 4, 5.0)
    assert [e.seq for e in (await store.load("e1")).events] == [1, 2, 3, 4]
    await store.aclose()
    with sqlite3.connect(db) as con:  # its table was left as it was: a rowid table
        sql = con.execute("SELECT sql FROM sqlite_master WHERE name='executions'").fetchone()[0]
    assert "WITHOUT ROWID" not in sql


def test_the_store_outlives_a_connection_closed_without_it(tmp_path: Path) -> None:
    """A connection closed by someone else (not ``release``) may truncate the WAL to zero
    (the journal size limit); the next store preallocates it again."""
    store = SqliteEventStore(tmp_path / "loom.db")
    asyncio.run(store.create(_started("e1")))
    asyncio.run(store.aclose())
    con = sqlite3.connect(store.path)
    con.execute("PRAGMA journal_size_limit=0")
    persist_wal(con, store.path)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    assert Path(f"{store.path}-wal").stat().st_size == 0
    again = SqliteEventStore(store.path)
    assert wal_size(store.path) == KEPT
    asyncio.run(again.aclose())


async def test_a_summary_survives_a_last_event_it_cannot_read(tmp_path: Path) -> None:
    """The log's end and last change come from the last event; a body that is not JSON, or
    whose time is not a number, leaves the stored time in place instead of failing."""
    store = SqliteEventStore(tmp_path / "loom.db")
    for eid in ("garbled", "text"):
        await store.create(_started(eid))
    with sqlite3.connect(store.path) as con:
        con.execute("INSERT INTO events VALUES ('garbled', 2, 'not json {')")
        con.execute("""INSERT INTO events VALUES ('text', 2, '{"at": "later"}')""")
    rows = {row.execution_id: row for row in await store.list()}
    for row in rows.values():
        assert row.last_seq == 2 and row.updated_at == row.created_at
    await store.aclose()


def _loom(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "loom", *args], check=True, cwd=ROOT, timeout=120)


@pytest.mark.slow
def test_each_loom_command_writes_into_the_wal_the_last_one_kept(tmp_path: Path) -> None:
    """``loom`` CLI processes, one after the other on one file: the first creates and
    preallocates the WAL, the next ones write into it (the same file, never grown)."""
    _kept_here(tmp_path)
    db = tmp_path / "loom.db"
    store = ["--app", "tests.store.test_sqlite_wal:app", "--store", f"sqlite:///{db}"]
    _loom(*store, "start", "steps", "--id", "first", "--input", "5")
    inode = _wal_inode(db)
    assert wal_size(db) == KEPT
    for n in range(3):
        _loom(*store, "start", "steps", "--id", f"next-{n}", "--input", "5")
        assert (_wal_inode(db), wal_size(db)) == (inode, KEPT)
