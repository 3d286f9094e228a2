"""Attacks on the Firestore page layout where an id is used again, on the emulator: a purge
or a TTL deletion, then a new start of the same id, seen by store objects whose memory
still holds the old log; and executions written by the previous layout (one document per
event) continued, snapshotted and purged by the new store."""

from __future__ import annotations

from typing import Any

import pytest
from google.api_core import exceptions as gexc
from google.cloud import firestore
from google.cloud.firestore_v1.async_batch import AsyncWriteBatch

from loom.errors import AppendConflictError
from loom.events import EffectCompleted, Event, ExecutionStarted
from loom.store import AppendRequest, Snapshot, StatusChange
from loom_gcp._firestore_docs import event_doc_id, event_fields, new_execution_fields
from loom_gcp.firestore import FirestoreEventStore
from tests.gcp.firestore_helpers import PROJECT, step

pytestmark = pytest.mark.slow


def sid(event: Event) -> str | None:
    return event.step_id if isinstance(event, EffectCompleted) else None


def ids_of(events: list[Event]) -> list[tuple[int, str | None]]:
    return [(e.seq, sid(e)) for e in events]


async def page_ids(client: firestore.AsyncClient, eid: str) -> list[str]:
    doc: Any = client.collection("executions").document(eid)
    return [d.id async for d in doc.collection("events").stream()]


async def write_legacy(
    client: firestore.AsyncClient, eid: str, events: list[Event], **fields: Any
) -> None:
    """An execution as the previous release wrote it: one document per event."""
    doc: Any = client.collection("executions").document(eid)
    batch = client.batch()
    batch.create(doc, {**new_execution_fields("f", 1.0), "last_seq": events[-1].seq, **fields})
    for event in events:
        ref = doc.collection("events").document(event_doc_id(event.seq))
        batch.create(ref, event_fields(event))
    await batch.commit()


# -- an id purged and started again ----------------------------------------------------------


async def test_a_store_that_remembers_the_old_log_never_serves_it_after_a_purge(
    stores: list[FirestoreEventStore],
) -> None:
    """``mine`` wrote and remembers a log of pages 2..3 and 4..6 (with a snapshot); another
    store purges the id and starts it again with pages at other seqs."""
    mine, other, _ = stores
    await mine.create(ExecutionStarted(execution_id="e1", flow="f", input=1))
    await mine.append(AppendRequest("e1", 1, [step(2, "old"), step(3, "old")]))
    more: list[Event] = [step(4, "old"), step(5, "old"), step(6, "old")]
    await mine.append(AppendRequest("e1", 3, more, StatusChange("suspended"), '{"old": 6}'))
    assert await other.delete_execution("e1")
    await other.create(ExecutionStarted(execution_id="e1", flow="f", input=2))
    new: list[Event] = [step(2 + i, "new") for i in range(4)]  # one page, 2..5
    await other.append(AppendRequest("e1", 1, new))
    loaded = await mine.load("e1")
    assert loaded.snapshot is None
    assert ids_of(loaded.events) == [(1, None)] + [(s, "new") for s in range(2, 6)]
    assert [sid(e) for e in await mine.read("e1", 3)] == ["new", "new"]
    assert await mine.append(AppendRequest("e1", 5, [step(6, "mine")])) == 6
    assert ids_of(await other.read("e1", 4)) == [(5, "new"), (6, "mine")]


async def test_ttl_leftovers_overlapping_the_new_log_are_never_read_as_it(
    stores: list[FirestoreEventStore], client: firestore.AsyncClient
) -> None:
    """TTL deleted the execution document alone, leaving pages 2..3, 4..9 and a snapshot.
    The new execution's reads, summary and appends must not take them for its own."""
    old, new, third = stores
    await old.create(ExecutionStarted(execution_id="e1", flow="f", input=1))
    await old.append(AppendRequest("e1", 1, [step(2, "old"), step(3, "old")]))
    await old.append(AppendRequest("e1", 3, [step(4 + i, "old") for i in range(6)]))
    await old.save_snapshot("e1", Snapshot(9, '{"old": 9}'))
    await client.collection("executions").document("e1").delete()  # what TTL does
    created, _ = await new.create(ExecutionStarted(execution_id="e1", flow="g", input=2))
    assert created
    summary = await third.summary("e1")
    assert (summary.flow, summary.last_seq) == ("g", 1)
    loaded = await third.load("e1")
    assert (loaded.snapshot, ids_of(loaded.events)) == (None, [(1, None)])
    assert await new.append(AppendRequest("e1", 1, [step(2, "new"), step(3, "new")])) == 3
    assert await old.append(AppendRequest("e1", 3, [step(4, "new")])) == 4
    for reader in (old, new, third):
        assert ids_of(await reader.read("e1")) == [(1, None)] + [(s, "new") for s in (2, 3, 4)]
        assert (await reader.summary("e1")).last_seq == 4
        assert (await reader.load("e1")).snapshot is None
    assert await page_ids(client, "e1") == [event_doc_id(2), event_doc_id(4)]


async def test_a_summary_is_exact_while_ttl_leftovers_lie_beyond_the_new_log(
    stores: list[FirestoreEventStore], client: firestore.AsyncClient, database: str
) -> None:
    """Leftovers beyond the new log are found by the summary's query first: they must not
    hide the new log's own newest page."""
    old, new, _ = stores
    await old.create(ExecutionStarted(execution_id="e1", flow="f", input=1))
    await old.append(AppendRequest("e1", 1, [step(2, "old")]))
    await old.append(AppendRequest("e1", 2, [step(3 + i, "old") for i in range(8)]))  # 3..10
    # A purge that stopped after deleting page 2 (its deletes are several commits), then
    # TTL deleted the execution document: page 3..10 is left.
    events: Any = client.collection("executions").document("e1").collection("events")
    await events.document(event_doc_id(2)).delete()
    await client.collection("executions").document("e1").delete()  # what TTL does
    await new.create(ExecutionStarted(execution_id="e1", flow="g", input=2))
    fresh = FirestoreEventStore(project=PROJECT, database=database)
    try:
        assert await fresh.append(AppendRequest("e1", 1, [step(2, "n"), step(3, "n")])) == 3
        assert (await fresh.summary("e1")).last_seq == 3
    finally:
        await fresh.aclose()


# -- the previous layout -------------------------------------------------------------------


async def test_a_retry_after_a_lost_answer_that_meets_an_old_release_event_conflicts(
    stores: list[FirestoreEventStore], client: firestore.AsyncClient
) -> None:
    """During a revision switch a worker of the previous release wrote event document 4
    while our commit's answer was lost (and it had not landed): a conflict, not a crash."""
    mine, *_ = stores
    started = ExecutionStarted(execution_id="old", flow="f", seq=1, at=1.0)
    await write_legacy(client, "old", [started, step(2, "a"), step(3, "b")])
    await mine.load("old")
    doc: Any = client.collection("executions").document("old")
    real = mine._io.commit_once
    calls: list[int] = []

    async def old_release_wins(batch: AsyncWriteBatch, timeout: float) -> None:
        calls.append(1)
        if len(calls) == 1:
            ref = doc.collection("events").document(event_doc_id(4))
            await ref.create(event_fields(step(4, "previous release")))
            raise gexc.ServiceUnavailable("connection reset before the response")
        await real(batch, timeout)

    mine._io.commit_once = old_release_wins  # type: ignore[method-assign]
    with pytest.raises(AppendConflictError):
        await mine.append(AppendRequest("old", 3, [step(4, "mine")]))
    assert ids_of(await mine.read("old", 2)) == [(3, "b"), (4, "previous release")]


async def test_a_legacy_snapshot_in_parts_without_its_page_loads_and_goes_on(
    stores: list[FirestoreEventStore], client: firestore.AsyncClient
) -> None:
    """The previous release's snapshot pointer (parts, no ``snapshot_page``)."""
    mine, other, third = stores
    started = ExecutionStarted(execution_id="old", flow="f", seq=1, at=1.0)
    legacy: list[Event] = [started, *[step(s, str(s)) for s in range(2, 7)]]
    await write_legacy(client, "old", legacy, status="suspended")
    from loom_gcp._firestore_docs import encode_snapshot

    (data,) = encode_snapshot('{"at": 4}')
    doc: Any = client.collection("executions").document("old")
    await doc.collection("snapshots").document("0000000004.abcd.0").create({"seq": 4, "data": data})
    pointer = {"snapshot_seq": 4, "snapshot_id": "0000000004.abcd", "snapshot_parts": 1}
    await doc.update(pointer)
    for reader in (mine, mine, other):  # cold, warm, cold
        loaded = await reader.load("old")
        assert (loaded.snapshot, ids_of(loaded.events)) == (
            Snapshot(4, '{"at": 4}'),
            [(5, "5"), (6, "6")],
        )
    await mine.append(AppendRequest("old", 6, [step(7, "7"), step(8, "8")]))
    await other.save_snapshot("old", Snapshot(7, '{"at": 7}'))  # inside the new page
    for reader in (mine, other, third):
        loaded = await reader.load("old")
        assert (loaded.snapshot, ids_of(loaded.events)) == (Snapshot(7, '{"at": 7}'), [(8, "8")])
        assert [e.seq for e in await reader.read("old", 5)] == [6, 7, 8]
    assert await third.delete_execution("old")
    assert await page_ids(client, "old") == []
    snapshots: Any = doc.collection("snapshots")
    assert [d.id async for d in snapshots.stream()] == []


async def test_ttl_leftovers_inside_the_new_log_do_not_move_its_end(
    stores: list[FirestoreEventStore], client: firestore.AsyncClient
) -> None:
    """A leftover page 6..9 (its page 2..5 purged before the purge stopped) beside the new
    log's page 2..7: a store that never loaded the new log must not take a snapshot at 8,
    ahead of the log, and must see that 7 ends a page; a read from inside the leftover's
    range must not lose the new log's events."""
    old, new, cold = stores
    await old.create(ExecutionStarted(execution_id="e1", flow="f", input=1))
    await old.append(AppendRequest("e1", 1, [step(2 + i, "old") for i in range(4)]))
    await old.append(AppendRequest("e1", 5, [step(6 + i, "old") for i in range(4)]))
    events: Any = client.collection("executions").document("e1").collection("events")
    await events.document(event_doc_id(2)).delete()
    await client.collection("executions").document("e1").delete()  # what TTL does
    await new.create(ExecutionStarted(execution_id="e1", flow="g", input=2))
    assert await new.append(AppendRequest("e1", 1, [step(2 + i, "new") for i in range(6)])) == 7
    new_log = [(1, None), *[(s, "new") for s in range(2, 8)]]
    for after in range(8, -1, -1):  # from the end: the first full read deletes leftovers
        assert ids_of(await cold.read("e1", after)) == new_log[after:]
    with pytest.raises(ValueError, match="ahead"):
        await cold.save_snapshot("e1", Snapshot(8, "{}"))
    await cold.save_snapshot("e1", Snapshot(7, '{"at": 7}'))
    doc = await client.collection("executions").document("e1").get()
    assert (doc.get("snapshot_seq"), doc.get("snapshot_page")) == (7, 2)
    assert await new.append(AppendRequest("e1", 7, [step(8, "new")])) == 8
    for reader in stores:
        loaded = await reader.load("e1")
        assert (loaded.snapshot, ids_of(loaded.events)) == (Snapshot(7, '{"at": 7}'), [(8, "new")])
