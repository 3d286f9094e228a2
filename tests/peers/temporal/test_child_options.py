"""Temporal's child workflow options and handles, ported to Loom's child flows.

``workflow.start_child_workflow(..., id=, execution_timeout=, task_queue=)``, the versioning
of a child, ``handle.signal(...)`` and ``handle.cancel()`` (the child's cancellation
requested from its parent), and a child id already in use. SQLite on disk, a fake clock,
every execute call checked by a replay.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from loom import ChildFlowFailedError, ChildIdTakenError, EffectContext, FlowContext, Loom
from loom.primitives.queues import QueueRef
from loom.wire import ExecutionPackage
from tests.peers.temporal.harness import EnvFactory


def options_app(log: list[str]) -> Loom:
    app = Loom("temporal-child-options")
    app.queue("children-queue", concurrency=1)

    @app.effect("work")
    def work(ctx: EffectContext, name: str) -> str:
        log.append(f"{ctx.execution_id}:{name}")
        return name.upper()

    @app.flow("long_child")
    async def long_child(ctx: FlowContext, _: None) -> Any:
        try:
            return await ctx.recv("finish")
        except asyncio.CancelledError:
            await ctx.execute(work, "child cleanup")
            raise

    @app.flow("versioned_child", version=1)
    async def child_v1(ctx: FlowContext, name: str) -> str:
        return f"v1 {name}"

    @app.flow("versioned_child", version=2)
    async def child_v2(ctx: FlowContext, name: str) -> str:
        return f"v2 {name}"

    @app.flow("parent_with_id")
    async def parent_with_id(ctx: FlowContext, child_id: str) -> Any:
        try:
            handle = await ctx.start_flow(long_child, None, execution_id=child_id)
        except ChildIdTakenError as exc:
            return {"already_started": exc.child_id, "holder": exc.holder_flow}
        await handle.send("finish", "signalled")
        return await handle

    @app.flow("parent_cancels_started")
    async def parent_cancels_started(ctx: FlowContext, wait_cancellation: bool) -> Any:
        handle = await ctx.start_flow(long_child, None)
        await ctx.execute(work, "parent step")
        await handle.cancel()
        if not wait_cancellation:  # TRY_CANCEL: the parent goes on without waiting
            return "requested"
        try:
            return await handle
        except ChildFlowFailedError as exc:
            return {"status": exc.status, "child": exc.child_id}

    @app.flow("parent_with_timeout")
    async def parent_with_timeout(ctx: FlowContext, seconds: float) -> Any:
        try:
            return await ctx.execute_flow(long_child, None, timeout=timedelta(seconds=seconds))
        except ChildFlowFailedError as exc:
            return {"status": exc.status, "message": exc.error.get("message")}

    @app.flow("parent_pins")
    async def parent_pins(ctx: FlowContext, version: int | None) -> str:
        return await ctx.execute_flow("versioned_child", "x", version=version)

    @app.flow("parent_on_queue")
    async def parent_on_queue(ctx: FlowContext, n: int) -> list[Any]:
        queue = QueueRef("children-queue")
        handles = [await ctx.start_flow(long_child, None, queue=queue) for _ in range(n)]
        for handle in handles:
            await handle.send("finish", handle.execution_id)
        return [await h for h in handles]

    return app


async def test_a_child_started_with_a_workflow_id_is_signalled_through_its_handle(
    make_env: EnvFactory,
):
    """Temporal: ``start_child_workflow(..., id="...")`` then ``handle.signal(...)``
    (test_workflow_signal_child). Loom: ``start_flow(execution_id=...)`` and
    ``handle.send``; the child's id is the one given, its parent recorded."""
    env = make_env(options_app([]))
    done = await env.start("parent_with_id", "my-child", execution_id="p1")
    assert (done.status, done.output) == ("completed", "signalled")
    child = await env.runtime.result("my-child")
    assert child.state is not None and child.state["parent"]["execution_id"] == "p1"


async def test_a_child_id_already_started_is_refused_to_the_parent(make_env: EnvFactory):
    """Temporal: test_workflow_child_already_started — starting a child under the id of a
    running workflow raises ``WorkflowAlreadyStartedError`` in the parent. Loom:
    ``ChildIdTakenError`` (recorded, so a replay raises it again), naming the holder."""
    env = make_env(options_app([]))
    await env.start("long_child", None, execution_id="taken")
    done = await env.start("parent_with_id", "taken", execution_id="p2")
    assert done.output == {"already_started": "taken", "holder": "long_child"}
    assert (await env.runtime.result("taken")).status == "suspended"  # left alone


async def test_cancelling_a_started_child_through_its_handle(make_env: EnvFactory):
    """Temporal: test_workflow_cancel_child_started — ``handle.cancel()`` on a started child
    with WAIT_CANCELLATION_COMPLETED: the child's cleanup runs and the parent's await raises
    ``ChildWorkflowError`` caused by the cancellation. Loom: the same with
    ``ChildFlowFailedError`` (status ``cancelled``)."""
    log: list[str] = []
    env = make_env(options_app(log))
    done = await env.start("parent_cancels_started", True, execution_id="p3")
    assert done.output == {"status": "cancelled", "child": "p3.child.1"}
    assert log == ["p3:parent step", "p3.child.1:child cleanup"]
    assert await env.types("p3") == [
        "ExecutionStarted",
        "ExecutionClaimed",
        "ChildStarted",
        "EffectCompleted",
        "ExecutionResumed",  # the child's end, cancelled (it ran inline)
        "ChildCancelRequested",
        "ExecutionCompleted",
    ]


async def test_a_cancel_request_the_parent_does_not_wait_for(make_env: EnvFactory):
    """Temporal: cancellation type TRY_CANCEL — the parent requests the child's cancel and
    goes on. Loom: the request is recorded, the child still cleans up and ends cancelled."""
    log: list[str] = []
    env = make_env(options_app(log))
    done = await env.start("parent_cancels_started", False, execution_id="p4")
    assert done.output == "requested"
    assert (await env.runtime.result("p4.child.1")).status == "cancelled"
    assert "p4.child.1:child cleanup" in log


async def test_a_child_past_its_execution_timeout(make_env: EnvFactory):
    """Temporal: ``execution_timeout`` on a child — past it the child times out and the
    parent sees ``ChildWorkflowError`` (TimeoutError). Loom: ``timeout`` on the child
    start; the child is cancelled with cleanup at its recorded deadline."""
    log: list[str] = []
    env = make_env(options_app(log))
    assert (await env.start("parent_with_timeout", 60.0, execution_id="p5")).status == ("suspended")
    assert await env.skip(59) == []
    await env.skip(2)
    done = await env.runtime.result("p5")
    assert done.output == {"status": "cancelled", "message": "the flow's timeout passed"}
    assert log == ["p5.child.1:child cleanup"]


async def test_a_child_runs_the_version_its_parent_asks_for(make_env: EnvFactory):
    """Temporal: a child started with a versioning intent (or a pinned build) runs that
    code. Loom: ``version=`` pins the child's flow version for its whole life; without it the
    latest registered runs."""
    env = make_env(options_app([]))
    assert (await env.start("parent_pins", 1, execution_id="p6")).output == "v1 x"
    assert (await env.start("parent_pins", None, execution_id="p7")).output == "v2 x"
    assert (await env.runtime.result("p6.child.1")).state["flow_version"] == "1"  # type: ignore[index]


async def test_children_on_a_task_queue_run_within_its_limits(make_env: EnvFactory):
    """Temporal: ``task_queue=`` sends a child to another worker pool. Loom: ``queue=`` runs
    the children within a declared queue's limits (here one at a time)."""
    env = make_env(options_app([]))
    done = await env.start("parent_on_queue", 2, execution_id="p8")
    for _ in range(10):  # the queue admits one child at a time: run what waits
        if done.status == "completed":
            break
        for row in await env.runtime.list():
            await env.runtime.execute(ExecutionPackage(execution_id=row.execution_id))
        done = await env.runtime.result("p8")
    assert done.output == ["p8.child.1", "p8.child.2"]
    first = (await env.history("p8.child.1"))[0]
    assert first.queue == "children-queue"  # type: ignore[union-attr]
