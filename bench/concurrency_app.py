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
