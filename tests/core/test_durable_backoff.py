"""A long retry backoff ends the execute call and schedules the next attempt durably.

``Retry(initial_interval=60)`` must not keep a worker (a billed request) sleeping for a
minute: the call suspends the execution with a timer at the backoff's end, and the next
execute call (here: the test env's clock skip, which runs what fell due) makes the attempt.
"""

from __future__ import annotations

import asyncio
from typing import Any

from loom import EffectContext, FlowContext, Loom, Retry
from loom.testing import LoomTestEnv


def make_app(attempts: list[int], fail_until: int, interval: float) -> Loom:
    app = Loom("backoff")
    policy = Retry(
        max_attempts=4, initial_interval=interval, backoff=2.0, max_interval=600, jitter=0.0
    )

    @app.effect("flaky", retry=policy)
    async def flaky(ctx: EffectContext, _: None) -> str:
        attempts.append(ctx.attempt)
        if ctx.attempt < fail_until:
            raise RuntimeError(f"attempt {ctx.attempt} failed")
        return f"ok at {ctx.attempt}"

    @app.flow("call")
    async def call(ctx: FlowContext, _: None) -> Any:
        return await ctx.execute(flaky, None)

    return app


async def test_a_long_backoff_suspends_and_a_timer_runs_the_next_attempt():
    attempts: list[int] = []
    env = LoomTestEnv(make_app(attempts, fail_until=3, interval=60))
    async with asyncio.timeout(20):  # inline, the two backoffs would sleep for 3 minutes
        first = await env.start("call", None, execution_id="e")
    assert first.status == "suspended" and attempts == [1]
    assert [w.wake_at for w in first.waiting_on] == [env.clock.now + 60]
    assert await env.skip(59) == []  # not due yet: nothing runs
    second = (await env.skip(1))[0]
    assert second.status == "suspended" and attempts == [1, 2]
    assert [w.wake_at for w in second.waiting_on] == [env.clock.now + 120]
    third = (await env.skip(120))[0]
    assert (third.status, third.output) == ("completed", "ok at 3")
    assert attempts == [1, 2, 3]
    retried = [
        (e.attempt, e.not_before) for e in await env.history("e") if e.type == "EffectRetried"
    ]
    assert [a for a, _ in retried] == [2, 2, 3, 3]  # scheduled, then started: each durable
    assert retried[0][1] is not None and retried[1][1] is None


async def test_a_short_backoff_stays_inline():
    attempts: list[int] = []
    env = LoomTestEnv(make_app(attempts, fail_until=3, interval=0.01))
    result = await env.start("call", None, execution_id="e")
    assert (result.status, result.output) == ("completed", "ok at 3")
    assert attempts == [1, 2, 3]


async def test_a_long_first_interval_is_not_capped_by_a_default_maximum():
    """``Retry(initial_interval=60)`` as written: the default cap grows with the interval."""
    assert Retry(initial_interval=60).interval_cap == 6000
    assert Retry().interval_cap == 10  # the old default for the default interval
    app = Loom("plain-retry")
    attempts: list[int] = []

    @app.effect("flaky", retry=Retry(initial_interval=60, jitter=0.0))
    async def flaky(ctx: EffectContext, _: None) -> str:
        attempts.append(ctx.attempt)
        if ctx.attempt < 2:
            raise RuntimeError("first attempt fails")
        return "ok"

    @app.flow("call")
    async def call(ctx: FlowContext, _: None) -> Any:
        return await ctx.execute(flaky, None)

    env = LoomTestEnv(app)
    async with asyncio.timeout(20):
        first = await env.start("call", None, execution_id="p")
    assert first.status == "suspended"
    assert [w.wake_at for w in first.waiting_on] == [env.clock.now + 60]
    done = (await env.skip(60))[0]
    assert (done.status, done.output, attempts) == ("completed", "ok", [1, 2])
