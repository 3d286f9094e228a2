"""The app the authority, id and limit attacks run against (``LOOM_APP`` of real worker
processes): a charge that needs the ``payments`` capability, and flows around it.

Every effect appends ``{idempotency_key} {effect}`` to ``$LOOM_TEST_DIR/calls.log`` (see
``tests.functions.apps.record``), so a test tells from another process whether anything was
invoked. ``sec.charge`` fails while ``$LOOM_TEST_DIR/bug`` exists, so a test makes an
execution fail and then lets its re-drive succeed.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from loom import EffectContext, FlowContext, Limits, Loom
from tests.functions.apps import record

app = Loom("authority-tests")


def _bug() -> bool:
    where = os.environ.get("LOOM_TEST_DIR")
    return where is not None and (Path(where) / "bug").exists()


@app.effect("sec.quote")
async def quote(ctx: EffectContext, amount: int) -> int:
    """The price: what was asked."""
    record(ctx)
    return amount


@app.effect("sec.charge", idempotent=False, requires={"payments"})
async def charge(ctx: EffectContext, amount: int) -> dict[str, Any]:
    """A payment: only an execution granted ``payments`` may run it."""
    record(ctx)
    if _bug():
        raise RuntimeError("the payment provider is down")
    return {"charge_id": f"ch_{ctx.idempotency_key}", "amount": amount}


@app.flow("sec.order")
async def order(ctx: FlowContext, amount: int) -> dict[str, Any]:
    """Quote (step 1), then charge (step 2)."""
    price = await ctx.execute(quote, amount)
    return {"receipt": await ctx.execute(charge, price)}


@app.flow("sec.echo")
async def echo(ctx: FlowContext, value: Any) -> Any:
    """No effect at all: the flow anyone may start."""
    return value


# A daily tick at 03:00 UTC: it never falls due while a test runs, and its next id is public
# (``GET /schedules``), which is what a squatter reads.
app.schedule("0 3 * * *", flow="sec.echo", input={"from": "schedule"}, name="nightly")


@app.flow("sec.deaf", limits=Limits(max_messages=20))
async def deaf(ctx: FlowContext, value: Any) -> None:
    """Never reads its mailbox: what a flood of messages fills."""
    await ctx.suspend(on="never", correlation_key=ctx.execution_id)


@app.flow("sec.forever", limits=Limits(max_runs=5))
async def forever(ctx: FlowContext, n: int) -> None:
    """Continues as new, for ever: stopped by its run limit."""
    await ctx.execute(quote, n)
    await ctx.continue_as_new(n + 1)


@app.flow("sec.parent")
async def parent(ctx: FlowContext, amount: int) -> Any:
    """Starts ``sec.order`` (which charges) as a child flow."""
    return await ctx.execute_flow(order, amount)
