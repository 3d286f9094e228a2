"""Queues in one process, on SQLite (on disk) and the Firestore emulator: a concurrency limit
holds while execute calls race, work beyond it waits (nothing claimed, nothing run) and runs
later; a partition key serializes its executions while other keys run; a rate limit spaces
starts; depth is visible; bad queue options are refused."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from loom.errors import ConfigurationError, InputError
from loom.primitives.queues import QueueRef, depths, queue_ref
from loom.runtime import Runtime
from loom.store import EventStore
from loom.store.leases import LeaseRequest
from loom.testing import FakeClock
from loom.wire import ExecutionPackage, ExecutionResult
from tests.flowcontrol import queue_app


def _runtime(store: EventStore, **options: Any) -> Runtime:
    queue_app.RUNNING.clear()
    queue_app.PEAK.clear()
    return Runtime(queue_app.app, store, **options)


async def _start(runtime: Runtime, n: int, queue: str, keys: list[str | None]) -> list[str]:
    ids: list[str] = []
    for i in range(n):
        key = keys[i % len(keys)]
        ref = QueueRef(queue, key)
        value = {"key": key or "-", "seconds": 0.2}
        await runtime.start("work", value, execution_id=f"{queue}-{i}", run=False, queue=ref)
        ids.append(f"{queue}-{i}")
    return ids


async def _round(runtime: Runtime, ids: list[str]) -> list[ExecutionResult]:
    return list(
        await asyncio.gather(*(runtime.execute(ExecutionPackage(execution_id=e)) for e in ids))
    )


async def _until_done(runtime: Runtime, ids: list[str]) -> int:
    rounds = 0
    pending = list(ids)
    while pending:
        rounds += 1
        assert rounds < 50
        results = await _round(runtime, pending)
        pending = [r.execution_id for r in results if r.status != "completed"]
    return rounds


async def test_a_concurrency_limit_holds_and_the_rest_waits(store: EventStore):
    runtime = _runtime(store)
    ids = await _start(runtime, 6, "two", [None])
    first = await _round(runtime, ids)
    # Two run and the rest wait; a call that asks for its slot only after the first two
    # released theirs (a loaded machine, a slow emulator) runs in this round too. The limit
    # itself is the peak below, whatever the timing.
    statuses = [r.status for r in first]
    assert statuses.count("completed") >= 2 and set(statuses) <= {"completed", "running"}
    waiting = [r.execution_id for r in first if r.status == "running"]
    for execution_id in waiting:
        history = await runtime.history(execution_id)
        assert [e.type for e in history] == ["ExecutionStarted"]  # nothing claimed or run
    assert (await depths(runtime))["two"].waiting == len(waiting)
    await _until_done(runtime, waiting)
    assert queue_app.PEAK["all"] == 2
    depth = (await depths(runtime))["two"]
    assert (depth.in_flight, depth.waiting) == (0, 0)


async def test_a_partition_key_serializes_its_executions(store: EventStore):
    runtime = _runtime(store)
    ids = await _start(runtime, 6, "serial", ["alice", "bob"])
    first = await _round(runtime, ids)
    # Every key makes progress in the first round (ids alternate alice, bob). How many of a
    # key's calls wait depends on whether they come before its first call releases (a busy
    # machine may be slower than the 0.2 s effect): the peaks below are what prove the order.
    done = {int(r.execution_id.rsplit("-", 1)[1]) % 2 for r in first if r.status == "completed"}
    assert done == {0, 1}
    await _until_done(runtime, ids)
    assert queue_app.PEAK["alice"] == queue_app.PEAK["bob"] == 1
    assert queue_app.PEAK["all"] == 2  # the keys ran side by side


async def test_a_rate_limit_spaces_the_starts(store: EventStore):
    runtime = _runtime(store, clock=FakeClock())  # the round takes no time: one window
    ids = await _start(runtime, 5, "slow", [None])
    first = await _round(runtime, ids)
    assert sum(r.status == "completed" for r in first) == 2
    runtime.clock.now += 1.0  # type: ignore[attr-defined]
    second = await _round(runtime, [r.execution_id for r in first if r.status != "completed"])
    assert sum(r.status == "completed" for r in second) == 2


async def test_a_lease_is_renewed_while_its_call_runs(store: EventStore):
    """A call running past ``lease_ttl`` keeps its slot (heartbeat); after its release the
    next one runs. Without renewals the second call would run beside the first."""
    runtime = _runtime(store)
    ids = await _start(runtime, 2, "brief", [None])
    long = {"key": "-", "seconds": 1.5}
    await runtime.start("work", long, execution_id="brief-long", run=False, queue=QueueRef("brief"))
    running = asyncio.ensure_future(runtime.execute(ExecutionPackage(execution_id="brief-long")))
    await asyncio.sleep(1.0)  # past the ttl of 0.6 s: only renewals keep the lease live
    refused = await runtime.execute(ExecutionPackage(execution_id=ids[0]))
    assert refused.status == "running"
    assert (await running).status == "completed"
    await _until_done(runtime, ids)
    assert queue_app.PEAK["all"] == 1


async def test_child_flows_on_a_queue_stay_within_its_limit(store: EventStore):
    """A step-sized piece of work throttled by a queue: a child flow started on it. The
    parent suspends on its children; children beyond the limit wait, then all complete."""
    runtime = _runtime(store)
    leases = store.leases()
    for other in ("x", "y"):  # the queue is full: every child must wait
        assert await leases.acquire(
            LeaseRequest("two", other, runtime.clock(), 60.0, limit=2, owner="them")
        )
    await runtime.start("fan_out", 5, execution_id="parent", run=False)
    assert (await runtime.execute(ExecutionPackage(execution_id="parent"))).status == "suspended"
    kids = [r.execution_id for r in await runtime.list() if r.execution_id != "parent"]
    assert len(kids) == 5
    for kid in kids:
        started, *rest = await runtime.history(kid)
        assert (started.queue, rest) == ("two", [])  # type: ignore[attr-defined]  # waits
    for other in ("x", "y"):
        await leases.release("two", other, "them")
    await _until_done(runtime, kids)
    result = await runtime.execute(ExecutionPackage(execution_id="parent"))
    assert (result.status, result.output) == ("completed", ["done"] * 5)
    assert queue_app.PEAK["all"] == 2


async def test_bad_queue_options_are_refused(store: EventStore):
    runtime = _runtime(store)
    with pytest.raises(InputError, match="unknown queue 'nope'"):
        await runtime.start("work", {}, queue=QueueRef("nope"))
    with pytest.raises(InputError, match="needs a queue"):
        queue_ref(None, "alice")
    assert await runtime.list() == []


def test_declarations_are_checked() -> None:
    app: Any = type(queue_app.app)("declared")
    app.queue("q", concurrency=1)
    for bad, options in (
        ("q", {}),
        ("a/b", {}),
        ("z", {"concurrency": 0}),
        ("y", {"lease_ttl": 0}),
    ):
        with pytest.raises(ConfigurationError):
            app.queue(bad, **options)
