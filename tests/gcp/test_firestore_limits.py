"""Firestore's commit limits, deadlines and retry order, on the emulator.

Faults inside one RPC (ABORTED, a stalled commit) are injected by replacing the store's
``commit_once`` (one commit attempt); everything else is the real emulator.
"""

from __future__ import annotations

import asyncio
import secrets
import time
import uuid
from collections.abc import AsyncIterator

import pytest
from google.api_core import exceptions as gexc
from google.cloud.firestore_v1.async_batch import AsyncWriteBatch

from loom.errors import (
    AppendConflictError,
    ConfigurationError,
    StoreLimitError,
    StoreUnavailableError,
)
from loom.events import EffectCompleted, Event, ExecutionStarted
from loom.store import AppendRequest, Snapshot, StatusChange
from loom_gcp.firestore import FirestoreEventStore
from tests.gcp.firestore_helpers import PROJECT, step

pytestmark = pytest.mark.slow


@pytest.fixture
async def store(firestore_emulator: str) -> AsyncIterator[FirestoreEventStore]:
    s = FirestoreEventStore(project=PROJECT, database=f"l{uuid.uuid4().hex[:24]}")
    await s.create(ExecutionStarted(execution_id="e1", flow="f"))
    yield s
    await s.aclose()


async def test_aborted_is_retried_not_taken_for_a_conflict(store: FirestoreEventStore) -> None:
    real = store._io.commit_once
    calls: list[str] = []

    async def contended(batch: AsyncWriteBatch, timeout: float) -> None:
        calls.append("commit")
        if len(calls) <= 2:
            raise gexc.Aborted("too much contention on these documents")
        await real(batch, timeout)

    store._io.commit_once = contended  # type: ignore[method-assign]
    assert await store.append(AppendRequest("e1", 1, [step(2)])) == 2
    assert len(calls) == 3
    assert [e.seq for e in await store.read("e1")] == [1, 2]


async def test_aborted_until_the_deadline_is_unavailability(firestore_emulator: str) -> None:
    store = FirestoreEventStore(project=PROJECT, database=f"l{uuid.uuid4().hex[:24]}", deadline=1)
    await store.create(ExecutionStarted(execution_id="e1", flow="f"))

    async def contended(batch: AsyncWriteBatch, timeout: float) -> None:
        raise gexc.Aborted("contention")

    store._io.commit_once = contended  # type: ignore[method-assign]
    with pytest.raises(StoreUnavailableError) as info:
        await store.append(AppendRequest("e1", 1, [step(2)]))
    assert not isinstance(info.value, AppendConflictError)
    assert info.value.details["reason"] == "busy"
    await store.aclose()


async def test_a_commit_that_never_answers_ends_at_the_deadline(firestore_emulator: str) -> None:
    store = FirestoreEventStore(
        project=PROJECT, database=f"l{uuid.uuid4().hex[:24]}", timeout=0.3, deadline=1.0
    )
    await store.create(ExecutionStarted(execution_id="e1", flow="f"))
    attempts: list[float] = []

    async def stalled(batch: AsyncWriteBatch, timeout: float) -> None:
        attempts.append(timeout)
        await asyncio.sleep(3600)  # ignores its gRPC deadline: only the backstop ends it

    store._io.commit_once = stalled  # type: ignore[method-assign]
    started = time.monotonic()
    with pytest.raises(StoreUnavailableError) as info:
        await store.append(AppendRequest("e1", 1, [step(2)]))
    assert time.monotonic() - started < 3.0
    assert len(attempts) >= 2 and max(attempts) <= 0.3
    assert info.value.details["reason"] == "timeout"
    await store.aclose()


async def test_racing_tasks_on_one_execution_keep_one_gap_free_log(
    store: FirestoreEventStore,
) -> None:
    """Contention on the emulator (every append also updates the execution document)."""

    async def racer(name: str) -> int:
        won = 0
        while won < 4:
            expected = (await store.summary("e1")).last_seq
            events: list[Event] = [step(expected + 1, f"{name}.{won}")]
            try:
                await store.append(AppendRequest("e1", expected, events, StatusChange("running")))
            except AppendConflictError:
                continue
            won += 1
        return won

    assert await asyncio.gather(*(racer(f"r{i}") for i in range(4))) == [4, 4, 4, 4]
    log = await store.read("e1")
    assert [e.seq for e in log] == list(range(1, 18))
    ids = [e.step_id for e in log if isinstance(e, EffectCompleted)]
    assert len(set(ids)) == 16
    assert (await store.summary("e1")).last_seq == 17


async def test_an_append_is_bounded_by_bytes_not_by_a_count_of_events(
    store: FirestoreEventStore,
) -> None:
    """Events share page documents, so 2,000 small ones are one commit of a few pages; what
    bounds an append is the commit's 10 MB, checked before anything is written (the count
    of 5,000 is for the journal's decisions written ahead)."""
    assert store.max_append_events == 5_000
    many = [step(2 + i, str(i)) for i in range(2_000)]
    store.reset_ops()
    assert await store.append(AppendRequest("e1", 1, many, StatusChange("running"))) == 2_001
    assert store.ops["writes"] <= 3  # one or two pages and the execution document
    assert [e.seq for e in await store.read("e1", 1_990)] == list(range(1_991, 2_002))
    big = [step(2_002 + i, str(i), secrets.token_hex(300_000)) for i in range(20)]
    with pytest.raises(StoreLimitError, match="bytes per commit") as info:
        await store.append(AppendRequest("e1", 2_001, big, StatusChange("suspended")))
    assert info.value.code == "store_limit"
    assert (await store.summary("e1")).last_seq == 2_001  # nothing of it was written


async def test_a_document_over_1_mib_is_refused(store: FirestoreEventStore) -> None:
    huge = secrets.token_hex(600_000)  # 1.2 MB of output in one event
    with pytest.raises(StoreLimitError, match="1048576") as info:
        await store.append(AppendRequest("e1", 1, [step(2, output=huge)]))
    assert info.value.code == "store_limit"
    with pytest.raises(StoreLimitError, match="1048576"):
        await store.create(ExecutionStarted(execution_id="e2", flow="f", input=huge))
    assert [e.seq for e in await store.read("e1")] == [1]
    assert [r.execution_id for r in await store.list()] == ["e1"]


async def test_a_commit_over_10_mb_is_refused(store: FirestoreEventStore) -> None:
    events: list[Event] = [step(2 + i, str(i), secrets.token_hex(400_000)) for i in range(13)]
    with pytest.raises(StoreLimitError, match="bytes per commit") as info:
        await store.append(AppendRequest("e1", 1, events))
    assert info.value.details["max"] == 10_000_000
    assert [e.seq for e in await store.read("e1")] == [1]


async def test_a_snapshot_over_one_commit_is_never_seen_half_written(
    store: FirestoreEventStore,
) -> None:
    await store.append(AppendRequest("e1", 1, [step(2), step(3, "t")]))
    await store.save_snapshot("e1", Snapshot(2, '{"old": true}'))
    # 2.4 MB of hex: two parts of up to 900 kB; one part per commit under a 1 MB budget
    # (the same code path as 10 MiB, without making the emulator carry 10 MB commits).
    store.snapshot_commit_bytes = 1_000_000
    big = secrets.token_hex(1_200_000)
    reader = FirestoreEventStore(project=PROJECT, database=store._client._database)
    seen: list[Snapshot | None] = []
    real = store._io.commit_once

    async def watched(batch: AsyncWriteBatch, timeout: float) -> None:
        await real(batch, timeout)
        seen.append((await reader.load("e1")).snapshot)  # after every commit of the save

    store._io.commit_once = watched  # type: ignore[method-assign]
    await store.save_snapshot("e1", Snapshot(3, big))
    store._io.commit_once = real  # type: ignore[method-assign]
    assert seen == [Snapshot(2, '{"old": true}'), Snapshot(3, big)]  # parts, then the swap
    await store.save_snapshot("e1", Snapshot(3, "{}"))  # not newer: ignored
    assert (await reader.load("e1")).snapshot == Snapshot(3, big)
    await store.append(AppendRequest("e1", 3, [step(4, "u")]))
    await store.save_snapshot("e1", Snapshot(4, '{"small": true}'))
    parts = store._client.collection("executions").document("e1").collection("snapshots")
    assert len([d async for d in parts.stream()]) == 1  # every big part deleted
    assert (await reader.load("e1")).snapshot == Snapshot(4, '{"small": true}')
    await reader.aclose()


def test_from_url_reads_the_deadline_knobs(firestore_emulator: str) -> None:
    store = FirestoreEventStore.from_url("firestore://p/d?timeout=1.5&deadline=4")
    assert (store._io.policy.timeout, store._io.policy.deadline) == (1.5, 4.0)
    default = FirestoreEventStore.from_url("firestore://p/d")
    assert (default._io.policy.timeout, default._io.policy.deadline) == (5.0, 20.0)
    for bad in ("timeout=0", "deadline=-1", "timeout=abc", "deadline=inf", "retries=3"):
        with pytest.raises(ConfigurationError, match=bad.split("=")[0]):
            FirestoreEventStore.from_url(f"firestore://p/d?{bad}")
