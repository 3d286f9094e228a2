"""Flows for the newcomer's CLI tests: one that fails, one that blocks in an effect, one
waiting on a gate with a timeout.

``slow.wait`` writes ``LOOM_TEST_MARK`` when it starts, then sleeps, so a test knows when to
press Ctrl-C.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from loom import EffectContext, FlowContext, GateTimeoutError, Loom

app = Loom("newcomer")


@app.flow("boom")
async def boom(ctx: FlowContext, reason: str) -> None:
    raise ValueError(reason)


@app.effect("slow.wait")
async def slow_wait(ctx: EffectContext, seconds: float) -> float:
    await asyncio.to_thread(Path(os.environ["LOOM_TEST_MARK"]).write_text, ctx.idempotency_key)
    await asyncio.sleep(seconds)
    return seconds


@app.flow("slow")
async def slow(ctx: FlowContext, seconds: float) -> float:
    return await ctx.execute(slow_wait, seconds)


@app.flow("deadline")
async def deadline(ctx: FlowContext, seconds: float) -> object:
    try:
        return await ctx.suspend("answer", ctx.execution_id, timeout=seconds)
    except GateTimeoutError:  # then waits on another gate: the execution goes on
        return ["timed out", await ctx.suspend("after", ctx.execution_id)]
