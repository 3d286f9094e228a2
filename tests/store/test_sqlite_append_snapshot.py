"""A snapshot taken where an execute call ends rides that call's last append on SQLite: one
transaction (one fsync) fewer per execution whose tail is worth a snapshot, and the same
snapshot a separate ``save_snapshot`` would have kept.

Transactions are counted from the outside, as commit frames in the WAL file.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from loom import EffectContext, FlowContext, Loom
from loom.kernel.fold import ExecutionState
from loom.runtime import Runtime
from loom.store import SqliteEventStore
from tests.store.test_sqlite_group_commit import wal_commits

app = Loom("append-snapshots", durability="batched")


@app.effect("noop")
async def noop(ctx: EffectContext, n: int) -> int:
    return n


@app.flow("steps")
async def steps(ctx: FlowContext, n: int) -> int:
    for i in range(n):
        await ctx.execute(noop, i)
    return n


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteEventStore]:
    s = SqliteEventStore(tmp_path / "loom.db")
    yield s
    await s.aclose()


async def test_the_end_of_a_long_execution_commits_its_snapshot_with_its_last_append(
    store: SqliteEventStore, tmp_path: Path
) -> None:
    runtime = Runtime(app, store, snapshot_min_tail=64)
    await runtime.start("steps", 1, execution_id="warm")  # the schema's own commits
    before = wal_commits(tmp_path / "loom.db")
    result = await runtime.start("steps", 100, execution_id="long")
    assert result.status == "completed" and result.output == 100
    # The start, then the claim, 100 steps and the end in one append carrying the
    # snapshot: no third transaction for the snapshot.
    assert wal_commits(tmp_path / "loom.db") - before == 2
    loaded = await store.load("long")
    assert loaded.snapshot is not None and loaded.snapshot.seq == 103 and loaded.events == []
    assert ExecutionState.from_json(loaded.snapshot.state) == await runtime.load_state("long")
    assert (await runtime.result("long")).output == 100


async def test_a_short_tail_keeps_no_snapshot(store: SqliteEventStore) -> None:
    runtime = Runtime(app, store, snapshot_min_tail=64)
    await runtime.start("steps", 3, execution_id="short")
    loaded = await store.load("short")
    assert loaded.snapshot is None and [e.seq for e in loaded.events] == [1, 2, 3, 4, 5, 6]
