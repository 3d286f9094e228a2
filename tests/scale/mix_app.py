"""The load model's app: a representative mix of what one deployment runs.

Every flow takes ten steps (the issue's unit of work): ``steps`` runs them in one go;
``sleeper`` sleeps on a durable timer half way; ``gated`` waits on a gate a client resumes;
``queued`` runs on a queue with a concurrency limit and partition keys; ``parent`` fans
out to ``child`` flows and waits for every one (fan-in); the schedule ``minutely`` starts
``steps`` every minute.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from loom import EffectContext, FlowContext, Loom

app = Loom("load-model")
app.queue("work", concurrency=1000, shards=16)  # sized for its share of 10,000 starts/s
app.schedule("* * * * *", flow="steps", input=0, name="minutely")

STEPS = 10


@app.effect("mix.step")
async def step(ctx: EffectContext, n: int) -> int:
    await asyncio.sleep(0)
    return n + 1


async def _run(ctx: FlowContext, n: int, steps: int) -> int:
    for _ in range(steps):
        n = await ctx.execute(step, n)
    return n


@app.flow("steps")
async def steps(ctx: FlowContext, n: int) -> int:
    return await _run(ctx, n, STEPS)


@app.flow("sleeper")
async def sleeper(ctx: FlowContext, n: int) -> int:
    n = await _run(ctx, n, STEPS // 2)
    await ctx.sleep(timedelta(seconds=1))
    return await _run(ctx, n, STEPS - STEPS // 2)


@app.flow("gated")
async def gated(ctx: FlowContext, n: int) -> int:
    n = await _run(ctx, n, STEPS // 2)
    extra: Any = await ctx.suspend(on="go", correlation_key=f"{ctx.execution_id}:go")
    return await _run(ctx, n + int(extra or 0), STEPS - STEPS // 2)


@app.flow("queued")
async def queued(ctx: FlowContext, n: int) -> int:
    return await _run(ctx, n, STEPS)


@app.flow("child")
async def child(ctx: FlowContext, n: int) -> int:
    return await _run(ctx, n, STEPS)


@app.flow("parent")
async def parent(ctx: FlowContext, children: int) -> int:
    started = [await ctx.start_flow("child", i) for i in range(children)]
    results = [await c.result() for c in started]
    return sum(results)
