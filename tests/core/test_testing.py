"""``loom.testing``: always-replay catches non-deterministic flows; time skipping."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

from loom import EffectContext, FlowContext, Loom
from loom.errors import NondeterminismError
from loom.testing import LoomTestEnv, replay


def make_app() -> Loom:
    app = Loom("t")

    @app.effect("a")
    async def a(ctx: EffectContext, _: None) -> str:
        return "a"

    @app.effect("b")
    async def b(ctx: EffectContext, _: None) -> str:
        return "b"

    @app.flow("coin")
    async def coin(ctx: FlowContext, _: None) -> str:
        # Wrong on purpose: a flow must take randomness from ctx.random().
        return await ctx.execute("a" if random.random() < 0.5 else "b", None)

    @app.flow("ctx_coin")
    async def ctx_coin(ctx: FlowContext, _: None) -> str:
        return await ctx.execute("a" if ctx.random() < 0.5 else "b", None)

    @app.flow("nap")
    async def nap(ctx: FlowContext, days: int) -> str:
        await ctx.sleep(timedelta(days=days))
        return "rested"

    return app


async def test_always_replay_catches_a_non_deterministic_flow():
    env = LoomTestEnv(make_app())
    with pytest.raises(NondeterminismError):
        for i in range(40):  # each run replays; some replay flips the coin the other way
            await env.start("coin", None, execution_id=f"c{i}")


async def test_ctx_randomness_replays_the_same_way():
    env = LoomTestEnv(make_app())
    outputs = {(await env.start("ctx_coin", None, execution_id=f"c{i}")).output for i in range(40)}
    assert outputs == {"a", "b"}  # both branches taken, every run replayed without complaint


async def test_replay_without_always_replay_is_a_separate_check():
    env = LoomTestEnv(make_app(), always_replay=False)
    history = None
    for i in range(40):
        await env.start("coin", None, execution_id=f"c{i}")
        try:
            await replay(env.app, await env.history(f"c{i}"))
        except NondeterminismError:
            history = i
            break
    assert history is not None


async def test_time_skipping_fires_timers_of_days_in_no_time():
    env = LoomTestEnv(make_app())
    started = await env.start("nap", 3, execution_id="n")
    assert started.status == "suspended" and started.wake_at is not None
    assert await env.skip(timedelta(days=2)) == []
    [done] = await env.skip(timedelta(days=1, seconds=1))
    assert (done.status, done.output) == ("completed", "rested")
