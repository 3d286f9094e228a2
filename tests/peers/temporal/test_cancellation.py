"""Temporal's workflow cancellation scenarios, ported to Loom's ``Runtime.cancel``.

Temporal delivers a cancel request as ``asyncio.CancelledError`` at the workflow's current
await; cleanup in ``except``/``finally`` may still run activities; a workflow that swallows
the error completes. Loom does the same (README, "Cancellation with cleanup"). SQLite on
disk, a fake clock, every execute call checked by a replay.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from loom import EffectContext, FlowContext, Loom
from loom.errors import ExecutionFinishedError
from loom.wire import ExecutionPackage
from tests.peers.temporal.harness import EnvFactory

RUNTIME: dict[str, Any] = {}


def cancel_app(log: list[str]) -> Loom:
    app = Loom("temporal-cancel")

    @app.effect("work")
    def work(ctx: EffectContext, name: str) -> str:
        log.append(name)
        return name

    @app.effect("cancels_itself")
    async def cancels_itself(ctx: EffectContext, name: str) -> str:
        # The cancel lands while this step runs, as a client's cancel would mid-activity.
        await RUNTIME["rt"].cancel(ctx.execution_id, "cancelled mid-activity")
        log.append(name)
        return name

    @app.flow("sleeper")
    async def sleeper(ctx: FlowContext, _: None) -> str:
        try:
            await ctx.sleep(timedelta(days=1))
            return "woke"
        finally:
            await ctx.execute(work, "cleanup")

    @app.flow("during_activity")
    async def during_activity(ctx: FlowContext, _: None) -> str:
        try:
            await ctx.execute(cancels_itself, "activity ran to its end")
            await ctx.execute(work, "never")
            return "not cancelled"
        except asyncio.CancelledError:
            await ctx.execute(work, "compensate")
            raise

    @app.flow("swallow")
    async def swallow(ctx: FlowContext, _: None) -> str:
        try:
            await ctx.recv("never")
        except asyncio.CancelledError:
            return "swallowed"
        return "received"

    @app.flow("cleanup_waits")
    async def cleanup_waits(ctx: FlowContext, _: None) -> None:
        try:
            await ctx.suspend("go", ctx.execution_id)
        except asyncio.CancelledError:
            await ctx.sleep(60)  # a durable wait inside cleanup, within the budget
            await ctx.execute(work, "after cleanup wait")
            raise

    @app.flow("branches")
    async def branches(ctx: FlowContext, _: None) -> Any:
        async def branch(n: int) -> str:
            try:
                await ctx.sleep(100 * n)
                return f"branch {n}"
            finally:
                await ctx.execute(work, f"undo {n}")

        try:
            return await asyncio.gather(branch(1), branch(2))
        except asyncio.CancelledError:
            await ctx.execute(work, "root cleanup")
            raise

    @app.flow("quick")
    async def quick(ctx: FlowContext, _: None) -> str:
        return await ctx.execute(work, "quick")

    @app.flow("never_ran")
    async def never_ran(ctx: FlowContext, _: None) -> str:
        try:
            return await ctx.execute(work, "body")
        finally:
            log.append("finally ran")

    @app.flow("deadline", timeout=timedelta(hours=1))
    async def deadline(ctx: FlowContext, _: None) -> None:
        try:
            await ctx.suspend("approval", ctx.execution_id)
        finally:
            await ctx.execute(work, "cleanup after deadline")

    @app.flow("cancel_then_cancel")
    async def cancel_then_cancel(ctx: FlowContext, _: None) -> str:
        try:
            await ctx.suspend("go", ctx.execution_id)
        except asyncio.CancelledError:
            await ctx.suspend("cleanup.done", ctx.execution_id)  # cleanup waits on a gate
            await ctx.execute(work, "cleanup finished")
            raise
        return "no"

    return app


async def test_cancel_during_a_timer_runs_the_finally_activity(make_env: EnvFactory):
    """Temporal: test_workflow_cancel_timer-like — cancel a workflow sleeping on a timer;
    the ``finally`` block runs an activity and the workflow ends cancelled. Loom: the same;
    the reason and who asked are recorded."""
    log: list[str] = []
    env = make_env(cancel_app(log))
    await env.start("sleeper", None, execution_id="c1")
    r = await env.runtime.cancel("c1", "user asked", by="alice")
    assert (r.status, r.error) == (
        "cancelled",
        {"code": "cancelled", "type": None, "message": "user asked"},
    )
    assert log == ["cleanup"]
    history = await env.history("c1")
    assert history[-1].type == "ExecutionCancelled" and history[-1].by == "alice"  # type: ignore[attr-defined]
    assert await env.skip(timedelta(days=2)) == []  # the cancelled timer never wakes it


async def test_cancel_during_an_activity_lets_it_finish_then_cancels(make_env: EnvFactory):
    """Temporal: test_workflow_cancel_activity — cancelling the workflow cancels the
    running activity (if it heartbeats). Loom deliberately does not interrupt a running
    step (README: "A step whose await is cancelled is not interrupted"): it runs to its end
    and is recorded, then the cancel arrives at the flow's next await; the next step never
    runs and the compensation does."""
    log: list[str] = []
    env = make_env(cancel_app(log))
    RUNTIME["rt"] = env.runtime
    r = await env.start("during_activity", None, execution_id="c2")
    assert r.status == "cancelled"
    assert log == ["activity ran to its end", "compensate"]
    types = await env.types("c2")
    assert types.index("CancelRequested") < types.index("CancelDelivered")


async def test_a_workflow_that_swallows_the_cancel_completes(make_env: EnvFactory):
    """Temporal: a workflow catching ``CancelledError`` and returning completes
    successfully. Loom: ``completed`` with its return value."""
    env = make_env(cancel_app([]))
    await env.start("swallow", None, execution_id="c3")
    r = await env.runtime.cancel("c3")
    assert (r.status, r.output) == ("completed", "swallowed")


async def test_cancelling_a_finished_workflow_is_refused(make_env: EnvFactory):
    """Temporal: cancelling a completed workflow fails ('workflow execution already
    completed'). Loom: ``ExecutionFinishedError``; nothing appended."""
    env = make_env(cancel_app([]))
    await env.start("quick", None, execution_id="c4")
    before = await env.types("c4")
    with pytest.raises(ExecutionFinishedError):
        await env.runtime.cancel("c4")
    assert await env.types("c4") == before


async def test_cleanup_may_wait_on_a_durable_timer(make_env: EnvFactory):
    """Temporal: cleanup after a cancel can sleep (in a non-cancellable scope). Loom: the
    cleanup's ``ctx.sleep`` suspends the execution; it resumes and ends cancelled."""
    log: list[str] = []
    env = make_env(cancel_app(log))
    await env.start("cleanup_waits", None, execution_id="c5")
    r = await env.runtime.cancel("c5")
    assert r.status == "suspended" and log == []
    [r] = await env.skip(61)
    assert r.status == "cancelled" and log == ["after cleanup wait"]


async def test_cancel_reaches_every_concurrent_branch_and_the_root_cleans_up(
    make_env: EnvFactory,
):
    """Temporal: test_workflow_cancel_multi — a cancel reaches every task of the workflow,
    and each task's ``finally`` may run activities. Loom deliberately runs new steps only in
    the root task's cleanup (docs/adr/0035: "tasks that were running at the hand-over start
    nothing new"): a gathered branch's ``finally`` effect is not started, it raises the
    cancel. That used to block the branch for good, so the ``gather`` never ended and the
    cancel call hung; now the branches unwind, the root's cleanup runs, and the execution
    ends ``cancelled``, live and on replay."""
    log: list[str] = []
    env = make_env(cancel_app(log))
    await env.start("branches", None, execution_id="c6")
    r = await asyncio.wait_for(env.runtime.cancel("c6"), 20)
    assert r.status == "cancelled"
    assert log == ["root cleanup"]
    assert await env.skip(300) == []


async def test_cancel_before_the_workflow_ever_ran(make_env: EnvFactory):
    """Temporal: test_workflow_cancel_before_run — a cancel requested before the first
    workflow task ends the workflow cancelled. Loom: an execution created but never run
    ends cancelled and its body never starts."""
    log: list[str] = []
    env = make_env(cancel_app(log))
    await env.start("never_ran", None, execution_id="c7", run=False)
    r = await env.runtime.cancel("c7", "before start")
    if r.status != "cancelled":  # the cancel is recorded; the next execute call delivers it
        r = await env.runtime.execute(ExecutionPackage(execution_id="c7", reason="start"))
    assert r.status == "cancelled"
    assert "body" not in log


async def test_a_workflow_execution_timeout_cancels_with_cleanup(make_env: EnvFactory):
    """Temporal: the workflow execution timeout terminates the run with no cleanup code.
    Loom deliberately differs: a flow's ``timeout=`` cancels the execution at its recorded
    deadline and its cleanup runs (README, "Flow timeouts")."""
    log: list[str] = []
    env = make_env(cancel_app(log))
    await env.start("deadline", None, execution_id="c8")
    assert await env.skip(timedelta(minutes=59)) == []
    [r] = await env.skip(timedelta(minutes=2))
    assert r.status == "cancelled" and log == ["cleanup after deadline"]
    late = await env.start("deadline", None, execution_id="c9")
    assert late.status == "suspended"
    ok = await env.runtime.resume("c9", "approval", "c9", "yes")  # before the deadline
    assert ok.status == "completed"


async def test_a_second_cancel_during_cleanup_does_not_restart_it(make_env: EnvFactory):
    """Temporal: a second cancel request on a workflow already cancelling is a no-op.
    Loom: the cleanup waiting on a gate is not interrupted again; it finishes once."""
    log: list[str] = []
    env = make_env(cancel_app(log))
    await env.start("cancel_then_cancel", None, execution_id="cc")
    first = await env.runtime.cancel("cc", "first")
    assert first.status == "suspended"
    second = await env.runtime.cancel("cc", "second")
    assert second.status == "suspended"
    done = await env.runtime.resume("cc", "cleanup.done", "cc")
    assert done.status == "cancelled" and log == ["cleanup finished"]
