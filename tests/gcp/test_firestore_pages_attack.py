"""Attacks on the Firestore page layout, on the emulator: racing writers through separate
store objects (cold and warm), appends whose ``expected_seq`` lies inside a page or ahead of
the log, commits whose acknowledgement is lost, snapshots inside pages and in parts.

Faults inside one commit are injected by replacing the store's ``commit_once``; everything
else is the real emulator.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import random
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from typing import Any

import pytest
from google.api_core import exceptions as gexc
from google.cloud import firestore
from google.cloud.firestore_v1.async_batch import AsyncWriteBatch

from loom.errors import AppendConflictError
from loom.events import EffectCompleted, Event, ExecutionStarted
from loom.store import AppendRequest, LoadedLog, Snapshot, StatusChange
from loom_gcp.firestore import FirestoreEventStore
from tests.gcp.firestore_helpers import PROJECT, step

pytestmark = pytest.mark.slow


@pytest.fixture
async def stores(database: str) -> AsyncIterator[list[FirestoreEventStore]]:
    """Four store objects over one database: four processes' views."""
    made = [FirestoreEventStore(project=PROJECT, database=database) for _ in range(4)]
    yield made
    for s in made:
        await s.aclose()


def sid(event: Event) -> str | None:
    return event.step_id if isinstance(event, EffectCompleted) else None


def ids_of(events: list[Event]) -> list[tuple[int, str | None]]:
    return [(e.seq, sid(e)) for e in events]


async def agree(readers: list[FirestoreEventStore], eid: str, log: list[Event]) -> None:
    """Every reader's ``load`` and ``read(after)`` (every ``after``) is ``log``."""
    for reader in readers:
        loaded = await reader.load(eid)
        base = loaded.snapshot.seq if loaded.snapshot else 0
        assert loaded.events == log[base:], f"load of {eid} by {id(reader)}"
        for after in range(len(log) + 2):
            assert await reader.read(eid, after) == log[after:], f"read after {after}"


# -- racing writers ------------------------------------------------------------------------


async def _racer(
    store: FirestoreEventStore, name: str, rounds: int, seed: int
) -> tuple[list[tuple[int, list[str | None]]], int, int]:
    """Append ``rounds`` batches of 1-6 events (one of them split over two pages), with
    ``expected_seq`` sometimes inside a page or ahead of what this racer last saw."""
    rng = random.Random(seed)
    won: list[tuple[int, list[str | None]]] = []
    conflicts = wrong = 0
    cold = rng.random() < 0.5
    end = (await store.summary("e1")).last_seq if cold else (await store.load("e1")).last_seq
    for batch_no in range(rounds):
        size = rng.randint(1, 6)
        ids = [f"{name}.{batch_no}.{i}" for i in range(size)]
        while True:
            skew = rng.choice([0, 0, 0, -1, 1, 3]) if end > 2 else 0
            expected = end + skew
            big = batch_no == 2  # two 600 kB events: two pages in one commit
            events: list[Event] = [
                step(expected + 1 + i, sid, secrets.token_hex(300_000) if big else i)
                for i, sid in enumerate(ids[:2] if big else ids)
            ]
            try:
                end = await store.append(AppendRequest("e1", expected, events))
            except AppendConflictError:
                conflicts += 1
                wrong += skew != 0
                loaded = await store.load("e1") if rng.random() < 0.5 else None
                end = loaded.last_seq if loaded else (await store.summary("e1")).last_seq
            else:
                won.append((expected + 1, [sid(e) for e in events]))
                break
    return won, conflicts, wrong


async def test_racing_store_objects_keep_one_log_that_every_reader_agrees_on(
    stores: list[FirestoreEventStore], database: str
) -> None:
    await stores[0].create(ExecutionStarted(execution_id="e1", flow="f"))
    reports = await asyncio.gather(*(_racer(s, f"w{i}", 6, seed=i) for i, s in enumerate(stores)))
    fresh = FirestoreEventStore(project=PROJECT, database=database)
    log = await fresh.read("e1")
    assert [e.seq for e in log] == list(range(1, len(log) + 1))  # gap-free, no duplicates
    by_seq = {e.seq: e for e in log}
    won = [w for report in reports for w in report[0]]
    assert sum(len(ids) for _, ids in won) == len(log) - 1  # every event is someone's win
    for first, ids in won:  # each winner's events sit where it was told they did
        assert [sid(by_seq[first + i]) for i in range(len(ids))] == ids
    assert sum(r[1] for r in reports) > 0  # they raced
    assert sum(r[2] for r in reports) > 0  # and misplaced appends were refused
    await agree([*stores, fresh], "e1", log)
    await fresh.aclose()


async def test_racers_sharing_store_objects_keep_one_log(
    stores: list[FirestoreEventStore], database: str
) -> None:
    """Two racers on each of two store objects: one memory of page ends and one log
    cache, updated by interleaved loads, appends and conflicts."""
    a, b, *_ = stores
    await a.create(ExecutionStarted(execution_id="e1", flow="f"))
    reports = await asyncio.gather(
        *(_racer(s, f"s{i}", 5, seed=20 + i) for i, s in enumerate([a, a, b, b]))
    )
    log = await stores[2].read("e1")
    assert [e.seq for e in log] == list(range(1, len(log) + 1))
    by_seq = {e.seq: e for e in log}
    won = [w for report in reports for w in report[0]]
    assert sum(len(ids) for _, ids in won) == len(log) - 1
    for first, ids in won:
        assert [sid(by_seq[first + i]) for i in range(len(ids))] == ids
    await agree(stores, "e1", log)


def _racing_process(database: str, name: str, seed: int, barrier: Any, results: Any) -> None:
    """One OS process: a store object of its own, racing after the barrier."""

    async def race() -> Any:
        store = FirestoreEventStore(project=PROJECT, database=database)
        await asyncio.to_thread(barrier.wait)
        try:
            return await _racer(store, name, 5, seed)
        finally:
            await store.aclose()

    results.put(asyncio.run(race()))


async def test_racing_processes_with_split_and_misplaced_appends_keep_one_log(
    stores: list[FirestoreEventStore], database: str
) -> None:
    await stores[0].create(ExecutionStarted(execution_id="e1", flow="f"))
    ctx = multiprocessing.get_context("spawn")  # a fresh interpreter: no inherited gRPC state
    barrier, results = ctx.Barrier(3), ctx.Queue()
    procs = [
        ctx.Process(target=_racing_process, args=(database, f"p{i}", 10 + i, barrier, results))
        for i in range(3)
    ]
    for proc in procs:
        proc.start()
    try:
        reports = [await asyncio.to_thread(results.get, True, 180) for _ in procs]
    finally:
        for proc in procs:
            proc.join(timeout=30)
            if proc.is_alive():
                proc.kill()
    log = await stores[1].read("e1")
    assert [e.seq for e in log] == list(range(1, len(log) + 1))
    by_seq = {e.seq: e for e in log}
    won = [w for report in reports for w in report[0]]
    assert sum(len(ids) for _, ids in won) == len(log) - 1
    for first, ids in won:
        assert [sid(by_seq[first + i]) for i in range(len(ids))] == ids
    assert sum(r[1] for r in reports) > 0 and sum(r[2] for r in reports) > 0
    await agree(stores, "e1", log)


async def test_an_expected_seq_inside_anothers_page_or_ahead_is_refused_by_any_store(
    stores: list[FirestoreEventStore],
) -> None:
    a, b, c, d = stores
    await a.create(ExecutionStarted(execution_id="e1", flow="f"))
    await a.append(AppendRequest("e1", 1, [step(2, "a"), step(3, "a"), step(4, "a")]))
    await b.load("e1")  # warm: knows 4 ends a page
    await c.summary("e1")  # knows 4 from the summary query
    for writer in (a, b, c, d):
        for expected in (2, 3, 5, 7):
            with pytest.raises(AppendConflictError):
                await writer.append(AppendRequest("e1", expected, [step(expected + 1, "x")]))
    assert [e.seq for e in await d.read("e1")] == [1, 2, 3, 4]
    assert await d.append(AppendRequest("e1", 4, [step(5, "d")])) == 5
    for writer in (a, b, c):  # each now holds a stale end: refused, then told
        with pytest.raises(AppendConflictError):
            await writer.append(AppendRequest("e1", 4, [step(5, "late")]))
        with pytest.raises(AppendConflictError):
            await writer.append(AppendRequest("e1", 3, [step(4, "late")]))
    log = await a.read("e1")
    assert ids_of(log)[-1] == (5, "d")
    await agree(stores, "e1", log)


# -- lost acknowledgements -----------------------------------------------------------------

Commit = Callable[[AsyncWriteBatch, float], Awaitable[None]]


def lose_ack(
    store: FirestoreEventStore,
    *,
    nth: int = 1,
    applied: bool = True,
    meanwhile: Callable[[], Awaitable[None]] | None = None,
) -> list[int]:
    """Make the store's ``nth`` commit fail with UNAVAILABLE, applied or not."""
    real: Commit = store._io.commit_once
    calls: list[int] = []

    async def flaky(batch: AsyncWriteBatch, timeout: float) -> None:
        calls.append(1)
        if len(calls) == nth:
            if applied:
                await real(batch, timeout)
            if meanwhile is not None:
                await meanwhile()
            raise gexc.ServiceUnavailable("connection reset before the response")
        await real(batch, timeout)

    store._io.commit_once = flaky  # type: ignore[method-assign]
    return calls


async def test_a_lost_ack_of_a_split_append_with_status_and_snapshot_is_success(
    stores: list[FirestoreEventStore],
) -> None:
    a, b, *_ = stores
    await a.create(ExecutionStarted(execution_id="e1", flow="f"))
    blobs = [secrets.token_hex(300_000) for _ in range(3)]  # 600 kB each: three pages
    events: list[Event] = [step(2 + i, str(i), blob) for i, blob in enumerate(blobs)]
    calls = lose_ack(a)
    change = StatusChange("suspended", wake_at=5.0)
    assert await a.append(AppendRequest("e1", 1, events, change, snapshot='{"at": 4}')) == 4
    assert len(calls) == 2
    for reader in (a, b):
        loaded = await reader.load("e1")
        assert (loaded.snapshot, loaded.events) == (Snapshot(4, '{"at": 4}'), [])
        summary = await reader.summary("e1")
        assert (summary.status, summary.wake_at, summary.last_seq) == ("suspended", 5.0, 4)
        assert [e.seq for e in await reader.read("e1", 2)] == [3, 4]
    assert await b.append(AppendRequest("e1", 4, [step(5, "b")])) == 5
    assert [e.seq for e in (await a.load("e1")).events] == [5]


async def test_a_lost_ack_of_a_split_append_that_did_not_land_loses_to_a_rival(
    stores: list[FirestoreEventStore],
) -> None:
    a, b, *_ = stores
    await a.create(ExecutionStarted(execution_id="e1", flow="f"))
    await b.load("e1")

    async def rival() -> None:
        await b.append(AppendRequest("e1", 1, [step(2, "b")], StatusChange("suspended")))

    lose_ack(a, applied=False, meanwhile=rival)
    blobs = [secrets.token_hex(300_000) for _ in range(2)]
    events: list[Event] = [step(2 + i, "a", blob) for i, blob in enumerate(blobs)]
    with pytest.raises(AppendConflictError):
        await a.append(AppendRequest("e1", 1, events, StatusChange("completed"), "{}"))
    log = await a.read("e1")
    assert ids_of(log) == [(1, None), (2, "b")]
    assert (await a.summary("e1")).status == "suspended"
    assert (await a.load("e1")).snapshot is None
    await agree(stores, "e1", log)


@pytest.mark.parametrize("lost", [1, 2])
async def test_a_lost_ack_of_a_commit_of_a_snapshot_in_parts_keeps_it_readable(
    stores: list[FirestoreEventStore], lost: int
) -> None:
    """A commit of a multi-commit snapshot was applied but its answer lost: the first (a
    part), whose retry meets that part; or the last (the other part and the pointer), whose
    retry must not delete the parts now pointed at."""
    a, b, *_ = stores
    await a.create(ExecutionStarted(execution_id="e1", flow="f"))
    await a.append(AppendRequest("e1", 1, [step(2, "a"), step(3, "b")]))
    await a.save_snapshot("e1", Snapshot(2, "{}"))  # replaced by the big one
    a.snapshot_commit_bytes = 1_000_000  # one 900 kB part per commit
    big = secrets.token_hex(1_200_000)  # two parts
    calls = lose_ack(a, nth=lost)
    await a.save_snapshot("e1", Snapshot(3, big))
    assert len(calls) == 3
    for reader in (a, b):
        loaded = await reader.load("e1")
        assert (loaded.snapshot, loaded.events) == (Snapshot(3, big), [])
    parts: Any = a._client.collection("executions").document("e1").collection("snapshots")
    assert len([d async for d in parts.stream()]) == 2  # the old part is gone


async def test_snapshots_inside_pages_and_in_parts_load_alike_cold_and_warm(
    stores: list[FirestoreEventStore],
) -> None:
    a, b, c, _ = stores
    await a.create(ExecutionStarted(execution_id="e1", flow="f"))
    await a.append(AppendRequest("e1", 1, [step(2 + i, str(i)) for i in range(5)]))  # 2..6
    await b.load("e1")  # warm before the snapshot
    await a.save_snapshot("e1", Snapshot(4, '{"at": 4}'))  # inside page 2..6
    for reader in (a, b, c):
        loaded = await reader.load("e1")
        assert (loaded.snapshot, [e.seq for e in loaded.events]) == (
            Snapshot(4, '{"at": 4}'),
            [5, 6],
        )
    with pytest.raises(ValueError, match="ahead"):
        await c.save_snapshot("e1", Snapshot(7, "{}"))
    await c.append(AppendRequest("e1", 6, [step(7, "c"), step(8, "c")]))
    c.snapshot_commit_bytes = 1_000_000
    big = secrets.token_hex(1_200_000)
    await c.save_snapshot("e1", Snapshot(7, big))  # inside page 7..8, in two commits
    await a.save_snapshot("e1", Snapshot(5, "{}"))  # older: ignored
    fresh = FirestoreEventStore(project=PROJECT, database=c._client._database)
    for reader in (a, b, c, fresh):
        loaded = await reader.load("e1")
        assert (loaded.snapshot, [e.seq for e in loaded.events]) == (Snapshot(7, big), [8])
    assert await b.append(AppendRequest("e1", 8, [step(9, "b")])) == 9
    for reader in (a, b, c, fresh):
        assert [e.seq for e in (await reader.load("e1")).events] == [8, 9]
    await fresh.aclose()


async def test_load_many_over_paged_legacy_and_snapshotted_executions(
    stores: list[FirestoreEventStore], client: firestore.AsyncClient
) -> None:
    from loom_gcp._firestore_docs import event_doc_id, event_fields, new_execution_fields

    a, b, *_ = stores
    started = ExecutionStarted(execution_id="old", flow="f", seq=1, at=1.0)
    legacy: list[Event] = [started, step(2, "a"), step(3, "b")]
    doc: Any = client.collection("executions").document("old")
    batch = client.batch()
    batch.create(doc, {**new_execution_fields("f", 1.0), "last_seq": 3})
    for event in legacy:
        ref = doc.collection("events").document(event_doc_id(event.seq))
        batch.create(ref, event_fields(event))
    await batch.commit()
    await a.create(ExecutionStarted(execution_id="paged", flow="f"))
    await a.append(AppendRequest("paged", 1, [step(2 + i, str(i)) for i in range(4)]))
    await a.create(ExecutionStarted(execution_id="snap", flow="f"))
    await a.append(AppendRequest("snap", 1, [step(2 + i, str(i)) for i in range(4)]))
    await a.save_snapshot("snap", Snapshot(3, '{"at": 3}'))  # inside the page
    await a.create(ExecutionStarted(execution_id="inline", flow="f"))
    await a.append(
        AppendRequest("inline", 1, [step(2, "x")], StatusChange("suspended"), '{"at": 2}')
    )
    order = ["snap", "old", "inline", "paged", "old"]
    for reader in (b, a, b):  # cold, warm (wrote them), warm (loaded them)
        many = await reader.load_many(order)
        one: list[LoadedLog] = [await reader.load(eid) for eid in order]
        assert many == one
        assert [m.last_seq for m in many] == [5, 3, 2, 5, 3]
        assert many[0].snapshot == Snapshot(3, '{"at": 3}')
        assert [e.seq for e in many[0].events] == [4, 5]
        assert many[1].events == legacy
        assert many[2].snapshot == Snapshot(2, '{"at": 2}') and many[2].events == []


async def test_a_lost_ack_whose_append_landed_and_was_built_on_is_still_success(
    stores: list[FirestoreEventStore],
) -> None:
    a, b, *_ = stores
    await a.create(ExecutionStarted(execution_id="e1", flow="f"))

    async def built_on() -> None:  # another writer loads our append and goes on
        assert (await b.load("e1")).last_seq == 3
        await b.append(AppendRequest("e1", 3, [step(4, "b")]))

    lose_ack(a, meanwhile=built_on)
    assert await a.append(AppendRequest("e1", 1, [step(2, "a"), step(3, "a")])) == 3
    with pytest.raises(AppendConflictError):
        await a.append(AppendRequest("e1", 3, [step(4, "a")]))
    log = await a.read("e1")
    assert ids_of(log) == [(1, None), (2, "a"), (3, "a"), (4, "b")]
    await agree(stores, "e1", log)


async def test_a_start_too_big_for_the_execution_document_is_page_one(
    stores: list[FirestoreEventStore], client: firestore.AsyncClient
) -> None:
    """A start over 512 kB is a page of its own: created (its answer lost), snapshotted at
    seq 1, continued, read from every seq; then deleted by TTL and started again big."""
    a, b, c, d = stores
    started = ExecutionStarted(execution_id="e1", flow="f", input=secrets.token_hex(300_000))
    calls = lose_ack(a)
    assert await a.create(started) == (True, started.model_copy(update={"seq": 1}))
    assert len(calls) == 2
    assert (await b.create(started))[0] is False
    await b.save_snapshot("e1", Snapshot(1, '{"at": 1}'))
    for reader in (a, b, c):
        loaded = await reader.load("e1")
        assert (loaded.snapshot, loaded.events) == (Snapshot(1, '{"at": 1}'), [])
    await c.append(AppendRequest("e1", 1, [step(2, "c"), step(3, "c")]))
    with pytest.raises(AppendConflictError):
        await a.append(AppendRequest("e1", 1, [step(2, "a")]))
    log = await d.read("e1")
    assert ids_of(log) == [(1, None), (2, "c"), (3, "c")]
    await agree(stores, "e1", log)
    await client.collection("executions").document("e1").delete()  # what TTL does
    again = started.model_copy(update={"input": secrets.token_hex(300_000)})
    created, first = await d.create(again)
    assert created and first.input == again.input
    for reader in stores:
        loaded = await reader.load("e1")
        assert (loaded.snapshot, loaded.events) == (None, [first])
    assert await a.append(AppendRequest("e1", 1, [step(2, "new")])) == 2
    await agree(stores, "e1", [first, step(2, "new")])


async def test_an_append_whose_snapshot_cannot_be_saved_still_reports_its_events_written(
    stores: list[FirestoreEventStore],
) -> None:
    """The snapshot too big to ride the status write is saved after the commit; if that
    fails, the append (written) must not be reported as failed: a snapshot is only a
    shortcut, and "a failed write writes nothing"."""
    a, b, *_ = stores
    await a.create(ExecutionStarted(execution_id="e1", flow="f"))
    real: Commit = a._io.commit_once
    commits: list[int] = []

    async def snapshot_down(batch: AsyncWriteBatch, timeout: float) -> None:
        commits.append(1)
        if len(commits) > 1:  # the append's commit passes, the snapshot's never do
            raise gexc.ServiceUnavailable("down")
        await real(batch, timeout)

    a._io.commit_once = snapshot_down  # type: ignore[method-assign]
    a._io.policy = replace(a._io.policy, deadline=1.0)
    state = secrets.token_hex(400_000)  # too big to ride the execution document
    change = StatusChange("suspended")
    assert await a.append(AppendRequest("e1", 1, [step(2, "a")], change, state)) == 2
    a._io.commit_once = real  # type: ignore[method-assign]
    loaded = await b.load("e1")
    assert (loaded.snapshot, ids_of(loaded.events)) == (None, [(1, None), (2, "a")])
    assert await a.append(AppendRequest("e1", 2, [step(3, "a")])) == 3
