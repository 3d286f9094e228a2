"""Group commit in ``SqliteEventStore``: concurrent appends really share one transaction,
a refused request fails alone, a failed transaction fails its whole group and writes
nothing, and a SIGKILL mid-group leaves whole appends or nothing of them.

Transactions are counted from the outside, as commit frames in the WAL file.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import struct
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from loom.errors import AppendConflictError, StoreError, StoreUnavailableError
from loom.events import EffectCompleted, ExecutionStarted
from loom.store import AppendRequest, SqliteEventStore
from tests.store.group_writer import EVENTS_PER_APPEND

ROOT = Path(__file__).resolve().parents[2]


def _started(eid: str) -> ExecutionStarted:
    return ExecutionStarted(execution_id=eid, flow="f", input={"n": 1})


def _step(seq: int) -> EffectCompleted:
    return EffectCompleted(seq=seq, step_id=str(seq), effect="fx", output=seq, at=1.0)


def wal_commits(db: Path) -> int:
    """Commit frames in the current WAL generation (frames whose salts match the header)."""
    data = Path(f"{db}-wal").read_bytes()
    if len(data) < 32:
        return 0
    page_size = struct.unpack(">I", data[8:12])[0]
    salts = data[16:24]
    count, offset = 0, 32
    while offset + 24 + page_size <= len(data):
        header = data[offset : offset + 24]
        if header[8:16] != salts:
            break  # left over from an earlier generation
        count += struct.unpack(">I", header[4:8])[0] != 0
        offset += 24 + page_size
    return count


@pytest.fixture(params=["in-loop", "off-loop"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SqliteEventStore]:
    s = SqliteEventStore(tmp_path / "loom.db", busy_timeout=0.1)
    if request.param == "off-loop":
        s.serve_off_loop()
    for i in range(60):
        await s.create(_started(f"e{i}"))
    yield s
    await s.aclose()


async def _append_all(store: SqliteEventStore, n: int) -> list[int | BaseException]:
    return await asyncio.gather(
        *(store.append(AppendRequest(f"e{i}", 1, [_step(2), _step(3)])) for i in range(n)),
        return_exceptions=True,
    )


async def test_concurrent_appends_share_transactions(store: SqliteEventStore) -> None:
    before = wal_commits(store.path)
    assert await _append_all(store, 50) == [3] * 50
    commits = wal_commits(store.path) - before
    # On the loop every append of the turn joins one group; the writer thread may start
    # draining before the last ones queue, so a few groups at most.
    assert 1 <= commits <= (1 if store._writer is None else 5)  # pyright: ignore[reportPrivateUsage]


async def test_sequential_appends_commit_one_by_one(store: SqliteEventStore) -> None:
    before = wal_commits(store.path)
    for seq in range(2, 12):
        await store.append(AppendRequest("e0", seq - 1, [_step(seq)]))
    assert wal_commits(store.path) - before == 10


async def test_a_group_is_bounded(tmp_path: Path) -> None:
    store = SqliteEventStore(tmp_path / "loom.db")
    await asyncio.gather(*(store.create(_started(f"e{i}")) for i in range(300)))
    before = wal_commits(store.path)
    assert await _append_all(store, 300) == [3] * 300
    assert wal_commits(store.path) - before == 2  # 256 + 44
    await store.aclose()


async def test_a_conflict_fails_alone_inside_a_shared_transaction(
    store: SqliteEventStore,
) -> None:
    await store.append(AppendRequest("e3", 1, [_step(2)]))
    before = wal_commits(store.path)
    outcomes = await _append_all(store, 20)
    assert isinstance(outcomes[3], AppendConflictError)
    assert [o for i, o in enumerate(outcomes) if i != 3] == [3] * 19
    assert [e.seq for e in await store.read("e3")] == [1, 2]
    assert wal_commits(store.path) - before <= 5


async def test_a_broken_constraint_fails_alone(store: SqliteEventStore) -> None:
    """A constraint another writer put in one append's way refuses that append only: its
    first event, inserted before the second failed, is undone, and the others still share
    one transaction (the group is applied again, a savepoint each)."""
    with sqlite3.connect(store.path, isolation_level=None) as other:
        other.execute(
            "CREATE TRIGGER in_the_way BEFORE INSERT ON events"
            " WHEN NEW.execution_id = 'e5' AND NEW.seq = 3"
            " BEGIN SELECT RAISE(ABORT, 'in the way'); END"
        )
    before = wal_commits(store.path)
    outcomes = await _append_all(store, 10)
    failed = outcomes[5]
    assert isinstance(failed, StoreError) and not isinstance(failed, StoreUnavailableError)
    assert isinstance(failed.__cause__, sqlite3.IntegrityError)
    assert [o for i, o in enumerate(outcomes) if i != 5] == [3] * 9
    assert (await store.summary("e5")).last_seq == 1
    assert [e.seq for e in await store.read("e4")] == [1, 2, 3]
    assert 1 <= wal_commits(store.path) - before <= (1 if store._writer is None else 5)  # pyright: ignore[reportPrivateUsage]


async def test_a_failed_transaction_fails_its_whole_group_and_writes_nothing(
    store: SqliteEventStore,
) -> None:
    other = sqlite3.connect(store.path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # held past the store's busy timeout
    try:
        outcomes = await _append_all(store, 10)
    finally:
        other.execute("ROLLBACK")
        other.close()
    for outcome in outcomes:
        assert isinstance(outcome, StoreUnavailableError), outcome
        assert outcome.details["reason"] == "busy"
        assert isinstance(outcome.__cause__, sqlite3.OperationalError)
    assert [(await store.summary(f"e{i}")).last_seq for i in range(10)] == [1] * 10
    assert await _append_all(store, 10) == [3] * 10  # the store recovers once the lock goes


def _child(db: Path, mode: str, env: dict[str, str]) -> subprocess.Popen[str]:
    args = [sys.executable, "-m", "tests.store.group_writer", str(db), "30", "40", mode]
    return subprocess.Popen(
        args, cwd=ROOT, env={**os.environ, **env}, stdout=subprocess.PIPE, text=True
    )


def _acks(lines: list[str]) -> dict[str, int]:
    acked: dict[str, int] = {}
    for line in lines:
        _, eid, seq = line.split()
        acked[eid] = max(acked.get(eid, 0), int(seq))
    return acked


async def _stored(db: Path) -> dict[str, int]:
    """Each execution's last seq, after checking its log is whole appends, gap-free."""
    store = SqliteEventStore(db)
    last: dict[str, int] = {}
    for summary in await store.list(limit=100):
        seqs = [e.seq for e in await store.read(summary.execution_id)]
        assert seqs == list(range(1, len(seqs) + 1))
        assert (len(seqs) - 1) % EVENTS_PER_APPEND == 0, seqs  # whole appends only
        assert summary.last_seq == len(seqs)
        last[summary.execution_id] = len(seqs)
    await store.aclose()
    return last


@pytest.mark.slow
async def test_sigkill_before_a_group_commits_keeps_exactly_what_was_acknowledged(
    tmp_path: Path,
) -> None:
    """Killed in the fifth transaction, after its statements ran and before its COMMIT:
    every acknowledged append is there, and nothing of the killed group is."""
    db = tmp_path / "loom.db"
    child = _child(db, "in-loop", {"LOOM_CRASH_AT": "in_group_commit:5"})
    out, _ = child.communicate(timeout=120)
    assert child.returncode == -signal.SIGKILL
    acked = _acks(out.splitlines())
    assert acked, "the child acknowledged nothing before it died"
    assert await _stored(db) == acked


@pytest.mark.slow
async def test_sigkill_at_any_moment_leaves_whole_appends(tmp_path: Path) -> None:
    """Killed from outside while the writer thread commits groups: acknowledged appends
    are durable, and every log holds whole appends only."""
    db = tmp_path / "loom.db"
    child = _child(db, "off-loop", {})
    assert child.stdout is not None
    lines = [child.stdout.readline() for _ in range(150)]
    child.send_signal(signal.SIGKILL)
    rest, _ = child.communicate(timeout=60)
    acked = _acks([*lines, *rest.splitlines()])
    stored = await _stored(db)
    for eid, seq in acked.items():
        assert stored.get(eid, 0) >= seq, (eid, seq, stored.get(eid))
