"""The pre-deploy replay check over executions that are cleaning up after a cancel or that
wait on child flows: unchanged code passes, changed code is caught."""

from __future__ import annotations

import asyncio
from typing import Any

from loom import EffectContext, FlowContext, Loom
from loom.ops.replay_check import Checked, ReplayChecker
from loom.runtime import Runtime
from loom.store.memory import InMemoryEventStore
from loom.testing import FakeClock


def make_app(cleanup_effect: str = "undo") -> Loom:
    app = Loom("rc")

    @app.effect("do")
    def do(ctx: EffectContext, value: Any) -> str:
        return "done"

    @app.effect("undo")
    def undo(ctx: EffectContext, value: Any) -> str:
        return "undone"

    @app.flow("kid")
    async def kid(ctx: FlowContext, key: str) -> Any:
        return await ctx.suspend("go", key)

    @app.flow("saga")
    async def saga(ctx: FlowContext, _: None) -> str:
        await ctx.execute(do, None)
        try:
            await ctx.suspend("confirm", ctx.execution_id)
            return "confirmed"
        except asyncio.CancelledError:
            await ctx.execute(cleanup_effect, None)
            await ctx.suspend("refund.settled", ctx.execution_id)  # cleanup waits
            raise

    @app.flow("parent")
    async def parent(ctx: FlowContext, _: None) -> Any:
        background = await ctx.start_flow(kid, "a", on_cancel="abandon")
        first = await ctx.execute_flow(kid, "b")
        return [first, await background]

    return app


async def seeded() -> InMemoryEventStore:
    store = InMemoryEventStore()
    rt = Runtime(make_app(), store, clock=FakeClock())
    await rt.start("saga", None, execution_id="s")
    await rt.cancel("s", "stop")  # suspended in its cleanup
    await rt.start("parent", None, execution_id="p")  # waits on its children
    return store


async def check(app: Loom, store: InMemoryEventStore) -> dict[str, Any]:
    seen: list[Checked] = []
    await ReplayChecker(app, store).run(seen.append)
    return {c.summary.execution_id: c.divergence for c in seen}


async def test_unchanged_code_passes_cleanups_and_parents():
    store = await seeded()
    found = await check(make_app(), store)
    assert {"s", "p", "p.child.1", "p.child.2"} <= set(found)
    assert all(d is None for d in found.values()), found


async def test_a_changed_cleanup_is_caught():
    store = await seeded()
    found = await check(make_app(cleanup_effect="do"), store)
    divergence = found["s"]
    assert divergence is not None and divergence.step_id == "3"
