"""A small Loom app for the HTTP worker tests (``LOOM_APP=tests.functions.apps:app``).

Effects append ``{idempotency_key} {effect}`` to ``$LOOM_TEST_DIR/calls.log`` so a test can
count invocations across processes (an ``O_APPEND`` write of one short line is atomic).
``held`` waits until ``$LOOM_TEST_DIR/release`` exists, so a test controls how long the
execution stays claimed.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

from loom import EffectContext, FlowContext, GateTimeoutError, Loom

app = Loom("http-tests")

HOLD_LIMIT_S = 30.0


def _dir() -> Path | None:
    raw = os.environ.get("LOOM_TEST_DIR")
    return Path(raw) if raw else None


def record(ctx: EffectContext) -> None:
    """Note one invocation of an effect in the side file."""
    where = _dir()
    if where is not None:
        with (where / "calls.log").open("a") as fh:
            fh.write(f"{ctx.idempotency_key} {ctx.effect}\n")


def calls(where: Path) -> list[str]:
    """Every invocation recorded so far, as ``"{key} {effect}"`` lines."""
    path = where / "calls.log"
    return path.read_text().splitlines() if path.exists() else []


@app.effect("t.double")
async def double(ctx: EffectContext, n: int) -> int:
    """Twice ``n``."""
    record(ctx)
    return 2 * n


@app.effect("t.greet")
async def greet(ctx: EffectContext, name: str) -> str:
    """A greeting."""
    record(ctx)
    return f"hello {name}"


@app.effect("t.hold")
async def hold(ctx: EffectContext, value: Any) -> str:
    """Return once the release file exists (polled: it is written by another process)."""
    record(ctx)
    where = _dir()
    deadline = time.monotonic() + HOLD_LIMIT_S
    while where is not None and not (where / "release").exists():
        if time.monotonic() > deadline:
            raise TimeoutError("release file never came")
        await asyncio.sleep(0.01)
    return "released"


@app.effect("t.charge", idempotent=False)
async def charge(ctx: EffectContext, amount: int) -> dict[str, Any]:
    """A non-idempotent effect: a crash after its intent record parks the step in doubt."""
    record(ctx)
    return {"charge_id": f"ch_{ctx.idempotency_key}", "amount": amount}


@app.flow("echo")
async def echo(ctx: FlowContext, value: dict[str, Any]) -> dict[str, Any]:
    """Straight through: one effect, then done."""
    n = await ctx.execute(double, int(value.get("n", 1)))
    return {"echo": value, "doubled": n}


@app.flow("gated")
async def gated(ctx: FlowContext, value: dict[str, Any]) -> dict[str, Any]:
    """An effect, a gate on ``go`` keyed by the execution id, then two effects."""
    n = await ctx.execute(double, int(value.get("n", 1)))
    payload = await ctx.suspend(on="go", correlation_key=f"{ctx.execution_id}:go")
    greeting = await ctx.execute(greet, str((payload or {}).get("name", "nobody")))
    m = await ctx.execute(double, n)
    return {"greeting": greeting, "n": n, "m": m}


@app.flow("held")
async def held(ctx: FlowContext, value: Any) -> dict[str, Any]:
    """Stays claimed in ``t.hold`` until the test writes the release file."""
    first = await ctx.execute(hold, value)
    second = await ctx.execute(double, 21)
    return {"first": first, "second": second}


@app.flow("pay")
async def pay(ctx: FlowContext, amount: int) -> dict[str, Any]:
    """One non-idempotent charge, then done."""
    receipt = await ctx.execute(charge, amount)
    return {"receipt": receipt}


@app.flow("versioned")
async def versioned_v1(ctx: FlowContext, value: Any) -> str:
    """Version 1 of a flow registered in two versions: waits on ``go``."""
    await ctx.suspend(on="go", correlation_key=f"{ctx.execution_id}:go")
    return "v1"


@app.flow("versioned", version=2)
async def versioned_v2(ctx: FlowContext, value: Any) -> str:
    """Version 2: waits on ``go`` too, answers differently."""
    await ctx.suspend(on="go", correlation_key=f"{ctx.execution_id}:go")
    return "v2"


@app.flow("refundable")
async def refundable(ctx: FlowContext, amount: int) -> str:
    """A charge, then a wait on ``ship``; a cancel refunds the charge (a compensation)."""
    receipt = await ctx.execute(charge, amount)
    try:
        await ctx.suspend(on="ship", correlation_key=ctx.execution_id)
        return "shipped"
    except asyncio.CancelledError:
        await ctx.execute(greet, f"refund {receipt['charge_id']}")
        raise


@app.flow("family")
async def family(ctx: FlowContext, value: dict[str, Any]) -> dict[str, Any]:
    """A parent: ``echo`` as a child flow."""
    return {"child": await ctx.execute_flow(echo, value)}


@app.flow("mailbox")
async def mailbox(ctx: FlowContext, n: int) -> list[Any]:
    """Takes ``n`` messages on ``cmd``, publishing how many it has under ``count``."""
    got: list[Any] = []
    for _ in range(n):
        got.append(await ctx.recv("cmd"))
        await ctx.set_event("count", len(got))
    return got


@app.flow("twice")
async def twice(ctx: FlowContext, n: int) -> int:
    """Continues as new once, then returns the run's input."""
    if n == 0:
        await ctx.continue_as_new(1)
    return n


@app.flow("deadline")
async def deadline(ctx: FlowContext, seconds: float) -> Any:
    """A gate on ``answer`` keyed by the execution id, with a timeout of ``seconds``."""
    try:
        return await ctx.suspend(on="answer", correlation_key=ctx.execution_id, timeout=seconds)
    except GateTimeoutError:
        return "timed out"


@app.flow("cart")
async def cart(ctx: FlowContext, _: None) -> list[str]:
    """Takes items by update (``add``, refused when empty; ``checkout`` ends it), answers
    the query ``items``, and streams each item added on ``added``."""
    items: list[str] = []
    done = asyncio.Event()

    async def add(item: str) -> int:
        items.append(item)
        await ctx.write_stream("added", item)
        return len(items)

    def nonempty(item: str) -> None:
        if not item.strip():
            raise ValueError("an item has a name")

    def checkout() -> int:
        done.set()
        return len(items)

    ctx.set_update_handler("add", add, validator=nonempty)
    ctx.set_update_handler("checkout", checkout)
    ctx.set_query_handler("items", lambda: list(items))
    await done.wait()
    await ctx.all_handlers_finished()
    await ctx.close_stream("added")
    return items
