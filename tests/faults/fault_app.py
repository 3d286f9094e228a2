"""The app the fault suite runs in a real ``loom serve`` or CLI process.

Every invocation of a ``side.*`` effect appends ``key attempt`` to the ledger file named by
``LOOM_TEST_SIDE_FILE`` (fsync'd), so the test counts real invocations. Then, if
``LOOM_TEST_GATE_DIR`` is set, the effect creates ``<dir>/<step>.ran`` and waits for
``<dir>/<step>.go``: the test injects its fault between the effect and the recording of its
outcome, which is where a store failure would lose an outcome. A ``big`` value makes the
output large enough to go to the blob store.

The flow catches ``Exception`` around the effect on purpose: a store failure must never be
something it can catch.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

from loom import EffectContext, EffectFailedError, FlowContext, Loom

app = Loom("faults")
BIG = 300 * 1024  # over the default 256 KiB blob threshold


def _record_and_wait(key: str, attempt: int) -> None:
    with open(os.environ["LOOM_TEST_SIDE_FILE"], "a", encoding="utf-8") as side:
        side.write(f"{key} {attempt}\n")
        side.flush()
        os.fsync(side.fileno())
    gates = os.environ.get("LOOM_TEST_GATE_DIR")
    if gates:
        name = key.replace(":", "_")
        Path(gates, f"{name}.ran").touch()
        deadline = time.monotonic() + 60
        while not Path(gates, f"{name}.go").exists() and time.monotonic() < deadline:
            time.sleep(0.02)


async def _record(ctx: EffectContext, big: bool) -> str:
    await asyncio.to_thread(_record_and_wait, ctx.idempotency_key, ctx.attempt)
    return f"done:{ctx.idempotency_key}" + ("x" * BIG if big else "")


@app.effect("side.idempotent")
async def idempotent(ctx: EffectContext, big: bool) -> str:
    return await _record(ctx, big)


@app.effect("side.once", idempotent=False)
async def once(ctx: EffectContext, big: bool) -> str:
    return await _record(ctx, big)


@app.effect("tail")
async def tail(ctx: EffectContext, value: str) -> str:
    return value[:40].upper()


@app.flow("fault.catching")
async def catching(ctx: FlowContext, spec: dict[str, Any]) -> dict[str, Any]:
    try:
        first = await ctx.execute(spec["effect"], bool(spec.get("big")))
    except Exception as exc:  # the point: a store failure must never land here
        return {"caught": type(exc).__name__}
    return {"result": await ctx.execute(tail, first)}


@app.flow("fault.quick")
async def quick(ctx: FlowContext, text: str) -> str:
    """No side effect and no gate: an unrelated execution to read while a fault lasts."""
    return await ctx.execute(tail, text)


@app.effect("nap")
async def nap(ctx: EffectContext, seconds: float) -> float:
    await asyncio.sleep(seconds)
    return seconds


@app.flow("fault.slow")
async def slow(ctx: FlowContext, seconds: float) -> float:
    """A backlog item: takes ``seconds`` of effect time to finish."""
    return await ctx.execute(nap, seconds)


def _note(key: str, attempt: int) -> None:
    with open(os.environ["LOOM_TEST_SIDE_FILE"], "a", encoding="utf-8") as side:
        side.write(f"{key} {attempt}\n")


@app.effect("side.sized")
async def sized(ctx: EffectContext, n: int) -> str:
    """Returns ``n`` characters (noted in the ledger, no gate)."""
    await asyncio.to_thread(_note, ctx.idempotency_key, ctx.attempt)
    return "x" * n


@app.effect("side.sized_once", idempotent=False)
async def sized_once(ctx: EffectContext, n: int) -> str:
    """The same, not idempotent (its intent is recorded before it runs)."""
    await asyncio.to_thread(_note, ctx.idempotency_key, ctx.attempt)
    return "x" * n


@app.flow("fault.sized")
async def sized_flow(ctx: FlowContext, spec: dict[str, Any]) -> dict[str, Any]:
    """An effect output of ``spec["output"]`` characters, then a result of ``spec["result"]``."""
    try:
        out = await ctx.execute(spec.get("effect", "side.sized"), spec["output"])
    except EffectFailedError as exc:
        return {"failed": exc.error_code}
    return {"length": len(out), "pad": "y" * spec.get("result", 0)}
