"""Reads the Firestore store saves, and the snapshot that rides an append (on the emulator).

A store remembers the logs it loaded or wrote: a later load reads the execution document
(which names the newest snapshot) and only the events that are new, after checking that the
log is still the one it remembers.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from loom.events import EffectCompleted, ExecutionCompleted, ExecutionStarted
from loom.store import AppendRequest, Snapshot, StatusChange
from loom_gcp.firestore import FirestoreEventStore
from tests.gcp.firestore_helpers import PROJECT

pytestmark = pytest.mark.slow


def step(seq: int, step_id: str = "1") -> EffectCompleted:
    return EffectCompleted(seq=seq, step_id=step_id, effect="fx", output={"n": seq}, at=1.0)


@pytest.fixture
async def pair(database: str) -> AsyncIterator[tuple[FirestoreEventStore, FirestoreEventStore]]:
    """Two store objects over one database: two processes."""
    a = FirestoreEventStore(project=PROJECT, database=database)
    b = FirestoreEventStore(project=PROJECT, database=database)
    yield a, b
    await a.aclose()
    await b.aclose()


async def test_a_known_log_costs_two_reads_and_sees_what_others_appended(
    pair: tuple[FirestoreEventStore, FirestoreEventStore],
) -> None:
    a, b = pair
    await a.create(ExecutionStarted(execution_id="e1", flow="f", input={}))
    a.reset_ops()
    assert [e.seq for e in (await a.load("e1")).events] == [1]
    assert a.ops["reads"] == 2  # the execution document, the query for what follows
    await b.append(AppendRequest("e1", 1, [step(2), step(3, "2")]))  # another process
    a.reset_ops()
    loaded = await a.load("e1")
    assert [e.seq for e in loaded.events] == [1, 2, 3]  # each event once
    # The execution document (it holds the start event a knew last) and the one page the
    # append wrote with both new events.
    assert a.ops["reads"] == 2
    assert [e.seq for e in (await a.load("e1")).events] == [1, 2, 3]


async def test_a_purged_id_started_again_elsewhere_is_not_taken_for_the_old_log(
    pair: tuple[FirestoreEventStore, FirestoreEventStore],
) -> None:
    a, b = pair
    await a.create(ExecutionStarted(execution_id="e1", flow="old", input={}))
    await a.append(AppendRequest("e1", 1, [step(2)]))
    await a.load("e1")
    assert await b.delete_execution("e1")
    await b.create(ExecutionStarted(execution_id="e1", flow="new", input={}, at=5.0))
    await b.append(AppendRequest("e1", 1, [step(2, "x"), step(3, "y")]))
    loaded = await a.load("e1")
    first = loaded.events[0]
    assert isinstance(first, ExecutionStarted) and first.flow == "new"
    assert [e.seq for e in loaded.events] == [1, 2, 3]


async def test_a_snapshot_rides_the_status_write_at_no_extra_cost(
    pair: tuple[FirestoreEventStore, FirestoreEventStore],
) -> None:
    a, b = pair
    await a.create(ExecutionStarted(execution_id="e1", flow="f", input={}))
    await a.save_snapshot("e1", Snapshot(1, "parts"))  # an earlier snapshot, in parts
    a.reset_ops()
    done = ExecutionCompleted(seq=2, output=1, at=1.0)
    request = AppendRequest("e1", 1, [done], StatusChange("completed"), snapshot='{"s": 2}')
    await a.append(request)
    assert a.ops == {"reads": 0, "writes": 2, "deletes": 0}  # the event, the execution doc
    loaded = await b.load("e1")  # a cold store
    assert loaded.snapshot == Snapshot(2, '{"s": 2}') and loaded.events == []
    assert b.ops["reads"] == 2  # the execution document (snapshot inside) and the tail query
    assert (await b.list("completed"))[0].execution_id == "e1"
    await b.save_snapshot("e1", Snapshot(1, "older"))  # never replaces a newer one
    assert (await a.load("e1")).snapshot == Snapshot(2, '{"s": 2}')


async def test_a_snapshot_too_big_to_ride_is_saved_in_parts(
    pair: tuple[FirestoreEventStore, FirestoreEventStore],
) -> None:
    a, b = pair
    await a.create(ExecutionStarted(execution_id="e1", flow="f", input={}))
    big = "".join(uuid.uuid4().hex for _ in range(20_000))  # 640 kB of hex: 300 kB zipped
    done = ExecutionCompleted(seq=2, output=1, at=1.0)
    await a.append(AppendRequest("e1", 1, [done], StatusChange("completed"), snapshot=big))
    loaded = await b.load("e1")
    assert loaded.snapshot == Snapshot(2, big) and loaded.events == []


async def test_a_finished_log_whose_end_rides_the_document_costs_one_read(
    pair: tuple[FirestoreEventStore, FirestoreEventStore],
) -> None:
    """Nothing follows a terminal event: once the remembered log ends with the end the
    execution document holds, a load reads that document alone (docs/adr/0087)."""
    a, b = pair
    await a.create(ExecutionStarted(execution_id="e1", flow="f", input={}))
    await a.load("e1")  # a's claim-free prefix, then a page and the end on the document
    await a.append(AppendRequest("e1", 1, [step(2)]))
    done = ExecutionCompleted(seq=3, output=1, at=1.0)
    await a.append(AppendRequest("e1", 2, [done], StatusChange("completed")))
    a.reset_ops()
    assert [e.seq for e in (await a.load("e1")).events] == [1, 2, 3]
    assert a.ops["reads"] == 1  # the execution document: no query for what follows
    # Purged and started again elsewhere: the document holds no end of that log any more.
    assert await b.delete_execution("e1")
    await b.create(ExecutionStarted(execution_id="e1", flow="again", input={}, at=5.0))
    await b.append(AppendRequest("e1", 1, [step(2, "x")]))
    loaded = await a.load("e1")
    first = loaded.events[0]
    assert isinstance(first, ExecutionStarted) and first.flow == "again"
    assert [e.seq for e in loaded.events] == [1, 2]


async def test_a_running_log_still_queries_for_what_others_appended(
    pair: tuple[FirestoreEventStore, FirestoreEventStore],
) -> None:
    a, b = pair
    await a.create(ExecutionStarted(execution_id="e1", flow="f", input={}))
    await a.append(AppendRequest("e1", 1, [step(2)]))
    await b.load("e1")
    await b.append(AppendRequest("e1", 2, [step(3, "2")]))
    a.reset_ops()
    assert [e.seq for e in (await a.load("e1")).events] == [1, 2, 3]
    # The execution document, then the query: the page a knew last (checked) and b's page.
    assert a.ops["reads"] == 3


def test_loom_resume_reads_nine_documents(database: str) -> None:
    """The whole ``loom resume`` command on a 200-step execution waiting on a gate, run to
    its end, counted at the client: the gate check's load (2: the execution document and a
    query), the resume's (2), the execute's (2), two reports of the finished execution (1
    each: its end rides the document), and the database's shard layout, read once by a new
    process's store (``loom_gcp._firestore_shards``)."""
    from bench.firestore_cost import measure_cli_resume

    counted = measure_cli_resume(database, 200)
    assert (counted["reads"], counted["writes"]) == (9, 4), counted
