"""Temporal's timer, asyncio and determinism scenarios, ported to Loom.

Temporal's Python SDK runs workflows on a deterministic event loop where ``asyncio.sleep`` is
a durable timer and ``asyncio.wait``/``gather``/``wait_for``/``as_completed`` behave as in
plain asyncio. Loom promises the same over ``ctx.execute``/``ctx.suspend``/``ctx.sleep``
(README, "Concurrency and deadlines inside a flow"). SQLite on disk, a fake clock, every
execute call checked by a replay.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from loom import EffectContext, EffectFailedError, FlowContext, GateTimeoutError, Loom, Retry
from loom.dispatch.inprocess import InProcessDispatcher
from loom.workers.local import LocalWorkerRuntime
from tests.peers.temporal.harness import EnvFactory


def timers_app(calls: list[str]) -> Loom:
    app = Loom("temporal-timers")

    @app.effect("echo")
    async def echo(ctx: EffectContext, value: Any) -> Any:
        calls.append(f"echo:{value}")
        return value

    @app.effect("boom", retry=Retry(max_attempts=1))
    async def boom(ctx: EffectContext, value: str) -> str:
        calls.append(f"boom:{value}")
        raise ValueError(f"boom {value}")

    @app.flow("zero_timers")
    async def zero_timers(ctx: FlowContext, _: None) -> str:
        await ctx.sleep(0)
        await asyncio.sleep(0)
        await ctx.sleep(timedelta(0))
        return await ctx.execute(echo, "after zero")

    @app.flow("zero_sleep_loop")
    async def zero_sleep_loop(ctx: FlowContext, n: int) -> int:
        for _ in range(n):
            await ctx.sleep(0)
        await ctx.sleep(-5)  # a deadline already passed: fires at once, as asyncio's does
        return n

    @app.flow("orphans")
    async def orphans(ctx: FlowContext, _: None) -> str:
        async def bad() -> None:
            raise ValueError("in a task nobody awaits")

        left = [  # held only so they are not collected; never awaited
            asyncio.ensure_future(bad()),
            asyncio.ensure_future(ctx.sleep(3600)),  # a timer nobody awaits
            asyncio.ensure_future(ctx.execute(echo, "unawaited step")),
        ]
        await asyncio.sleep(0)
        assert len(left) == 3
        return await ctx.execute(echo, "main")

    @app.flow("many_timers")
    async def many_timers(ctx: FlowContext, n: int) -> list[int]:
        order: list[int] = []

        async def nap(i: int) -> None:
            await asyncio.sleep(n - i)  # the last started fires first
            order.append(i)

        await asyncio.gather(*(nap(i) for i in range(n)))
        return order

    @app.flow("cancel_timer")
    async def cancel_timer(ctx: FlowContext, _: None) -> list[Any]:
        timer = asyncio.ensure_future(ctx.sleep(timedelta(hours=1)))
        await ctx.execute(echo, "before cancel")
        timer.cancel()
        try:
            await timer
            fate = "fired"
        except asyncio.CancelledError:
            fate = "cancelled"
        return [fate, await ctx.execute(echo, "after cancel")]

    @app.flow("wait_for_gate")
    async def wait_for_gate(ctx: FlowContext, _: None) -> str:
        try:
            return await asyncio.wait_for(ctx.suspend("reply", ctx.execution_id), 30)
        except TimeoutError:
            return "timed out"

    @app.flow("gate_timeout")
    async def gate_timeout(ctx: FlowContext, _: None) -> str:
        try:
            return await ctx.suspend("reply", ctx.execution_id, timeout=timedelta(minutes=5))
        except GateTimeoutError:
            return "gate timed out"

    @app.flow("as_completed")
    async def as_completed(ctx: FlowContext, _: None) -> list[Any]:
        racers = [
            asyncio.ensure_future(ctx.sleep(30)),
            asyncio.ensure_future(ctx.execute(echo, "fast")),
            asyncio.ensure_future(ctx.sleep(10)),
        ]
        order: list[Any] = []
        for next_done in asyncio.as_completed(racers):
            order.append(await next_done)
        return order

    @app.flow("gather_exceptions")
    async def gather_exceptions(ctx: FlowContext, _: None) -> list[str]:
        results = await asyncio.gather(
            ctx.execute(echo, "a"),
            ctx.execute(boom, "b"),
            ctx.execute(echo, "c"),
            return_exceptions=True,
        )
        return [r if isinstance(r, str) else type(r).__name__ for r in results]

    @app.flow("gather_fails")
    async def gather_fails(ctx: FlowContext, _: None) -> str:
        try:
            await asyncio.gather(ctx.execute(echo, "x"), ctx.execute(boom, "y"))
        except EffectFailedError as exc:
            return f"caught {exc.effect}"
        return "no error"

    @app.flow("task_group")
    async def task_group(ctx: FlowContext, _: None) -> str:
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(ctx.sleep(timedelta(days=1)))
                group.create_task(ctx.execute(boom, "tg"))
        except ExceptionGroup as errors:
            return f"group failed: {[type(e).__name__ for e in errors.exceptions]}"
        return "no error"

    @app.flow("shielded")
    async def shielded(ctx: FlowContext, _: None) -> list[Any]:
        inner = asyncio.ensure_future(ctx.sleep(60))
        try:
            await asyncio.wait_for(asyncio.shield(inner), 10)
            first = "inner first"
        except TimeoutError:
            first = "deadline first"
        await inner  # the shielded timer was not cancelled: it still fires
        return [first, await ctx.execute(echo, "after shield")]

    @app.flow("timeout_block")
    async def timeout_block(ctx: FlowContext, _: None) -> str:
        try:
            async with asyncio.timeout(5):
                await ctx.recv("never")
        except TimeoutError:
            return "deadline"
        return "message"

    @app.flow("event_condition")
    async def event_condition(ctx: FlowContext, _: None) -> list[Any]:
        # Temporal's wait_condition(lambda: self.ready): an asyncio.Event set by a task.
        ready = asyncio.Event()
        box: list[Any] = []

        async def listener() -> None:
            box.append(await ctx.recv("ready"))
            ready.set()

        listening = asyncio.ensure_future(listener())
        await ready.wait()
        await listening
        return [box[0], await ctx.execute(echo, "after condition")]

    @app.flow("determinism")
    async def determinism(ctx: FlowContext, _: None) -> dict[str, Any]:
        before = ctx.now()
        ids = [str(ctx.uuid()) for _ in range(3)]
        randoms = [ctx.random() for _ in range(3)]
        await ctx.sleep(timedelta(hours=2))
        after = ctx.now()
        return {
            "ids": ids,
            "randoms": randoms,
            "elapsed": (after - before).total_seconds(),
            "before": before.timestamp(),
        }

    @app.flow("sleep_cancelled_by_deadline")
    async def sleep_cancelled_by_deadline(ctx: FlowContext, _: None) -> list[str]:
        out: list[str] = []
        for seconds in (1, 100):
            try:
                await asyncio.wait_for(ctx.sleep(seconds), 50)
                out.append("slept")
            except TimeoutError:
                out.append("cut")
        return out

    return app


async def test_zero_length_timers_do_not_block(make_env: EnvFactory):
    """Temporal: ``workflow.sleep(0)``/``asyncio.sleep(0)`` complete without waiting on the
    server (test_workflow_timer_zero style). Loom: zero-second ``ctx.sleep`` and
    ``asyncio.sleep(0)`` return in the same execute call."""
    calls: list[str] = []
    env = make_env(timers_app(calls))
    r = await env.start("zero_timers", None, execution_id="z")
    assert (r.status, r.output) == ("completed", "after zero")


async def test_zero_length_timers_in_a_loop_neither_recurse_nor_report_stale(
    make_env: EnvFactory,
):
    """Temporal: a workflow looping over ``workflow.sleep(0)`` runs to its end. Loom: each
    zero-second timer is due as soon as the flow suspends on it, and the same call runs
    it on (no dispatcher); 300 of them used to nest one execute call per timer until
    ``RecursionError``, and a single one made ``start`` report ``suspended`` for an
    execution that had completed."""
    env = make_env(timers_app([]))
    env.always_replay = False  # 300 replays of a growing log: not what is tested
    r = await env.start("zero_sleep_loop", 300, execution_id="zl")
    assert (r.status, r.output) == ("completed", 300)
    assert (await env.runtime.result("zl")).status == "completed"
    one = await env.start("zero_sleep_loop", 1, execution_id="z1")
    assert (one.status, one.output) == ("completed", 1)


async def test_zero_length_timers_in_a_loop_under_the_in_process_dispatcher(
    make_env: EnvFactory,
):
    """The same under ``loom serve``'s in-process dispatcher, which runs a dispatch already
    due at once: 200 zero-second timers used to nest one dispatch per timer until
    ``RecursionError``, leaving the execution suspended."""
    env = make_env(timers_app([]))
    env.always_replay = False
    env.runtime.dispatcher = InProcessDispatcher(LocalWorkerRuntime(env.runtime))
    r = await env.start("zero_sleep_loop", 200, execution_id="zd")
    assert (r.status, r.output) == ("completed", 200)


async def test_many_timers_fire_in_deadline_order(make_env: EnvFactory):
    """Temporal: many concurrent timers each fire once, in deadline order. Loom: 20
    ``asyncio.sleep`` timers in one flow; the clock is skipped one second at a time and
    they complete shortest first; each replay agrees."""
    env = make_env(timers_app([]))
    n = 20
    assert (await env.start("many_timers", n, execution_id="m")).status == "suspended"
    last = None
    for _ in range(n):
        [last] = await env.skip(1)
    assert last is not None and last.status == "completed"
    assert last.output == list(reversed(range(n)))


async def test_a_cancelled_timer_never_fires(make_env: EnvFactory):
    """Temporal: cancelling a timer's task cancels the timer (test_workflow_cancel_timer
    style). Loom: the awaiting task gets ``CancelledError``, the flow goes on without
    waiting for the hour."""
    calls: list[str] = []
    env = make_env(timers_app(calls))
    r = await env.start("cancel_timer", None, execution_id="ct")
    assert (r.status, r.output) == ("completed", ["cancelled", "after cancel"])
    assert calls == ["echo:before cancel", "echo:after cancel"]


async def test_wait_for_on_a_signal_fires_at_the_deadline_and_a_late_reply_loses(
    make_env: EnvFactory,
):
    """Temporal: ``asyncio.wait_for`` around a wait raises ``TimeoutError`` at the durable
    deadline. Loom: the deadline survives the suspension; a reply after it loses."""
    env = make_env(timers_app([]))
    await env.start("wait_for_gate", None, execution_id="wf1")
    assert await env.skip(29) == []
    [r] = await env.skip(2)
    assert r.output == "timed out"
    await env.start("wait_for_gate", None, execution_id="wf2")
    assert (await env.runtime.resume("wf2", "reply", "wf2", "yes")).output == "yes"


async def test_a_gate_timeout_raises_into_the_flow(make_env: EnvFactory):
    """Temporal: a wait_condition timeout is an ``asyncio.TimeoutError`` the workflow may
    catch. Loom: ``GateTimeoutError`` at the recorded deadline."""
    env = make_env(timers_app([]))
    await env.start("gate_timeout", None, execution_id="gt")
    [r] = await env.skip(timedelta(minutes=5, seconds=1))
    assert r.output == "gate timed out"


async def test_as_completed_yields_in_completion_order(make_env: EnvFactory):
    """Temporal: ``asyncio.as_completed`` in a workflow yields results in the order they
    completed (test_workflow_as_completed). Loom: the effect first, then the 10 s timer,
    then the 30 s one, live and on replay."""
    env = make_env(timers_app([]))
    await env.start("as_completed", None, execution_id="ac")
    await env.skip(10)
    [r] = await env.skip(20)
    assert (r.status, r.output) == ("completed", ["fast", None, None])


async def test_gather_with_return_exceptions_keeps_every_outcome(make_env: EnvFactory):
    """Temporal: ``asyncio.gather(..., return_exceptions=True)`` over activities returns the
    failure in place. Loom: the failed step's ``EffectFailedError`` sits beside the others'
    results."""
    calls: list[str] = []
    env = make_env(timers_app(calls))
    r = await env.start("gather_exceptions", None, execution_id="ge")
    assert r.output == ["a", "EffectFailedError", "c"]
    assert sorted(calls) == ["boom:b", "echo:a", "echo:c"]


async def test_gather_raises_the_first_failure(make_env: EnvFactory):
    """Temporal: ``asyncio.gather`` raises an activity's failure into the workflow. Loom:
    the ``EffectFailedError`` names the effect."""
    env = make_env(timers_app([]))
    assert (await env.start("gather_fails", None, execution_id="gf")).output == "caught boom"


async def test_a_task_group_cancels_its_siblings_when_one_fails(make_env: EnvFactory):
    """Temporal: a TaskGroup member's failure cancels the others (here a day-long timer).
    Loom: the group raises at once, no timer is left to wake the execution."""
    env = make_env(timers_app([]))
    r = await env.start("task_group", None, execution_id="tg")
    assert (r.status, r.output) == ("completed", "group failed: ['EffectFailedError']")


async def test_shield_keeps_the_inner_timer_alive_past_an_outer_deadline(
    make_env: EnvFactory,
):
    """Temporal: ``asyncio.shield`` protects the inner awaitable from an outer cancel.
    Loom: the 10 s deadline cuts the wait, the shielded 60 s timer still fires at 60 s."""
    calls: list[str] = []
    env = make_env(timers_app(calls))
    await env.start("shielded", None, execution_id="sh")
    [r] = await env.skip(11)
    assert r.status == "suspended" and calls == []
    [r] = await env.skip(50)
    assert (r.status, r.output) == ("completed", ["deadline first", "after shield"])


async def test_asyncio_timeout_around_a_wait(make_env: EnvFactory):
    """Temporal: ``asyncio.timeout`` works in workflows (test_workflow_asyncio_timeout).
    Loom: the block's deadline is a durable timer."""
    env = make_env(timers_app([]))
    await env.start("timeout_block", None, execution_id="tb")
    [r] = await env.skip(6)
    assert r.output == "deadline"


async def test_an_event_set_by_a_signal_task_releases_the_main_task(make_env: EnvFactory):
    """Temporal: ``workflow.wait_condition`` on state a signal handler sets. Loom: an
    ``asyncio.Event`` set by a flow task after its ``recv``."""
    env = make_env(timers_app([]))
    await env.start("event_condition", None, execution_id="ev")
    r = await env.runtime.send("ev", "ready", "go")
    assert (r.status, r.output) == ("completed", ["go", "after condition"])


async def test_now_uuid_and_random_are_recorded_and_time_moves_with_the_clock(
    make_env: EnvFactory,
):
    """Temporal: ``workflow.now()``, ``workflow.uuid4()`` and ``workflow.random()`` are
    deterministic on replay (test_workflow_deterministic_random, test_workflow_uuid). Loom:
    ``ctx.now/uuid/random`` are recorded; each replay after every call (the harness) serves
    the same values, and ``now`` after a two-hour sleep is two hours later."""
    env = make_env(timers_app([]))
    await env.start("determinism", None, execution_id="d")
    [r] = await env.skip(timedelta(hours=2))
    out = r.output
    assert len(set(out["ids"])) == 3 and len(set(out["randoms"])) == 3
    assert all(0 <= x < 1 for x in out["randoms"])
    assert out["elapsed"] >= 7200
    assert out["before"] == env.clock.now - 7200
    again = await env.start("determinism", None, execution_id="d2")
    assert again.status == "suspended"
    [r2] = await env.skip(timedelta(hours=2))
    assert r2.output["ids"] != out["ids"]  # new execution, new values


async def test_wait_for_around_a_durable_sleep_cuts_only_the_long_one(make_env: EnvFactory):
    """Temporal: ``asyncio.wait_for(workflow.sleep(1), 50)`` lets the sleep finish; a
    100 s sleep is cut at 50 s. Loom: the same, on recorded deadlines."""
    env = make_env(timers_app([]))
    await env.start("sleep_cancelled_by_deadline", None, execution_id="sd")
    [r] = await env.skip(1)
    assert r.status == "suspended"
    [r] = await env.skip(50)
    assert (r.status, r.output) == ("completed", ["slept", "cut"])


async def test_tasks_the_workflow_never_awaits_do_not_decide_its_end(make_env: EnvFactory):
    """Temporal: an exception in a task the workflow never awaits does not fail the
    workflow, and a workflow may return with timers still pending. Loom: the flow completes
    with its own result; a step started in an unawaited task runs once and is recorded;
    the pending hour-long timer never wakes the ended execution."""
    calls: list[str] = []
    env = make_env(timers_app(calls))
    r = await env.start("orphans", None, execution_id="or")
    assert (r.status, r.output) == ("completed", "main")
    assert sorted(calls) == ["echo:main", "echo:unawaited step"]
    assert await env.skip(3601) == []
