"""What the Firestore store costs and keeps, on the emulator (beyond the shared contract)."""

from __future__ import annotations

import secrets
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
from google.cloud import firestore

from loom.errors import ConfigurationError
from loom.events import (
    EffectCompleted,
    EffectStarted,
    ExecutionClaimed,
    ExecutionCompleted,
    ExecutionStarted,
)
from loom.shards import shard_of
from loom.store import AppendRequest, Snapshot, StatusChange
from loom_gcp.firestore import FirestoreEventStore
from tests.gcp.firestore_helpers import PROJECT

pytestmark = pytest.mark.slow


def step(seq: int, step_id: str = "1") -> EffectCompleted:
    return EffectCompleted(seq=seq, step_id=step_id, effect="fx", output={"n": seq}, at=1.0)


@pytest.fixture
async def store(database: str) -> AsyncIterator[FirestoreEventStore]:
    s = FirestoreEventStore(project=PROJECT, database=database)
    await s.create(ExecutionStarted(execution_id="e1", flow="f", input={"n": 1}))
    yield s
    await s.aclose()


async def test_the_hot_path_writes_one_document_per_append_and_reads_none(
    store: FirestoreEventStore,
) -> None:
    store.reset_ops()
    await store.append(AppendRequest("e1", 1, [ExecutionClaimed(seq=2, holder="w", until=9.0)]))
    await store.append(AppendRequest("e1", 2, [step(3)]))  # an idempotent step
    await store.append(  # a non-idempotent step: intent record, then outcome
        AppendRequest("e1", 3, [EffectStarted(seq=4, step_id="2", effect="p", idempotency_key="k")])
    )
    await store.append(AppendRequest("e1", 4, [step(5, "2")]))
    assert store.ops == {"reads": 0, "writes": 4, "deletes": 0}
    done = ExecutionCompleted(seq=6, output=1)
    await store.append(AppendRequest("e1", 5, [done], StatusChange("completed")))
    # The end rides the execution document's status update: one write, not two.
    assert store.ops == {"reads": 0, "writes": 5, "deletes": 0}


async def test_a_cold_store_reads_once_before_its_first_append(database: str) -> None:
    warm = FirestoreEventStore(project=PROJECT, database=database)
    await warm.create(ExecutionStarted(execution_id="e1", flow="f"))
    await warm.append(AppendRequest("e1", 1, [step(2)]))
    cold = FirestoreEventStore(project=PROJECT, database=database)
    await cold.append(AppendRequest("e1", 2, [step(3, "2")]))
    await cold.append(AppendRequest("e1", 3, [step(4, "3")]))
    assert cold.ops == {"reads": 1, "writes": 2, "deletes": 0}
    await warm.aclose()
    await cold.aclose()


async def test_list_reads_execution_documents_only(store: FirestoreEventStore) -> None:
    for i in range(5):
        await store.append(AppendRequest("e1", 1 + i, [step(2 + i, str(i))]))
    await store.create(ExecutionStarted(execution_id="e2", flow="f"))
    store.reset_ops()
    rows = await store.list()
    assert {r.execution_id for r in rows} == {"e1", "e2"}
    # One query per shard: each execution document read once, an empty shard billed one read
    # (and no event page read at all).
    shards = await store.shard_count()
    held = {shard_of(e, shards) for e in ("e1", "e2")}
    assert store.ops["reads"] == 2 + shards - len(held)


async def test_summary_is_exact_although_the_execution_document_lags(
    store: FirestoreEventStore,
) -> None:
    before = time.time()
    await store.append(AppendRequest("e1", 1, [step(2), step(3, "2")]))
    listed = {r.execution_id: r for r in await store.list()}
    assert listed["e1"].last_seq == 1  # documented: list shows the last status change
    summary = await store.summary("e1")
    assert summary.last_seq == 3
    assert summary.updated_at >= before - 1


async def test_a_large_snapshot_is_split_and_replaced_whole(
    store: FirestoreEventStore, database: str
) -> None:
    for i in range(3):
        await store.append(AppendRequest("e1", 1 + i, [step(2 + i, str(i))]))
    big = secrets.token_hex(1_200_000)  # 2.4 MB of hex: still over 1 MiB compressed
    await store.save_snapshot("e1", Snapshot(3, big))
    client = firestore.AsyncClient(project=PROJECT, database=database)
    parts = client.collection("executions").document("e1").collection("snapshots")
    assert len([d async for d in parts.stream()]) == 2
    fresh = FirestoreEventStore(project=PROJECT, database=database)
    loaded = await fresh.load("e1")
    assert loaded.snapshot == Snapshot(3, big)
    assert [e.seq for e in loaded.events] == [4]
    # exec doc + 2 parts + the tail query
    assert fresh.ops["reads"] == 4
    await store.save_snapshot("e1", Snapshot(4, '{"small": true}'))
    assert len([d async for d in parts.stream()]) == 1  # the old parts are gone
    assert (await fresh.load("e1")).snapshot == Snapshot(4, '{"small": true}')
    await fresh.aclose()


async def test_resume_reads_a_constant_number_of_documents(
    store: FirestoreEventStore, database: str
) -> None:
    events = [step(2 + i, str(i)) for i in range(200)]
    await store.append(AppendRequest("e1", 1, events))
    await store.save_snapshot("e1", Snapshot(201, '{"folded": 200}'))
    await store.append(AppendRequest("e1", 201, [step(202, "x")]))
    cold = FirestoreEventStore(project=PROJECT, database=database)  # another process
    loaded = await cold.load("e1")
    assert loaded.last_seq == 202 and len(loaded.events) == 1
    assert cold.ops["reads"] == 3  # execution doc, one snapshot part, one tail event
    await cold.aclose()
    store.reset_ops()  # the store that wrote them already holds the snapshot and the log
    assert (await store.load("e1")).last_seq == 202
    assert store.ops["reads"] == 2  # execution doc, the last event it knows


async def test_finished_executions_get_an_expiry(store: FirestoreEventStore, database: str) -> None:
    client = firestore.AsyncClient(project=PROJECT, database=database)
    doc = client.collection("executions").document("e1")
    assert (await doc.get()).get("expire_at") is None
    done = ExecutionCompleted(seq=2, output=1)
    await store.append(AppendRequest("e1", 1, [done], StatusChange("completed")))
    expire_at = (await doc.get()).get("expire_at")
    assert isinstance(expire_at, datetime)
    delta = expire_at - datetime.now(UTC)
    assert timedelta(days=29) < delta <= timedelta(days=30)


async def test_purge_removes_the_execution_and_its_subcollections(
    store: FirestoreEventStore, database: str
) -> None:
    await store.append(AppendRequest("e1", 1, [step(2)]))
    await store.save_snapshot("e1", Snapshot(2, "{}"))
    assert await store.delete_execution("e1")
    assert await store.list() == []
    client = firestore.AsyncClient(project=PROJECT, database=database)
    leftovers = [d async for d in client.collection_group("events").stream()]
    assert leftovers == []


def test_from_url(firestore_emulator: str) -> None:
    store = FirestoreEventStore.from_url("firestore://my-proj/orders")
    assert store._client.project == "my-proj"
    assert store._client._database == "orders"
    default = FirestoreEventStore.from_url("firestore://my-proj")
    assert default._client._database == "(default)"
    with pytest.raises(ConfigurationError):
        FirestoreEventStore.from_url("sqlite:///x.db")
    with pytest.raises(ConfigurationError):
        FirestoreEventStore.from_url("firestore://p/a/b")


async def test_a_start_over_events_left_by_a_ttl_deletion_starts_anew(
    store: FirestoreEventStore, database: str
) -> None:
    """Firestore TTL deletes only the execution document; the events stay behind."""
    await store.append(AppendRequest("e1", 1, [step(2), step(3, "2")]))
    await store.save_snapshot("e1", Snapshot(3, "{}"))
    done = ExecutionCompleted(seq=4, output=1)
    await store.append(AppendRequest("e1", 3, [done], StatusChange("completed")))
    client = firestore.AsyncClient(project=PROJECT, database=database)
    await client.collection("executions").document("e1").delete()  # what TTL does
    other = FirestoreEventStore(project=PROJECT, database=database)  # a fresh instance
    try:
        created, first = await other.create(
            ExecutionStarted(execution_id="e1", flow="g", input={"n": 2})
        )
        assert created is True and first.flow == "g"
        log = await other.load("e1")
        assert log.snapshot is None and [e.seq for e in log.events] == [1]
        assert await other.append(AppendRequest("e1", 1, [step(2)])) == 2
        # The instance that saw the old log (up to seq 4) serves the new one too.
        assert [e.seq for e in (await store.load("e1")).events] == [1, 2]
        assert await store.append(AppendRequest("e1", 2, [step(3)])) == 3
    finally:
        await other.aclose()


async def test_another_instance_serves_an_id_purged_and_started_again(
    store: FirestoreEventStore, database: str
) -> None:
    await store.append(AppendRequest("e1", 1, [step(2), step(3, "2")]))
    await store.load("e1")  # this instance now knows the log reaches seq 3
    other = FirestoreEventStore(project=PROJECT, database=database)
    try:
        assert await other.delete_execution("e1")
        await other.create(ExecutionStarted(execution_id="e1", flow="f", input={"n": 2}))
        assert [e.seq for e in (await store.load("e1")).events] == [1]
        assert await store.append(AppendRequest("e1", 1, [step(2)])) == 2
    finally:
        await other.aclose()
