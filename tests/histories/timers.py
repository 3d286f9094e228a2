"""Flows that put asyncio deadlines around steps, gates and ``ctx.sleep``, for the golden
histories of flow timers.

Each flow's result depends on whether a deadline fired before the thing it guards finished,
so a replay that let the timers run on the process clock (instantaneous on replay) or handed
their firings over at another point than the log's would end with another result.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel

from loom import EffectContext, FlowContext, Loom

app = Loom("timers")


class Pause(BaseModel):
    name: str
    seconds: float


@app.effect("pause")
async def pause(ctx: EffectContext, p: Pause) -> str:
    # An effect's own deadline runs on the loop's clock, never as a flow timer.
    return await asyncio.wait_for(_sleep_then(p), p.seconds + 5)


async def _sleep_then(p: Pause) -> str:
    await asyncio.sleep(p.seconds)
    return p.name


def _step(ctx: FlowContext, name: str, seconds: float) -> Any:
    return ctx.execute(pause, Pause(name=name, seconds=seconds))


@app.flow("timer.wait_for")
async def wait_for(ctx: FlowContext, _: None) -> dict[str, Any]:
    """``asyncio.wait_for`` around a slow step (times out) and a fast one (does not)."""
    try:
        slow = await asyncio.wait_for(_step(ctx, "slow", 0.8), 0.2)
    except TimeoutError:
        slow = "timed out"
    fast = await asyncio.wait_for(_step(ctx, "fast", 0.01), 5)
    go = await ctx.suspend("go", ctx.execution_id)
    return {"slow": slow, "fast": fast, "go": go}


@app.flow("timer.timeout")
async def timeout(ctx: FlowContext, _: None) -> dict[str, Any]:
    """``asyncio.timeout`` around two steps: the deadline falls during the second."""
    done: list[str] = []
    try:
        async with asyncio.timeout(0.4):
            done.append(await _step(ctx, "one", 0.05))
            done.append(await _step(ctx, "two", 0.8))
    except TimeoutError:
        done.append("timed out")
    go = await ctx.suspend("go", ctx.execution_id)
    return {"done": done, "go": go}


@app.flow("timer.sleep")
async def sleep(ctx: FlowContext, _: None) -> dict[str, Any]:
    """``asyncio.sleep`` between steps (the execution suspends on it), and raced against a
    step with ``asyncio.wait``."""
    first = await _step(ctx, "first", 0)
    await asyncio.sleep(0.2)
    step = asyncio.ensure_future(_step(ctx, "raced", 0.6))
    nap = asyncio.ensure_future(asyncio.sleep(0.1, "nap"))
    done, _pending = await asyncio.wait({step, nap}, return_when=asyncio.FIRST_COMPLETED)
    winner = sorted("step" if t is step else "nap" for t in done)
    go = await ctx.suspend("go", ctx.execution_id)
    return {"first": first, "winner": winner, "raced": await step, "go": go}


@app.flow("timer.wait_timeout")
async def wait_timeout(ctx: FlowContext, _: None) -> dict[str, Any]:
    """``asyncio.wait(timeout=)`` and ``asyncio.as_completed(timeout=)`` over steps."""
    tasks = [asyncio.ensure_future(_step(ctx, n, s)) for n, s in (("a", 0.05), ("b", 0.9))]
    done, pending = await asyncio.wait(tasks, timeout=0.3)
    first = sorted(t.result() for t in done)
    for task in pending:
        task.cancel()
    order: list[str] = []
    racers = [asyncio.ensure_future(_step(ctx, n, s)) for n, s in (("c", 0.8), ("d", 0.05))]
    try:
        for next_done in asyncio.as_completed(racers, timeout=0.3):
            order.append(await next_done)
    except TimeoutError:
        order.append("timed out")
    go = await ctx.suspend("go", ctx.execution_id)
    return {"first": first, "pending": len(pending), "order": order, "go": go}


@app.flow("timer.gate")
async def gate(ctx: FlowContext, _: None) -> dict[str, Any]:
    """``asyncio.wait_for`` around gates: the execution suspends with the timer pending; one
    reply comes in time, the other after the deadline (it loses to the timer)."""
    early = await asyncio.wait_for(ctx.suspend("early", ctx.execution_id), 30)
    try:
        late = await asyncio.wait_for(ctx.suspend("late", ctx.execution_id), 0.2)
    except TimeoutError:
        late = "timed out"
    go = await ctx.suspend("go", ctx.execution_id)
    return {"early": early, "late": late, "go": go}


@app.flow("timer.ctx_sleep")
async def ctx_sleep(ctx: FlowContext, _: None) -> dict[str, Any]:
    """``asyncio.wait_for`` around durable timers: a long ``ctx.sleep`` is cut short, a short
    one is not."""
    try:
        await asyncio.wait_for(ctx.sleep(60), 0.2)
        long = "slept"
    except TimeoutError:
        long = "timed out"
    await asyncio.wait_for(ctx.sleep(0.1), 30)
    go = await ctx.suspend("go", ctx.execution_id)
    return {"long": long, "short": "slept", "go": go}
