"""Apps of the flow-control tests. ``Calls`` counts what each effect ran, and ``bug`` makes
``transform`` fail, as a bug fixed after the fact would."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from loom import EffectContext, FlowContext, Loom, Retry


@dataclass
class Calls:
    """What the effects of :func:`pipeline_app` ran, and whether the bug is in."""

    ran: list[str] = field(default_factory=list[str])
    bug: bool = False


def pipeline_app(calls: Calls) -> Loom:
    """``pipeline``: fetch (1), now (2), transform (3), a gate (4), store (5)."""
    app = Loom("pipeline")

    @app.effect("fetch")
    async def fetch(ctx: EffectContext, value: int) -> int:
        calls.ran.append("fetch")
        return value * 10

    @app.effect("transform", retry=Retry(max_attempts=1))
    async def transform(ctx: EffectContext, value: int) -> int:
        calls.ran.append("transform")
        if calls.bug:
            raise ValueError("transform has a bug")
        return value + 1

    @app.effect("store")
    async def store(ctx: EffectContext, value: Any) -> Any:
        calls.ran.append("store")
        return {"stored": value}

    @app.flow("pipeline")
    async def pipeline(ctx: FlowContext, value: int) -> Any:
        fetched = await ctx.execute(fetch, value)
        when = ctx.now().timestamp()
        changed = await ctx.execute(transform, fetched)
        approval = await ctx.suspend("approval", f"order-{value}")
        saved = await ctx.execute(store, [changed, approval])
        return {"when": when, "saved": saved}

    @app.flow("boom")
    async def boom(ctx: FlowContext, value: int) -> Any:
        fetched = await ctx.execute(fetch, value)
        if calls.bug:
            raise RuntimeError("the flow's own code has a bug")
        return fetched

    @app.flow("nap")
    async def nap(ctx: FlowContext, value: int) -> Any:
        await ctx.sleep(60)
        return await ctx.execute(fetch, value)

    return app


CALLS = Calls()
app = pipeline_app(CALLS)
"""The app the CLI and HTTP tests load by reference (they toggle ``CALLS.bug`` in-process)."""
