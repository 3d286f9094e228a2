"""Cancellation and child flows together with messages and continue-as-new."""

from __future__ import annotations

import asyncio
from typing import Any

from loom import EffectContext, FlowContext, Loom
from loom.testing import LoomTestEnv
from loom.wire import ExecutionPackage


def make_app(log: list[str]) -> Loom:
    app = Loom("mix")

    @app.effect("note")
    def note(ctx: EffectContext, what: str) -> str:
        log.append(what)
        return what

    @app.flow("kid")
    async def kid(ctx: FlowContext, n: int) -> int:
        return n * 2

    @app.flow("looper")
    async def looper(ctx: FlowContext, run: int) -> list[Any]:
        doubled = await ctx.execute_flow(kid, run)
        if run < 2:
            await ctx.continue_as_new(run + 1)
        return [run, doubled]

    @app.flow("listener")
    async def listener(ctx: FlowContext, _: None) -> Any:
        try:
            return await ctx.recv("cmd")
        except asyncio.CancelledError:
            await ctx.execute(note, "listener cleaned up")
            raise

    return app


async def test_each_run_of_a_continued_parent_starts_its_own_child():
    env = LoomTestEnv(make_app([]))
    result = await env.start("looper", 1, execution_id="l")
    for _ in range(3):  # each run is its own execute call (what its dispatch makes)
        if result.status == "completed":
            break
        result = await env.runtime.execute(ExecutionPackage(execution_id="l"))
    assert (result.status, result.output) == ("completed", [2, 4])
    first = await env.runtime.result("l.child.1")
    second = await env.runtime.result("l#run2.child.1")
    assert (first.output, second.output) == (2, 4)


async def test_a_cancel_arrives_at_a_recv():
    log: list[str] = []
    env = LoomTestEnv(make_app(log))
    assert (await env.start("listener", None, execution_id="r")).status == "suspended"
    result = await env.runtime.cancel("r", "shutting down")
    assert result.status == "cancelled" and log == ["listener cleaned up"]
