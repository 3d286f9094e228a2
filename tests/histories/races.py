"""Flows that race steps, gates and timers, for the golden histories of racing flows.

Each flow's result depends on which racer the flow saw finish first, so a replay that handed
recorded outcomes over in any other order than the log's would end with another result.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel

from loom import EffectContext, FlowContext, Loom

app = Loom("races")


class Pause(BaseModel):
    name: str
    seconds: float


@app.effect("pause")
async def pause(ctx: EffectContext, p: Pause) -> str:
    await asyncio.sleep(p.seconds)
    return p.name


@app.effect("refuse")
async def refuse(ctx: EffectContext, p: Pause) -> str:
    await asyncio.sleep(p.seconds)
    raise ValueError(f"{p.name} refused")


def _pause(ctx: FlowContext, name: str, seconds: float) -> asyncio.Task[Any]:
    return asyncio.ensure_future(ctx.execute(pause, Pause(name=name, seconds=seconds)))


@app.flow("race.first_completed")
async def first_completed(ctx: FlowContext, _: None) -> dict[str, Any]:
    """``asyncio.wait(FIRST_COMPLETED)`` over two steps, then a gate (a later replay)."""
    fast, slow = _pause(ctx, "fast", 0.05), _pause(ctx, "slow", 0.6)
    done, pending = await asyncio.wait({fast, slow}, return_when=asyncio.FIRST_COMPLETED)
    first = sorted(t.result() for t in done)
    rest = [await t for t in pending]
    go = await ctx.suspend("go", ctx.execution_id)
    return {"first": first, "rest": rest, "go": go}


@app.flow("race.as_completed")
async def as_completed(ctx: FlowContext, _: None) -> dict[str, Any]:
    """``asyncio.as_completed`` over three steps and a failing one, then a gate."""
    tasks = [_pause(ctx, "a", 0.9), _pause(ctx, "b", 0.05), _pause(ctx, "c", 0.45)]
    tasks.append(asyncio.ensure_future(ctx.execute(refuse, Pause(name="d", seconds=0.25))))
    order: list[str] = []
    for next_done in asyncio.as_completed(tasks):
        try:
            order.append(await next_done)
        except Exception as exc:  # the failure takes its place in the order too
            order.append(f"error: {exc}")
    go = await ctx.suspend("go", ctx.execution_id)
    return {"order": order, "go": go}


@app.flow("race.gate_or_timer")
async def gate_or_timer(ctx: FlowContext, _: None) -> dict[str, Any]:
    """A gate raced against a durable timer; the gate's reply comes after the timer fired."""
    gate = asyncio.ensure_future(ctx.suspend("go", ctx.execution_id))
    timer = asyncio.ensure_future(ctx.sleep(0.3))
    done, _pending = await asyncio.wait({gate, timer}, return_when=asyncio.FIRST_COMPLETED)
    winner = sorted("gate" if t is gate else "timer" for t in done)
    finish = await ctx.suspend("finish", ctx.execution_id)
    late = await gate  # the reply that lost the race is still delivered to its gate
    return {"winner": winner, "finish": finish, "late": late}


@app.flow("race.step_or_gate")
async def step_or_gate(ctx: FlowContext, _: None) -> dict[str, Any]:
    """A slow step raced against a gate resumed while the step runs; the loser is cancelled."""
    step = _pause(ctx, "step", 1.5)
    gate = asyncio.ensure_future(ctx.suspend("go", ctx.execution_id))
    done, pending = await asyncio.wait({step, gate}, return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()
    winner = sorted("gate" if t is gate else "step" for t in done)
    after = await ctx.execute(pause, Pause(name="after", seconds=0))
    go = await ctx.suspend("again", ctx.execution_id)
    return {"winner": winner, "after": after, "again": go}
