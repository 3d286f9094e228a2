"""The effect delivery contract: keys, retries, timeouts, capabilities,
budgets, metering, intent records and verdicts."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from loom import EffectContext, EffectFailedError, FlowContext, Loom, Retry
from loom.errors import UnknownExecutionError, VerdictError
from loom.testing import LoomTestEnv
from loom.wire import ExecutionPackage


class Flaky(Exception):
    pass


class Fatal(Exception):
    pass


def make_env(log: list[tuple[str, int]], fail_times: int = 0) -> LoomTestEnv:
    app = Loom("d")

    @app.effect("flaky", retry=Retry(max_attempts=4, initial_interval=0.001, jitter=0))
    async def flaky(ctx: EffectContext, n: int) -> int:
        log.append((ctx.idempotency_key, ctx.attempt))
        if len([x for x in log if x[0] == ctx.idempotency_key]) <= fail_times:
            raise Flaky(f"try {ctx.attempt}")
        return n * 2

    @app.effect(
        "fatal", retry=Retry(max_attempts=5, initial_interval=0.001, non_retryable=(Fatal,))
    )
    async def fatal(ctx: EffectContext, _: None) -> None:
        log.append((ctx.idempotency_key, ctx.attempt))
        raise Fatal("no point retrying")

    @app.effect("slow", timeout=0.05, retry=Retry(max_attempts=2, initial_interval=0.001))
    async def slow(ctx: EffectContext, _: None) -> None:
        log.append((ctx.idempotency_key, ctx.attempt))
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            log.append(("cancelled", ctx.attempt))
            raise

    @app.effect("pay", idempotent=False, requires={"payments"})
    async def pay(ctx: EffectContext, amount: int) -> dict[str, Any]:
        log.append((ctx.idempotency_key, ctx.attempt))
        return {"charged": amount}

    @app.flow("one")
    async def one(ctx: FlowContext, effect: str) -> Any:
        arg = {"flaky": 21, "fatal": None, "slow": None, "pay": 5}[effect]
        try:
            return await ctx.execute(effect, arg)
        except EffectFailedError as exc:
            return {"failed": exc.error_code, "type": exc.error_type}

    @app.flow("many")
    async def many(ctx: FlowContext, n: int) -> int:
        for i in range(n):
            await ctx.execute(flaky, i)
        return n

    return LoomTestEnv(app)


async def test_retries_reuse_the_key_and_count_attempts():
    log: list[tuple[str, int]] = []
    env = make_env(log, fail_times=2)
    result = await env.start("one", "flaky", execution_id="r1")
    assert result.output == 42
    assert log == [("r1:1", 1), ("r1:1", 2), ("r1:1", 3)]
    [done] = [e for e in await env.history("r1") if e.type == "EffectCompleted"]
    assert done.attempts == 3
    assert result.meter["attempts"] == 3 and result.meter["effect_calls"] == 1


async def test_exhausted_retries_raise_a_typed_error_into_the_flow():
    log: list[tuple[str, int]] = []
    env = make_env(log, fail_times=99)
    result = await env.start("one", "flaky", execution_id="r2")
    assert result.output == {"failed": "error", "type": "Flaky"}
    assert len(log) == 4
    assert [e.type for e in await env.history("r2")].count("EffectFailed") == 1


async def test_non_retryable_errors_fail_at_once():
    log: list[tuple[str, int]] = []
    env = make_env(log)
    result = await env.start("one", "fatal", execution_id="r3")
    assert result.output == {"failed": "error", "type": "Fatal"}
    assert log == [("r3:1", 1)]


async def test_timeouts_cancel_the_attempt():
    log: list[tuple[str, int]] = []
    env = make_env(log)
    result = await env.start("one", "slow", execution_id="r4")
    assert result.output == {"failed": "timeout", "type": "TimeoutError"}
    assert log == [("r4:1", 1), ("cancelled", 1), ("r4:1", 2), ("cancelled", 2)]


async def test_missing_capability_fails_without_invoking():
    log: list[tuple[str, int]] = []
    env = make_env(log)
    result = await env.start("one", "pay", execution_id="c1")
    assert result.output == {"failed": "unauthorized", "type": "CapabilityError"}
    assert log == []
    ok = await env.start("one", "pay", execution_id="c2", capabilities={"payments"})
    assert ok.output == {"charged": 5}
    types = [e.type for e in await env.history("c2")]
    assert types.index("EffectStarted") < types.index("EffectCompleted")  # intent first


async def test_budget_stops_the_execution_with_a_clear_error():
    log: list[tuple[str, int]] = []
    env = make_env(log)
    result = await env.start("many", 5, execution_id="b1", budgets={"max_effect_calls": 3})
    assert result.status == "failed"
    assert result.error and result.error["code"] == "budget_exceeded"
    assert "max_effect_calls" in result.error["message"]
    assert len(log) == 3


async def test_metering_counts_calls_attempts_time_and_bytes():
    log: list[tuple[str, int]] = []
    env = make_env(log)
    result = await env.start("many", 4, execution_id="m1")
    meter = result.meter
    assert (meter["effect_calls"], meter["attempts"]) == (4, 4)
    assert meter["bytes_stored"] == len("0246")  # JSON sizes of the outputs 0, 2, 4, 6
    assert meter["effect_seconds"] >= 0


async def _park_in_doubt(env: LoomTestEnv, eid: str) -> None:
    """Leave an intent record with no outcome, as a crash would, then rebuild."""
    from loom import events as ev
    from loom.store.base import AppendRequest

    await env.runtime.start("one", "pay", execution_id=eid, capabilities={"payments"}, run=False)
    intent = ev.EffectStarted(
        seq=2, step_id="1", effect="pay", idempotency_key=f"{eid}:1", at=env.clock.now
    )
    await env.store.append(AppendRequest(eid, 1, [intent]))
    result = await env.runtime.execute(ExecutionPackage(execution_id=eid))
    assert result.status == "in_doubt"
    assert [(d.step_id, d.effect, d.idempotency_key) for d in result.in_doubt] == [
        ("1", "pay", f"{eid}:1")
    ]


async def test_in_doubt_is_never_reinvoked_until_a_verdict():
    log: list[tuple[str, int]] = []
    env = make_env(log)
    await _park_in_doubt(env, "v1")
    again = await env.runtime.execute(ExecutionPackage(execution_id="v1"))
    assert again.status == "in_doubt" and log == []
    result = await env.runtime.verdict("v1", "1", "performed", output={"charged": 5}, by="ana")
    assert (result.status, result.output) == ("completed", {"charged": 5})
    assert log == []
    [verdict] = [e for e in await env.history("v1") if e.type == "EffectVerdict"]
    assert verdict.by == "ana"


async def test_not_performed_invokes_again_with_the_same_key():
    log: list[tuple[str, int]] = []
    env = make_env(log)
    await _park_in_doubt(env, "v2")
    result = await env.runtime.verdict("v2", "1", "not_performed")
    assert result.output == {"charged": 5}
    assert log == [("v2:1", 2)]


async def test_failed_verdict_raises_into_the_flow():
    log: list[tuple[str, int]] = []
    env = make_env(log)
    await _park_in_doubt(env, "v3")
    result = await env.runtime.verdict("v3", "1", "failed", error="card declined")
    assert result.output == {"failed": "verdict", "type": "OperatorVerdict"}
    assert log == []


async def test_bad_verdicts_are_refused_and_append_nothing():
    log: list[tuple[str, int]] = []
    env = make_env(log)
    await _park_in_doubt(env, "v4")
    count = len(await env.history("v4"))
    with pytest.raises(UnknownExecutionError):
        await env.runtime.verdict("nope", "1", "performed", output={})
    with pytest.raises(VerdictError, match="not in doubt"):
        await env.runtime.verdict("v4", "7", "performed", output={})
    with pytest.raises(VerdictError, match="output"):
        await env.runtime.verdict("v4", "1", "performed", output="not a dict")
    with pytest.raises(VerdictError, match="unknown verdict"):
        await env.runtime.verdict("v4", "1", "maybe")
    assert len(await env.history("v4")) == count
    await env.start("one", "flaky", execution_id="v5")
    with pytest.raises(VerdictError, match="not in doubt"):
        await env.runtime.verdict("v5", "1", "performed", output=1)
