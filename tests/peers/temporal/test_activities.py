"""Temporal's activity scenarios (``tests/worker/test_activity.py``), ported to Loom effects.

Retry policies (maximum attempts, backoff, non-retryable error types), timeouts, the attempt
number and a stable idempotency key, errors raised into the workflow, bad input. SQLite on
disk, a fake clock, every execute call checked by a replay.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from pydantic import BaseModel

from loom import EffectContext, EffectFailedError, FlowContext, Loom, Retry
from loom.errors import InvalidPayloadError
from tests.peers.temporal.harness import EnvFactory


class Order(BaseModel):
    order_id: str
    qty: int


class Receipt(BaseModel):
    order_id: str
    total: int


class Declined(Exception):
    """A business error that retrying cannot fix."""


class CardExpired(Declined):
    """A subclass of a non-retryable type."""


def activities_app(log: list[tuple[str, int, str]]) -> Loom:
    app = Loom("temporal-activities")
    fails_left: dict[str, int] = {}

    @app.effect("flaky", retry=Retry(max_attempts=5, initial_interval=0, jitter=0))
    async def flaky(ctx: EffectContext, failures: int) -> str:
        log.append((ctx.effect, ctx.attempt, ctx.idempotency_key))
        left = fails_left.setdefault(ctx.idempotency_key, failures)
        if left > 0:
            fails_left[ctx.idempotency_key] = left - 1
            raise ConnectionError(f"transient, {left} left")
        return f"ok after {ctx.attempt}"

    @app.effect("always_fails", retry=Retry(max_attempts=3, initial_interval=0))
    def always_fails(ctx: EffectContext, _: None) -> None:
        log.append((ctx.effect, ctx.attempt, ctx.idempotency_key))
        raise RuntimeError(f"attempt {ctx.attempt} broke")

    @app.effect(
        "declines", retry=Retry(max_attempts=5, initial_interval=0, non_retryable=(Declined,))
    )
    def declines(ctx: EffectContext, kind: str) -> None:
        log.append((ctx.effect, ctx.attempt, ctx.idempotency_key))
        raise CardExpired("expired") if kind == "sub" else Declined("declined")

    @app.effect("slow", timeout=0.2, retry=Retry(max_attempts=2, initial_interval=0))
    async def slow(ctx: EffectContext, seconds: float) -> str:
        log.append((ctx.effect, ctx.attempt, ctx.idempotency_key))
        await asyncio.sleep(seconds)
        return "finished"

    @app.effect("slow_sync", timeout=0.2, retry=Retry(max_attempts=1))
    def slow_sync(ctx: EffectContext, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not ctx.cancelled:
            time.sleep(0.01)
        log.append((ctx.effect, ctx.attempt, "saw cancel" if ctx.cancelled else "ran out"))
        return ctx.cancelled

    @app.effect("long_backoff", retry=Retry(max_attempts=3, initial_interval=60, jitter=0))
    def long_backoff(ctx: EffectContext, _: None) -> int:
        log.append((ctx.effect, ctx.attempt, ctx.idempotency_key))
        if ctx.attempt < 3:
            raise ConnectionError("down")
        return ctx.attempt

    @app.effect("price")
    def price(ctx: EffectContext, order: Order) -> Receipt:
        return Receipt(order_id=order.order_id, total=order.qty * 250)

    @app.effect("self_cancels", retry=Retry(max_attempts=2, initial_interval=0))
    async def self_cancels(ctx: EffectContext, _: None) -> str:
        log.append((ctx.effect, ctx.attempt, ctx.idempotency_key))
        if ctx.attempt == 1:
            raise asyncio.CancelledError()  # e.g. a library's inner task was cancelled
        return "second attempt"

    @app.effect("chained", retry=Retry(max_attempts=1))
    def chained(ctx: EffectContext, _: None) -> None:
        try:
            {}["missing"]
        except KeyError as exc:
            raise ValueError("lookup failed") from exc

    @app.flow("call")
    async def call(ctx: FlowContext, args: list[Any]) -> Any:
        name, value = args
        return await ctx.execute(name, value)

    @app.flow("catch")
    async def catch(ctx: FlowContext, args: list[Any]) -> Any:
        name, value = args
        try:
            return await ctx.execute(name, value)
        except EffectFailedError as exc:
            return {"message": str(exc), **exc.details}

    @app.flow("typed")
    async def typed(ctx: FlowContext, order: Order) -> Receipt:
        receipt = await ctx.execute(price, order)
        assert isinstance(receipt, Receipt)
        return receipt

    return app


async def test_an_activity_is_retried_until_it_succeeds_with_the_same_key(
    make_env: EnvFactory,
):
    """Temporal: test_activity_retry — fails twice, succeeds on attempt 3;
    ``activity.info().attempt`` counts. Loom: ``ctx.attempt`` counts, every attempt carries
    the same idempotency key, and each attempt after the first is recorded."""
    log: list[tuple[str, int, str]] = []
    env = make_env(activities_app(log))
    r = await env.start("call", ["flaky", 2], execution_id="r1")
    assert (r.status, r.output) == ("completed", "ok after 3")
    assert [(a, k) for _, a, k in log] == [(1, "r1:1"), (2, "r1:1"), (3, "r1:1")]
    assert (await env.types("r1")).count("EffectRetried") == 2


async def test_retries_exhausted_raise_the_last_error_into_the_workflow(make_env: EnvFactory):
    """Temporal: when maximum attempts run out the workflow gets an ActivityError whose
    cause is the last ApplicationError. Loom: ``EffectFailedError`` with the last
    attempt's message and type, after exactly ``max_attempts`` attempts."""
    log: list[tuple[str, int, str]] = []
    env = make_env(activities_app(log))
    r = await env.start("catch", ["always_fails", None], execution_id="x1")
    assert r.status == "completed"
    assert r.output["error_type"] == "RuntimeError"
    assert "attempt 3 broke" in r.output["message"]
    assert [a for _, a, _ in log] == [1, 2, 3]


async def test_an_uncaught_activity_failure_fails_the_workflow(make_env: EnvFactory):
    """Temporal: an activity failure the workflow does not catch fails the workflow. Loom:
    the execution ends ``failed`` and its error names the effect's failure."""
    env = make_env(activities_app([]))
    r = await env.start("call", ["always_fails", None], execution_id="x2")
    assert r.status == "failed"
    assert r.error is not None and "attempt 3 broke" in r.error["message"]


@pytest.mark.parametrize("kind", ["exact", "sub"])
async def test_a_non_retryable_error_type_fails_at_once(make_env: EnvFactory, kind: str):
    """Temporal: ``RetryPolicy(non_retryable_error_types=[...])`` stops retrying at once
    (test_activity_non_retryable_error). Loom: ``Retry(non_retryable=(Declined,))``, which
    also covers subclasses (an ``isinstance`` check: Temporal matches the type name)."""
    log: list[tuple[str, int, str]] = []
    env = make_env(activities_app(log))
    r = await env.start("catch", ["declines", kind], execution_id=f"nr-{kind}")
    assert r.output["error_type"] == ("CardExpired" if kind == "sub" else "Declined")
    assert [a for _, a, _ in log] == [1]
    assert "EffectRetried" not in await env.types(f"nr-{kind}")


async def test_an_activity_over_its_timeout_is_cancelled_and_retried(make_env: EnvFactory):
    """Temporal: start_to_close_timeout cancels the attempt and retries it; once attempts
    run out the workflow gets a TimeoutError cause. Loom: each attempt bounded by the
    effect's ``timeout=``, error code ``timeout``."""
    log: list[tuple[str, int, str]] = []
    env = make_env(activities_app(log))
    began = time.monotonic()
    r = await env.start("catch", ["slow", 5], execution_id="to1")
    assert time.monotonic() - began < 4  # neither attempt ran its five seconds
    assert (r.output["error_code"], r.output["error_type"]) == ("timeout", "TimeoutError")
    assert [a for _, a, _ in log] == [1, 2]


async def test_an_activity_within_its_timeout_is_not_cut(make_env: EnvFactory):
    """Temporal: an activity that returns before its timeout returns its result."""
    env = make_env(activities_app([]))
    r = await env.start("call", ["slow", 0.01], execution_id="to2")
    assert r.output == "finished"


async def test_a_sync_activity_sees_its_cancellation(make_env: EnvFactory):
    """Temporal: a sync (threaded) activity learns of its cancellation through
    ``activity.is_cancelled()`` and may stop. Loom: ``ctx.cancelled`` turns true once the
    attempt's timeout passed; the step fails with code ``timeout``."""
    log: list[tuple[str, int, str]] = []
    env = make_env(activities_app(log))
    r = await env.start("catch", ["slow_sync", 3], execution_id="ts")
    assert r.output["error_code"] == "timeout"
    for _ in range(100):  # the thread stops on its own shortly after
        if log:
            break
        await asyncio.sleep(0.02)
    assert log == [("slow_sync", 1, "saw cancel")]


async def test_a_long_backoff_is_a_durable_timer(make_env: EnvFactory):
    """Temporal: the retry backoff is a server-side timer; no worker waits for it. Loom: a
    backoff longer than ``max_inline_backoff`` ends the execute call; the next attempt runs
    when the clock reaches it, with the attempt count kept."""
    log: list[tuple[str, int, str]] = []
    env = make_env(activities_app(log))
    r = await env.start("call", ["long_backoff", None], execution_id="bo")
    assert r.status == "suspended" and [a for _, a, _ in log] == [1]
    assert await env.skip(30) == []
    [r] = await env.skip(31)
    assert r.status == "suspended" and [a for _, a, _ in log] == [1, 2]
    [r] = await env.skip(121)  # the second wait doubled
    assert (r.status, r.output) == ("completed", 3)
    assert [a for _, a, _ in log] == [1, 2, 3]


async def test_typed_inputs_and_outputs_round_trip(make_env: EnvFactory):
    """Temporal: dataclass/pydantic activity arguments and results are converted back to
    their types in the workflow. Loom: the effect's output comes back as its model, live
    and on replay."""
    env = make_env(activities_app([]))
    r = await env.start("typed", {"order_id": "o-1", "qty": 3}, execution_id="ty")
    assert r.output == {"order_id": "o-1", "total": 750}


async def test_bad_workflow_input_is_refused_before_anything_runs(make_env: EnvFactory):
    """Temporal: test_workflow_fail_on_bad_input — an argument that cannot be converted
    fails. Loom: the start is refused with ``InvalidPayloadError`` and nothing is written."""
    env = make_env(activities_app([]))
    with pytest.raises(InvalidPayloadError):
        await env.start("typed", {"order_id": "o-1", "qty": "many"}, execution_id="bad")
    assert await env.runtime.list() == []


async def test_an_unknown_activity_fails_the_workflow_clearly(make_env: EnvFactory):
    """Temporal: an activity type no worker registered keeps failing the activity task
    ('not registered'). Loom: the flow fails with ``unknown_effect`` naming it."""
    env = make_env(activities_app([]))
    r = await env.start("call", ["no.such.effect", None], execution_id="ue")
    assert r.status == "failed"
    assert r.error is not None and r.error["code"] == "unknown_effect"
    assert "no.such.effect" in r.error["message"]


async def test_a_cancelled_error_raised_by_the_activity_itself_is_a_failed_attempt(
    make_env: EnvFactory,
):
    """Temporal: an activity that raises ``CancelledError`` without a cancel request is a
    failed attempt, retried under its policy. Loom used to read it as the flow being
    cancelled: the execute call ended ``running`` with nothing recorded. Now the attempt
    fails (an error naming the ``CancelledError``) and the retry runs."""
    log: list[tuple[str, int, str]] = []
    env = make_env(activities_app(log))
    r = await env.start("call", ["self_cancels", None], execution_id="sc")
    assert (r.status, r.output) == ("completed", "second attempt")
    assert [a for _, a, _ in log] == [1, 2]
    retried = [e for e in await env.history("sc") if e.type == "EffectRetried"]
    assert len(retried) == 1 and "CancelledError" in retried[0].error.message  # type: ignore[attr-defined]


async def test_an_activity_error_keeps_its_type_and_message_not_its_cause(
    make_env: EnvFactory,
):
    """Temporal: an ApplicationError raised ``from`` another keeps the cause chain in the
    failure (test_activity_failure_with_cause). Loom records the raised exception's type and
    message only (``ErrorInfo``: code, type, message); the cause is not carried — a
    deliberate, smaller error model."""
    env = make_env(activities_app([]))
    r = await env.start("catch", ["chained", None], execution_id="ch")
    assert (r.output["error_type"], r.output["error_code"]) == ("ValueError", "error")
    assert "lookup failed" in r.output["message"]
