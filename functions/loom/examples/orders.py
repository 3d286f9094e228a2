"""Example flows for ``loom demo``: an order that is priced, reserved, approved, charged.

Run them yourself, from any folder (the charge needs the ``payments`` capability, which the
app's grant policy lets a local user grant)::

    export LOOM_APP=loom.examples.orders:app
    loom start order.fulfil --id o-1 --capability payments --input '{"order_id": "o-1", "items": ["book", "pen"]}'
    loom resume o-1 --on approval --key o-1:approval#1 --payload '{"by": "dana"}' --wait 2
    loom show o-1
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from pydantic import BaseModel

from loom import EffectContext, FlowContext, Loom, Retry
from loom.grants import GrantPolicy, rules

# Who may grant the orders' capabilities: local users of the CLI, and callers holding the
# worker's shared secret. A deployment overrides this with LOOM_GRANTS.
app = Loom(
    "orders",
    grants=GrantPolicy(
        rules({"local:*": {"order.*": ["payments"]}, "shared-secret": {"order.*": ["payments"]}})
    ),
)

PRICES = {"book": 1200, "pen": 150, "lamp": 3400}


class Order(BaseModel):
    """What a customer ordered."""

    order_id: str
    items: list[str]
    approval_timeout_s: float = 2 * 24 * 3600
    cooling_off_s: float = 1.0


class Quote(BaseModel):
    """The price of an order, in cents."""

    order_id: str
    total: int


class Charge(BaseModel):
    """A charge to make at the payment provider."""

    order_id: str
    amount: int


class Receipt(BaseModel):
    """What the payment provider answered."""

    charge_id: str
    amount: int


class Outcome(BaseModel):
    """How the order ended."""

    order_id: str
    total: int
    receipt: Receipt
    approved_by: str | None = None


@app.effect("pricing.quote")
async def quote(ctx: EffectContext, order: Order) -> Quote:
    """Price an order (idempotent: a pure lookup)."""
    return Quote(order_id=order.order_id, total=sum(PRICES.get(i, 500) for i in order.items))


@app.effect("inventory.reserve", retry=Retry(max_attempts=3, initial_interval=0.01))
def reserve(ctx: EffectContext, item: str) -> str:
    """Reserve one item (sync, runs in a thread; idempotent by the key)."""
    return f"rsv-{item}-{ctx.idempotency_key}"


@app.effect(
    "payments.charge", idempotent=False, timeout=timedelta(seconds=10), requires={"payments"}
)
async def charge(ctx: EffectContext, req: Charge) -> Receipt:
    """Charge the customer. Not idempotent: a crash mid-charge parks the step in doubt."""
    await asyncio.sleep(0)
    return Receipt(charge_id=f"ch_{ctx.idempotency_key}", amount=req.amount)


@app.effect("email.send")
async def send_email(ctx: EffectContext, text: str) -> bool:
    """Send a confirmation (idempotent: the mail service deduplicates on the key)."""
    return True


@app.flow("order.fulfil")
async def fulfil(ctx: FlowContext, order: Order) -> Outcome:
    """Price, reserve every item at once, wait for approval, cool off, charge, confirm."""
    q = await ctx.execute(quote, order)
    await asyncio.gather(*(ctx.execute(reserve, item) for item in order.items))
    approval: dict[str, Any] | None = await ctx.suspend(
        on="approval",
        correlation_key=f"{ctx.execution_id}:approval#1",
        timeout=timedelta(seconds=order.approval_timeout_s),
    )
    await ctx.sleep(timedelta(seconds=order.cooling_off_s))
    receipt = await ctx.execute(charge, Charge(order_id=order.order_id, amount=q.total))
    await ctx.execute(send_email, f"order {order.order_id} charged {q.total}")
    return Outcome(
        order_id=order.order_id,
        total=q.total,
        receipt=receipt,
        approved_by=(approval or {}).get("by"),
    )


@app.flow("order.express")
async def express(ctx: FlowContext, order: Order) -> Outcome:
    """No approval, no wait: price, reserve, charge, confirm."""
    q = await ctx.execute(quote, order)
    for item in order.items:
        await ctx.execute(reserve, item)
    receipt = await ctx.execute(charge, Charge(order_id=order.order_id, amount=q.total))
    await ctx.execute(send_email, f"order {order.order_id} charged {q.total}")
    return Outcome(order_id=order.order_id, total=q.total, receipt=receipt)
