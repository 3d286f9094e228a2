"""The app the crash tests of child handles, forks through children and bulk operations run
in a child process.

Every invocation of ``side.note`` appends ``key what`` to the file named by
``LOOM_TEST_SIDE_FILE`` before returning, so a test counts real invocations across process
deaths.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from loom import ChildFlowFailedError, EffectContext, FlowContext, Loom

app = Loom("family")


@app.effect("side.note")
def note(ctx: EffectContext, what: str) -> str:
    with open(os.environ["LOOM_TEST_SIDE_FILE"], "a", encoding="utf-8") as side:
        side.write(f"{ctx.idempotency_key} {what}\n")
        side.flush()
        os.fsync(side.fileno())
    return what


@app.flow("fam.waiter")
async def waiter(ctx: FlowContext, _: None) -> Any:
    """Waits for a message on ``go``; cancelled, it cleans up with a step."""
    try:
        got = await ctx.recv("go")
    except asyncio.CancelledError:
        await ctx.execute(note, "cleanup")
        raise
    return await ctx.execute(note, f"got {got}")


@app.flow("fam.canceller")
async def canceller(ctx: FlowContext, _: None) -> str:
    """Starts a waiter under an id of its choosing, cancels it through the handle (step 2),
    and reports what became of it."""
    child = await ctx.start_flow(waiter, None, execution_id=f"{ctx.execution_id}-kid")
    await child.cancel("not needed")
    try:
        await child
    except ChildFlowFailedError as exc:
        await ctx.execute(note, f"child {exc.status}")
        return f"child {exc.status}"
    return "child completed"


@app.flow("fam.overseer")
async def overseer(ctx: FlowContext, _: None) -> Any:
    """Starts a waiter, notes a step, waits on ``ok``, then returns the waiter's output."""
    child = await ctx.start_flow(waiter, None)  # step 1
    await ctx.execute(note, "meanwhile")  # step 2
    await ctx.suspend("ok", f"{ctx.execution_id}:ok")  # step 3
    return await child


@app.flow("fam.approval")
async def approval(ctx: FlowContext, _: None) -> Any:
    """Waits on ``approve``; cancelled, it cleans up with a step."""
    try:
        return await ctx.suspend("approve", f"{ctx.execution_id}:approve")
    except asyncio.CancelledError:
        await ctx.execute(note, "undo")
        raise
