"""The ``EventStore`` contract for paging, deletion and purge, on every backend (see conftest)."""

from __future__ import annotations

import asyncio
import time

from loom.errors import UnknownExecutionError
from loom.events import ExecutionCompleted, ExecutionFailed, ExecutionStarted
from loom.store import AppendRequest, EventStore, Snapshot, StatusChange
from loom.store.base import ListCursor
from tests.contracts.test_event_store import started, step


async def finish(store: EventStore, eid: str, status: str = "completed") -> None:
    event = (
        ExecutionCompleted(seq=2, output=1)
        if status == "completed"
        else ExecutionFailed(seq=2, error={"type": "X", "message": "m"})
    )
    await store.append(AppendRequest(eid, 1, [event], StatusChange(status)))


async def tick() -> None:
    """Let the wall clock move so creation and finish times differ."""
    await asyncio.sleep(0.02)


async def create_all(store: EventStore, ids: list[str]) -> None:
    for eid in ids:
        await store.create(started(eid))
        await tick()


async def pages(
    store: EventStore, size: int, *, oldest_first: bool, status: str | None = None
) -> list[list[str]]:
    seen: list[list[str]] = []
    after: ListCursor | None = None
    while True:
        rows = await store.list(status, limit=size, oldest_first=oldest_first, after=after)
        if not rows:
            return seen
        seen.append([r.execution_id for r in rows])
        after = rows[-1].cursor


async def test_list_pages_through_everything_in_either_order(store: EventStore) -> None:
    ids = [f"e{i:02d}" for i in range(7)]
    await create_all(store, ids)
    assert await pages(store, 3, oldest_first=True) == [ids[0:3], ids[3:6], ids[6:]]
    newest = list(reversed(ids))
    assert await pages(store, 3, oldest_first=False) == [newest[0:3], newest[3:6], newest[6:]]
    assert [r.execution_id for r in await store.list()] == newest  # the default is unchanged


async def test_paging_by_status_skips_other_statuses(store: EventStore) -> None:
    ids = [f"e{i}" for i in range(5)]
    await create_all(store, ids)
    await finish(store, "e1")
    await finish(store, "e3")
    assert await pages(store, 2, oldest_first=True, status="running") == [["e0", "e2"], ["e4"]]
    assert await pages(store, 1, oldest_first=True, status="completed") == [["e1"], ["e3"]]


async def test_a_cursor_resumes_after_its_row_even_when_times_tie(store: EventStore) -> None:
    await create_all(store, ["a", "b"])
    [first] = await store.list(limit=1, oldest_first=True)
    rest = await store.list(oldest_first=True, after=first.cursor)
    assert [r.execution_id for r in rest] == ["b"]
    # A cursor names a position, not a row that must still exist.
    ghost = (first.created_at, "a0")
    assert [r.execution_id for r in await store.list(oldest_first=True, after=ghost)] == ["b"]


async def test_delete_execution_removes_everything_and_the_id_starts_anew(
    store: EventStore,
) -> None:
    await store.create(started("e1", payload={"old": True}))
    await store.append(AppendRequest("e1", 1, [step(2), step(3, "2")]))
    await store.save_snapshot("e1", Snapshot(3, '{"old": true}'))
    await finish_at(store, "e1", 3)
    assert await store.delete_execution("e1") is True
    assert await store.delete_execution("e1") is False  # idempotent
    for call in (store.load("e1"), store.read("e1"), store.summary("e1")):
        try:
            await call
        except UnknownExecutionError:
            continue
        raise AssertionError("the deleted execution is still there")
    assert await store.list() == []
    created, first = await store.create(started("e1", payload={"new": True}))
    assert created is True and first.input == {"new": True}
    log = await store.load("e1")
    assert log.snapshot is None and [e.seq for e in log.events] == [1]
    assert await store.append(AppendRequest("e1", 1, [step(2)])) == 2  # numbering from 1


async def finish_at(store: EventStore, eid: str, last: int) -> None:
    done = ExecutionCompleted(seq=last + 1, output=1)
    await store.append(AppendRequest(eid, last, [done], StatusChange("completed")))


async def test_purge_deletes_only_finished_executions_older_than_the_cutoff(
    store: EventStore,
) -> None:
    await create_all(store, ["old-done", "old-failed", "old-running"])
    await finish(store, "old-done")
    await finish(store, "old-failed", "failed")
    await tick()
    cutoff = time.time()
    await tick()
    await create_all(store, ["young-done"])
    await finish(store, "young-done")
    report = await store.purge(cutoff)
    assert report.purged == ["old-done", "old-failed"]
    assert report.cursor is None  # reached executions too young to qualify
    left = {r.execution_id for r in await store.list()}
    assert left == {"old-running", "young-done"}
    again = await store.purge(cutoff)  # idempotent
    assert again.purged == [] and {r.execution_id for r in await store.list()} == left


async def test_purge_keeps_an_old_execution_that_finished_after_the_cutoff(
    store: EventStore,
) -> None:
    await create_all(store, ["long"])
    cutoff = time.time()
    await tick()
    await finish(store, "long")
    assert (await store.purge(cutoff)).purged == []
    assert (await store.purge(time.time() + 1)).purged == ["long"]


async def test_purge_works_in_bounded_resumable_batches(store: EventStore) -> None:
    ids = [f"e{i}" for i in range(5)]
    await create_all(store, ids)
    for eid in ids:
        if eid != "e2":
            await finish(store, eid)
    cutoff = time.time() + 1
    deleted_first: list[str] = []

    async def note(eid: str) -> None:
        assert (await store.summary(eid)).status == "completed"  # called before deletion
        deleted_first.append(eid)

    batches: list[list[str]] = []
    report = await store.purge(cutoff, limit=2, on_delete=note)
    batches.append(report.purged)
    while report.cursor is not None:
        report = await store.purge(cutoff, limit=2, after=report.cursor, on_delete=note)
        batches.append(report.purged)
    assert [eid for batch in batches for eid in batch] == ["e0", "e1", "e3", "e4"]
    assert all(len(b) <= 2 for b in batches) and deleted_first == ["e0", "e1", "e3", "e4"]
    assert [r.execution_id for r in await store.list()] == ["e2"]


async def test_a_purge_hook_that_fails_keeps_the_execution(store: EventStore) -> None:
    await create_all(store, ["e1"])
    await finish(store, "e1")

    async def broken(eid: str) -> None:
        raise OSError("blob store down")

    try:
        await store.purge(time.time() + 1, on_delete=broken)
    except OSError:
        pass
    else:
        raise AssertionError("the hook's error was swallowed")
    assert (await store.summary("e1")).status == "completed"


async def test_a_purged_id_starts_again_as_a_new_execution(store: EventStore) -> None:
    await store.create(started("e1", payload={"run": 1}))
    await finish(store, "e1")
    assert (await store.purge(time.time() + 1)).purged == ["e1"]
    created, first = await store.create(ExecutionStarted(execution_id="e1", flow="g", input=2))
    assert created and (first.flow, first.input) == ("g", 2)
    assert (await store.summary("e1")).status == "running"
