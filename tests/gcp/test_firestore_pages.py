"""The Firestore store's page layout, on the emulator: one document per append (split at
1 MiB), the start event on the execution document, reads that start inside a page, and
executions written by the previous layout (one document per event)."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from google.cloud import firestore

from loom import EffectContext, FlowContext, Loom
from loom.errors import AppendConflictError
from loom.events import EffectCompleted, Event, ExecutionCompleted, ExecutionStarted
from loom.runtime import Runtime
from loom.store import AppendRequest, Snapshot, StatusChange
from loom_gcp._firestore_docs import (
    MAX_DOC_BYTES,
    event_doc_id,
    event_fields,
    inline_snapshot_fields,
)
from loom_gcp._firestore_docs import new_execution_fields as legacy_execution_fields
from loom_gcp.firestore import FirestoreEventStore
from tests.gcp.firestore_helpers import PROJECT, lose_first_ack, step

pytestmark = pytest.mark.slow


@pytest.fixture
async def store(database: str) -> AsyncIterator[FirestoreEventStore]:
    s = FirestoreEventStore(project=PROJECT, database=database)
    yield s
    await s.aclose()


async def cold(database: str) -> FirestoreEventStore:
    """Another store object over the same database: what another process sees."""
    return FirestoreEventStore(project=PROJECT, database=database)


async def page_docs(client: firestore.AsyncClient, eid: str) -> dict[str, dict[str, Any]]:
    doc: Any = client.collection("executions").document(eid)
    events: Any = doc.collection("events")
    return {d.id: d.to_dict() or {} async for d in events.stream()}


async def test_create_writes_one_document_and_an_append_one_page(
    store: FirestoreEventStore, client: firestore.AsyncClient
) -> None:
    await store.create(ExecutionStarted(execution_id="e1", flow="f", input={"n": 1}))
    assert store.ops["writes"] == 1
    assert await page_docs(client, "e1") == {}  # the start rides the execution document
    events: list[Event] = [step(2 + i, str(i)) for i in range(10)]
    await store.append(AppendRequest("e1", 1, events, StatusChange("running")))
    assert store.ops["writes"] == 3  # + one page, + the execution document's status
    pages = await page_docs(client, "e1")
    assert list(pages) == [event_doc_id(2)]
    assert (pages[event_doc_id(2)]["seq"], pages[event_doc_id(2)]["last"]) == (2, 11)
    assert len(pages[event_doc_id(2)]["bodies"]) == 10


@pytest.mark.parametrize("applied", [True, False])
async def test_a_create_whose_answer_was_lost_counts_what_firestore_may_bill(
    store: FirestoreEventStore, client: firestore.AsyncClient, applied: bool
) -> None:
    """The first commit of a create gets no answer (the connection reset; on a loaded
    machine, the client's timeout). Applied or not, Firestore may have billed it, so the
    operation counts include it: one write when it applied (the retry collides with it and
    writes nothing), two when it did not (the retry writes)."""
    calls = lose_first_ack(store, applied=applied)
    created, _ = await store.create(ExecutionStarted(execution_id="e1", flow="f"))
    assert created and len(calls) == 2
    assert store.ops["writes"] == (1 if applied else 2)
    assert (await store.read("e1"))[0].flow == "f"  # type: ignore[union-attr]


async def test_an_append_over_1_mib_is_split_into_pages_in_one_commit(
    store: FirestoreEventStore, client: firestore.AsyncClient, database: str
) -> None:
    await store.create(ExecutionStarted(execution_id="e1", flow="f"))
    blobs = [secrets.token_hex(200_000) for _ in range(5)]  # 400 kB each: two per page
    events: list[Event] = [step(2 + i, str(i), blobs[i]) for i in range(5)]
    store.reset_ops()
    assert await store.append(AppendRequest("e1", 1, events)) == 6
    assert store.ops["writes"] == 3
    pages = await page_docs(client, "e1")
    assert [(p["seq"], p["last"]) for p in pages.values()] == [(2, 3), (4, 5), (6, 6)]
    assert list(pages) == [event_doc_id(2), event_doc_id(4), event_doc_id(6)]
    other = await cold(database)
    try:
        loaded = await other.load("e1")
        assert [e.seq for e in loaded.events] == [1, 2, 3, 4, 5, 6]
        outputs = [e.output for e in loaded.events if isinstance(e, EffectCompleted)]
        assert outputs == blobs
        assert [e.seq for e in await other.read("e1", after_seq=4)] == [5, 6]
        with pytest.raises(AppendConflictError):  # 4 is inside a page, not the log's end
            await other.append(AppendRequest("e1", 4, [step(5, "x")]))
    finally:
        await other.aclose()
    assert all(len(str(p)) < MAX_DOC_BYTES for p in pages.values())


async def test_read_after_a_seq_inside_a_page(store: FirestoreEventStore, database: str) -> None:
    await store.create(ExecutionStarted(execution_id="e1", flow="f"))
    await store.append(AppendRequest("e1", 1, [step(2 + i, str(i)) for i in range(5)]))
    await store.append(AppendRequest("e1", 6, [step(7, "a"), step(8, "b")]))
    for reader in (store, await cold(database)):
        assert [e.seq for e in await reader.read("e1", after_seq=3)] == [4, 5, 6, 7, 8]
        assert [e.seq for e in await reader.read("e1", after_seq=7)] == [8]
        assert [e.seq for e in await reader.read("e1", after_seq=1)] == list(range(2, 9))
        assert [e.seq for e in await reader.read("e1")] == list(range(1, 9))
        assert await reader.read("e1", after_seq=8) == []
        assert await reader.read("e1", after_seq=50) == []
    await reader.aclose()


async def test_a_snapshot_inside_a_page_loads_the_rest_of_the_page(
    store: FirestoreEventStore, database: str
) -> None:
    await store.create(ExecutionStarted(execution_id="e1", flow="f"))
    await store.append(AppendRequest("e1", 1, [step(2 + i, str(i)) for i in range(4)]))
    await store.save_snapshot("e1", Snapshot(3, '{"at": 3}'))
    other = await cold(database)
    try:
        loaded = await other.load("e1")
        assert loaded.snapshot == Snapshot(3, '{"at": 3}')
        assert [e.seq for e in loaded.events] == [4, 5]
        assert await other.append(AppendRequest("e1", 5, [step(6, "x")])) == 6
        assert [e.seq for e in (await store.load("e1")).events] == [4, 5, 6]
    finally:
        await other.aclose()


async def test_two_appends_at_the_same_seq_one_wins(
    store: FirestoreEventStore, database: str
) -> None:
    await store.create(ExecutionStarted(execution_id="e1", flow="f"))
    await store.append(AppendRequest("e1", 1, [step(2, "a"), step(3, "b")]))
    other = await cold(database)
    try:
        await other.load("e1")  # both know the log ends at 3

        async def attempt(writer: FirestoreEventStore, name: str) -> str:
            events: list[Event] = [step(4, name), step(5, name)]
            try:
                await writer.append(AppendRequest("e1", 3, events))
            except AppendConflictError:
                return "conflict"
            return name

        outcomes = await asyncio.gather(attempt(store, "one"), attempt(other, "two"))
        assert sorted(outcomes) in (["conflict", "one"], ["conflict", "two"])
        winner = next(o for o in outcomes if o != "conflict")
        log = await (await cold(database)).read("e1")
        assert [e.seq for e in log] == [1, 2, 3, 4, 5]
        assert {e.step_id for e in log[3:] if isinstance(e, EffectCompleted)} == {winner}
    finally:
        await other.aclose()


async def test_an_execution_of_the_previous_layout_loads_appends_and_purges(
    store: FirestoreEventStore, client: firestore.AsyncClient, database: str
) -> None:
    """The previous release wrote one document per event, the start in ``0000000001``."""
    started = ExecutionStarted(execution_id="old", flow="f", input={"n": 1}, seq=1, at=1.0)
    legacy: list[Event] = [started, step(2, "a"), step(3, "b")]
    doc: Any = client.collection("executions").document("old")
    batch = client.batch()
    batch.create(doc, {**legacy_execution_fields("f", 1.0), "last_seq": 3})
    for event in legacy:
        batch.create(
            doc.collection("events").document(event_doc_id(event.seq)), event_fields(event)
        )
    await batch.commit()

    assert (await store.load("old")).events == legacy
    assert [e.seq for e in await store.read("old", after_seq=2)] == [3]
    created, first = await store.create(started.model_copy(update={"at": 2.0}))
    assert (created, first) == (False, started)
    done = ExecutionCompleted(seq=6, output=1, at=1.0)
    more: list[Event] = [step(4, "c"), step(5, "d"), done]
    assert await store.append(AppendRequest("old", 3, more, StatusChange("completed"))) == 6
    assert (await store.summary("old")).last_seq == 6
    other = await cold(database)
    try:
        assert (await other.load("old")).events == legacy + more
        assert [e.seq for e in await other.read("old", after_seq=4)] == [5, 6]
        with pytest.raises(AppendConflictError):
            await other.append(AppendRequest("old", 3, [step(4, "x")]))
        report = await other.purge(time.time() + 60)
        assert report.purged == ["old"]
    finally:
        await other.aclose()
    assert await page_docs(client, "old") == {}
    assert not (await doc.get()).exists


async def test_a_legacy_snapshot_loads_and_the_log_goes_on(
    store: FirestoreEventStore, client: firestore.AsyncClient, database: str
) -> None:
    """The previous release kept a snapshot without ``snapshot_page``: every event was a
    document of its own, so the snapshot's seq always ended one."""
    started = ExecutionStarted(execution_id="old", flow="f", seq=1, at=1.0)
    legacy: list[Event] = [started, step(2, "a"), step(3, "b"), step(4, "c")]
    snapshot = inline_snapshot_fields(3, '{"at": 3}', 0) or {}
    del snapshot["snapshot_page"]
    doc: Any = client.collection("executions").document("old")
    fields = {**legacy_execution_fields("f", 1.0), **snapshot, "status": "suspended"}
    batch = client.batch()
    batch.create(doc, {**fields, "last_seq": 3})
    for event in legacy:
        batch.create(
            doc.collection("events").document(event_doc_id(event.seq)), event_fields(event)
        )
    await batch.commit()
    # Cold: the execution document, then documents 3 (the snapshot's) and 4; then from
    # what the store remembers: the execution document and document 4.
    for reads in (3, 2):
        store.reset_ops()
        loaded = await store.load("old")
        assert (loaded.snapshot, loaded.events) == (Snapshot(3, '{"at": 3}'), legacy[3:])
        assert store.ops["reads"] == reads
    assert await store.append(AppendRequest("old", 4, [step(5, "d")])) == 5
    other = await cold(database)
    try:
        assert [e.seq for e in (await other.load("old")).events] == [4, 5]
    finally:
        await other.aclose()


async def test_a_batched_ten_step_flow_writes_at_most_three_documents(database: str) -> None:
    counts: dict[str, int] = {}
    for durability in ("batched", "strict"):
        app = Loom("pages", durability=durability)

        @app.effect("step")
        async def idem(ctx: EffectContext, n: int) -> int:
            return n

        @app.flow("steps")
        async def steps(ctx: FlowContext, n: int) -> int:
            for i in range(n):
                await ctx.execute("step", i)
            return n

        store = FirestoreEventStore(project=PROJECT, database=database)
        result = await Runtime(app, store).start("steps", 10)
        assert result.status == "completed"
        counts[durability] = store.ops["writes"]
        assert store.ops["reads"] <= 3
        await store.aclose()
    assert counts["batched"] <= 3  # start; claim + steps + end in one page + the status
    assert counts["strict"] <= 14  # start, claim, 10 steps, the end and the status


async def test_pages_left_by_a_ttl_deletion_are_not_the_new_log_and_are_deleted(
    store: FirestoreEventStore, client: firestore.AsyncClient, database: str
) -> None:
    """TTL deletes the execution document alone; a new start of the id writes no page, so
    nothing collides with the old pages: their age tells them apart."""
    await store.create(ExecutionStarted(execution_id="e1", flow="old"))
    await store.append(AppendRequest("e1", 1, [step(2, "a"), step(3, "b")]))
    await client.collection("executions").document("e1").delete()  # what TTL does
    other = await cold(database)
    try:
        created, first = await other.create(ExecutionStarted(execution_id="e1", flow="new"))
        assert created and first.flow == "new"
        assert [e.seq for e in await other.read("e1")] == [1]
        assert [e.seq for e in (await other.load("e1")).events] == [1]
        assert await page_docs(client, "e1") == {}  # the first read deleted the leftovers
        assert await other.append(AppendRequest("e1", 1, [step(2, "c")])) == 2
        loaded = await store.load("e1")  # the store that wrote the old log
        assert [(e.seq, getattr(e, "step_id", None)) for e in loaded.events] == [
            (1, None),
            (2, "c"),
        ]
    finally:
        await other.aclose()
