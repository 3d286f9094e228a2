"""Group commit applies a group of appends or creates by kind, without changing an outcome.

A group of requests for distinct executions is applied in a few ``executemany`` statements;
when one request of it would be refused, the batch is rolled back and the group applied one
by one, where exactly that request fails. These tests submit every request in one loop turn
on a real SQLite file (so they form one group, one transaction) and check each outcome
against what one append at a time would give.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Sequence
from pathlib import Path
from typing import Any

import pytest

from loom.errors import AppendConflictError, UnknownExecutionError
from loom.events import EffectCompleted, ExecutionStarted
from loom.store import AppendRequest, SqliteEventStore
from loom.store.base import StatusChange


def _started(eid: str) -> ExecutionStarted:
    return ExecutionStarted(execution_id=eid, flow="f", input={"n": 1})


def _step(seq: int) -> EffectCompleted:
    return EffectCompleted(seq=seq, step_id=str(seq), effect="fx", output=seq, at=1.0)


def _plain(eid: str, expected: int = 1) -> AppendRequest:
    return AppendRequest(eid, expected, [_step(expected + 1)])


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteEventStore]:
    s = SqliteEventStore(tmp_path / "loom.db")
    await asyncio.gather(*(s.create(_started(f"e{i}")) for i in range(30)))
    yield s
    await s.aclose()


async def _one_group(
    store: SqliteEventStore, calls: Sequence[Awaitable[Any]]
) -> tuple[list[Any], int, int]:
    """Run ``calls`` in one loop turn: their outcomes, transactions and batches it took."""
    group = store._group  # pyright: ignore[reportPrivateUsage]
    commits, batched = group.commits, group.batched
    outcomes = await asyncio.gather(*calls, return_exceptions=True)
    return list(outcomes), group.commits - commits, group.batched - batched


async def test_plain_appends_are_applied_as_one_batch(store: SqliteEventStore) -> None:
    outcomes, commits, batched = await _one_group(
        store, [store.append(_plain(f"e{i}")) for i in range(30)]
    )
    assert outcomes == [2] * 30
    assert (commits, batched) == (1, 1)
    assert [e.seq for e in await store.read("e17")] == [1, 2]
    assert (await store.summary("e17")).last_seq == 2


async def test_conflicts_and_an_unknown_id_fail_alone_and_the_rest_commit_together(
    store: SqliteEventStore,
) -> None:
    """Among them, an append whose events would not collide with stored ones (the log is
    behind what it expects) and one to an execution that does not exist: only the summary
    update can refuse those, and it must, with nothing of them written."""
    await store.append(_plain("e3"))  # e3 now ends at 2: an append expecting 1 conflicts
    requests = [_plain(f"e{i}") for i in range(20)]
    requests[5] = _plain("e5", expected=4)  # e5 ends at 1
    requests[7] = _plain("never-created")
    requests[9] = AppendRequest(
        "e9", 1, [_step(2)], StatusChange("suspended", wake_at=5.0), snapshot='{"s":1}'
    )
    outcomes, commits, batched = await _one_group(store, [store.append(r) for r in requests])
    assert isinstance(outcomes[3], AppendConflictError)
    assert isinstance(outcomes[5], AppendConflictError)
    assert isinstance(outcomes[7], UnknownExecutionError)
    assert [o for i, o in enumerate(outcomes) if i not in (3, 5, 7)] == [2] * 17
    assert (commits, batched) == (1, 0)  # the batch was given up, in the same transaction
    assert [e.seq for e in await store.read("e3")] == [1, 2]  # nothing of the conflicts
    assert [e.seq for e in await store.read("e5")] == [1]
    with pytest.raises(UnknownExecutionError):
        await store.read("never-created")
    summary = await store.summary("e9")
    assert (summary.status, summary.wake_at, summary.last_seq) == ("suspended", 5.0, 2)
    loaded = await store.load("e9")
    assert loaded.snapshot is not None and loaded.snapshot.state == '{"s":1}'


async def test_an_unknown_id_alone_in_a_batch_writes_no_events(store: SqliteEventStore) -> None:
    outcomes, _, batched = await _one_group(
        store, [store.append(_plain("e1")), store.append(_plain("ghost"))]
    )
    assert outcomes[0] == 2 and isinstance(outcomes[1], UnknownExecutionError)
    assert batched == 0
    con = store._con()  # pyright: ignore[reportPrivateUsage]
    assert con.execute("SELECT count(*) FROM events WHERE execution_id='ghost'").fetchone() == (0,)


async def test_status_changes_and_snapshots_ride_the_batch(store: SqliteEventStore) -> None:
    done = StatusChange("completed")
    parked = StatusChange("in_doubt", parked_reason="operator")
    requests = [
        AppendRequest("e0", 1, [_step(2), _step(3)], done, snapshot='{"at":3}'),
        AppendRequest("e1", 1, [_step(2)], parked),
        _plain("e2"),
    ]
    outcomes, _, batched = await _one_group(store, [store.append(r) for r in requests])
    assert outcomes == [3, 2, 2] and batched == 1
    e0, e1, e2 = [await store.summary(f"e{i}") for i in range(3)]
    assert (e0.status, e0.last_seq) == ("completed", 3)
    assert (e1.status, e1.parked_reason) == ("in_doubt", "operator")
    assert (e2.status, e2.last_seq) == ("running", 2)
    loaded = await store.load("e0")
    assert loaded.snapshot is not None and (loaded.snapshot.seq, loaded.events) == (3, [])


async def test_two_appends_to_one_execution_keep_the_order_they_came_in(
    store: SqliteEventStore,
) -> None:
    """Applied by kind (status changes after plain appends), the second append would land
    first and both would succeed; in order the first one conflicts, as it must."""
    ahead = AppendRequest("e0", 2, [_step(3)], StatusChange("completed"))
    outcomes, commits, batched = await _one_group(
        store, [store.append(ahead), store.append(_plain("e0")), store.append(_plain("e1"))]
    )
    assert isinstance(outcomes[0], AppendConflictError)
    assert outcomes[1:] == [2, 2] and (commits, batched) == (1, 0)
    summary = await store.summary("e0")
    assert (summary.status, summary.last_seq) == ("running", 2)


async def test_creates_are_batched_and_a_repeat_among_them_gets_the_stored_start(
    store: SqliteEventStore,
) -> None:
    fresh = [store.create(_started(f"n{i}"), [_step(2)]) for i in range(10)]
    outcomes, _, batched = await _one_group(store, fresh)
    assert [created for created, _ in outcomes] == [True] * 10 and batched == 1
    assert [e.seq for e in await store.read("n4")] == [1, 2]
    again = ExecutionStarted(execution_id="n4", flow="other", input={"n": 2})
    calls = [store.create(_started(f"m{i}"), [_step(2)]) for i in range(5)]
    calls.insert(2, store.create(again, [_step(2)]))
    outcomes, commits, batched = await _one_group(store, calls)
    assert [created for created, _ in outcomes] == [True, True, False, True, True, True]
    assert outcomes[2][1].flow == "f" and (commits, batched) == (1, 0)
    assert [e.seq for e in await store.read("m3")] == [1, 2]
    assert (await store.summary("n4")).last_seq == 2  # the repeat wrote nothing


async def test_creates_and_appends_in_one_group_are_batched_by_kind(
    store: SqliteEventStore,
) -> None:
    calls: list[Awaitable[Any]] = []
    for i in range(6):  # interleaved: each kind is applied in one pass of its own
        calls.append(store.create(_started(f"k{i}"), [_step(2)]))
        calls.append(store.append(_plain(f"e{i}")))
    outcomes, commits, batched = await _one_group(store, calls)
    assert [o if isinstance(o, int) else o[0] for o in outcomes] == [True, 2] * 6
    assert (commits, batched) == (1, 1)
    assert [e.seq for e in await store.read("k5")] == [1, 2]
    assert [e.seq for e in await store.read("e5")] == [1, 2]


async def test_a_conflict_in_a_group_of_both_kinds_fails_alone(store: SqliteEventStore) -> None:
    calls: list[Awaitable[Any]] = [store.create(_started(f"j{i}")) for i in range(3)]
    calls += [store.append(_plain("e0")), store.append(_plain("e1", expected=5))]
    outcomes, commits, batched = await _one_group(store, calls)
    assert [o[0] for o in outcomes[:3]] == [True] * 3 and outcomes[3] == 2
    assert isinstance(outcomes[4], AppendConflictError)
    assert (commits, batched) == (1, 0)
    assert (await store.summary("e1")).last_seq == 1 and (await store.summary("j2")).last_seq == 1
