"""Attempts count across execute calls: a retry made after a durable backoff (the worker
sleeps no longer than ``max_inline_backoff``; a longer backoff ends the call and a timer
brings the step back) counts exactly as an inline one, in ``EffectCompleted.attempts`` /
``EffectFailed.attempts``, in the meter, and against ``budgets`` (checked when a step
starts: a step begun runs its retry policy out, in either mode)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from loom import EffectContext, FlowContext, Loom, Retry
from loom import events as ev
from loom.kernel.decide import Decision, write
from loom.runtime import Runtime
from loom.store.base import EventStore
from loom.wire import ExecutionPackage, ExecutionResult

CALLS: dict[str, int] = {}


def make_app() -> Loom:
    app = Loom("attempts")

    @app.effect("flaky", retry=Retry(max_attempts=3, initial_interval=0.01))
    async def flaky(ctx: EffectContext, fail_times: int) -> str:
        CALLS[ctx.idempotency_key] = CALLS.get(ctx.idempotency_key, 0) + 1
        if CALLS[ctx.idempotency_key] <= fail_times:
            raise RuntimeError(f"attempt {ctx.attempt} failed")
        return f"ok after {ctx.attempt}"

    @app.flow("steps")
    async def steps(ctx: FlowContext, fails: list[int]) -> list[Any]:
        out: list[Any] = []
        for fail_times in fails:
            try:
                out.append(await ctx.execute(flaky, fail_times))
            except Exception as exc:  # a step that failed for good: noted, the flow goes on
                out.append(type(exc).__name__)
        return out

    return app


async def _run(store: EventStore, durable: bool, fails: list[int], **start: Any) -> Any:
    """Run to the end; with ``durable``, every backoff is a timer and the clock skips it."""
    now = [time.time()]
    rt = Runtime(
        make_app(), store, clock=lambda: now[0], max_inline_backoff=0.0 if durable else 60.0
    )
    result: ExecutionResult = await rt.start("steps", fails, execution_id="e", **start)
    for _ in range(20):
        if result.status != "suspended":
            break
        now[0] += 120.0  # past any backoff: the timer is due
        result = await rt.execute(ExecutionPackage(execution_id="e"))
    history = await rt.history("e")
    outcomes = [
        (e.type, e.attempts)  # type: ignore[attr-defined]
        for e in history
        if e.type in ("EffectCompleted", "EffectFailed")
    ]
    state = await rt.load_state("e")
    return result, outcomes, state.meter.attempts, sum(CALLS.values())


@pytest.mark.parametrize("durable", [False, True], ids=["inline", "durable"])
async def test_every_attempt_is_counted_whatever_the_backoff(store: EventStore, durable: bool):
    CALLS.clear()
    result, outcomes, metered, invoked = await _run(store, durable, [2, 5])
    assert result.status == "completed"
    assert result.output == ["ok after 3", "EffectFailedError"]
    assert outcomes == [("EffectCompleted", 3), ("EffectFailed", 3)]
    assert metered == invoked == 6


@pytest.mark.parametrize("durable", [False, True], ids=["inline", "durable"])
async def test_a_budget_of_attempts_holds_whatever_the_backoff(store: EventStore, durable: bool):
    CALLS.clear()
    result, _, metered, invoked = await _run(store, durable, [2, 2, 2], budgets={"max_attempts": 4})
    assert (result.status, result.error["code"]) == ("failed", "budget_exceeded")  # type: ignore[index]
    assert metered == invoked == 6  # two steps of three attempts; the third never starts


async def test_a_not_performed_verdict_runs_the_effect_again_whatever_its_retry_policy(
    store: EventStore,
):
    """``Retry(max_attempts=1)``, the usual policy of a charge: an attempt that went in
    doubt and was declared ``not_performed`` never ran, so the step runs again (attempt 2),
    rather than failing as if its only attempt had been spent."""
    app = Loom("verdicts")
    calls: list[int] = []

    @app.effect("charge", idempotent=False, retry=Retry(max_attempts=1))
    async def charge(ctx: EffectContext, _: None) -> str:
        calls.append(ctx.attempt)
        return f"charged on attempt {ctx.attempt}"

    @app.flow("pay")
    async def pay(ctx: FlowContext, _: None) -> str:
        return await ctx.execute(charge, None)

    rt = Runtime(app, store)
    await rt.start("pay", None, execution_id="v", run=False)
    state = await rt.load_state("v")
    started = ev.EffectStarted(step_id="1", effect="charge", idempotency_key="v:1")
    await write(rt, state, lambda _: Decision([started]))  # a worker wrote it, then died
    parked = await rt.execute(ExecutionPackage(execution_id="v"))
    assert parked.status == "in_doubt" and calls == []
    done = await rt.verdict("v", "1", "not_performed")
    assert (done.status, done.output) == ("completed", "charged on attempt 2")
    assert calls == [2]
    outcome = [e for e in await rt.history("v") if e.type == "EffectCompleted"]
    assert [e.attempts for e in outcome] == [2]  # type: ignore[attr-defined]
