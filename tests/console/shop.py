"""The app the console tests serve: a shop whose flows reach every state the console shows
(a non-idempotent charge that can fall in doubt, an approval gate with a deadline, a
durable timer, an effect that fails)."""

from __future__ import annotations

import asyncio
from typing import Any

from loom import EffectContext, FlowContext, Loom, Retry

app = Loom("shop")


@app.effect("payments.charge", idempotent=False)
async def charge(ctx: EffectContext, amount: int) -> dict[str, Any]:
    """Not idempotent: a crash after its intent record leaves the step in doubt."""
    return {"charge_id": f"ch_{ctx.idempotency_key}", "amount": amount}


@app.effect("inventory.reserve")
async def reserve(ctx: EffectContext, sku: str) -> dict[str, Any]:
    await asyncio.sleep(0.05)  # long enough to draw a bar
    return {"sku": sku, "held": True}


@app.effect("mail.send")
async def send(ctx: EffectContext, to: str) -> str:
    return f"sent to {to}"


@app.effect("payments.refund", retry=Retry(max_attempts=1))
async def refund(ctx: EffectContext, amount: int) -> str:
    raise RuntimeError(f"the card network refused a refund of {amount}")


@app.flow("checkout")
async def checkout(ctx: FlowContext, order: dict[str, Any]) -> dict[str, Any]:
    """Charge, reserve, wait up to a day for approval, then mail the customer."""
    receipt = await ctx.execute(charge, int(order.get("amount", 1)))
    held = await ctx.execute(reserve, str(order.get("sku", "sku-1")))
    approval = await ctx.suspend("approve", f"{ctx.execution_id}:approve", timeout=86400)
    mailed = await ctx.execute(send, str(order.get("email", "a@example.com")))
    return {"receipt": receipt, "held": held, "approval": approval, "mail": mailed}


@app.flow("reminder")
async def reminder(ctx: FlowContext, to: str) -> str:
    """Sleep an hour on a durable timer, then mail."""
    await ctx.sleep(3600)
    return await ctx.execute(send, to)


@app.flow("refund")
async def refund_flow(ctx: FlowContext, amount: int) -> str:
    """Fails: the refund effect raises."""
    return await ctx.execute(refund, amount)


@app.flow("echo")
async def echo(ctx: FlowContext, value: Any) -> Any:
    """Returns its input (big inputs go to the blob store)."""
    return value


@app.flow("gift")
async def gift(ctx: FlowContext, to: str) -> str:
    """A parent: publishes its stage, wraps a child flow, and returns what the child did."""
    await ctx.set_event("stage", "wrapping")
    wrapped = await ctx.execute_flow(echo, {"wrap": to})
    await ctx.set_event("stage", "sent")
    return f"{wrapped['wrap']} gifted"


@app.flow("tally")
async def tally(ctx: FlowContext, n: int) -> int:
    """Continues as new until its input reaches 3: three runs of one execution."""
    if n < 3:
        await ctx.continue_as_new(n + 1)
    return n


@app.flow("basket")
async def basket(ctx: FlowContext, _: None) -> list[str]:
    """Takes items by update (``put``; ``fail`` raises), streams them on ``items``."""
    items: list[str] = []

    async def put(item: str) -> int:
        items.append(item)
        await ctx.write_stream("items", item)
        return len(items)

    def fail(why: str) -> None:
        raise ValueError(why)

    ctx.set_update_handler("put", put)
    ctx.set_update_handler("fail", fail)
    return await ctx.suspend("close", "basket")
