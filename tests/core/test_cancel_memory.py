"""Cancelled sessions are freed: what the cancellation keeps per session (its doomed
branches, its replayed hand-over) holds the session, so it is dropped when the call ends.
Before, every execute call that met a cancel stayed in memory for the process's life."""

from __future__ import annotations

import asyncio
import gc

from loom import EffectContext, FlowContext, Loom
from loom.kernel import cancellation
from loom.testing import LoomTestEnv


def make_app() -> Loom:
    app = Loom("leak")

    @app.effect("undo")
    async def undo(ctx: EffectContext, n: int) -> int:
        return n

    @app.flow("branches")
    async def branches(ctx: FlowContext, _: None) -> int:
        async def branch(i: int) -> None:
            await ctx.suspend("go", f"k{i}")

        try:
            await asyncio.gather(branch(1), branch(2))
        except asyncio.CancelledError:
            await ctx.execute(undo, 1)  # cleanup after gathered branches were cut off
            raise
        return 0

    return app


async def test_cancelled_sessions_are_not_kept() -> None:
    env = LoomTestEnv(make_app())  # (every execute call also replays: sessions twice over)
    for i in range(20):
        await env.start("branches", None, execution_id=f"x{i}")
        assert (await env.runtime.cancel(f"x{i}", "stop")).status == "cancelled"
    gc.collect()
    assert len(cancellation._SESSIONS) == 0  # pyright: ignore[reportPrivateUsage]
