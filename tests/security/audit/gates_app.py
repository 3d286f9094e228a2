"""An app whose flows wait on Loom's own gates: a day's durable timer, a day's deadline
around an approval, and a mailbox (``LOOM_APP=tests.security.audit.gates_app:app``)."""

from __future__ import annotations

import asyncio
from typing import Any

from loom import FlowContext, Loom

app = Loom("gates")
DAY = 86400


@app.flow("nap")
async def nap(ctx: FlowContext, _: Any) -> str:
    """Sleeps a day on a durable timer."""
    await ctx.sleep(DAY)
    return "woke"


@app.flow("deadline")
async def deadline(ctx: FlowContext, _: Any) -> str:
    """Waits up to a day for an approval."""
    try:
        return await asyncio.wait_for(ctx.suspend("approval", ctx.execution_id), DAY)
    except TimeoutError:
        return "expired"


@app.flow("inbox")
async def inbox(ctx: FlowContext, n: int) -> list[Any]:
    """Takes ``n`` messages on ``cmd``."""
    return [await ctx.recv("cmd") for _ in range(n)]
