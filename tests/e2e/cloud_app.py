"""The flow of the cloud-path end-to-end test (``LOOM_APP=tests.e2e.cloud_app:app``).

Effects append ``{idempotency_key} {effect} {pid}`` to ``$LOOM_E2E_DIR/calls.log`` so the
test can count invocations across processes. ``e2e.hold`` blocks the first time it runs
anywhere (it creates ``$LOOM_E2E_DIR/held`` holding its pid and waits to be killed); every
later invocation returns at once. Without ``LOOM_E2E_DIR`` nothing blocks or is recorded,
which is how the test computes the reference history in-process.
"""

from __future__ import annotations

import asyncio
import os
from datetime import timedelta
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from loom import EffectContext, FlowContext, Loom

app = Loom("e2e-cloud")
HOLD_LIMIT_S = 60.0


class Order(BaseModel):
    """What the flow is started with."""

    order_id: str
    items: list[int]
    cool_off_s: float = 1.0


def _dir() -> Path | None:
    raw = os.environ.get("LOOM_E2E_DIR")
    return Path(raw) if raw else None


def _record(ctx: EffectContext) -> None:
    where = _dir()
    if where is not None:
        with (where / "calls.log").open("a") as fh:
            fh.write(f"{ctx.idempotency_key} {ctx.effect} {os.getpid()}\n")


@app.effect("e2e.quote")
async def quote(ctx: EffectContext, order: Order) -> int:
    """The order's total."""
    _record(ctx)
    return sum(order.items)


@app.effect("e2e.hold")
async def hold(ctx: EffectContext, total: int) -> str:
    """Block the first time (the test kills this process), pass every later time."""
    _record(ctx)
    where = _dir()
    if where is not None:
        try:
            fd = os.open(where / "held", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            pass
        else:
            os.write(fd, str(os.getpid()).encode())
            os.close(fd)
            await asyncio.sleep(HOLD_LIMIT_S)  # killed long before this ends
            raise TimeoutError("nobody killed the worker holding the execution")
    return f"held:{total}:{ctx.idempotency_key}"


@app.effect("e2e.ship")
async def ship(ctx: EffectContext, total: int) -> str:
    """Ship it."""
    _record(ctx)
    return f"shipment-{ctx.idempotency_key}"


@app.flow("e2e.order")
async def order_flow(ctx: FlowContext, order: Order) -> dict[str, Any]:
    """Steps, a gate resumed over HTTP, a durable timer, a step that outlives a worker."""
    total = await ctx.execute(quote, order)
    approval = await ctx.suspend(on="approval", correlation_key=f"{ctx.execution_id}:approval")
    await ctx.sleep(timedelta(seconds=order.cool_off_s))
    held = await ctx.execute(hold, total)
    shipment = await ctx.execute(ship, total)
    return {"total": total, "approved_by": approval["by"], "held": held, "shipment": shipment}
