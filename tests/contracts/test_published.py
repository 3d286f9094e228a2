"""Published state (``ctx.set_event`` / ``Runtime.get_event``) on every store."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from loom import FlowContext, Loom
from loom.errors import EventNotFoundError, InputError, UnknownExecutionError
from loom.kernel.fold import fold
from loom.runtime import Runtime
from loom.store.base import EventStore
from loom.wire import ExecutionPackage


def make_app() -> Loom:
    app = Loom("published")

    @app.flow("progress")
    async def progress(ctx: FlowContext, _: None) -> str:
        await ctx.set_event("progress", {"done": 1})
        await ctx.set_event("url", "https://pay.example/1")
        await ctx.suspend("go", "k")
        await ctx.set_event("progress", {"done": 2})
        return "ok"

    @app.flow("nothing")
    async def nothing(ctx: FlowContext, _: None) -> Any:
        return await ctx.suspend("go", "k")

    return app


@pytest.fixture
def rt(store: EventStore) -> Runtime:
    return Runtime(make_app(), store)


async def test_values_are_readable_while_the_flow_waits_and_the_latest_wins(rt: Runtime) -> None:
    waiting = await rt.start("progress", execution_id="p")
    assert waiting.status == "suspended"
    assert await rt.get_event("p", "progress") == {"done": 1}
    assert await rt.get_event("p", "url") == "https://pay.example/1"
    done = await rt.resume("p", "go", "k")
    assert done.status == "completed"
    assert await rt.get_event("p", "progress") == {"done": 2}  # readable after the end too
    history = await rt.history("p")
    # Replayed twice (start, resume), each publication is in the log once.
    assert [e.type for e in history].count("EventPublished") == 3
    assert fold(history).steps["1"]["effect"] == "loom.set_event"


async def test_a_key_never_set_is_not_found_or_waited_for(rt: Runtime) -> None:
    await rt.start("nothing", execution_id="n")
    with pytest.raises(EventNotFoundError, match="'missing'"):
        await rt.get_event("n", "missing")
    began = time.monotonic()
    with pytest.raises(EventNotFoundError):
        await rt.get_event("n", "missing", timeout=0.3)
    assert time.monotonic() - began >= 0.3
    with pytest.raises(UnknownExecutionError):
        await rt.get_event("nobody", "k")
    with pytest.raises(InputError):
        await rt.get_event("n", "k", timeout=10_000)
    with pytest.raises(InputError):
        await rt.get_event("n", "")


async def test_a_waiting_reader_gets_the_value_once_it_is_published(rt: Runtime) -> None:
    await rt.start("progress", execution_id="w", run=False)
    reader = asyncio.ensure_future(rt.get_event("w", "url", timeout=30))
    await asyncio.sleep(0.3)
    assert not reader.done()
    await rt.execute(ExecutionPackage(execution_id="w"))  # a worker runs it meanwhile
    assert await asyncio.wait_for(reader, 10) == "https://pay.example/1"
