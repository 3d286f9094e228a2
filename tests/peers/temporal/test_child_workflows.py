"""Temporal's child workflow scenarios, ported to Loom's child flows.

Results, failure propagation, cancellation both ways, the parent close policy, signals to a
child, fan-out. A child is an execution of its own (README, "Child flows"). SQLite on disk, a
fake clock, every execute call checked by a replay.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from loom import ChildFlowFailedError, EffectContext, FlowContext, Loom
from tests.peers.temporal.harness import EnvFactory


def children_app(log: list[str]) -> Loom:
    app = Loom("temporal-children")

    @app.effect("work")
    def work(ctx: EffectContext, name: str) -> str:
        log.append(f"{ctx.execution_id}:{name}")
        return name.upper()

    @app.flow("child")
    async def child(ctx: FlowContext, name: str) -> str:
        if name == "fail":
            raise ValueError("child broke")
        return await ctx.execute(work, name)

    @app.flow("waiting_child")
    async def waiting_child(ctx: FlowContext, _: None) -> Any:
        try:
            return await ctx.recv("go")
        except asyncio.CancelledError:
            await ctx.execute(work, "child cleanup")
            raise

    @app.flow("parent")
    async def parent(ctx: FlowContext, name: str) -> str:
        return f"parent got {await ctx.execute_flow(child, name)}"

    @app.flow("parent_catches")
    async def parent_catches(ctx: FlowContext, name: str) -> dict[str, Any]:
        try:
            return {"output": await ctx.execute_flow("child", name)}
        except ChildFlowFailedError as exc:
            return {"status": exc.status, "message": exc.error.get("message"), "id": exc.child_id}

    @app.flow("parent_waits_child")
    async def parent_waits_child(ctx: FlowContext, on_cancel: str) -> Any:
        handle = await ctx.start_flow(waiting_child, None, on_cancel=on_cancel)
        await ctx.set_event("child_id", handle.execution_id)
        try:
            return await handle
        except ChildFlowFailedError as exc:
            return f"child {exc.status}"

    @app.flow("parent_leaves")
    async def parent_leaves(ctx: FlowContext, on_cancel: str) -> str:
        handle = await ctx.start_flow(waiting_child, None, on_cancel=on_cancel)
        return handle.execution_id  # ends without awaiting the child

    @app.flow("fan_out")
    async def fan_out(ctx: FlowContext, names: list[str]) -> list[str]:
        handles = [await ctx.start_flow(child, n) for n in names]
        return list(await asyncio.gather(*(h.result() for h in handles)))

    @app.flow("parent_works_meanwhile")
    async def parent_works_meanwhile(ctx: FlowContext, _: None) -> list[Any]:
        handle = await ctx.start_flow(waiting_child, None)
        mine = await ctx.execute(work, "parent step")
        return [mine, await handle]

    @app.flow("looping_child")
    async def looping_child(ctx: FlowContext, n: int) -> int:
        if n < 3:
            await ctx.continue_as_new(n + 1)
        return n * 10

    @app.flow("parent_of_looper")
    async def parent_of_looper(ctx: FlowContext, _: None) -> int:
        return await ctx.execute_flow(looping_child, 0)

    return app


async def test_a_child_workflow_returns_its_result(make_env: EnvFactory):
    """Temporal: test_workflow_simple_child — ``execute_child_workflow`` returns the child's
    result. Loom: ``ctx.execute_flow``; the child has its own id and log, naming its
    parent."""
    log: list[str] = []
    env = make_env(children_app(log))
    r = await env.start("parent", "hi", execution_id="p1")
    assert (r.status, r.output) == ("completed", "parent got HI")
    child = await env.runtime.result("p1.child.1")
    assert child.status == "completed" and log == ["p1.child.1:hi"]
    assert child.state is not None and child.state["parent"]["execution_id"] == "p1"


async def test_a_failed_child_raises_into_the_parent(make_env: EnvFactory):
    """Temporal: a child's failure reaches the parent as ChildWorkflowError with the cause.
    Loom: ``ChildFlowFailedError`` with the child's status, error and id."""
    env = make_env(children_app([]))
    r = await env.start("parent_catches", "fail", execution_id="p2")
    assert r.output["status"] == "failed" and r.output["id"] == "p2.child.1"
    assert "child broke" in r.output["message"]


async def test_an_uncaught_child_failure_fails_the_parent(make_env: EnvFactory):
    """Temporal: an unhandled ChildWorkflowError fails the parent workflow."""
    env = make_env(children_app([]))
    r = await env.start("parent", "fail", execution_id="p3")
    assert r.status == "failed"
    assert r.error is not None and "child broke" in r.error["message"]


async def test_cancelling_the_parent_cancels_the_child_and_both_clean_up(
    make_env: EnvFactory,
):
    """Temporal: test_workflow_cancel_child_started — cancelling the parent cancels the
    child (cancellation type TRY_CANCEL/WAIT_CANCELLATION_COMPLETED); the child runs its
    cleanup. Loom: the child ends ``cancelled`` after its cleanup step."""
    log: list[str] = []
    env = make_env(children_app(log))
    await env.start("parent_waits_child", "cancel", execution_id="p4")
    r = await env.runtime.cancel("p4", "stop all")
    assert r.status == "cancelled"  # the CancelledError, not a ChildFlowFailedError, left it
    child = await env.runtime.result("p4.child.1")
    assert child.status == "cancelled"
    assert log == ["p4.child.1:child cleanup"]


async def test_a_child_cancelled_from_outside_fails_the_await_in_the_parent(
    make_env: EnvFactory,
):
    """Temporal: cancelling the child alone raises ChildWorkflowError (cause
    CancelledError) in the parent. Loom: ``ChildFlowFailedError`` with status
    ``cancelled``; the parent decides what to do."""
    env = make_env(children_app([]))
    await env.start("parent_waits_child", "cancel", execution_id="p5")
    child_id = await env.runtime.get_event("p5", "child_id")
    await env.runtime.cancel(child_id, "child only")
    parent = await env.runtime.result("p5")
    assert (parent.status, parent.output) == ("completed", "child cancelled")


async def test_a_signal_to_the_child_completes_it_and_the_parent(make_env: EnvFactory):
    """Temporal: signalling a child by its id (test_workflow_signal_child). Loom: a message
    to the child's execution id; its end resumes the parent."""
    env = make_env(children_app([]))
    await env.start("parent_waits_child", "cancel", execution_id="p6")
    await env.runtime.send("p6.child.1", "go", {"value": 42})
    parent = await env.runtime.result("p6")
    assert (parent.status, parent.output) == ("completed", {"value": 42})


@pytest.mark.parametrize(
    ("on_cancel", "child_status"), [("cancel", "cancelled"), ("abandon", "suspended")]
)
async def test_the_parent_close_policy(make_env: EnvFactory, on_cancel: str, child_status: str):
    """Temporal: ParentClosePolicy TERMINATE (default) ends a running child when the parent
    closes; ABANDON leaves it running. Loom: ``on_cancel="cancel"`` (default, a cancel with
    cleanup rather than a termination) and ``on_cancel="abandon"``."""
    env = make_env(children_app([]))
    r = await env.start("parent_leaves", on_cancel, execution_id=f"pc-{on_cancel}")
    assert r.status == "completed"
    child = await env.runtime.result(r.output)
    assert child.status == child_status
    if on_cancel == "abandon":  # the abandoned child lives on and still takes messages
        done = await env.runtime.send(r.output, "go", "later")
        assert (done.status, done.output) == ("completed", "later")


async def test_fan_out_to_many_children(make_env: EnvFactory):
    """Temporal: a workflow starting many children concurrently and gathering results.
    Loom: ten children, results in start order, one execution each."""
    log: list[str] = []
    env = make_env(children_app(log))
    names = [f"n{i}" for i in range(10)]
    r = await env.start("fan_out", names, execution_id="fo")
    assert r.output == [n.upper() for n in names]
    assert len(log) == 10
    ids = {row.execution_id for row in await env.runtime.list()}
    assert {f"fo.child.{i}" for i in range(1, 11)} <= ids


async def test_the_parent_runs_on_while_the_child_runs(make_env: EnvFactory):
    """Temporal: ``start_child_workflow`` returns a handle; the parent keeps working and
    awaits it later. Loom: ``ctx.start_flow`` then ``await handle``."""
    log: list[str] = []
    env = make_env(children_app(log))
    r = await env.start("parent_works_meanwhile", None, execution_id="pm")
    assert r.status == "suspended" and log == ["pm:parent step"]
    await env.runtime.send("pm.child.1", "go", "child value")
    assert (await env.runtime.result("pm")).output == ["PARENT STEP", "child value"]


async def test_a_child_that_continues_as_new_returns_its_last_runs_result(
    make_env: EnvFactory,
):
    """Temporal: a child that continues-as-new is followed to its final run; the parent
    gets the last run's result. Loom: the child keeps its id across runs; the parent gets
    the final output."""
    env = make_env(children_app([]))
    r = await env.start("parent_of_looper", None, execution_id="pl")
    assert (r.status, r.output) == ("completed", 30)
    child = await env.runtime.load_state("pl.child.1")
    assert child.run == 4


async def test_cancelling_the_parent_leaves_an_abandoned_child_running(make_env: EnvFactory):
    """Temporal: a child started with ParentClosePolicy ABANDON keeps running when the
    parent is cancelled. Loom: ``on_cancel="abandon"``; the parent ends ``cancelled``, the
    child still waits and can finish on its own."""
    env = make_env(children_app([]))
    await env.start("parent_waits_child", "abandon", execution_id="pa")
    assert (await env.runtime.cancel("pa")).status == "cancelled"
    assert (await env.runtime.result("pa.child.1")).status == "suspended"
    done = await env.runtime.send("pa.child.1", "go", "alone")
    assert (done.status, done.output) == ("completed", "alone")
