"""The app a worker process runs, and dies in, during an ``asyncio.wait_for``.

``slow.once`` (non-idempotent) and ``slow.again`` (idempotent) append their idempotency key to
``LOOM_TEST_SIDE_FILE`` when invoked, sleep past the flow's deadline and, with
``LOOM_TEST_KILL_IN_EFFECT=1``, SIGKILL their own process before returning: the flow had
already timed out and moved on, and the worker died with the step unfinished.
"""

from __future__ import annotations

import asyncio
import os
import signal

from loom import EffectContext, FlowContext, Loom

app = Loom("timer-crash")


def _record(ctx: EffectContext) -> None:
    with open(os.environ["LOOM_TEST_SIDE_FILE"], "a", encoding="utf-8") as side:
        side.write(f"{ctx.idempotency_key}\n")


async def _slow(ctx: EffectContext) -> str:
    _record(ctx)
    await asyncio.sleep(0.8)
    if os.environ.get("LOOM_TEST_KILL_IN_EFFECT") == "1":
        os.kill(os.getpid(), signal.SIGKILL)
    return "charged"


@app.effect("slow.once", idempotent=False)
async def slow_once(ctx: EffectContext, _: None) -> str:
    return await _slow(ctx)


@app.effect("slow.again")
async def slow_again(ctx: EffectContext, _: None) -> str:
    return await _slow(ctx)


@app.effect("shout")
async def shout(ctx: EffectContext, value: str) -> str:
    return value.upper()


@app.flow("guarded")
async def guarded(ctx: FlowContext, effect: str) -> str:
    try:
        out = await asyncio.wait_for(ctx.execute(effect, None), 0.2)
    except TimeoutError:
        out = "timed out"
    return await ctx.execute(shout, out)
