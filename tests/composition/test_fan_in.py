"""Fan-in through the parent's inbox, on memory and the Firestore emulator: the results of a
parent's many children are independent writes (none races the parent's log), the parent is
woken a bounded number of times (one wake per interval), and it gets every result once.

The dispatcher plays Cloud Tasks: tasks run later, in tasks of their own, a name once.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from loom import FlowContext, Loom
from loom.dispatch.base import Dispatcher
from loom.errors import AppendConflictError, ExecutionSupersededError, StoreError
from loom.kernel.inbox import WAKE_MARK
from loom.runtime import Runtime
from loom.store import EventStore
from loom.store.base import AppendRequest
from loom.wire import ExecutionPackage
from tests.contracts.conftest import make_store

CHILDREN = 60

app = Loom("fan-in")


@app.flow("kid")
async def kid(ctx: FlowContext, n: int) -> int:
    return n * 2


@app.flow("parent")
async def parent(ctx: FlowContext, n: int) -> int:
    started = [await ctx.start_flow("kid", i) for i in range(n)]
    return sum([await c.result() for c in started])


class Tasks(Dispatcher):
    """Cloud Tasks, roughly: a task name once, delivered later, retried on a store error,
    re-sent a little later when another call holds the execution."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.names: set[str] = set()
        self.sent: Counter[str] = Counter()
        self.running: set[asyncio.Task[None]] = set()

    async def dispatch(
        self, package: ExecutionPackage, dispatch_id: str, not_before: float | None = None
    ) -> None:
        if dispatch_id in self.names:
            return
        self.names.add(dispatch_id)
        self.sent[package.execution_id] += 1
        delay = 0.0 if not_before is None else max(0.0, not_before - time.time())
        asyncio.get_running_loop().call_later(delay, self._start, package, dispatch_id)

    def _start(self, package: ExecutionPackage, dispatch_id: str) -> None:
        task = asyncio.get_running_loop().create_task(self._run(package, dispatch_id))
        self.running.add(task)
        task.add_done_callback(self.running.discard)

    async def _run(self, package: ExecutionPackage, dispatch_id: str, tries: int = 0) -> None:
        try:
            await self.runtime.execute(package.model_copy(update={"dispatch_id": dispatch_id}))
        except (ExecutionSupersededError, StoreError):
            await asyncio.sleep(0.3)
            await self._run(package, dispatch_id, tries + 1)


@pytest.fixture(params=["memory", pytest.param("firestore", marks=pytest.mark.slow)])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[EventStore]:
    s = await make_store(request.param, tmp_path, request)
    inbox = s.inbox()
    assert inbox is not None
    inbox.wake_interval = 1.0  # as on Firestore (the memory store's is 0: at once)
    yield s
    await s.aclose()


async def test_a_parents_children_tell_it_through_its_inbox(store: EventStore) -> None:
    rt = Runtime(app, store)
    tasks = rt.dispatcher = Tasks(rt)
    conflicts: Counter[str] = Counter()
    append = store.append

    async def counting(request: AppendRequest) -> int:
        try:
            return await append(request)
        except AppendConflictError:
            conflicts[request.execution_id] += 1
            raise

    store.append = counting  # type: ignore[method-assign]
    started = time.monotonic()
    await rt.start("parent", CHILDREN, execution_id="p")
    deadline = time.monotonic() + 120
    while (await rt.store.summary("p")).status != "completed":
        assert time.monotonic() < deadline, "the parent did not complete"
        await asyncio.sleep(0.2)
    took = time.monotonic() - started
    result = await rt.result("p")
    assert result.output == sum(i * 2 for i in range(CHILDREN))
    history = await rt.history("p")
    told = [e for e in history if e.type == "ExecutionResumed"]
    assert len(told) == CHILDREN  # every child's result, once
    wakes = [n for n in tasks.names if n.startswith(f"p{WAKE_MARK}")]
    assert 1 <= len(wakes) <= took + 2  # one a second at most, not one a child
    assert conflicts["p"] <= 2  # the children's posts never raced the parent's log
    inbox = store.inbox()
    assert inbox is not None and await inbox.items("p") == []  # drained
    await asyncio.gather(*tasks.running, return_exceptions=True)
