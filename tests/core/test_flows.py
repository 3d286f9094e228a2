"""The flow API, replay and the runtime's control calls, on the in-memory test env."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from pydantic import BaseModel

from loom import EffectContext, FlowContext, GateTimeoutError, Loom
from loom.errors import (
    ExecutionConflictError,
    ExecutionFinishedError,
    GateTimedOutError,
    InvalidPayloadError,
    UnknownExecutionError,
    UnknownFlowError,
)
from loom.testing import LoomTestEnv


class Item(BaseModel):
    name: str
    qty: int = 1


def make_app(calls: list[str]) -> Loom:
    app = Loom("t")

    @app.effect("echo")
    async def echo(ctx: EffectContext, value: Any) -> Any:
        calls.append(f"echo:{ctx.idempotency_key}")
        return value

    @app.effect("item")
    def item(ctx: EffectContext, name: str) -> Item:
        calls.append(f"item:{name}")
        return Item(name=name, qty=len(name))

    @app.flow("straight")
    async def straight(ctx: FlowContext, n: int) -> dict[str, Any]:
        a = await ctx.execute(echo, n)
        it = await ctx.execute(item, "book")
        assert isinstance(it, Item)  # outputs come back typed, live and on replay
        return {"a": a, "qty": it.qty}

    @app.flow("gated")
    async def gated(ctx: FlowContext, key: str) -> Any:
        before = await ctx.execute(echo, "before")
        got = await ctx.suspend("approval", key)
        after = await ctx.execute(echo, "after")
        return [before, got, after]

    @app.flow("first_of")
    async def first_of(ctx: FlowContext, _: None) -> str:
        gate = asyncio.ensure_future(ctx.suspend("go", "k"))
        timer = asyncio.ensure_future(ctx.sleep(timedelta(hours=1)))
        done, _pending = await asyncio.wait({gate, timer}, return_when=asyncio.FIRST_COMPLETED)
        return "gate" if gate in done else "timer"

    @app.flow("decisions")
    async def decisions(ctx: FlowContext, _: None) -> list[Any]:
        values = [ctx.now().isoformat(), str(ctx.uuid()), ctx.random()]
        await ctx.suspend("x", "y")
        return values

    @app.flow("swallow")
    async def swallow(ctx: FlowContext, _: None) -> str:
        try:
            await ctx.suspend("x", "y")
        except Exception:  # a user's broad except must not swallow a suspension
            return "swallowed"
        return "resumed"

    @app.flow("timeout")
    async def timeout(ctx: FlowContext, _: None) -> str:
        try:
            await ctx.suspend("reply", "r", timeout=timedelta(minutes=5))
        except GateTimeoutError:
            return "timed out"
        return "replied"

    return app


@pytest.fixture
def calls() -> list[str]:
    return []


@pytest.fixture
def env(calls: list[str]) -> LoomTestEnv:
    return LoomTestEnv(make_app(calls))


async def test_straight_through_completes_with_typed_outputs(env: LoomTestEnv, calls: list[str]):
    result = await env.start("straight", 7, execution_id="s1")
    assert (result.status, result.output) == ("completed", {"a": 7, "qty": 4})
    assert calls == ["echo:s1:1", "item:book"]
    types = [e.type for e in await env.history("s1")]
    assert types == [
        "ExecutionStarted",
        "ExecutionClaimed",
        "EffectCompleted",
        "EffectCompleted",
        "ExecutionCompleted",
    ]


async def test_get_returns_state_and_history(env: LoomTestEnv):
    await env.start("straight", 3, execution_id="h1")
    result, events = await env.runtime.get("h1")
    assert result.status == "completed" and result.output == {"a": 3, "qty": 4}
    assert [e.seq for e in events] == [1, 2, 3, 4, 5]
    with pytest.raises(UnknownExecutionError):
        await env.runtime.get("nope")


async def test_gate_suspends_then_resume_replays_without_reinvoking(
    env: LoomTestEnv, calls: list[str]
):
    result = await env.start("gated", "k1", execution_id="g1")
    assert result.status == "suspended"
    assert [(g.on, g.correlation_key) for g in result.waiting_on] == [("approval", "k1")]
    assert calls == ["echo:g1:1"]
    result = await env.runtime.resume("g1", "approval", "k1", {"ok": True})
    assert result.status == "completed"
    assert result.output == ["before", {"ok": True}, "after"]
    assert calls == ["echo:g1:1", "echo:g1:3"]  # step 1 served from the log


async def test_early_resume_is_buffered_and_duplicates_are_noops(env: LoomTestEnv):
    await env.runtime.start("gated", "k2", execution_id="g2", run=False)
    early = await env.runtime.resume("g2", "approval", "k2", "early")
    assert early.status == "completed" and early.output == ["before", "early", "after"]
    count = len(await env.history("g2"))
    again = await env.runtime.resume("g2", "approval", "k2", "again")  # a redelivery
    assert again.status == "completed"
    with pytest.raises(ExecutionFinishedError):
        await env.runtime.resume("g2", "approval", "other-key", "new")
    assert len(await env.history("g2")) == count


async def test_duplicate_resume_on_a_waiting_execution_appends_nothing(env: LoomTestEnv):
    await env.start("first_of", None, execution_id="d1")
    await env.runtime.resume("d1", "other", "zz", 1)
    count = len(await env.history("d1"))
    await env.runtime.resume("d1", "other", "zz", 2)
    assert len(await env.history("d1")) == count


async def test_gather_runs_effects_concurrently_with_positional_ids(calls: list[str]):
    app = Loom("c")
    started: list[str] = []
    both = asyncio.Event()

    @app.effect("meet")
    async def meet(ctx: EffectContext, who: str) -> str:
        started.append(who)
        if len(started) == 2:
            both.set()
        await asyncio.wait_for(both.wait(), 2)  # deadlocks unless both run at once
        return who

    @app.flow("pair")
    async def pair(ctx: FlowContext, _: None) -> list[str]:
        return list(await asyncio.gather(ctx.execute(meet, "a"), ctx.execute(meet, "b")))

    env = LoomTestEnv(app)
    result = await env.start("pair", None, execution_id="p1")
    assert result.output == ["a", "b"]
    steps = sorted(
        getattr(e, "step_id", "") for e in await env.history("p1") if e.type == "EffectCompleted"
    )
    assert steps == ["1.1", "2.1"]


async def test_first_of_gate_and_timer(env: LoomTestEnv):
    result = await env.start("first_of", None, execution_id="f1")
    assert {g.on for g in result.waiting_on} == {"go", "loom.timer"}
    assert (await env.runtime.resume("f1", "go", "k", None)).output == "gate"
    await env.start("first_of", None, execution_id="f2")
    [fired] = await env.skip(timedelta(hours=1, seconds=1))
    assert (fired.execution_id, fired.output) == ("f2", "timer")


async def test_timer_does_not_fire_early(env: LoomTestEnv):
    await env.start("first_of", None, execution_id="f3")
    assert await env.skip(timedelta(minutes=59)) == []
    assert (await env.runtime.result("f3")).status == "suspended"


async def test_gate_timeout_raises_into_the_flow(env: LoomTestEnv):
    await env.start("timeout", None, execution_id="t1")
    [result] = await env.skip(timedelta(minutes=6))
    assert result.output == "timed out"
    # The reply that comes too late changes nothing: the timeout took the gate, and the
    # reply is refused (it was answered as a redelivery, as if it had been accepted).
    count = len(await env.history("t1"))
    with pytest.raises(GateTimedOutError, match=r"'reply'.*timed out"):
        await env.runtime.resume("t1", "reply", "r", "late")
    assert len(await env.history("t1")) == count


async def test_decisions_are_recorded_and_replayed(env: LoomTestEnv):
    first = await env.start("decisions", None, execution_id="n1")
    assert first.status == "suspended"
    env.clock.now += 1000
    done = await env.runtime.resume("n1", "x", "y", None)
    values = done.output
    assert values[0].startswith("2023-11-14")  # the clock at first run, not now
    assert len(values[1]) == 36 and 0 <= values[2] < 1
    recorded = [e for e in await env.history("n1") if e.type == "DecisionRecorded"]
    assert [e.kind for e in recorded] == ["now", "uuid", "random"]


async def test_broad_except_cannot_swallow_a_suspension(env: LoomTestEnv):
    result = await env.start("swallow", None, execution_id="w1")
    assert result.status == "suspended"
    assert (await env.runtime.resume("w1", "x", "y", 1)).output == "resumed"


async def test_start_is_idempotent_and_conflicts_are_clear(env: LoomTestEnv, calls: list[str]):
    await env.start("straight", 1, execution_id="i1")
    again = await env.start("straight", 1, execution_id="i1")
    assert again.status == "completed" and len(calls) == 2
    with pytest.raises(ExecutionConflictError, match="i1"):
        await env.start("straight", 2, execution_id="i1")
    with pytest.raises(ExecutionConflictError):
        await env.start("gated", "k", execution_id="i1")
    assert len(await env.history("i1")) == 5


async def test_bad_input_is_refused_and_nothing_is_appended(env: LoomTestEnv):
    with pytest.raises(UnknownFlowError, match="nope"):
        await env.start("nope", 1, execution_id="b1")
    with pytest.raises(InvalidPayloadError, match="straight"):
        await env.start("straight", "not an int", execution_id="b2")
    assert await env.store.list() == []
    with pytest.raises(UnknownExecutionError):
        await env.runtime.resume("missing", "a", "b", None)


async def test_cancel_ends_an_execution(env: LoomTestEnv):
    await env.start("gated", "k", execution_id="x1")
    result = await env.runtime.cancel("x1", "customer left")
    assert result.status == "cancelled"
    assert result.error and result.error["message"] == "customer left"
    with pytest.raises(ExecutionFinishedError):
        await env.runtime.cancel("x1")
