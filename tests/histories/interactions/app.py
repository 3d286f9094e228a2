"""The flows of the golden histories of updates, queries, streams and event reads.

``ledger`` takes entries by update (one step each, in the handler), answers the query
``balance`` and streams each entry; ``ledger_v0`` is the same flow before it took updates
(its history proves that registering handlers shifts no step id); ``watcher`` reads
another execution's published value, waiting for it.
"""

from __future__ import annotations

import asyncio
from typing import Any

from loom import EffectContext, FlowContext, Loom

app = Loom("interactions")


@app.effect("fx.rate")
async def rate(ctx: EffectContext, currency: str) -> int:
    return {"EUR": 2, "USD": 1}.get(currency, 0)


@app.flow("ledger")
async def ledger(ctx: FlowContext, opening: int) -> dict[str, Any]:
    balance = {"amount": await ctx.execute(rate, "USD") * opening}
    closed = asyncio.Event()

    async def post(entry: dict[str, Any]) -> int:
        balance["amount"] += entry["amount"] * await ctx.execute(rate, entry["currency"])
        await ctx.write_stream("entries", entry)
        return balance["amount"]

    def positive(entry: dict[str, Any]) -> None:
        if entry["amount"] <= 0:
            raise ValueError("an entry is positive")

    def refuse(_: None) -> None:
        raise RuntimeError("refunds go through support")

    def close() -> int:
        closed.set()
        return balance["amount"]

    ctx.set_update_handler("post", post, validator=positive)
    ctx.set_update_handler("refund", refuse)
    ctx.set_update_handler("close", close)
    ctx.set_query_handler("balance", lambda: balance["amount"])
    await ctx.set_event("opened", balance["amount"])
    await closed.wait()
    await ctx.all_handlers_finished()
    await ctx.close_stream("entries")
    return {"balance": balance["amount"]}


@app.flow("watcher")
async def watcher(ctx: FlowContext, of: str) -> Any:
    opened = await ctx.get_event(of, "opened", timeout=30)
    never = await ctx.get_event(of, "never", timeout=0)
    return {"opened": opened, "never": never}


def before_handlers() -> Loom:
    """The ledger as it was before it took updates: the same steps, no handlers."""
    old = Loom("interactions")
    old.effects.update(app.effects)

    @old.flow("ledger")
    async def ledger_v0(ctx: FlowContext, opening: int) -> dict[str, Any]:
        amount = await ctx.execute(rate, "USD") * opening
        await ctx.set_event("opened", amount)
        await ctx.suspend("close", ctx.execution_id)
        return {"balance": amount}

    return old
