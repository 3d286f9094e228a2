"""Queries (``ctx.set_query_handler`` / ``Runtime.query``) on every store: a value the flow's
code computes from where the execution stands, read without writing anything."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from loom import EffectContext, FlowContext, Loom
from loom.errors import (
    InvalidPayloadError,
    QueryFailedError,
    UnknownExecutionError,
    UnknownQueryError,
)
from loom.runtime import Runtime
from loom.store.base import EventStore
from loom.wire import ExecutionPackage

GATES: dict[str, asyncio.Event] = {}
CALLS: list[str] = []


def make_app() -> Loom:
    app = Loom("queries")

    @app.effect("charge")
    async def charge(ctx: EffectContext, amount: int) -> int:
        CALLS.append(ctx.execution_id)
        gate = GATES.get(ctx.execution_id)
        if gate is not None:
            await gate.wait()
        return amount

    @app.flow("order")
    async def order(ctx: FlowContext, amounts: list[int]) -> int:
        paid: list[int] = []
        stage = {"name": "starting"}
        ctx.set_query_handler("paid", lambda: sum(paid))
        ctx.set_query_handler("stage", lambda: stage["name"])

        def times(k: int) -> list[int]:
            return [x * k for x in paid]

        ctx.set_query_handler("times", times)
        ctx.set_query_handler("broken", lambda: 1 / 0)
        for amount in amounts:
            stage["name"] = f"charging {amount}"
            paid.append(await ctx.execute(charge, amount))
        stage["name"] = "waiting for approval"
        await ctx.suspend("approve", ctx.execution_id)
        ctx.set_query_handler("late", lambda: "registered after the approval")
        stage["name"] = "done"
        return sum(paid)

    return app


@pytest.fixture
def rt(store: EventStore) -> Runtime:
    return Runtime(make_app(), store)


async def test_a_query_reads_the_flows_state_where_it_waits(rt: Runtime) -> None:
    await rt.start("order", [10, 20], execution_id="o")
    before = await rt.history("o")
    calls = len(CALLS)
    assert await rt.query("o", "paid") == 30
    assert await rt.query("o", "stage") == "waiting for approval"
    assert await rt.query("o", "times", 2) == [20, 40]
    assert await rt.history("o") == before  # nothing written
    assert len(CALLS) == calls  # nothing invoked
    with pytest.raises(UnknownQueryError, match="registered: broken, paid, stage, times"):
        await rt.query("o", "late")  # not registered where the flow stands
    with pytest.raises(QueryFailedError, match="ZeroDivisionError"):
        await rt.query("o", "broken")
    with pytest.raises(InvalidPayloadError):
        await rt.query("o", "times", "two")  # the handler takes an int
    with pytest.raises(UnknownExecutionError):
        await rt.query("nobody", "paid")
    await rt.resume("o", "approve", "o")
    assert await rt.query("o", "stage") == "done"  # a finished execution answers too
    assert await rt.query("o", "late") == "registered after the approval"


async def test_a_query_on_a_running_execution_stops_at_its_step_in_flight(rt: Runtime) -> None:
    GATES["run"] = asyncio.Event()
    await rt.start("order", [5, 7], execution_id="run", run=False)
    running = asyncio.ensure_future(rt.execute(ExecutionPackage(execution_id="run")))
    await asyncio.sleep(0.2)  # the first charge is in flight
    calls = len(CALLS)
    assert await rt.query("run", "stage") == "charging 5"
    assert await rt.query("run", "paid") == 0
    assert len(CALLS) == calls  # the step in flight was not invoked again
    GATES["run"].set()
    assert (await asyncio.wait_for(running, 10)).status == "suspended"
    assert await rt.query("run", "paid") == 12


async def test_queries_at_once_answer_alike_and_write_nothing(rt: Runtime) -> None:
    await rt.start("order", [1, 2, 3], execution_id="many")
    seq = (await rt.store.summary("many")).last_seq
    answers = await asyncio.gather(*(rt.query("many", "paid") for _ in range(8)))
    assert answers == [6] * 8
    assert (await rt.store.summary("many")).last_seq == seq


async def test_a_query_never_reaches_another_execution(store: EventStore) -> None:
    """A replay that reaches a step not in the log (a message to another execution, a child)
    stops there: nothing is sent, started or written."""
    app = Loom("quiet")

    @app.flow("sender")
    async def sender(ctx: FlowContext, to: str) -> Any:
        sent = {"n": 0}
        ctx.set_query_handler("sent", lambda: sent["n"])
        await ctx.suspend("go", to)
        await ctx.send(to, "hello", "there")
        sent["n"] += 1
        return await ctx.execute_flow("child", None)

    @app.flow("child")
    async def child(ctx: FlowContext, _: None) -> str:
        return "child"

    @app.flow("inbox")
    async def inbox(ctx: FlowContext, _: None) -> Any:
        return await ctx.recv("hello")

    rt = Runtime(app, store)
    await rt.start("inbox", execution_id="box")
    await rt.start("sender", "box", execution_id="snd")
    box_before, snd_before = await rt.history("box"), await rt.history("snd")
    # The gate is resumed in the log by hand (no run), so the replay reaches the send.
    from loom import events as ev
    from loom.store.base import AppendRequest

    resume = ev.ExecutionResumed(on="go", correlation_key="box")
    ev.number([resume], len(snd_before), 1.0)
    await store.append(AppendRequest("snd", len(snd_before), [resume]))
    assert await rt.query("snd", "sent") == 0
    assert await rt.history("box") == box_before
    assert await rt.history("snd") == [*snd_before, resume]
    rows = await store.list(limit=100)
    assert sorted(r.execution_id for r in rows) == ["box", "snd"]  # no child started
