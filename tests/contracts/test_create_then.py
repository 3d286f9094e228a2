"""The ``EventStore`` contract for ``create(started, then)``: events written with the start,
atomically and only by the call that creates the execution (every backend, see conftest)."""

from __future__ import annotations

import asyncio
import time

import pytest

from loom import EffectContext, FlowContext, Loom
from loom.errors import AppendConflictError
from loom.events import EffectCompleted, Event, ExecutionClaimed, ExecutionStarted
from loom.ops.fork import fork
from loom.runtime import Runtime
from loom.store import AppendRequest, EventStore, Snapshot, StatusChange


def started(eid: str = "e1", n: int = 1) -> ExecutionStarted:
    return ExecutionStarted(execution_id=eid, flow="f", input={"n": n})


def claim(seq: int = 2, holder: str = "h1") -> ExecutionClaimed:
    return ExecutionClaimed(seq=seq, holder=holder, until=time.time() + 60, at=time.time())


def step(seq: int, step_id: str) -> EffectCompleted:
    return EffectCompleted(seq=seq, step_id=step_id, effect="fx", output=seq, at=1.0)


def shape(events: list[Event]) -> list[tuple[int, str]]:
    return [(e.seq, e.type) for e in events]


async def test_events_written_with_the_create_load_after_the_start(store: EventStore) -> None:
    then: list[Event] = [claim(2), step(3, "a")]
    created, first = await store.create(started(), then)
    assert created and first.seq == 1
    loaded = await store.load("e1")
    assert loaded.snapshot is None
    assert loaded.events == [first, *then]
    assert (await store.summary("e1")).last_seq == 3
    assert (await store.load_many(["e1"]))[0].events == [first, *then]


async def test_a_repeated_create_writes_nothing_of_its_events(store: EventStore) -> None:
    await store.create(started(n=1), [claim(2, "h1")])
    created, stored = await store.create(started(n=2), [claim(2, "h2"), step(3, "x")])
    assert created is False and stored.input == {"n": 1}
    events = await store.read("e1")
    assert shape(events) == [(1, "ExecutionStarted"), (2, "ExecutionClaimed")]
    assert isinstance(events[1], ExecutionClaimed) and events[1].holder == "h1"
    assert (await store.summary("e1")).last_seq == 2


async def test_a_create_with_events_onto_an_existing_plain_start_writes_none(
    store: EventStore,
) -> None:
    await store.create(started())
    assert (await store.create(started(), [claim(2)]))[0] is False
    assert shape(await store.read("e1")) == [(1, "ExecutionStarted")]
    assert await store.append(AppendRequest("e1", 1, [step(2, "a")])) == 2


async def test_appends_continue_after_the_events_and_fence_at_their_end(
    store: EventStore,
) -> None:
    await store.create(started(), [claim(2), step(3, "a")])
    for stale in (1, 2):  # inside what the create wrote: the log goes past
        with pytest.raises(AppendConflictError):
            await store.append(AppendRequest("e1", stale, [step(stale + 1, "late")]))
    assert await store.append(AppendRequest("e1", 3, [step(4, "b")])) == 4
    with pytest.raises(AppendConflictError):
        await store.append(AppendRequest("e1", 3, [step(4, "again")]))
    assert shape(await store.read("e1")) == [
        (1, "ExecutionStarted"),
        (2, "ExecutionClaimed"),
        (3, "EffectCompleted"),
        (4, "EffectCompleted"),
    ]


async def test_racing_creates_with_claims_leave_exactly_one_claim(store: EventStore) -> None:
    """Two starters each create with their own claim, concurrently: one creates, the other
    writes nothing; a third that saw only the start and claims by an append at 1 conflicts."""
    results = await asyncio.gather(
        *(store.create(started(), [claim(2, f"h{i}"), step(3, f"s{i}")]) for i in range(2))
    )
    winners = [i for i, (created, _) in enumerate(results) if created]
    assert len(winners) == 1
    with pytest.raises(AppendConflictError):
        await store.append(AppendRequest("e1", 1, [claim(2, "late")]))
    events = await store.read("e1")
    assert [e.holder for e in events if isinstance(e, ExecutionClaimed)] == [f"h{winners[0]}"]
    assert [e.step_id for e in events if isinstance(e, EffectCompleted)] == [f"s{winners[0]}"]


async def test_read_after_and_snapshots_see_the_events(store: EventStore) -> None:
    then: list[Event] = [claim(2), step(3, "a"), step(4, "b")]
    _, first = await store.create(started(), then)
    log = [first, *then]
    for after in range(6):
        assert await store.read("e1", after) == log[after:], after
    await store.save_snapshot("e1", Snapshot(3, "state at 3"))
    loaded = await store.load("e1")
    assert loaded.snapshot == Snapshot(3, "state at 3") and loaded.events == log[3:]
    await store.append(AppendRequest("e1", 4, [step(5, "c")], StatusChange("completed")))
    assert [e.seq for e in await store.read("e1", 2)] == [3, 4, 5]


async def test_listing_and_purge_see_executions_created_with_events(store: EventStore) -> None:
    await store.create(started("e1"), [claim(2)])
    await store.create(started("e2"), [claim(2), step(3, "a")])
    await store.append(AppendRequest("e2", 3, [step(4, "b")], StatusChange("completed")))
    rows = {r.execution_id: r for r in await store.list()}
    assert rows["e1"].status == "running" and rows["e2"].status == "completed"
    assert [r.execution_id for r in await store.scan(["running"])] == ["e1"]
    report = await store.purge(time.time() + 1)
    assert report.purged == ["e2"]
    created, _ = await store.create(started("e2", n=9), [claim(2, "again")])
    assert created
    events = await store.read("e2")
    assert shape(events) == [(1, "ExecutionStarted"), (2, "ExecutionClaimed")]


async def test_misnumbered_events_with_a_create_are_refused_and_nothing_written(
    store: EventStore,
) -> None:
    with pytest.raises(ValueError, match="seq"):
        await store.create(started(), [claim(3)])
    with pytest.raises(ValueError, match="seq"):
        await store.create(started(), [claim(2), step(2, "a")])
    assert await store.list() == []


async def test_a_fork_reuses_the_steps_written_with_the_create(store: EventStore) -> None:
    """A log whose steps were all written by ``create`` (a copy of a real run's log) forks
    from its second step: the first step's recorded outcome is reused, not run again."""
    calls: list[int] = []
    app = Loom("create-then")

    @app.effect("a")
    async def a(ctx: EffectContext, n: int) -> int:
        calls.append(n)
        return n * 10

    @app.flow("two")
    async def two(ctx: FlowContext, _: None) -> list[int]:
        return [await ctx.execute(a, 1), await ctx.execute(a, 2)]

    rt = Runtime(app, store)
    assert (await rt.start("two", None, execution_id="orig")).output == [10, 20]
    events = await store.read("orig")
    first = events[0]
    assert isinstance(first, ExecutionStarted)
    copy = first.model_copy(update={"execution_id": "e1"})
    assert (await store.create(copy, events[1:]))[0]
    assert await store.read("e1", 1) == events[1:]
    calls.clear()
    steps = [e.step_id for e in events if isinstance(e, EffectCompleted)]
    result = await fork(rt, "e1", steps[1], new_id="f1")
    assert result.output == [10, 20] and calls == [2]
