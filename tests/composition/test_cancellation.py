"""Cancellation with cleanup on the in-memory test env (every execute call is followed by a
replay of the whole log that must reach the same place)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from examples import saga

from loom import EffectContext, FlowContext, Loom
from loom.errors import ExecutionFinishedError, InvalidPayloadError
from loom.testing import LoomTestEnv, replay


@pytest.fixture(autouse=True)
def _clear() -> None:
    saga.BOOKED.clear()


async def types(env: LoomTestEnv, eid: str) -> list[str]:
    return [e.type for e in await env.history(eid)]


async def test_a_cancel_reaches_the_blocked_await_and_the_saga_compensates():
    env = LoomTestEnv(saga.app)
    await env.start("trip.book", {"trip_id": "t1"}, execution_id="t1")
    assert saga.BOOKED == ["hotel+t1", "flight+t1"]
    result = await env.runtime.cancel("t1", "changed my mind", by="alice")
    assert result.status == "cancelled"
    assert result.error == {"code": "cancelled", "type": None, "message": "changed my mind"}
    assert saga.BOOKED == ["hotel+t1", "flight+t1", "flight-F-t1", "hotel-H-t1"]
    history = await env.history("t1")
    kinds = [e.type for e in history]
    assert kinds.index("CancelRequested") < kinds.index("CancelDelivered")
    assert kinds[-1] == "ExecutionCancelled" and history[-1].by == "alice"  # type: ignore[union-attr]
    outcome = await replay(saga.app, history)
    assert outcome.status == "cancelled"
    with pytest.raises(ExecutionFinishedError):
        await env.runtime.cancel("t1")


def cleanup_app(log: list[str]) -> Loom:
    app = Loom("c")

    @app.effect("step")
    def step(ctx: EffectContext, name: str) -> str:
        log.append(name)
        return name

    @app.flow("swallow")
    async def swallow(ctx: FlowContext, _: None) -> str:
        try:
            await ctx.suspend("go", "k")
        except asyncio.CancelledError:
            await ctx.execute(step, "cleanup")
            return "swallowed"
        return "not cancelled"

    @app.flow("fail_in_cleanup")
    async def fail_in_cleanup(ctx: FlowContext, _: None) -> None:
        try:
            await ctx.suspend("go", "k")
        finally:
            raise ValueError("cleanup broke")

    @app.flow("slow_cleanup", cleanup_timeout=timedelta(minutes=1))
    async def slow_cleanup(ctx: FlowContext, _: None) -> None:
        try:
            await ctx.suspend("go", "k")
        finally:
            await ctx.execute(step, "first")
            await ctx.suspend("refund.done", "k")  # waits past the budget
            await ctx.execute(step, "never")

    @app.flow("fanout")
    async def fanout(ctx: FlowContext, _: None) -> Any:
        async def branch(n: int) -> str:
            try:
                await ctx.suspend("go", str(n))
                return "done"
            finally:
                log.append(f"branch {n} unwound")

        try:
            return await asyncio.gather(branch(1), branch(2))
        except asyncio.CancelledError:
            await ctx.execute(step, "root cleanup")
            raise

    @app.flow("busy")
    async def busy(ctx: FlowContext, _: None) -> None:
        try:
            await ctx.execute(step, "a")
            await ctx.execute(step, "b")
        except asyncio.CancelledError:
            await ctx.execute(step, "undo")
            raise

    return app


async def test_a_flow_that_swallows_the_cancel_and_returns_completes():
    log: list[str] = []
    env = LoomTestEnv(cleanup_app(log))
    await env.start("swallow", None, execution_id="s1")
    result = await env.runtime.cancel("s1")
    assert (result.status, result.output, log) == ("completed", "swallowed", ["cleanup"])


async def test_cleanup_that_raises_fails_the_execution():
    env = LoomTestEnv(cleanup_app([]))
    await env.start("fail_in_cleanup", None, execution_id="f1")
    result = await env.runtime.cancel("f1")
    assert result.status == "failed"
    assert result.error and "cleanup broke" in result.error["message"]


async def test_a_cleanup_past_its_budget_is_woken_by_the_deadline_and_ends_cancelled():
    log: list[str] = []
    env = LoomTestEnv(cleanup_app(log))
    await env.start("slow_cleanup", None, execution_id="b1")
    result = await env.runtime.cancel("b1", "stop")
    assert result.status == "suspended" and log == ["first"]
    assert result.wake_at == pytest.approx(env.clock.now + 60)
    assert await env.skip(30) == []  # not due yet
    [woken] = await env.skip(31)
    assert woken.status == "cancelled" and "budget" in (woken.error or {})["message"]
    assert log == ["first"]


async def test_parallel_branches_unwind_and_only_the_root_cleans_up():
    log: list[str] = []
    env = LoomTestEnv(cleanup_app(log))
    await env.start("fanout", None, execution_id="p1")
    result = await env.runtime.cancel("p1")
    assert result.status == "cancelled"
    # Flow code runs again on every replay; the effect ran once.
    assert set(log) == {"branch 1 unwound", "branch 2 unwound", "root cleanup"}
    assert log.count("root cleanup") == 1


async def test_a_second_cancel_while_cleaning_up_changes_nothing():
    log: list[str] = []
    env = LoomTestEnv(cleanup_app(log))
    await env.start("slow_cleanup", None, execution_id="d1")
    await env.runtime.cancel("d1", "first reason", by="a")
    again = await env.runtime.cancel("d1", "second reason", by="b")
    assert again.status == "suspended"
    assert (await types(env, "d1")).count("CancelRequested") == 1


async def test_a_cancel_during_a_running_effect_arrives_at_the_next_await():
    log: list[str] = []
    app = Loom("inflight")
    env = LoomTestEnv(app)

    @app.effect("step")
    async def step(ctx: EffectContext, name: str) -> str:
        log.append(name)
        if name == "a":  # the cancel lands while this execute call holds the execution
            mid = await env.runtime.cancel(ctx.execution_id, "mid-effect")
            assert mid.status == "running"
        return name

    @app.flow("busy")
    async def busy(ctx: FlowContext, _: None) -> list[str]:
        done: list[str] = []
        try:
            done.append(await ctx.execute(step, "a"))
            done.append(await ctx.execute(step, "b"))
            return done
        except asyncio.CancelledError:
            await ctx.execute(step, f"undo {done}")
            raise

    result = await env.start("busy", None, execution_id="i1")
    assert result.status == "cancelled"
    assert log == ["a", "undo ['a']"]  # "a" finished and was recorded; "b" never started
    kinds = await types(env, "i1")
    assert kinds.index("EffectCompleted") < kinds.index("CancelDelivered")


async def test_a_flow_timeout_cancels_with_cleanup_at_the_recorded_deadline():
    env = LoomTestEnv(saga.app)
    started = await env.start("trip.book", {"trip_id": "t2"}, execution_id="t2")
    assert started.status == "suspended"
    assert started.wake_at == pytest.approx(env.clock.now + 24 * 3600)  # the confirm gate
    [gate_timeout] = await env.skip(timedelta(days=1, seconds=1))
    assert gate_timeout.status == "failed"  # the saga lets an unconfirmed trip fail


async def test_the_flow_deadline_wakes_a_suspended_execution():
    env = LoomTestEnv(saga.app)
    trip = {"trip_id": "t3", "confirm_within_s": 30 * 24 * 3600}
    started = await env.start("trip.book", trip, execution_id="t3")
    deadline = env.clock.now + 7 * 24 * 3600
    assert started.wake_at == pytest.approx(deadline)  # earlier than the 30-day gate
    assert await env.skip(timedelta(days=7) - timedelta(seconds=5)) == []
    [woken] = await env.skip(10)
    assert woken.status == "cancelled"
    assert woken.error and woken.error["message"] == "the flow's timeout passed"
    assert saga.BOOKED == ["hotel+t3", "flight+t3", "flight-F-t3", "hotel-H-t3"]
    requested = [e for e in await env.history("t3") if e.type == "CancelRequested"]
    assert [e.by for e in requested] == ["loom.timeout"]  # type: ignore[union-attr]


async def test_a_start_overrides_the_flow_timeout():
    env = LoomTestEnv(saga.app)
    trip = {"trip_id": "t4", "confirm_within_s": 3600}
    started = await env.start("trip.book", trip, execution_id="t4", timeout=60)
    assert started.wake_at == pytest.approx(env.clock.now + 60)
    [woken] = await env.skip(61)
    assert woken.status == "cancelled"
    with pytest.raises(InvalidPayloadError, match="timeout"):
        await env.start("trip.book", trip, execution_id="t5", timeout=-1)


async def test_a_deadline_passed_while_running_is_decided_by_the_recorded_time():
    """A resume delivered after the deadline (before the timer task) does not let the flow
    do anything new: the deadline, not the timer's delivery, decides."""
    env = LoomTestEnv(saga.app)
    trip = {"trip_id": "t6", "confirm_within_s": 30 * 24 * 3600}
    await env.start("trip.book", trip, execution_id="t6", timeout=100)
    env.clock.now += 200  # the timer task is late; a confirm arrives first
    result = await env.runtime.resume("t6", "trip.confirm", "t6", "yes")
    assert result.status == "cancelled"
    assert saga.BOOKED[-2:] == ["flight-F-t6", "hotel-H-t6"]


async def test_a_cleanup_replays_from_a_snapshot_taken_in_the_middle_of_it():
    log: list[str] = []
    env = LoomTestEnv(cleanup_app(log), snapshot_every=2)
    await env.start("slow_cleanup", None, execution_id="n1")
    await env.runtime.cancel("n1")
    assert log == ["first"]
    [snapshot] = [await env.store.load("n1")]
    assert snapshot.snapshot is not None  # the cleanup's state comes from a snapshot
    result = await env.runtime.resume("n1", "refund.done", "k", None)
    assert result.status == "cancelled" and log == ["first", "never"]


async def test_a_deadline_that_passes_during_a_step_cancels_at_the_next_one():
    log: list[str] = []
    app = Loom("slow")
    env = LoomTestEnv(app)

    @app.effect("step")
    def step(ctx: EffectContext, name: str) -> str:
        log.append(name)
        env.clock.now += 50  # a slow step: the deadline passes while it runs
        return name

    @app.flow("two", timeout=60)
    async def two(ctx: FlowContext, _: None) -> None:
        try:
            await ctx.execute(step, "a")
            await ctx.execute(step, "b")
            await ctx.execute(step, "c")
        except asyncio.CancelledError:
            await ctx.execute(step, "undo")
            raise

    result = await env.start("two", None, execution_id="m1")
    assert result.status == "cancelled"
    assert log == ["a", "b", "undo"]  # "c" would have started past the deadline


async def test_an_execution_in_doubt_is_cancelled_at_once_with_who_asked():
    from loom.errors import EffectOutcomeUnknownError

    app = Loom("doubt")

    @app.effect("pay", idempotent=False)
    def pay(ctx: EffectContext, _: None) -> None:
        raise EffectOutcomeUnknownError("the provider timed out after the request left")

    @app.flow("f")
    async def f(ctx: FlowContext, _: None) -> None:
        try:
            await ctx.execute(pay, None)
        finally:
            await ctx.execute(pay, None)  # never reached: its flow cannot run while in doubt

    env = LoomTestEnv(app)
    assert (await env.start("f", None, execution_id="q1")).status == "in_doubt"
    result = await env.runtime.cancel("q1", "give up", by="ops")
    assert result.status == "cancelled"
    kinds = await types(env, "q1")
    assert kinds[-1] == "ExecutionCancelled" and "CancelRequested" not in kinds


def timer_app(log: list[str]) -> Loom:
    app = Loom("timers")

    @app.effect("note")
    def note(ctx: EffectContext, what: str) -> str:
        log.append(what)
        return what

    @app.flow("napper")
    async def napper(ctx: FlowContext, _: None) -> None:
        try:
            await ctx.execute(note, "start")
            await ctx.sleep(timedelta(hours=1))
        except asyncio.CancelledError:
            await ctx.sleep(timedelta(seconds=30))  # cleanup may wait durably too
            await ctx.execute(note, "cleaned")
            raise

    return app


async def test_a_sleeping_flow_is_cancelled_at_its_timer_and_its_cleanup_may_sleep():
    log: list[str] = []
    env = LoomTestEnv(timer_app(log))
    await env.start("napper", None, execution_id="z1")
    waiting = await env.runtime.cancel("z1")
    assert waiting.status == "suspended" and log == ["start"]
    [done] = await env.skip(31)
    assert done.status == "cancelled" and log == ["start", "cleaned"]


async def test_a_cancel_before_the_first_run_arrives_at_the_first_step():
    log: list[str] = []
    env = LoomTestEnv(timer_app(log))
    await env.start("napper", None, execution_id="z2", run=False)
    result = await env.runtime.cancel("z2")
    assert result.status == "suspended" and log == []  # "start" never ran
    [done] = await env.skip(31)
    assert done.status == "cancelled" and log == ["cleaned"]


async def test_cancelling_an_unknown_execution_is_refused():
    from loom.errors import UnknownExecutionError

    env = LoomTestEnv(timer_app([]))
    with pytest.raises(UnknownExecutionError):
        await env.runtime.cancel("nobody")
