"""``ctx.get_event`` inside a flow on every store: what it read is recorded and replayed."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from loom import FlowContext, Loom
from loom.errors import InputError
from loom.kernel.fold import fold
from loom.runtime import Runtime
from loom.store.base import EventStore
from loom.testing import replay
from loom.wire import ExecutionPackage


def make_app() -> Loom:
    app = Loom("reads")

    @app.flow("publisher")
    async def publisher(ctx: FlowContext, value: Any) -> str:
        await ctx.set_event("url", value)
        await ctx.suspend("next", ctx.execution_id)
        await ctx.set_event("url", "changed")
        return "published"

    @app.flow("late")
    async def late(ctx: FlowContext, _: None) -> str:
        await ctx.suspend("go", ctx.execution_id)
        await ctx.set_event("url", "at last")
        return await ctx.suspend("end", ctx.execution_id)

    @app.flow("reader")
    async def reader(ctx: FlowContext, args: dict[str, Any]) -> Any:
        return await ctx.get_event(args["of"], args.get("key", "url"), timeout=args["timeout"])

    @app.flow("bad")
    async def bad(ctx: FlowContext, _: None) -> Any:
        return await ctx.get_event("x", "k", timeout=-1)

    return app


@pytest.fixture
def rt(store: EventStore) -> Runtime:
    return Runtime(make_app(), store)


async def test_a_value_read_is_recorded_and_replayed_as_it_was(rt: Runtime) -> None:
    await rt.start("publisher", {"n": 1}, execution_id="pub")
    done = await rt.start("reader", {"of": "pub", "timeout": 0}, execution_id="r")
    assert (done.status, done.output) == ("completed", {"n": 1})
    await rt.resume("pub", "next", "pub")  # the publisher moves on: the read does not
    history = await rt.history("r")
    assert [e.type for e in history].count("EventRead") == 1
    assert "EventAwaited" not in [e.type for e in history]  # found at once: one append
    assert (await replay(rt.app, history)).output == {"n": 1}
    assert fold(history).steps["1"]["effect"] == "loom.get_event"


async def test_nothing_in_time_is_none_and_a_missing_key_of_an_ended_one_at_once(
    rt: Runtime,
) -> None:
    await rt.start("publisher", "v", execution_id="p2")
    began = time.monotonic()
    missing = await rt.start("reader", {"of": "p2", "key": "nope", "timeout": 0.3})
    assert missing.output is None and time.monotonic() - began >= 0.3
    await rt.resume("p2", "next", "p2")  # ended: a key it never set will never come
    began = time.monotonic()
    ended = await rt.start("reader", {"of": "p2", "key": "nope", "timeout": 30})
    assert ended.output is None and time.monotonic() - began < 5
    nobody = await rt.start("reader", {"of": "nobody", "timeout": 0.2})
    assert nobody.status == "completed" and nobody.output is None
    failed = await rt.start("bad", None)
    assert failed.status == "failed" and failed.error is not None
    assert failed.error["type"] == InputError.__name__


async def test_a_wait_sees_a_value_published_meanwhile(rt: Runtime) -> None:
    await rt.start("late", None, execution_id="lt")
    await rt.start("reader", {"of": "lt", "timeout": 20}, execution_id="w", run=False)
    reading = asyncio.ensure_future(rt.execute(ExecutionPackage(execution_id="w")))
    await asyncio.sleep(0.3)
    assert not reading.done()
    await rt.resume("lt", "go", "lt")
    result = await asyncio.wait_for(reading, 10)
    assert (result.status, result.output) == ("completed", "at last")
    kinds = [e.type for e in await rt.history("w")]
    assert kinds.index("EventAwaited") < kinds.index("EventRead")
    state = await rt.load_state("w")
    assert state.steps["1"]["found"] is True


async def test_a_reader_that_another_starts_later_is_waited_for(rt: Runtime) -> None:
    await rt.start("reader", {"of": "later", "timeout": 20}, execution_id="early", run=False)
    reading = asyncio.ensure_future(rt.execute(ExecutionPackage(execution_id="early")))
    await asyncio.sleep(0.3)
    await rt.start("publisher", "from later", execution_id="later")
    result = await asyncio.wait_for(reading, 10)
    assert result.output == "from later"
