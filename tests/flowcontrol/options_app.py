"""An app for the queue options' tests: ``job`` runs one effect that records when it
started (``STARTED``, in order) and takes ``seconds``; ``nap`` sleeps durably."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

from loom import EffectContext, FlowContext, Loom

app = Loom("queue-options")
app.queue("one", concurrency=1)
app.queue("dedup", concurrency=10)
app.queue("per-worker", worker_concurrency=1)
app.queue("pair-per-worker", concurrency=5, worker_concurrency=2)

STARTED: list[tuple[str, float]] = []
RUNNING: Counter[str] = Counter()
PEAK: Counter[str] = Counter()


def reset() -> None:
    STARTED.clear()
    RUNNING.clear()
    PEAK.clear()


@app.effect("job.step")
async def step(ctx: EffectContext, value: dict[str, Any]) -> str:
    STARTED.append((str(value["name"]), time.time()))
    RUNNING["all"] += 1
    PEAK["all"] = max(PEAK["all"], RUNNING["all"])
    try:
        await asyncio.sleep(float(value.get("seconds", 0.05)))
    finally:
        RUNNING["all"] -= 1
    return str(value["name"])


@app.flow("job")
async def job(ctx: FlowContext, value: dict[str, Any]) -> str:
    return await ctx.execute(step, value)


@app.flow("nap")
async def nap(ctx: FlowContext, seconds: float) -> str:
    await ctx.sleep(seconds)
    return "woke"
