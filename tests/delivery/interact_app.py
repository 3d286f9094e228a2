"""The app the crash tests of updates, event reads and streams run in child processes.

``note`` appends ``key payload`` to the file named by ``LOOM_TEST_SIDE_FILE`` (so a test
counts real invocations across process deaths). ``tab`` takes items by the update ``add``
(each noted in its handler) until ``close``; ``reader`` reads ``ready`` of another
execution, waiting; ``writer`` streams three values, noting each.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from loom import EffectContext, FlowContext, Loom

app = Loom("interact-crashes")


@app.effect("note")
def note(ctx: EffectContext, payload: Any) -> Any:
    with open(os.environ["LOOM_TEST_SIDE_FILE"], "a", encoding="utf-8") as side:
        side.write(f"{ctx.idempotency_key} {payload}\n")
        side.flush()
        os.fsync(side.fileno())
    return payload


@app.flow("tab")
async def tab(ctx: FlowContext, _: None) -> list[str]:
    items: list[str] = []
    closed = asyncio.Event()

    async def add(item: str) -> int:
        items.append(await ctx.execute(note, item))
        return len(items)

    ctx.set_update_handler("add", add)
    ctx.set_update_handler("close", lambda: closed.set())
    await closed.wait()
    await ctx.all_handlers_finished()
    return items


@app.flow("publisher")
async def publisher(ctx: FlowContext, _: None) -> str:
    await ctx.suspend("go", "publisher")
    await ctx.set_event("ready", "yes")
    return "published"


@app.flow("reader")
async def reader(ctx: FlowContext, args: dict[str, Any]) -> Any:
    return await ctx.get_event(args["of"], "ready", timeout=args["timeout"])


@app.flow("writer")
async def writer(ctx: FlowContext, n: int) -> int:
    for i in range(n):
        await ctx.write_stream("out", await ctx.execute(note, i))
    await ctx.close_stream("out")
    return n
