"""Streams (``ctx.write_stream`` / ``Runtime.read_stream``) on every store."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from loom import FlowContext, Loom
from loom.errors import (
    InputError,
    LimitExceededError,
    StreamClosedError,
    UnknownExecutionError,
)
from loom.kernel.execution_limits import Limits
from loom.runtime import Runtime
from loom.store.base import EventStore
from loom.testing import replay
from loom.wire import ExecutionPackage


def make_app() -> Loom:
    app = Loom("streams", limits=Limits(max_stream_values=200))

    @app.flow("tokens")
    async def tokens(ctx: FlowContext, n: int) -> int:
        for i in range(n):
            await ctx.write_stream("tokens", {"i": i})
            if i % 3 == 0:
                await ctx.write_stream("every-third", i)
        await ctx.close_stream("tokens")
        return n

    @app.flow("paced")
    async def paced(ctx: FlowContext, n: int) -> str:
        for i in range(n):
            await ctx.suspend("next", str(i))
            await ctx.write_stream("out", i)
        return "done"

    @app.flow("misuse")
    async def misuse(ctx: FlowContext, what: str) -> Any:
        if what == "closed":
            await ctx.close_stream("s")
            try:
                await ctx.write_stream("s", 1)
            except StreamClosedError as exc:
                return exc.code
        for i in range(250):
            try:
                await ctx.write_stream("s", i)
            except LimitExceededError as exc:
                return [i, exc.code]
        return "never full"

    return app


@pytest.fixture
def rt(store: EventStore) -> Runtime:
    return Runtime(make_app(), store)


async def test_values_read_from_any_offset_in_order(rt: Runtime) -> None:
    await rt.start("tokens", 140, execution_id="t")
    first = await rt.read_stream("t", "tokens", limit=10)
    assert [v["i"] for v in first.values] == list(range(10))
    assert (first.next_offset, first.closed) == (10, False)
    middle = await rt.read_stream("t", "tokens", 63, limit=5)  # across a mark of the index
    assert [v["i"] for v in middle.values] == [63, 64, 65, 66, 67]
    tail = await rt.read_stream("t", "tokens", 130, limit=100)
    assert [v["i"] for v in tail.values] == list(range(130, 140)) and tail.closed
    past = await rt.read_stream("t", "tokens", 140)
    assert (past.values, past.closed) == ([], True)
    every = [v async for v in rt.stream("t", "every-third")]
    assert every == list(range(0, 140, 3))  # not closed by the flow: over with its end
    assert [v["i"] async for v in rt.stream("t", "tokens", 137)] == [137, 138, 139]
    # A replay writes nothing twice.
    history = await rt.history("t")
    assert [e.type for e in history].count("StreamWritten") == 140 + 47
    assert (await replay(rt.app, history)).output == 140


async def test_a_reader_waits_for_values_as_the_flow_writes_them(rt: Runtime) -> None:
    await rt.start("paced", 3, execution_id="p")

    async def read_all() -> list[Any]:
        return [v async for v in rt.stream("p", "out")]

    reader = asyncio.ensure_future(read_all())
    waited = asyncio.ensure_future(rt.read_stream("p", "out", 0, timeout=20))
    await asyncio.sleep(0.3)
    assert not waited.done()
    for i in range(3):
        await rt.resume("p", "next", str(i))
        await asyncio.sleep(0.1)
    assert (await asyncio.wait_for(waited, 10)).values[0] == 0
    assert await asyncio.wait_for(reader, 10) == [0, 1, 2]


async def test_closed_and_full_streams_refuse_in_the_flow_and_bad_reads_are_input_errors(
    rt: Runtime,
) -> None:
    assert (await rt.start("misuse", "closed", execution_id="c")).output == "stream_closed"
    full = await rt.start("misuse", "full", execution_id="f")
    assert full.output == [200, "limit_exceeded"]
    assert (await rt.read_stream("f", "s", 199)).values == [199]
    low = await rt.start("misuse", "full", execution_id="low", budgets={"max_stream_values": 4})
    assert low.output == [4, "limit_exceeded"]
    for bad in ({"offset": -1}, {"limit": 0}, {"limit": 5000}, {"timeout": 120.0}):
        with pytest.raises(InputError):
            await rt.read_stream("c", "s", **bad)
    with pytest.raises(InputError):
        await rt.read_stream("c", "")
    with pytest.raises(UnknownExecutionError):
        await rt.read_stream("nobody", "s")
    nothing = await rt.read_stream("c", "never-written")
    assert (nothing.values, nothing.closed) == ([], True)  # the execution ended


async def test_a_stream_written_by_a_running_session_is_readable_before_its_end(
    rt: Runtime,
) -> None:
    await rt.start("paced", 2, execution_id="live", run=False)
    await rt.execute(ExecutionPackage(execution_id="live"))
    await rt.resume("live", "next", "0")
    chunk = await rt.read_stream("live", "out")
    assert (chunk.values, chunk.closed) == ([0], False)


async def test_a_full_log_takes_no_stream_value(rt: Runtime) -> None:
    done = await rt.start("tokens", 10, execution_id="capped", budgets={"max_events": 6})
    assert done.status == "failed" and done.error is not None
    assert done.error["code"] == "limit_exceeded"
    chunk = await rt.read_stream("capped", "tokens")
    assert len(chunk.values) <= 6 and chunk.closed
