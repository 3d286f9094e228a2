"""Queue admission through admit passes (a dispatcher that carries jobs, as ``loom serve``'s
and Cloud Tasks do), on memory, SQLite on disk and the Firestore emulator: executions beyond
the limit wait in the queue and are woken when granted, not polled; the concurrency limit
and partition keys hold; and every execution completes."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from loom.dispatch.inprocess import InProcessDispatcher
from loom.primitives.queues import QueueRef, depths
from loom.runtime import Runtime
from loom.store import EventStore
from loom.wire import ExecutionPackage, ExecutionResult
from loom.workers.local import LocalWorkerRuntime
from tests.contracts.conftest import make_store
from tests.flowcontrol import queue_app

STORES = [
    pytest.param("memory"),
    pytest.param("sqlite"),
    pytest.param("firestore", marks=pytest.mark.slow),
]


@pytest.fixture(params=STORES)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[EventStore]:
    s = await make_store(request.param, tmp_path, request)
    yield s
    await s.aclose()


class Counted(LocalWorkerRuntime):
    """A local worker that counts the execute calls each execution gets."""

    def __init__(self, runtime: Runtime) -> None:
        super().__init__(runtime)
        self.calls: Counter[str] = Counter()

    async def execute(self, handle: object, package: ExecutionPackage) -> ExecutionResult:
        self.calls[package.execution_id] += 1
        return await super().execute(handle, package)


async def _serve(store: EventStore) -> tuple[Runtime, Counted, InProcessDispatcher]:
    queue_app.RUNNING.clear()
    queue_app.PEAK.clear()
    runtime = Runtime(queue_app.app, store)
    worker = Counted(runtime)
    runtime.dispatcher = InProcessDispatcher(worker)
    assert runtime.dispatcher.carries_jobs
    return runtime, worker, runtime.dispatcher


async def _all_completed(runtime: Runtime, ids: list[str], budget: float = 90.0) -> None:
    deadline = time.monotonic() + budget
    while True:
        statuses = [(await runtime.store.summary(e)).status for e in ids]
        if all(s == "completed" for s in statuses):
            return
        assert time.monotonic() < deadline, f"not all completed: {Counter(statuses)}"
        await asyncio.sleep(0.1)


async def test_waiting_executions_are_granted_in_order_and_woken_not_polled(store: EventStore):
    runtime, worker, dispatcher = await _serve(store)
    ids = [f"two-{i:02d}" for i in range(10)]
    try:
        value = {"key": "-", "seconds": 0.1}
        starts = [runtime.start("work", value, execution_id=e, queue=QueueRef("two")) for e in ids]
        await asyncio.gather(*starts)  # delivered at once, as a burst of tasks would be
        await _all_completed(runtime, ids)
        assert queue_app.PEAK["all"] == 2
        # Each execution ran when first dispatched or when its grant woke it: no polls.
        assert all(worker.calls[e] <= 2 for e in ids), dict(worker.calls)
        depth = (await depths(runtime))["two"]
        assert (depth.in_flight, depth.waiting) == (0, 0)
    finally:
        await dispatcher.aclose()


async def test_a_partition_key_serializes_its_executions_across_passes(store: EventStore):
    runtime, _, dispatcher = await _serve(store)
    ids = [f"serial-{i:02d}" for i in range(8)]
    try:
        keys = ["alice" if i % 2 else "bob" for i in range(len(ids))]
        starts = [
            runtime.start(
                "work", {"key": k, "seconds": 0.1}, execution_id=e, queue=QueueRef("serial", k)
            )
            for e, k in zip(ids, keys, strict=True)
        ]
        await asyncio.gather(*starts)
        await _all_completed(runtime, ids)
        assert (queue_app.PEAK["alice"], queue_app.PEAK["bob"]) == (1, 1)
        assert queue_app.PEAK["all"] == 2  # the two keys ran side by side
    finally:
        await dispatcher.aclose()
