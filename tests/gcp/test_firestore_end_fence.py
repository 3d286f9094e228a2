"""Attacks on the end riding the execution document, on the emulator.

An append that finishes an execution writes its events on the execution document (``end``)
under a ``last_update_time`` precondition, instead of a page of their own; appends that are
not the holder's own (``AppendRequest.fence``) write the execution document too. Each test
races two store objects (two processes' views) or loses a commit's answer, and checks that
exactly one log comes out, gap-free, that every reader agrees on.

Faults inside one commit are injected by replacing the store's ``commit_once``; everything
else is the real emulator.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from google.cloud import firestore

from loom.errors import AppendConflictError, LogEndedError
from loom.events import (
    Event,
    ExecutionClaimed,
    ExecutionCompleted,
    ExecutionResumed,
    ExecutionStarted,
)
from loom.store import AppendRequest, LoadedLog, Snapshot, StatusChange
from loom_gcp._firestore_docs import event_doc_id
from loom_gcp.firestore import FirestoreEventStore
from tests.gcp.firestore_helpers import PROJECT, lose_first_ack, step
from tests.gcp.test_firestore_pages_reuse import write_legacy

pytestmark = pytest.mark.slow


def claim(seq: int, holder: str) -> ExecutionClaimed:
    return ExecutionClaimed(seq=seq, holder=holder, until=time.time() + 60, at=time.time())


def done(seq: int, output: object = "done") -> ExecutionCompleted:
    return ExecutionCompleted(seq=seq, output=output, at=time.time())


def resumed(seq: int) -> ExecutionResumed:
    return ExecutionResumed(seq=seq, on="gate", correlation_key="k", at=time.time())


def end(expected: int, snapshot: str | None = None) -> AppendRequest:
    """The holder's last append: a step and the completion."""
    events: list[Event] = [step(expected + 1, "last"), done(expected + 2)]
    return AppendRequest("e1", expected, events, StatusChange("completed"), snapshot)


async def held_by(holder: FirestoreEventStore) -> int:
    """Start e1 with the holder's claim and one step; the log ends at 3."""
    await holder.create(ExecutionStarted(execution_id="e1", flow="f"), [claim(2, "h")])
    return await holder.append(AppendRequest("e1", 2, [step(3, "a")]))


async def agree(readers: list[FirestoreEventStore], log: list[Event]) -> None:
    """One gap-free log, the same for every reader's load and read(after)."""
    assert [e.seq for e in log] == list(range(1, len(log) + 1))
    for reader in readers:
        loaded = await reader.load("e1")
        base = loaded.snapshot.seq if loaded.snapshot else 0
        assert loaded.events == log[base:]
        for after in range(len(log) + 1):
            assert await reader.read("e1", after) == log[after:], after


async def page_ids(client: firestore.AsyncClient) -> list[str]:
    events: Any = client.collection("executions").document("e1").collection("events")
    return [d.id async for d in events.stream()]


# -- the end and a foreign append, both orders ------------------------------------------


async def test_a_fenced_append_after_a_riding_end_it_did_not_see_conflicts(
    stores: list[FirestoreEventStore], client: firestore.AsyncClient
) -> None:
    holder, foreign, reader = stores
    await held_by(holder)
    await foreign.load("e1")  # sees the log end at 3, before the end lands
    holder.reset_ops()
    assert await holder.append(end(3)) == 5
    assert holder.ops["writes"] == 1  # the end rode the execution document
    assert event_doc_id(4) not in await page_ids(client)
    with pytest.raises(AppendConflictError):  # a resume that would land inside the end
        await foreign.append(AppendRequest("e1", 3, [resumed(4)], fence=True))
    log = await reader.read("e1")
    assert [e.type for e in log][-2:] == ["EffectCompleted", "ExecutionCompleted"]
    await agree(stores, log)


async def test_a_riding_end_after_a_fenced_append_it_did_not_see_conflicts(
    stores: list[FirestoreEventStore],
) -> None:
    holder, foreign, reader = stores
    await held_by(holder)
    await foreign.load("e1")
    assert await foreign.append(AppendRequest("e1", 3, [resumed(4)], fence=True)) == 4
    with pytest.raises(AppendConflictError):
        await holder.append(end(3))
    log = await reader.read("e1")
    assert [e.type for e in log][-1] == "ExecutionResumed"
    assert (await reader.summary("e1")).status == "running"
    await agree(stores, log)


async def test_a_cold_fenced_append_reads_the_execution_document_and_sees_the_end(
    stores: list[FirestoreEventStore],
) -> None:
    """The foreign store has never seen e1: it reads the execution document first, finds
    the end there, and refuses an append below it (its page id would collide with nothing)."""
    holder, foreign, reader = stores
    await held_by(holder)
    await holder.append(end(3))
    with pytest.raises(AppendConflictError):
        await foreign.append(AppendRequest("e1", 3, [resumed(4)], fence=True))
    await agree(stores, await reader.read("e1"))


async def test_a_takeover_claim_fences_the_old_holders_end(
    stores: list[FirestoreEventStore],
) -> None:
    """A new holder takes over (its claim fenced); the old holder, alive after all, tries
    to finish: its end must not land beside the new holder's log."""
    old, new, reader = stores
    await held_by(old)
    await new.load("e1")
    await new.append(AppendRequest("e1", 3, [claim(4, "new")], fence=True))
    with pytest.raises(AppendConflictError):
        await old.append(end(3))
    assert await new.append(end(4)) == 6
    log = await reader.read("e1")
    holders = [e.holder for e in log if isinstance(e, ExecutionClaimed)]
    assert holders == ["h", "new"] and len(log) == 6
    await agree(stores, log)


# -- stale or missing stamps ------------------------------------------------------------


async def test_a_store_without_a_stamp_writes_the_end_as_a_page(
    stores: list[FirestoreEventStore], database: str, client: firestore.AsyncClient
) -> None:
    holder, _, reader = stores
    await held_by(holder)
    cold = FirestoreEventStore(project=PROJECT, database=database)
    assert await cold.append(end(3)) == 5
    assert event_doc_id(4) in await page_ids(client)  # a page: its create() fenced it
    assert cold.ops["writes"] == 2
    await agree([holder, reader, cold], await reader.read("e1"))
    await cold.aclose()


async def test_a_stale_stamp_falls_back_to_a_page_that_loses_the_race(
    stores: list[FirestoreEventStore],
) -> None:
    """The holder's stamp is stale (a snapshot was saved elsewhere) and a foreign fenced
    append landed: the precondition fails, and the page the holder falls back to collides."""
    holder, foreign, reader = stores
    await held_by(holder)
    await foreign.save_snapshot("e1", Snapshot(3, "at 3"))
    await foreign.append(AppendRequest("e1", 3, [resumed(4)], fence=True))
    with pytest.raises(AppendConflictError):
        await holder.append(end(3))
    await agree(stores, await reader.read("e1"))


async def test_a_stale_stamp_alone_does_not_refuse_the_holders_end(
    stores: list[FirestoreEventStore], client: firestore.AsyncClient
) -> None:
    """Only a snapshot changed the execution document: the log still ends where the holder
    says, so its end is written (as a page), not refused as a lost race."""
    holder, other, reader = stores
    await held_by(holder)
    await other.save_snapshot("e1", Snapshot(3, "at 3"))
    assert await holder.append(end(3)) == 5
    assert event_doc_id(4) in await page_ids(client)
    assert (await reader.summary("e1")).status == "completed"
    await agree(stores, await reader.read("e1"))


# -- lost answers ------------------------------------------------------------------------


@pytest.mark.parametrize("applied", [True, False])
async def test_a_riding_end_whose_answer_was_lost_is_written_once(
    stores: list[FirestoreEventStore], client: firestore.AsyncClient, applied: bool
) -> None:
    holder, _, reader = stores
    await held_by(holder)
    calls = lose_first_ack(holder, applied=applied)
    assert await holder.append(end(3)) == 5  # its own write is no conflict
    assert len(calls) == 2
    assert event_doc_id(4) not in await page_ids(client)  # not written again as a page
    log = await reader.read("e1")
    assert [e.seq for e in log] == [1, 2, 3, 4, 5]
    await agree(stores, log)


@pytest.mark.parametrize("applied", [True, False])
async def test_a_fenced_append_whose_answer_was_lost_is_written_once(
    stores: list[FirestoreEventStore], applied: bool
) -> None:
    """Its retry meets its own page and its own precondition's change: success, once; and
    the holder's end, whose stamp the fenced write made stale, conflicts."""
    holder, foreign, reader = stores
    await held_by(holder)
    await foreign.load("e1")
    lose_first_ack(foreign, applied=applied)
    assert await foreign.append(AppendRequest("e1", 3, [resumed(4)], fence=True)) == 4
    with pytest.raises(AppendConflictError):
        await holder.append(end(3))
    log = await reader.read("e1")
    assert [e.type for e in log][-1] == "ExecutionResumed" and len(log) == 4
    await agree(stores, log)


# -- readers, snapshots, the previous layout, retention ---------------------------------


async def test_every_reader_sees_the_end_and_what_follows_it(
    stores: list[FirestoreEventStore],
) -> None:
    holder, foreign, reader = stores
    await held_by(holder)
    await holder.load("e1")  # the holder's log cache holds 1..3
    await holder.append(end(3, snapshot='{"at": 5}'))
    loaded = await reader.load("e1")
    assert loaded == LoadedLog(Snapshot(5, '{"at": 5}'), [])
    assert await holder.load("e1") == loaded  # from its cache: the end and the snapshot
    summary = await reader.summary("e1")
    assert (summary.status, summary.last_seq) == ("completed", 5)
    # Nothing follows the end, fenced or not, from a store that saw it or not.
    with pytest.raises(LogEndedError):
        await foreign.append(AppendRequest("e1", 5, [resumed(6)], fence=True))
    with pytest.raises(LogEndedError):
        await holder.append(AppendRequest("e1", 5, [resumed(6)]))
    log = await reader.read("e1")
    assert [e.seq for e in log] == [1, 2, 3, 4, 5]
    assert (await reader.summary("e1")).last_seq == 5
    assert [len(x.events) for x in await reader.load_many(["e1"])] == [0]
    rows = await reader.list()
    assert [(r.execution_id, r.status) for r in rows] == [("e1", "completed")]
    await agree(stores, log)


async def test_a_second_finishing_append_does_not_overwrite_the_end(
    stores: list[FirestoreEventStore],
) -> None:
    holder, other, reader = stores
    await held_by(holder)
    await holder.append(end(3))
    again = AppendRequest("e1", 5, [done(6, "twice")], StatusChange("failed"))
    for store in (holder, other):
        with pytest.raises(LogEndedError):
            await store.append(again)
    log = await reader.read("e1")
    assert len(log) == 5 and (await reader.summary("e1")).status == "completed"
    await agree(stores, log)


async def test_an_execution_of_the_previous_layout_ends_on_its_document(
    stores: list[FirestoreEventStore], client: firestore.AsyncClient
) -> None:
    holder, _, reader = stores
    first = ExecutionStarted(execution_id="e1", flow="f", seq=1)
    await write_legacy(client, "e1", [first, claim(2, "h"), step(3, "a")])
    await holder.load("e1")
    holder.reset_ops()
    assert await holder.append(end(3)) == 5
    assert holder.ops["writes"] == 1
    log = await reader.read("e1")
    assert [e.seq for e in log] == [1, 2, 3, 4, 5]
    await agree(stores, log)


async def test_purge_and_ttl_take_the_end_with_the_execution_document(
    stores: list[FirestoreEventStore], client: firestore.AsyncClient
) -> None:
    holder, other, reader = stores
    await held_by(holder)
    await holder.append(end(3))
    assert (await other.purge(time.time() + 1)).purged == ["e1"]
    assert await page_ids(client) == []
    await holder.create(ExecutionStarted(execution_id="e1", flow="f", input=2), [claim(2, "x")])
    assert await reader.read("e1", 1) == [await_claim(await reader.read("e1"))]
    await holder.append(AppendRequest("e1", 2, [step(3, "b")]))
    await holder.append(end(3))
    # Firestore TTL deletes the execution document alone: its end goes with it, the pages
    # stay behind as leftovers that a new execution of the id never takes for its own.
    await client.collection("executions").document("e1").delete()
    await other.create(ExecutionStarted(execution_id="e1", flow="f", input=3))
    assert [e.seq for e in await reader.read("e1")] == [1]
    assert await other.append(end(1)) == 3
    assert [e.seq for e in await reader.read("e1")] == [1, 2, 3]
    await agree([other, reader], await reader.read("e1"))


def await_claim(events: list[Event]) -> Event:
    """The claim of a log that should hold the start and one claim."""
    assert [e.type for e in events] == ["ExecutionStarted", "ExecutionClaimed"]
    return events[1]


async def test_a_fenced_finishing_append_is_a_page_that_peers_collide_with(
    stores: list[FirestoreEventStore], client: firestore.AsyncClient
) -> None:
    """Writers with no holder among them (a commission's case stream) fence the append
    that ends the stream: it never rides, so a peer's plain append at the same position
    collides with its page."""
    first, peer, reader = stores
    await held_by(first)
    await peer.load("e1")
    fenced = end(3)
    finishing = AppendRequest("e1", 3, fenced.events, fenced.status, fence=True)
    assert await first.append(finishing) == 5
    assert event_doc_id(4) in await page_ids(client)
    with pytest.raises(AppendConflictError):
        await peer.append(AppendRequest("e1", 3, [step(4, "peer")]))
    await agree(stores, await reader.read("e1"))


async def test_concurrent_ends_and_fenced_appends_leave_one_log(database: str) -> None:
    """Many rounds of a holder's end and a foreign fenced append at the same position, sent
    at once from two store objects (each warm: it loaded the log): exactly one lands."""
    wins = {"end": 0, "foreign": 0}
    for round_no in range(12):
        holder = FirestoreEventStore(project=PROJECT, database=database)
        foreign = FirestoreEventStore(project=PROJECT, database=database)
        eid = f"r{round_no}"
        await holder.create(ExecutionStarted(execution_id=eid, flow="f"), [claim(2, "h")])
        await holder.append(AppendRequest(eid, 2, [step(3, "a")]))
        await foreign.load(eid)
        finishing = replace_id(end(3), eid)
        outcomes = await asyncio.gather(
            holder.append(finishing),
            foreign.append(AppendRequest(eid, 3, [resumed(4)], fence=True)),
            return_exceptions=True,
        )
        landed = [not isinstance(o, BaseException) for o in outcomes]
        assert landed.count(True) == 1, outcomes
        assert all(
            isinstance(o, AppendConflictError) for o in outcomes if isinstance(o, BaseException)
        )
        wins["end" if landed[0] else "foreign"] += 1
        reader = FirestoreEventStore(project=PROJECT, database=database)
        log = await reader.read(eid)
        await reader.aclose()
        assert [e.seq for e in log] == list(range(1, len(log) + 1))
        assert len(log) == (5 if landed[0] else 4)
        for store in (holder, foreign):
            assert await store.read(eid) == log
            await store.aclose()
    assert sum(wins.values()) == 12


def replace_id(request: AppendRequest, eid: str) -> AppendRequest:
    return AppendRequest(eid, request.expected_seq, request.events, request.status)
