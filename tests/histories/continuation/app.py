"""The flow of the continue-as-new golden histories: run 1 continues while a step of
another task is still running."""

from __future__ import annotations

import asyncio
from typing import Any

from loom import FlowContext, Loom

app = Loom("continuation")


@app.flow("rollover")
async def rollover(ctx: FlowContext, run: int) -> Any:
    """Run 1 starts ``slow`` in a task and continues before it finishes; run 2 waits for a
    ``go`` resume and returns it with the run number."""
    if run == 2:
        return {"run": run, "go": await ctx.suspend("go", "k")}
    first = await ctx.execute("quick", None)
    pending = asyncio.ensure_future(ctx.execute("slow", first))
    await asyncio.sleep(0.01)
    try:
        await ctx.continue_as_new(run + 1)
    finally:
        await pending


@app.effect("quick")
async def quick(ctx: Any, _: None) -> str:
    return "quick"


@app.effect("slow", idempotent=False)
async def slow(ctx: Any, value: str) -> str:
    await asyncio.sleep(0.1)
    return f"slow after {value}"
