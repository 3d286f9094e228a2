"""Racing appends on the Firestore emulator: across OS processes, and across lost acks."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from multiprocessing.synchronize import Barrier
from typing import Any

import pytest
from google.api_core import exceptions as gexc
from google.cloud.firestore_v1.async_batch import AsyncWriteBatch

from loom.errors import AppendConflictError, StoreUnavailableError
from loom.events import EffectCompleted, Event, ExecutionStarted
from loom.store import AppendRequest, Snapshot, StatusChange
from loom_gcp.firestore import FirestoreEventStore

pytestmark = pytest.mark.slow

PROJECT = "loom-test"
RACERS = 3
BATCHES_PER_RACER = 8


def step(seq: int, step_id: str) -> EffectCompleted:
    return EffectCompleted(seq=seq, step_id=step_id, effect="fx", output={"by": step_id}, at=1.0)


def new_database() -> str:
    return f"r{uuid.uuid4().hex[:24]}"


@pytest.fixture
async def database(firestore_emulator: str) -> AsyncIterator[str]:
    """A fresh database holding execution ``e1``."""
    name = new_database()
    store = FirestoreEventStore(project=PROJECT, database=name)
    await store.create(ExecutionStarted(execution_id="e1", flow="f", input={"n": 1}))
    await store.aclose()
    yield name


async def _race(database: str, name: str, barrier: Barrier) -> dict[str, Any]:
    store = FirestoreEventStore(project=PROJECT, database=database)
    won: list[tuple[int, list[str]]] = []
    conflicts = 0
    expected = (await store.summary("e1")).last_seq
    await asyncio.to_thread(barrier.wait)
    for batch_no in range(BATCHES_PER_RACER):
        size = 1 + batch_no % 3  # batches of 1-3 events: all or nothing
        ids = [f"{name}.{batch_no}.{i}" for i in range(size)]
        while True:
            events: list[Event] = [step(expected + 1 + i, sid) for i, sid in enumerate(ids)]
            try:
                expected = await store.append(AppendRequest("e1", expected, events))
            except AppendConflictError:
                conflicts += 1
                expected = (await store.summary("e1")).last_seq
            else:
                won.append((expected - size + 1, ids))
                break
    await store.aclose()
    return {"name": name, "won": won, "conflicts": conflicts}


def _racer(database: str, name: str, barrier: Barrier, results: Any) -> None:
    """One OS process: append its batches, retrying after every conflict."""
    results.put(asyncio.run(_race(database, name, barrier)))


async def test_racing_processes_build_one_gap_free_log(database: str) -> None:
    ctx = multiprocessing.get_context("spawn")  # a fresh interpreter: no inherited gRPC state
    barrier = ctx.Barrier(RACERS)
    results = ctx.Queue()
    procs = [
        ctx.Process(target=_racer, args=(database, f"p{i}", barrier, results))
        for i in range(RACERS)
    ]
    for proc in procs:
        proc.start()
    try:
        reports = [await asyncio.to_thread(results.get, True, 120) for _ in procs]
    finally:
        for proc in procs:
            proc.join(timeout=30)
            if proc.is_alive():
                proc.kill()
    assert all(proc.exitcode == 0 for proc in procs)

    store = FirestoreEventStore(project=PROJECT, database=database)
    log = await store.read("e1")
    await store.aclose()
    by_seq = {e.seq: e for e in log}
    total = RACERS * sum(1 + b % 3 for b in range(BATCHES_PER_RACER))
    assert [e.seq for e in log] == list(range(1, total + 2))  # gap-free
    written = [e.step_id for e in log if isinstance(e, EffectCompleted)]
    assert len(written) == len(set(written)) == total  # nothing lost, nothing duplicated
    # Every append a racer saw succeed is in the log, at the seqs it was told: a conflict
    # that went unnoticed would show here as someone else's event at a "won" seq.
    for report in reports:
        for first_seq, ids in report["won"]:
            stored = [by_seq[first_seq + i] for i in range(len(ids))]
            assert [e.step_id for e in stored if isinstance(e, EffectCompleted)] == ids
    # The processes really raced (otherwise this test proves nothing).
    assert sum(r["conflicts"] for r in reports) > 0


async def test_a_stale_store_conflicts_instead_of_leaving_a_gap(database: str) -> None:
    stale = FirestoreEventStore(project=PROJECT, database=database)
    fresh = FirestoreEventStore(project=PROJECT, database=database)
    await stale.load("e1")  # it has seen seq 1
    await fresh.append(AppendRequest("e1", 1, [step(2, "fresh")]))
    with pytest.raises(AppendConflictError):
        await stale.append(AppendRequest("e1", 1, [step(2, "stale")]))
    with pytest.raises(AppendConflictError):  # ahead of the log: doc 5 absent, doc 4 absent
        await stale.append(AppendRequest("e1", 4, [step(5, "ahead")]))
    assert [e.seq for e in await fresh.read("e1")] == [1, 2]
    await stale.aclose()
    await fresh.aclose()


Commit = Callable[[AsyncWriteBatch, float], Awaitable[None]]


def lose_first_ack(
    store: FirestoreEventStore,
    *,
    applied: bool,
    meanwhile: Callable[[AsyncWriteBatch], Awaitable[None]] | None = None,
):
    """Make the store's first commit fail with UNAVAILABLE, applied or not (a lost ack)."""
    real: Commit = store._io.commit_once
    calls: list[int] = []

    async def flaky(batch: AsyncWriteBatch, timeout: float) -> None:
        calls.append(1)
        if len(calls) == 1:
            if applied:
                await real(batch, timeout)
            if meanwhile is not None:
                await meanwhile(batch)
            raise gexc.ServiceUnavailable("connection reset before the response")
        await real(batch, timeout)

    store._io.commit_once = flaky  # type: ignore[method-assign]
    return calls


async def test_a_retried_commit_that_had_landed_counts_as_success(database: str) -> None:
    store = FirestoreEventStore(project=PROJECT, database=database)
    calls = lose_first_ack(store, applied=True)
    request = AppendRequest(
        "e1", 1, [step(2, "a"), step(3, "b")], StatusChange("suspended", wake_at=9.0)
    )
    assert await store.append(request) == 3
    assert len(calls) == 2  # the retry met our own documents and took them as success
    log = await store.read("e1")
    assert [(e.seq, getattr(e, "step_id", None)) for e in log] == [(1, None), (2, "a"), (3, "b")]
    summary = await store.summary("e1")
    assert (summary.status, summary.wake_at, summary.last_seq) == ("suspended", 9.0, 3)
    await store.aclose()


async def test_a_retry_that_meets_another_writers_event_conflicts(database: str) -> None:
    store = FirestoreEventStore(project=PROJECT, database=database)
    other = FirestoreEventStore(project=PROJECT, database=database)

    async def other_wins(_batch: AsyncWriteBatch) -> None:
        await other.append(AppendRequest("e1", 1, [step(2, "other")]))

    lose_first_ack(store, applied=False, meanwhile=other_wins)
    with pytest.raises(AppendConflictError):
        await store.append(AppendRequest("e1", 1, [step(2, "mine")]))
    log = await other.read("e1")
    assert [getattr(e, "step_id", None) for e in log] == [None, "other"]
    await store.aclose()
    await other.aclose()


async def test_a_plain_repeat_is_a_conflict_like_on_every_backend(database: str) -> None:
    store = FirestoreEventStore(project=PROJECT, database=database)
    request = AppendRequest("e1", 1, [step(2, "a")])
    await store.append(request)
    with pytest.raises(AppendConflictError):
        await store.append(request)
    # Also from a store that never saw the first append (it must ask Firestore).
    cold = FirestoreEventStore(project=PROJECT, database=database)
    with pytest.raises(AppendConflictError):
        await cold.append(request)
    assert len(await store.read("e1")) == 2
    await store.aclose()
    await cold.aclose()


async def test_create_whose_ack_was_lost_reports_created(firestore_emulator: str) -> None:
    store = FirestoreEventStore(project=PROJECT, database=new_database())
    lose_first_ack(store, applied=True)
    started = ExecutionStarted(execution_id="e2", flow="f", input=[1], at=5.0)
    created, stored = await store.create(started)
    assert created is True and stored.seq == 1 and stored.input == [1]
    created, _ = await store.create(started)  # a real repeat: not created
    assert created is False
    await store.aclose()


async def test_exhausted_retries_raise_a_store_error(database: str) -> None:
    store = FirestoreEventStore(project=PROJECT, database=database, deadline=0.5)
    calls: list[float] = []

    async def down(_batch: AsyncWriteBatch, timeout: float) -> None:
        calls.append(timeout)
        raise gexc.ServiceUnavailable("down")

    store._io.commit_once = down  # type: ignore[method-assign]
    started = time.monotonic()
    with pytest.raises(StoreUnavailableError) as info:
        await store.append(AppendRequest("e1", 1, [step(2, "a")]))
    assert time.monotonic() - started < 2.0  # the deadline, not an attempt count, ends it
    assert len(calls) > 2 and all(t <= 0.5 for t in calls)  # retried, each attempt bounded
    assert info.value.details["reason"] == "unavailable"
    cause = info.value.__cause__
    assert isinstance(cause, gexc.RetryError)
    assert isinstance(cause.cause, gexc.ServiceUnavailable)
    await store.aclose()
    assert os.environ["FIRESTORE_EMULATOR_HOST"].startswith("127.0.0.1:")


async def test_a_log_shorter_than_remembered_takes_appends(database: str) -> None:
    """Another instance purged ``e1`` and started it again (with a snapshot at its start):
    this store object saw a longer log. It must not refuse every append on that memory
    alone, which made the runtime's control appends loop ("log keeps changing")."""
    mine = FirestoreEventStore(project=PROJECT, database=database)
    other = FirestoreEventStore(project=PROJECT, database=database)
    assert await mine.append(AppendRequest("e1", 1, [step(2, "a"), step(3, "b")])) == 3
    assert await other.delete_execution("e1")
    await other.create(ExecutionStarted(execution_id="e1", flow="f", input={"n": 2}))
    await other.save_snapshot("e1", Snapshot(1, "{}"))
    loaded = await mine.load("e1")
    assert (loaded.snapshot, loaded.events) == (Snapshot(1, "{}"), [])
    assert await mine.append(AppendRequest("e1", 1, [step(2, "c")])) == 2
    with pytest.raises(AppendConflictError):  # a real conflict is still one
        await other.append(AppendRequest("e1", 1, [step(2, "d")]))
    again = FirestoreEventStore(project=PROJECT, database=database)
    assert await again.append(AppendRequest("e1", 2, [step(3, "e")])) == 3
    # Without a load in between: memory says 3, the log is shorter again.
    assert await other.delete_execution("e1")
    await other.create(ExecutionStarted(execution_id="e1", flow="f", input={"n": 3}))
    assert await again.append(AppendRequest("e1", 1, [step(2, "f")])) == 2
    for store in (mine, other, again):
        await store.aclose()
