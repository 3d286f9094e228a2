"""Ports of DBOS Transact's ``get_event``-in-a-workflow tests (``test_dbos.py``:
``test_set_get_events``, ``test_get_event_timeout``) and its stream tests
(``test_streaming.py``) onto Loom, over SQLite on disk with an in-process dispatcher (so
durable sleeps fire).

A DBOS workflow is a Loom flow, ``DBOS.get_event`` in a workflow ``ctx.get_event``,
``DBOS.write_stream``/``close_stream`` ``ctx.write_stream``/``close_stream`` and
``DBOS.read_stream`` ``Runtime.stream``. Where Loom differs, the test says so: values are
JSON (a tuple or a set reads back as a list, an object JSON cannot hold is refused where
DBOS pickles it), and a stream is written by the flow, not from inside a step.
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
from loom.errors import ContextMisuseError
from loom.runtime import Runtime
from loom.store import SqliteEventStore
from loom.workers.local import LocalWorkerRuntime

CALLS: dict[str, int] = {}


class Custom:
    def __init__(self, value: str) -> None:
        self.value = value


def make_app() -> Loom:
    app = Loom("dbos-events-streams")

    @app.effect("counting_step")
    async def counting_step(ctx: EffectContext, _: None) -> int:
        CALLS["step"] = CALLS.get("step", 0) + 1
        return CALLS["step"]

    @app.flow("set_events")
    async def set_events(ctx: FlowContext, _: None) -> None:
        await ctx.set_event("key1", "value1")
        await ctx.set_event("key2", "value2")
        await ctx.set_event("key3", None)

    @app.flow("get_event")
    async def get_event(ctx: FlowContext, args: dict[str, Any]) -> str | None:
        CALLS["get_event"] = CALLS.get("get_event", 0) + 1
        msg = await ctx.get_event(args["target"], args["key"], timeout=args.get("timeout", 0))
        return str(msg) if msg is not None else None

    @app.flow("set_later")
    async def set_later(ctx: FlowContext, _: None) -> None:
        await ctx.sleep(1)
        await ctx.set_event("key", "value")

    @app.flow("own_event")
    async def own_event(ctx: FlowContext, _: None) -> Any:
        return await ctx.get_event(ctx.execution_id, "key", timeout=0)

    @app.flow("writer")
    async def writer(ctx: FlowContext, args: dict[str, Any]) -> None:
        for value in args["values"]:
            await ctx.write_stream(args.get("key", "test_stream"), value)
            if args.get("pause"):
                await ctx.sleep(args["pause"])
        if args.get("close", True):
            await ctx.close_stream(args.get("key", "test_stream"))
        if args.get("fail"):
            raise RuntimeError("after writing")
        if args.get("linger"):
            await ctx.sleep(args["linger"])

    @app.flow("interleaved")
    async def interleaved(ctx: FlowContext, _: None) -> None:
        for key, value in [("stream1", "1a"), ("stream2", "2a"), ("stream1", "1b")]:
            await ctx.write_stream(key, value)
        for key, value in [("stream3", "3a"), ("stream2", "2b"), ("stream1", "1c")]:
            await ctx.write_stream(key, value)
        for key in ("stream1", "stream2", "stream3"):
            await ctx.close_stream(key)

    @app.flow("recovery")
    async def recovery(ctx: FlowContext, _: None) -> None:
        CALLS["workflow"] = CALLS.get("workflow", 0) + 1
        count1 = await ctx.execute(counting_step)
        await ctx.write_stream("recovery_stream", f"step_{count1}")
        count2 = await ctx.execute(counting_step)
        await ctx.write_stream("recovery_stream", f"step_{count2}")
        await ctx.close_stream("recovery_stream")

    @app.flow("custom")
    async def custom(ctx: FlowContext, _: None) -> str:
        try:
            await ctx.write_stream("s", Custom("test"))
        except Exception as exc:
            return type(exc).__name__
        return "written"

    @app.flow("keeps_ctx")
    async def keeps_ctx(ctx: FlowContext, _: None) -> None:
        KEPT.append(ctx)

    return app


KEPT: list[FlowContext] = []


@pytest.fixture
async def rt(tmp_path: Path) -> AsyncIterator[Runtime]:
    CALLS.clear()
    store = SqliteEventStore(tmp_path / "loom.db")
    runtime = Runtime(make_app(), store)
    dispatcher = InProcessDispatcher(LocalWorkerRuntime(runtime))
    runtime.dispatcher = dispatcher
    yield runtime
    await dispatcher.aclose()
    await store.aclose()


async def result(rt: Runtime, eid: str, within: float = 20) -> Any:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        got = await rt.result(eid)
        if got.status in ("completed", "failed"):
            return got
        assert loop.time() < deadline, got
        await asyncio.sleep(0.05)


async def test_set_get_events(rt: Runtime) -> None:
    await rt.start("set_events", execution_id="wf")
    value1 = await rt.start("get_event", {"target": "wf", "key": "key1"})
    assert value1.output == "value1"
    value2 = await rt.start("get_event", {"target": "wf", "key": "key2"})
    assert value2.output == "value2"
    assert await rt.get_event("wf", "key1") == "value1"  # outside a workflow
    value3 = await rt.start("get_event", {"target": "wf", "key": "key3"})
    assert value3.output is None  # a value of None is None

    # Once and only once: the same workflow id returns the recorded None, no second wait.
    began = time.monotonic()
    args = {"target": "non-existent-uuid", "key": "key1", "timeout": 1.0}
    first = await rt.start("get_event", args, execution_id="timeout-id")
    assert first.output is None and time.monotonic() - began > 0.7
    calls, began = CALLS["get_event"], time.monotonic()
    again = await rt.start("get_event", args, execution_id="timeout-id")
    assert again.output is None and time.monotonic() - began < 0.5
    assert CALLS["get_event"] == calls  # the flow did not even run again

    # A reader started before the value is set gets it as soon as it is.
    began = time.monotonic()
    await rt.start("set_later", execution_id="setter")
    getter = asyncio.ensure_future(
        rt.start("get_event", {"target": "setter", "key": "key", "timeout": 60})
    )
    assert (await result(rt, "setter")).status == "completed"
    assert (await asyncio.wait_for(getter, 20)).output == "value"
    assert time.monotonic() - began < 5


async def test_get_event_timeout_of_its_own_event(rt: Runtime) -> None:
    done = await rt.start("own_event", execution_id="own")
    assert (done.status, done.output) == ("completed", None)


async def test_basic_stream_write_read_and_read_again(rt: Runtime) -> None:
    values = ["hello", 42, {"key": "value"}, [1, 2, 3], None]
    await rt.start("writer", {"values": values}, execution_id="w")
    assert [v async for v in rt.stream("w", "test_stream")] == values
    assert [v async for v in rt.stream("w", "test_stream")] == values


async def test_stream_read_offset(rt: Runtime) -> None:
    await rt.start("writer", {"values": list(range(5))}, execution_id="o")
    for offset, expected in ((0, [0, 1, 2, 3, 4]), (2, [2, 3, 4]), (4, [4]), (5, []), (100, [])):
        assert [v async for v in rt.stream("o", "test_stream", offset)] == expected


async def test_unclosed_stream_ends_with_its_workflow(rt: Runtime) -> None:
    values = ["hello", 42, None]
    await rt.start("writer", {"values": values, "close": False}, execution_id="u1")
    assert [v async for v in rt.stream("u1", "test_stream")] == values
    failed = await rt.start("writer", {"values": values, "close": False, "fail": True})
    assert failed.status == "failed"
    assert [v async for v in rt.stream(failed.execution_id, "test_stream")] == values


async def test_stream_termination_while_reader_blocked(rt: Runtime) -> None:
    await rt.start(
        "writer", {"values": ["only_value"], "close": False, "linger": 1.0}, execution_id="t"
    )
    began = time.monotonic()
    read = [v async for v in rt.stream("t", "test_stream")]
    assert read == ["only_value"] and time.monotonic() - began < 10
    assert (await result(rt, "t")).status == "completed"


async def test_stream_concurrent_write_read(rt: Runtime) -> None:
    expected = [f"value_{i}" for i in range(10)]
    await rt.start("writer", {"values": expected, "pause": 0.1}, execution_id="c")
    began = time.monotonic()
    assert [v async for v in rt.stream("c", "test_stream")] == expected
    assert time.monotonic() - began < 100


async def test_stream_multiple_keys_and_interleaved_and_empty(rt: Runtime) -> None:
    await rt.start("interleaved", execution_id="i")
    assert [v async for v in rt.stream("i", "stream1")] == ["1a", "1b", "1c"]
    assert [v async for v in rt.stream("i", "stream2")] == ["2a", "2b"]
    assert [v async for v in rt.stream("i", "stream3")] == ["3a"]
    await rt.start("writer", {"values": [], "key": "empty_stream"}, execution_id="e")
    assert [v async for v in rt.stream("e", "empty_stream")] == []


async def test_stream_serialization_types(rt: Runtime) -> None:
    values = ["string", 42, 3.14, True, False, None, [1, 2, 3], {"nested": {"dict": "value"}}]
    await rt.start("writer", {"values": [*values, (1, 2, 3)]}, execution_id="s")
    read = [v async for v in rt.stream("s", "test_stream")]
    assert read == [*values, [1, 2, 3]]  # a tuple is a JSON array
    refused = await rt.start("custom", execution_id="cu")
    assert refused.output == "InvalidPayloadError"  # JSON only: nothing written
    assert (await rt.read_stream("cu", "s")).values == []


async def test_stream_workflow_recovery(rt: Runtime) -> None:
    await rt.start("recovery", execution_id="r")
    assert [v async for v in rt.stream("r", "recovery_stream")] == ["step_1", "step_2"]
    # Run it again from its log, as a recovery does: nothing is invoked or written twice.
    state = await rt.load_state("r")
    from loom.testing import replay

    assert (await replay(rt.app, await rt.history("r"))).status == "completed"
    assert CALLS["step"] == 2
    assert [v async for v in rt.stream("r", "recovery_stream")] == ["step_1", "step_2"]
    records = [rec.get("effect") for _, rec in sorted(state.steps.items())]
    assert records.count("loom.write_stream") == 2 and records.count("loom.close_stream") == 1


async def test_stream_large_data(rt: Runtime) -> None:
    data = [{"id": i, "data": f"item_{i}", "large_field": "x" * 1000} for i in range(100)]
    await rt.start("writer", {"values": data}, execution_id="big")
    assert [v async for v in rt.stream("big", "test_stream")] == data


async def test_stream_error_cases(rt: Runtime) -> None:
    """Writing or closing a stream outside a workflow is refused: a ``ctx`` kept after its
    flow ended is a misuse."""
    await rt.start("keeps_ctx", execution_id="k")
    with pytest.raises(ContextMisuseError):
        await KEPT[-1].write_stream("test", "value")
    with pytest.raises(ContextMisuseError):
        await KEPT[-1].close_stream("test")
