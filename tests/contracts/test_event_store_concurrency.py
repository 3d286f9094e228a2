"""The ``EventStore`` contract under concurrency: appends to many executions at once.

Run over every backend by the ``store`` fixture. Group-committing backends (SQLite) put
these appends in shared transactions; the contract is that nobody can tell: each append is
whole and durable when it returns, each execution's order is kept, and a refused append
fails alone.
"""

from __future__ import annotations

import asyncio

import pytest

from loom.errors import AppendConflictError, UnknownExecutionError
from loom.events import EffectCompleted
from loom.store import AppendRequest, EventStore, StatusChange
from tests.contracts.test_event_store import started, step

EXECUTIONS = 40
ROUNDS = 5


def _pair(expected: int, tag: str) -> list[EffectCompleted]:
    return [step(expected + 1, f"{tag}a", tag), step(expected + 2, f"{tag}b", tag)]


async def _chain(store: EventStore, eid: str) -> None:
    """Append ``ROUNDS`` two-event batches to one execution, each after the last returned."""
    expected = 1
    for r in range(ROUNDS):
        expected = await store.append(AppendRequest(eid, expected, _pair(expected, f"{eid}-{r}")))


async def test_concurrent_appends_to_many_executions_are_all_kept_in_order(
    store: EventStore,
) -> None:
    eids = [f"c{i}" for i in range(EXECUTIONS)]
    created = await asyncio.gather(*(store.create(started(eid)) for eid in eids))
    assert all(new for new, _ in created)
    await asyncio.gather(*(_chain(store, eid) for eid in eids))
    for eid in eids:
        events = await store.read(eid)
        assert [e.seq for e in events] == list(range(1, 2 + 2 * ROUNDS))
        outputs = [e.step_id for e in events[1:] if isinstance(e, EffectCompleted)]
        assert outputs == [f"{eid}-{r}{half}" for r in range(ROUNDS) for half in "ab"]
        assert (await store.summary(eid)).last_seq == 1 + 2 * ROUNDS


async def test_a_conflicting_append_among_many_fails_alone(store: EventStore) -> None:
    eids = [f"k{i}" for i in range(20)]
    await asyncio.gather(*(store.create(started(eid)) for eid in eids))
    await store.append(AppendRequest("k7", 1, [step(2, "first")]))
    requests = [AppendRequest(eid, 1, _pair(1, eid)) for eid in eids]  # k7's is now stale
    requests.append(AppendRequest("missing", 1, [step(2)]))
    outcomes = await asyncio.gather(*(store.append(r) for r in requests), return_exceptions=True)
    for eid, outcome in zip(eids, outcomes, strict=False):
        if eid == "k7":
            assert isinstance(outcome, AppendConflictError)
        else:
            assert outcome == 3, (eid, outcome)
            assert [e.seq for e in await store.read(eid)] == [1, 2, 3]
    assert isinstance(outcomes[-1], UnknownExecutionError)
    kept = [e.step_id for e in await store.read("k7", 1) if isinstance(e, EffectCompleted)]
    assert kept == ["first"]


async def test_racing_appends_to_one_execution_among_others(store: EventStore) -> None:
    """Five appends at the same seq of one execution, mixed with appends to others."""
    await asyncio.gather(*(store.create(started(f"r{i}")) for i in range(10)))
    racers = [AppendRequest("r0", 1, [step(2, f"w{i}")]) for i in range(5)]
    others = [AppendRequest(f"r{i}", 1, [step(2)]) for i in range(1, 10)]
    outcomes = await asyncio.gather(
        *(store.append(r) for r in [*racers, *others]), return_exceptions=True
    )
    wins = [o for o in outcomes[:5] if o == 2]
    assert len(wins) == 1
    assert all(isinstance(o, AppendConflictError) for o in outcomes[:5] if o != 2)
    assert outcomes[5:] == [2] * 9
    assert [e.seq for e in await store.read("r0")] == [1, 2]


@pytest.mark.parametrize("status", ["suspended", "completed"])
async def test_status_changes_of_concurrent_appends_each_land(
    store: EventStore, status: str
) -> None:
    eids = [f"s{i}" for i in range(15)]
    await asyncio.gather(*(store.create(started(eid)) for eid in eids))
    await asyncio.gather(
        *(
            store.append(AppendRequest(eid, 1, [step(2)], StatusChange(status, wake_at=float(i))))
            for i, eid in enumerate(eids)
        )
    )
    listed = {s.execution_id: s for s in await store.list(status)}
    assert sorted(listed) == sorted(eids)
    assert [listed[eid].wake_at for eid in eids] == [float(i) for i in range(15)]
