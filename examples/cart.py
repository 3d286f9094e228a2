"""A shopping cart a caller talks to while it runs: updates, queries, streams and a read of
another execution's published value.

``cart`` takes items by update (``add``, whose validator refuses an empty name; ``checkout``
ends it), answers the queries ``items`` and ``total``, and writes each line of the receipt
to the stream ``receipt``. ``courier`` reads the cart's published ``checked_out`` value
(waiting for it) and ships.

    loom --app examples.cart:app start cart --id c-1
    loom --app examples.cart:app update c-1 add '"apple"'
    loom --app examples.cart:app query c-1 items
    loom --app examples.cart:app stream c-1 receipt
"""

from __future__ import annotations

import asyncio

from loom import EffectContext, FlowContext, Loom

app = Loom("cart")

PRICES = {"apple": 3, "bread": 4, "cheese": 9}


@app.effect("price.lookup")
async def lookup(ctx: EffectContext, item: str) -> int:
    return PRICES.get(item, 1)


@app.flow("cart")
async def cart(ctx: FlowContext, _: None) -> int:
    items: list[str] = []
    total = {"amount": 0}
    checked_out = asyncio.Event()

    async def add(item: str) -> int:
        price = await ctx.execute(lookup, item)  # a step of the handler, recorded
        items.append(item)
        total["amount"] += price
        await ctx.write_stream("receipt", f"{item}: {price}")
        return total["amount"]

    def named(item: str) -> None:
        if not item.strip():
            raise ValueError("an item needs a name")

    def checkout() -> int:
        checked_out.set()
        return total["amount"]

    ctx.set_update_handler("add", add, validator=named)
    ctx.set_update_handler("checkout", checkout)
    ctx.set_query_handler("items", lambda: list(items))
    ctx.set_query_handler("total", lambda: total["amount"])
    await checked_out.wait()
    await ctx.all_handlers_finished()  # every accepted update answered before the end
    await ctx.write_stream("receipt", f"total: {total['amount']}")
    await ctx.close_stream("receipt")
    await ctx.set_event("checked_out", total["amount"])
    return total["amount"]


@app.flow("courier")
async def courier(ctx: FlowContext, cart_id: str) -> str:
    amount = await ctx.get_event(cart_id, "checked_out", timeout=30)
    if amount is None:
        return f"nothing to ship for {cart_id}"
    return f"shipping {cart_id} ({amount})"
