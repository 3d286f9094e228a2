"""The app of the fault tests (``LOOM_APP=tests.faults.apps:app``).

Each effect notes its invocation in the side ledger (``$LOOM_TEST_DIR/calls.log``, the
format of ``tests.functions.apps``) and then waits until ``$LOOM_TEST_DIR/release`` exists,
so a test can inject a fault while an effect runs: after its intent was recorded and before
its outcome is.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

from loom import EffectContext, FlowContext, Loom
from tests.functions.apps import HOLD_LIMIT_S, record

app = Loom("fault-tests")


async def _released() -> None:
    where = Path(os.environ["LOOM_TEST_DIR"])
    deadline = time.monotonic() + HOLD_LIMIT_S
    while not (where / "release").exists():
        if time.monotonic() > deadline:
            raise TimeoutError("release file never came")
        await asyncio.sleep(0.01)


@app.effect("x.reserve")
async def reserve(ctx: EffectContext, item: str) -> str:
    """An idempotent effect, held until released."""
    record(ctx)
    await _released()
    return f"reserved {item}"


@app.effect("x.charge", idempotent=False)
async def charge(ctx: EffectContext, amount: int) -> dict[str, Any]:
    """A non-idempotent effect, held until released."""
    record(ctx)
    await _released()
    return {"charge_id": f"ch_{ctx.idempotency_key}", "amount": amount}


@app.flow("reserve")
async def reserve_flow(ctx: FlowContext, item: str) -> dict[str, Any]:
    """One idempotent step."""
    return {"reserved": await ctx.execute(reserve, item)}


@app.flow("charge")
async def charge_flow(ctx: FlowContext, amount: int) -> dict[str, Any]:
    """One non-idempotent step."""
    return {"receipt": await ctx.execute(charge, amount)}
