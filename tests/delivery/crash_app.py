"""The app the crash matrix runs in a child process.

Every invocation of ``side.effect`` appends ``key attempt`` to the file named by
``LOOM_TEST_SIDE_FILE`` before returning, so the test counts real invocations across process
deaths. ``LOOM_TEST_DIE_IN_EFFECT=1`` makes the effect SIGKILL its own process after writing
that line: the effect ran, and its worker died inside it. ``side.flaky`` always fails, and
with ``LOOM_TEST_DIE_AT_ATTEMPT=n`` kills its worker during attempt ``n``.
"""

from __future__ import annotations

import asyncio
import os
import signal

from loom import EffectContext, FlowContext, Loom, Retry

app = Loom("crash")


def _record(ctx: EffectContext) -> str:
    with open(os.environ["LOOM_TEST_SIDE_FILE"], "a", encoding="utf-8") as side:
        side.write(f"{ctx.idempotency_key} {ctx.attempt}\n")
        side.flush()
        os.fsync(side.fileno())
    if os.environ.get("LOOM_TEST_DIE_IN_EFFECT") == "1":
        os.kill(os.getpid(), signal.SIGKILL)
    return f"done:{ctx.idempotency_key}"


@app.effect("side.idempotent")
async def idempotent(ctx: EffectContext, _: None) -> str:
    return _record(ctx)


@app.effect("side.once", idempotent=False)
async def once(ctx: EffectContext, _: None) -> str:
    return _record(ctx)


@app.effect("tail")
async def tail(ctx: EffectContext, value: str) -> str:
    return value.upper()


@app.flow("crash.idempotent")
async def flow_idempotent(ctx: FlowContext, _: None) -> str:
    first = await ctx.execute(idempotent, None)
    return await ctx.execute(tail, first)


@app.flow("crash.once")
async def flow_once(ctx: FlowContext, _: None) -> str:
    first = await ctx.execute(once, None)
    return await ctx.execute(tail, first)


@app.effect("side.flaky", retry=Retry(max_attempts=5, initial_interval=0.01, max_interval=0.01))
def flaky(ctx: EffectContext, _: None) -> str:
    with open(os.environ["LOOM_TEST_SIDE_FILE"], "a", encoding="utf-8") as side:
        side.write(f"{ctx.idempotency_key} {ctx.attempt}\n")
    if os.environ.get("LOOM_TEST_DIE_AT_ATTEMPT") == str(ctx.attempt):
        os.kill(os.getpid(), signal.SIGKILL)
    raise RuntimeError(f"attempt {ctx.attempt} failed")


@app.flow("crash.flaky")
async def flow_flaky(ctx: FlowContext, _: None) -> str:
    try:
        return await ctx.execute(flaky, None)
    except Exception as exc:
        return f"gave up: {exc}"


@app.flow("crash.batched", durability="batched")
async def flow_batched(ctx: FlowContext, _: None) -> str:
    """Two idempotent steps kept unforced, then a non-idempotent one (a durable point)."""
    await ctx.execute(idempotent, None)
    await ctx.execute(idempotent, None)
    third = await ctx.execute(once, None)
    return await ctx.execute(tail, third)


@app.flow("crash.held")
async def flow_held(ctx: FlowContext, _: None) -> str:
    """Strict: two idempotent steps, each held until the next effect, a non-idempotent one,
    and an idempotent tail held until the end."""
    await ctx.execute(idempotent, None)
    await ctx.execute(idempotent, None)
    third = await ctx.execute(once, None)
    return await ctx.execute(tail, third)


@app.flow("crash.saga")
async def flow_saga(ctx: FlowContext, _: None) -> str:
    """A booking (step 1), a wait (2); a cancel compensates with steps 3 and 4."""
    await ctx.execute(once, None)
    try:
        await ctx.suspend("confirm", ctx.execution_id)
        return "confirmed"
    except asyncio.CancelledError:
        await ctx.execute(idempotent, None)
        await ctx.execute(once, None)
        raise


@app.flow("crash.kid")
async def flow_kid(ctx: FlowContext, n: int) -> str:
    """A child flow: one idempotent effect."""
    return await ctx.execute(idempotent, None)


@app.flow("crash.parent")
async def flow_parent(ctx: FlowContext, _: None) -> list[str]:
    """Two child flows, one after the other."""
    return [await ctx.execute_flow(flow_kid, n) for n in (1, 2)]
