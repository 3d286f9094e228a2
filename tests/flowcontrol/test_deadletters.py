"""Dead letters: parked and failed executions listed and re-driven in bulk, with a dry run.

On SQLite (on disk) and the Firestore emulator. Failures come from real flow runs (an effect
with a bug, a flow whose own code raises). The poison park is reached by the documented
mechanism: execute calls that claimed the execution and then died leave only their
``ExecutionClaimed`` behind, which is what this test appends (a real SIGKILL is exercised in
``tests/delivery/test_poison.py``).
"""

from __future__ import annotations

import time

import pytest

from loom import events as ev
from loom.blobs import InMemoryBlobStore
from loom.errors import InputError, ReservedExecutionIdError
from loom.ops.deadletters import find, parse_since, redrive, redrive_by_id, redrive_id
from loom.runtime import Runtime
from loom.store import EventStore
from loom.store.base import AppendRequest, StatusChange
from loom.testing import FakeClock
from loom.wire import ExecutionPackage
from tests.flowcontrol.apps import Calls, pipeline_app


def _runtime(store: EventStore, calls: Calls) -> Runtime:
    app = pipeline_app(calls)
    # The store stamps summaries with the wall clock: --since is compared with those.
    return Runtime(
        app, store, blobs=InMemoryBlobStore(), clock=FakeClock(time.time()), max_idle_claims=2
    )


async def _poison(runtime: Runtime, eid: str) -> None:
    await runtime.start("boom", 7, execution_id=eid, run=False)
    for n, holder in enumerate(("dead-1", "dead-2"), start=1):
        claim = ev.ExecutionClaimed(holder=holder, until=runtime.clock() + 30)
        ev.number([claim], n, runtime.clock())
        await runtime.store.append(AppendRequest(eid, n, [claim], StatusChange("running")))
    runtime.clock.now += 60  # type: ignore[attr-defined]  # both claims lapsed
    parked = await runtime.execute(ExecutionPackage(execution_id=eid))
    assert (parked.parked_reason or "").startswith("poison")


async def _dead_letters(runtime: Runtime, calls: Calls) -> dict[str, list[ev.Event]]:
    calls.bug = True
    for eid in ("p-1", "p-2"):
        assert (await runtime.start("pipeline", 1, execution_id=eid)).status == "failed"
    assert (await runtime.start("boom", 2, execution_id="b-1")).status == "failed"
    calls.bug = False
    await _poison(runtime, "poisoned")
    return {eid: await runtime.history(eid) for eid in ("p-1", "p-2", "b-1", "poisoned")}


async def test_a_dry_run_lists_and_writes_nothing(store: EventStore):
    calls = Calls()
    runtime = _runtime(store, calls)
    before = await _dead_letters(runtime, calls)
    letters = await find(runtime, "failed", flow="pipeline")
    planned = await redrive(runtime, letters, by="ops", dry_run=True)
    assert [(p.execution_id, p.action, p.status) for p in planned] == [
        ("p-1", "fork", None),
        ("p-2", "fork", None),
    ]
    assert planned[0].new_execution_id == redrive_id("p-1", 5)  # where transform failed
    assert "transform has a bug" in planned[0].reason
    assert [r.execution_id for r in await find(runtime, "poison")] == ["poisoned"]
    assert [r.execution_id for r in await find(runtime, "parked")] == ["poisoned"]
    assert {eid: await runtime.history(eid) for eid in before} == before
    assert len(await runtime.list()) == 4  # no execution was started


async def test_failed_ones_are_forked_once_and_poison_runs_again(store: EventStore):
    calls = Calls()
    runtime = _runtime(store, calls)
    await _dead_letters(runtime, calls)
    calls.ran.clear()
    done = await redrive(runtime, await find(runtime, "failed"), by="ops")
    assert {(d.execution_id, d.action, d.status) for d in done} == {
        ("p-1", "fork", "suspended"),  # reran transform, now waits on its gate
        ("p-2", "fork", "suspended"),
        ("b-1", "fork", "completed"),  # the flow's code ran again; fetch came from the copy
    }
    assert sorted(calls.ran) == ["transform", "transform"]
    again = await redrive(runtime, await find(runtime, "failed"), by="ops")
    assert {d.action for d in again} == {"none"} and len(await runtime.list()) == 7
    (poison,) = await redrive(runtime, await find(runtime, "poison"), by="ops")
    assert (poison.action, poison.status) == ("retry", "completed")
    assert await find(runtime, "parked") == []
    retried = [e for e in await runtime.history("poisoned") if isinstance(e, ev.ExecutionRetried)]
    assert [e.by for e in retried] == ["ops"]
    original = await runtime.result("p-1")
    assert original.status == "failed"  # a failed execution stays failed


async def test_a_second_bulk_retry_starts_nothing_even_when_the_redrives_failed(
    store: EventStore,
):
    """The bug is still in: every re-drive fails again. A bulk retry does not select those
    re-drives, so repeating it starts nothing; re-driving one by its id still does."""
    calls = Calls()
    runtime = _runtime(store, calls)
    await _dead_letters(runtime, calls)
    calls.bug = True
    first = await redrive(runtime, await find(runtime, "failed", bulk=True), by="ops")
    assert {(d.execution_id, d.action, d.status) for d in first} == {
        ("p-1", "fork", "failed"),
        ("p-2", "fork", "failed"),
        ("b-1", "fork", "failed"),
    }
    assert len(await runtime.list()) == 7
    for _ in range(2):
        letters = await find(runtime, "failed", bulk=True)
        assert [r.execution_id for r in letters] == ["p-1", "p-2", "b-1"]
        again = await redrive(runtime, letters, by="ops")
        assert {(d.action, d.new_execution_id, d.status) for d in again} == {
            ("none", redrive_id("p-1", 5), "failed"),
            ("none", redrive_id("p-2", 5), "failed"),
            ("none", first[2].new_execution_id, "failed"),
        }
        assert len(await runtime.list()) == 7  # nothing new started
    listed = {r.execution_id for r in await find(runtime, "failed")}  # the listing: all six
    assert listed == {"p-1", "p-2", "b-1", *(d.new_execution_id for d in first)}
    calls.bug = False
    one = await redrive_by_id(runtime, redrive_id("p-1", 5), by="ops")
    assert (one.action, one.status) == ("fork", "suspended")
    assert one.new_execution_id is not None and one.new_execution_id.startswith("p-1.redrive-5.")
    assert len(await runtime.list()) == 8


async def test_an_execution_of_the_redrive_form_is_selected_unless_it_is_a_redrive(
    store: EventStore,
):
    """Only the id form with a fork origin makes a re-drive: an execution that merely holds
    an id of that form (one started before such ids were reserved; an outside start of it
    is refused now) is a dead letter like any other."""
    calls = Calls()
    runtime = _runtime(store, calls)
    calls.bug = True
    with pytest.raises(ReservedExecutionIdError):
        await runtime.start("boom", 1, execution_id="mine.redrive-3")
    held = await runtime.start("boom", 1, execution_id="mine.redrive-3", derived="redrive")
    assert held.status == "failed"
    assert [r.execution_id for r in await find(runtime, "failed", bulk=True)] == ["mine.redrive-3"]


async def test_a_redrive_id_held_by_another_execution_is_not_reported_as_the_redrive(
    store: EventStore,
):
    """An execution that took a letter's re-drive id (before such ids were reserved) is not
    its re-drive: the re-drive reports the id as held, starts nothing and writes nothing to
    the squatter."""
    calls = Calls()
    runtime = _runtime(store, calls)
    calls.bug = True
    assert (await runtime.start("pipeline", 1, execution_id="p-1")).status == "failed"
    squat = redrive_id("p-1", 5)
    await runtime.start("boom", 9, execution_id=squat, derived="redrive", run=False)
    before = await runtime.history(squat)
    letters = [r for r in await find(runtime, "failed") if r.execution_id == "p-1"]
    done = await redrive(runtime, letters, by="ops")
    assert [(d.action, d.new_execution_id, d.status) for d in done] == [("none", squat, None)]
    assert done[0].error is not None and "reserved_execution_id" in done[0].error
    assert await runtime.history(squat) == before


async def test_since_narrows_and_a_bad_since_is_refused(store: EventStore):
    calls = Calls()
    runtime = _runtime(store, calls)
    await _dead_letters(runtime, calls)
    now = time.time()
    assert len(await find(runtime, "failed", since=parse_since("1h", now))) == 3
    assert await find(runtime, "failed", since=now + 5) == []
    assert parse_since("2026-01-01T00:00:00+00:00", now) == 1767225600.0
    for bad in ("yesterday", "2026-01-01T00:00:00"):
        with pytest.raises(InputError, match="--since"):
            parse_since(bad, now)


def test_a_redrive_id_keeps_to_the_id_rule():
    long = "x" * 250
    made = redrive_id(long, 12)
    assert (
        len(made.encode()) <= 255
        and made.endswith(".redrive-12")
        and made != redrive_id("y" * 250, 12)
    )
    assert redrive_id("order-1", 3) == "order-1.redrive-3"
