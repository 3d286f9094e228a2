"""An app with queues, for the queue tests (loaded by reference by worker processes).

``work`` runs one effect that takes a little while, so executions overlap when allowed to;
``RUNNING`` counts, in this process, how many run at once (per queue and per partition key).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from loom import EffectContext, FlowContext, Loom
from loom.primitives.queues import QueueRef

app = Loom("queued")
app.queue("five", concurrency=5)
app.queue("two", concurrency=2)
app.queue("serial", concurrency=10)
app.queue("slow", rate_per_second=2)
app.queue("brief", concurrency=1, lease_ttl=0.6)  # renewed every 0.2 s while it runs

RUNNING: Counter[str] = Counter()
PEAK: Counter[str] = Counter()


@app.effect("work.do")
async def do(ctx: EffectContext, value: dict[str, Any]) -> str:
    key = str(value.get("key", "-"))
    RUNNING[key] += 1
    PEAK[key] = max(PEAK[key], RUNNING[key])
    RUNNING["all"] += 1
    PEAK["all"] = max(PEAK["all"], RUNNING["all"])
    try:
        await asyncio.sleep(float(value.get("seconds", 0.05)))
    finally:
        RUNNING[key] -= 1
        RUNNING["all"] -= 1
    return "done"


@app.flow("work")
async def work(ctx: FlowContext, value: Any) -> str:
    return await ctx.execute(do, value)


@app.flow("fan_out")
async def fan_out(ctx: FlowContext, n: int) -> list[str]:
    """Runs ``n`` child ``work`` flows at once, each on the queue ``two`` (at most 2 run)."""
    children = [
        await ctx.start_flow("work", {"key": "-", "seconds": 0.2}, queue=QueueRef("two"))
        for _ in range(n)
    ]
    return [await child.result() for child in children]
