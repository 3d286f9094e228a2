"""A flow that sleeps on a durable timer, for the restart tests of ``loom serve``."""

from __future__ import annotations

from loom import EffectContext, FlowContext, Loom

app = Loom("timers")


@app.effect("wake")
async def wake(ctx: EffectContext, seconds: float) -> str:
    return f"woke after {seconds:g}s"


@app.flow("nap")
async def nap(ctx: FlowContext, seconds: float) -> str:
    await ctx.sleep(seconds)
    return await ctx.execute(wake, seconds)
