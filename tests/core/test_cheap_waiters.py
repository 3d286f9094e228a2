"""A waiter (``get_event`` with a timeout) costs a summary read per poll, not a load of the
state: forty readers each folding a big execution five times a second starved a worker.
The state is loaded again only when the log grew, and a value published meanwhile is still
seen at once."""

from __future__ import annotations

import asyncio
from typing import Any

from loom import FlowContext, Loom
from loom.errors import EventNotFoundError
from loom.runtime import Runtime
from loom.store.base import LoadedLog
from loom.store.memory import InMemoryEventStore

app = Loom("waiters")


@app.flow("slow.publisher")
async def publisher(ctx: FlowContext, n: int) -> None:
    await ctx.suspend("go", ctx.execution_id)
    await ctx.set_event("ready", n)


class CountingStore(InMemoryEventStore):
    """Counts whole-state loads and summary reads."""

    def __init__(self) -> None:
        super().__init__()
        self.loads = 0
        self.summaries = 0

    async def load(self, execution_id: str) -> LoadedLog:
        self.loads += 1
        return await super().load(execution_id)

    async def summary(self, execution_id: str) -> Any:
        self.summaries += 1
        return await super().summary(execution_id)


async def test_a_waiter_polls_the_last_seq_and_loads_only_on_change():
    store = CountingStore()
    rt = Runtime(app, store)
    await rt.start("slow.publisher", 7, execution_id="w-1")
    store.loads = store.summaries = 0
    try:
        await rt.get_event("w-1", "ready", timeout=1.5)
        raise AssertionError("nothing was published")
    except EventNotFoundError:
        pass
    assert store.loads <= 2, store.loads  # the first look, and one at the deadline
    assert store.summaries >= 3  # it kept checking the last seq meanwhile


async def test_a_value_published_while_waiting_is_returned():
    store = CountingStore()
    rt = Runtime(app, store)
    await rt.start("slow.publisher", 8, execution_id="w-2")
    waiter = asyncio.ensure_future(rt.get_event("w-2", "ready", timeout=10))
    await asyncio.sleep(0.3)
    await rt.resume("w-2", "go", "w-2")
    assert await asyncio.wait_for(waiter, 5) == 8
