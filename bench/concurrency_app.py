"""The app ``bench/concurrency.py`` serves: one flow whose only step waits.

``wait.async`` sleeps on the event loop; ``wait.sync`` blocks a worker thread, as a sync
effect calling a slow API would.
"""

from __future__ import annotations

import asyncio
import time

from pydantic import BaseModel

from loom import EffectContext, FlowContext, Loom

app = Loom("bench-concurrency")


class Wait(BaseModel):
    """How long the step waits, and how."""

    seconds: float
    kind: str = "async"


@app.effect("wait.async")
async def wait_async(ctx: EffectContext, seconds: float) -> float:
    """Wait without holding a thread."""
    await asyncio.sleep(seconds)
    return seconds


@app.effect("wait.sync")
def wait_sync(ctx: EffectContext, seconds: float) -> float:
    """Wait in a worker thread."""
    time.sleep(seconds)
    return seconds


@app.flow("wait")
async def wait(ctx: FlowContext, spec: Wait) -> float:
    """One step that waits ``spec.seconds``."""
    return await ctx.execute(f"wait.{spec.kind}", spec.seconds)


@app.effect("noop")
async def noop(ctx: EffectContext, n: int) -> int:
    """Does nothing: what is measured is the durable step around it."""
    return n


@app.flow("steps")
async def steps(ctx: FlowContext, n: int) -> int:
    """``n`` sequential idempotent steps, each written before the next (strict)."""
    for i in range(n):
        await ctx.execute(noop, i)
    return n


@app.flow("steps.batched", durability="batched")
async def steps_batched(ctx: FlowContext, n: int) -> int:
    """The same steps with durable points (one write at the end)."""
    for i in range(n):
        await ctx.execute(noop, i)
    return n
