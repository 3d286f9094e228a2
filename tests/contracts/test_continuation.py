"""Continue-as-new on every store: a fresh history per run, one execution id, nothing lost.

The runtime runs with no dispatcher, so the next run starts inline when a run continues.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from loom import FlowContext, Loom
from loom.errors import ExecutionFinishedError, InvalidPayloadError
from loom.runtime import Runtime
from loom.store.base import EventStore
from loom.wire import ExecutionPackage


def make_app() -> Loom:
    app = Loom("continuation")

    @app.flow("counter")
    async def counter(ctx: FlowContext, state: dict[str, int]) -> dict[str, int]:
        """Adds what arrives on ``add``; continues every 3 messages; ``stop`` ends it."""
        total = state["total"]
        for _ in range(3):
            got = await ctx.recv("add")
            if got == "stop":
                return {"total": total, "runs": state["runs"]}
            total += got
            await ctx.set_event("total", total)
        await ctx.continue_as_new({"total": total, "runs": state["runs"] + 1})

    @app.flow("gate_after")
    async def gate_after(ctx: FlowContext, n: int) -> Any:
        if n == 0:
            await ctx.continue_as_new(1)
        return await ctx.suspend("go", "k")

    @app.flow("bad_input")
    async def bad_input(ctx: FlowContext, n: int) -> Any:
        await ctx.continue_as_new("not a number")

    @app.flow("in_flight")
    async def in_flight(ctx: FlowContext, _: None) -> Any:
        pending = asyncio.ensure_future(ctx.execute("slow", None))
        await asyncio.sleep(0)
        try:
            await ctx.continue_as_new(None)
        finally:
            await pending

    @app.effect("slow")
    async def slow(ctx: Any, _: None) -> str:
        await asyncio.sleep(0.05)
        return "done"

    @app.flow("ticker")
    async def ticker(ctx: FlowContext, args: dict[str, Any]) -> list[str]:
        """Sends and keys one step per run, at the same step id every run."""
        keys = [*args["keys"], await ctx.execute("key_of", None)]
        await ctx.send(args["to"], "tick", len(keys))
        if len(keys) < 3:
            await ctx.continue_as_new({**args, "keys": keys})
        return keys

    @app.effect("key_of")
    async def key_of(ctx: Any, _: None) -> str:
        return ctx.idempotency_key

    @app.flow("ticks")
    async def ticks(ctx: FlowContext, _: None) -> list[Any]:
        return [await ctx.recv("tick") for _ in range(3)]

    return app


START = {"total": 0, "runs": 1}


@pytest.fixture
def rt(store: EventStore) -> Runtime:
    return Runtime(make_app(), store)


async def test_runs_continue_with_a_fresh_history_and_the_same_id(rt: Runtime) -> None:
    await rt.start("counter", START, execution_id="c")
    for n in range(7):
        await rt.send("c", "add", n)
    state = await rt.load_state("c")
    assert (state.run, state.status) == (3, "suspended")  # 3 + 3 messages, then a third run
    assert state.input == {"total": 15, "runs": 3}
    assert set(state.steps) == {"2"}  # run 3's history only: its first recv took message 7
    assert await rt.get_event("c", "total") == 21  # published values carry over
    done = await rt.send("c", "add", "stop")
    result = await rt.result("c")
    assert (result.status, result.output) == ("completed", {"total": 21, "runs": 3}), done
    history = await rt.history("c")
    chain = [e.run for e in history if e.type == "ExecutionContinued"]
    assert chain == [2, 3]
    # Loading reads the current run: a snapshot stands at its start.
    loaded = await rt.store.load("c")
    assert loaded.snapshot is not None and loaded.snapshot.seq >= state.run_started_seq


async def test_messages_the_ended_run_did_not_take_are_carried_over(rt: Runtime) -> None:
    await rt.start("counter", START, execution_id="m", run=False)
    for n in [1, 2, 3, 4, 5]:  # buffered before the flow runs: run 1 takes 3, leaves 2
        await rt.send("m", "add", n, message_id=f"m{n}")
    await rt.execute(ExecutionPackage(execution_id="m"))
    state = await rt.load_state("m")
    assert state.run == 2 and state.input == {"total": 6, "runs": 2}
    await rt.send("m", "add", 5, message_id="m5")  # a retried send across the boundary
    await rt.send("m", "add", "stop")
    result = await rt.result("m")
    assert result.output == {"total": 15, "runs": 2}  # 4 and 5 once each, then stop


async def test_resumes_and_cancels_reach_the_current_run(rt: Runtime) -> None:
    await rt.start("gate_after", 0, execution_id="g")
    state = await rt.load_state("g")
    assert (state.run, state.status) == (2, "suspended")
    done = await rt.resume("g", "go", "k", "yes")
    assert (await rt.result("g")).output == "yes", done
    await rt.start("gate_after", 0, execution_id="g2")
    await rt.cancel("g2", "enough")
    with pytest.raises(ExecutionFinishedError):
        await rt.send("g2", "add", 1)


async def test_a_bad_next_input_or_a_step_in_flight_fails_the_run_clearly(rt: Runtime) -> None:
    failed = await rt.start("bad_input", 0, execution_id="b")
    assert failed.status == "failed" and failed.error is not None
    assert failed.error["code"] == InvalidPayloadError.code
    failed = await rt.start("in_flight", None, execution_id="f")
    assert failed.status == "failed" and failed.error is not None
    assert "in flight" in failed.error["message"]
    assert (await rt.load_state("f")).run == 1


async def test_step_keys_differ_from_run_to_run(rt: Runtime) -> None:
    """Step ids restart every run; idempotency keys and message ids must not."""
    await rt.start("ticks", None, execution_id="rx")
    await rt.start("ticker", {"to": "rx", "keys": []}, execution_id="tk")
    assert (await rt.result("tk")).output == ["tk:1", "tk#run2:1", "tk#run3:1"]
    received = [e.message_id for e in await rt.history("rx") if e.type == "MessageReceived"]
    assert received == ["tk:2", "tk#run2:2", "tk#run3:2"]
    assert (await rt.result("rx")).output == [1, 2, 3]
