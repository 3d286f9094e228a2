"""Ports of DBOS Transact's queue tests (``test_queue.py``: priority, deduplication, delay,
worker concurrency, timeouts that start at dequeue) onto Loom, over SQLite on disk, with the
in-process dispatcher that carries jobs (what ``loom serve`` runs).

A DBOS queue is a Loom queue (``app.queue``), ``SetEnqueueOptions`` the options of a
:class:`~loom.primitives.queues.QueueRef`, ``DBOSQueueDeduplicatedError``
:class:`~loom.errors.QueueDeduplicatedError`. Where Loom deliberately differs, the test's
docstring says what Loom promises instead.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from loom import EffectContext, FlowContext, Loom
from loom.dispatch.inprocess import InProcessDispatcher
from loom.errors import QueueDeduplicatedError
from loom.primitives.queues import QueueRef
from loom.runtime import Runtime
from loom.store.sqlite import SqliteEventStore
from loom.workers.local import LocalWorkerRuntime

app = Loom("dbos-queues")
app.queue("prio", concurrency=1)
app.queue("dedup")
app.queue("worker", worker_concurrency=2)
app.queue("limited", concurrency=1)
ORDER: list[str] = []
RUNNING: list[int] = [0, 0]  # now, peak


@app.effect("work")
async def work(ctx: EffectContext, value: dict[str, Any]) -> str:
    ORDER.append(str(value["name"]))
    RUNNING[0] += 1
    RUNNING[1] = max(RUNNING)
    try:
        await asyncio.sleep(float(value.get("seconds", 0.05)))
    finally:
        RUNNING[0] -= 1
    return str(value["name"])


@app.flow("workflow")
async def workflow(ctx: FlowContext, value: dict[str, Any]) -> str:
    return await ctx.execute(work, value)


@app.flow("blocked")
async def blocked(ctx: FlowContext, _: None) -> str:
    await ctx.sleep(30)
    return "slept"


@pytest.fixture
async def rt(tmp_path: Path) -> AsyncIterator[Runtime]:
    ORDER.clear()
    RUNNING[:] = [0, 0]
    runtime = Runtime(app, SqliteEventStore(tmp_path / "loom.db"))
    runtime.dispatcher = InProcessDispatcher(LocalWorkerRuntime(runtime))
    yield runtime
    await runtime.dispatcher.aclose()
    await runtime.store.aclose()


async def _all(rt: Runtime, ids: list[str]) -> dict[str, str]:
    for _ in range(600):
        found = {e: (await rt.store.summary(e)).status for e in ids}
        if all(s in ("completed", "failed", "cancelled") for s in found.values()):
            return found
        await asyncio.sleep(0.05)
    raise AssertionError(f"not done: {found}")


def _wf(name: str, seconds: float = 0.05) -> dict[str, Any]:
    return {"name": name, "seconds": seconds}


async def _hold(rt: Runtime, queue: str, seconds: float) -> asyncio.Task[Any]:
    """A first workflow holding the queue's one slot (a start runs inline: in a task)."""
    task = asyncio.ensure_future(
        rt.start("workflow", _wf("first", seconds), execution_id="first", queue=QueueRef(queue))
    )
    for _ in range(500):
        if ORDER:
            return task
        await asyncio.sleep(0.01)
    raise AssertionError("the first workflow never ran")


async def test_queue_priority(rt: Runtime):
    """``test_priority_queue``: with the queue saturated, workflows run by priority (lower
    first), then in the order they were enqueued; no priority is the best (0)."""
    first = await _hold(rt, "prio", 0.4)
    plan = [("p5a", 5), ("p1", 1), ("none", None), ("p5b", 5), ("p3", 3)]
    for name, prio in plan:
        q = QueueRef("prio") if prio is None else QueueRef("prio", priority=prio)
        await rt.start("workflow", _wf(name), execution_id=name, queue=q)
    await _all(rt, ["first", *[n for n, _ in plan]])
    await first
    assert ORDER == ["first", "none", "p1", "p3", "p5a", "p5b"]


async def test_queue_deduplication(rt: Runtime):
    """``test_queue_deduplication``: a second enqueue with the same deduplication id while
    the first is enqueued or running raises; once the first finished, the id is free. The
    same workflow id enqueued again is the same workflow, not a duplicate."""
    q = QueueRef("dedup", deduplication_id="user-1")
    held = asyncio.ensure_future(rt.start("workflow", _wf("a", 0.3), execution_id="a", queue=q))
    await asyncio.sleep(0.05)
    with pytest.raises(QueueDeduplicatedError, match="user-1"):
        await rt.start("workflow", _wf("b"), execution_id="b", queue=q)
    other = QueueRef("dedup", deduplication_id="user-2")  # another id is no duplicate
    await rt.start("workflow", _wf("c"), execution_id="c", queue=other)
    await held
    assert (await rt.start("workflow", _wf("a", 0.3), execution_id="a", queue=q)).status == (
        "completed"
    )
    await rt.start("workflow", _wf("b"), execution_id="b", queue=q)
    assert await _all(rt, ["a", "b", "c"]) == dict.fromkeys("abc", "completed")


async def test_queue_delay(rt: Runtime):
    """DBOS's enqueue ``delay_seconds``: the workflow is not dequeued before its delay."""
    began = time.time()
    await rt.start(
        "workflow", _wf("later"), execution_id="later", queue=QueueRef("dedup", delay=0.5)
    )
    assert (await rt.store.summary("later")).status == "running" and ORDER == []
    await _all(rt, ["later"])
    assert time.time() - began >= 0.5


async def test_worker_concurrency(rt: Runtime):
    """``test_worker_concurrency``: at most ``worker_concurrency`` of the queue run at once
    on one worker (a Loom runtime: one process), whatever the global limit."""
    ids = [f"w{i}" for i in range(6)]
    q = QueueRef("worker")
    await asyncio.gather(
        *(rt.start("workflow", _wf(e, 0.15), execution_id=e, queue=q) for e in ids)
    )
    assert await _all(rt, ids) == dict.fromkeys(ids, "completed")
    assert RUNNING[1] == 2


async def test_timeout_starts_at_dequeue(rt: Runtime):
    """``test_queue_workflow_timeout`` / enqueue timeouts: a workflow's timeout counts from
    when it is dequeued, not enqueued; past it, it is cancelled."""
    first = await _hold(rt, "limited", 0.5)
    waited = QueueRef("limited", timeout=0.3)
    await rt.start("workflow", _wf("quick"), execution_id="quick", queue=waited)
    await rt.start("blocked", None, execution_id="slow", queue=QueueRef("limited", timeout=0.3))
    done = await _all(rt, ["first", "quick", "slow"])
    await first
    assert done == {"first": "completed", "quick": "completed", "slow": "cancelled"}
