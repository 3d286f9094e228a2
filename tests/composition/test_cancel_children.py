"""A cancel reaches children: the project's own composition of cancellation and child
flows, on the in-memory test env (every execute call is followed by a checked replay).

Cancelling a flow cancels what it started with ``on_cancel="cancel"``, all the way down: each
level's cleanup runs once as ordinary flow code (its compensating effect recorded), each
level ends ``cancelled``, and nothing is written after any level's end.
"""

from __future__ import annotations

import asyncio
from typing import Any

from loom import EffectContext, FlowContext, Loom
from loom.testing import LoomTestEnv

FINISHED = {"ExecutionCompleted", "ExecutionFailed", "ExecutionCancelled"}
BEGAN = asyncio.Event()  # ``slow`` is running (set anew on each test's loop)


def nested(log: list[str]) -> Loom:
    app = Loom("nested")

    @app.effect("undo")
    async def undo(ctx: EffectContext, who: str) -> str:
        log.append(f"undo {who}")
        return who

    @app.effect("slow")
    async def slow(ctx: EffectContext, who: str) -> str:
        log.append(f"slow {who} began")
        BEGAN.set()
        await asyncio.sleep(0.05)
        log.append(f"slow {who} ended")
        return who

    async def cleaned(ctx: FlowContext, who: str, body: Any) -> Any:
        try:
            return await body
        except asyncio.CancelledError:
            await ctx.execute(undo, who)  # cleanup is flow code: a recorded step
            raise

    @app.flow("leaf")
    async def leaf(ctx: FlowContext, _: None) -> Any:
        return await cleaned(ctx, "leaf", ctx.suspend("go", f"{ctx.execution_id}:go"))

    @app.flow("middle")
    async def middle(ctx: FlowContext, _: None) -> Any:
        return await cleaned(ctx, "middle", ctx.execute_flow(leaf, None))

    @app.flow("top")
    async def top(ctx: FlowContext, _: None) -> Any:
        return await cleaned(ctx, "top", ctx.execute_flow(middle, None))

    @app.flow("busy_leaf")
    async def busy_leaf(ctx: FlowContext, _: None) -> Any:
        async def work() -> Any:
            await ctx.execute(slow, "leaf")
            return await ctx.suspend("go", f"{ctx.execution_id}:go")

        return await cleaned(ctx, "busy leaf", work())

    @app.flow("busy_top")
    async def busy_top(ctx: FlowContext, _: None) -> Any:
        return await cleaned(ctx, "busy top", ctx.execute_flow(busy_leaf, None))

    return app


async def _ends(env: LoomTestEnv, eid: str) -> list[str]:
    return [e.type for e in await env.history(eid) if e.type in FINISHED]


async def test_a_cancel_reaches_grandchildren_and_every_level_cleans_up_once():
    log: list[str] = []
    env = LoomTestEnv(nested(log))
    assert (await env.start("top", None, execution_id="t")).status == "suspended"
    ids = sorted(r.execution_id for r in await env.runtime.list())
    assert ids == ["t", "t.child.1", "t.child.1.child.1"]
    assert (await env.runtime.cancel("t", "stop")).status == "cancelled"
    for eid in ids:
        result = await env.runtime.result(eid)
        assert result.status == "cancelled", (eid, result)
        assert await _ends(env, eid) == ["ExecutionCancelled"]  # one end, nothing after it
        assert (await env.history(eid))[-1].type == "ExecutionCancelled"
    assert sorted(log) == ["undo leaf", "undo middle", "undo top"]
    reasons = {eid: (await env.runtime.result(eid)).error for eid in ids}
    assert "parent t was cancelled" in str(reasons["t.child.1"])


async def test_a_cancel_reaches_a_child_whose_effect_is_running():
    """The child is inside an effect when its parent is cancelled: the effect finishes and
    is recorded, then the cancel arrives at the child's next await and it cleans up."""
    global BEGAN
    BEGAN = asyncio.Event()
    log: list[str] = []
    env = LoomTestEnv(nested(log))
    started = asyncio.ensure_future(env.start("busy_top", None, execution_id="b"))
    await BEGAN.wait()
    cancelled = await env.runtime.cancel("b", "stop")
    await started
    assert cancelled.status in ("running", "cancelled")
    for eid in ("b", "b.child.1"):
        assert (await env.runtime.result(eid)).status == "cancelled", eid
        assert await _ends(env, eid) == ["ExecutionCancelled"]
    assert log.index("slow leaf ended") < log.index("undo busy leaf")
    assert log.count("undo busy leaf") == 1 and log.count("undo busy top") == 1
