"""The app the peer-engine ports run: flows shaped like the peer suites' own workflows.

``LEDGER`` records every effect invocation as ``"{effect}:{idempotency_key}"`` (in this
process); with ``LOOM_TEST_SIDE_FILE`` set (a child process), each invocation is also
appended to that file, so a test can count what a killed process ran.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from loom import EffectContext, FlowContext, Loom, Retry
from loom.errors import EffectFailedError, GateTimeoutError, MessageTimeoutError

LEDGER: list[str] = []
FLAKY: dict[str, int] = {}
"""How many more times ``flaky`` fails for a key (set by the test)."""


class TerminalError(Exception):
    """What Restate calls a terminal error and Inngest a ``NonRetriableError``."""


def _note(ctx: EffectContext, what: str) -> None:
    line = f"{what}:{ctx.idempotency_key}"
    LEDGER.append(line)
    side = os.environ.get("LOOM_TEST_SIDE_FILE")
    if side:
        with open(side, "a", encoding="utf-8") as out:
            out.write(line + "\n")


app = Loom("peers")
app.queue("one", concurrency=1)
app.queue("two", concurrency=2)
app.queue("slow", rate_per_second=1)
app.queue("keyed", concurrency=10)


@app.effect("echo")
async def echo(ctx: EffectContext, value: Any) -> Any:
    _note(ctx, "echo")
    return value


@app.effect("charge", idempotent=False)
async def charge(ctx: EffectContext, amount: int) -> str:
    _note(ctx, "charge")
    return f"ch-{ctx.idempotency_key}-{amount}"


@app.effect("flaky", retry=Retry(max_attempts=4, initial_interval=0.01, jitter=0.0))
async def flaky(ctx: EffectContext, key: str) -> int:
    _note(ctx, "flaky")
    if FLAKY.get(key, 0) > 0:
        FLAKY[key] -= 1
        raise RuntimeError(f"flaky {key} attempt {ctx.attempt}")
    return ctx.attempt


@app.effect(
    "terminal",
    retry=Retry(max_attempts=5, initial_interval=0.01, non_retryable=(TerminalError,)),
)
async def terminal(ctx: EffectContext, reason: str) -> None:
    _note(ctx, "terminal")
    raise TerminalError(reason)


@app.effect("sleepy", retry=Retry(max_attempts=1), timeout=0.2)
async def sleepy(ctx: EffectContext, seconds: float) -> str:
    _note(ctx, "sleepy")
    await asyncio.sleep(seconds)
    return "woke"


@app.effect("slow_work", retry=Retry(max_attempts=1))
async def slow_work(ctx: EffectContext, seconds: float) -> str:
    _note(ctx, "slow_work")
    await asyncio.sleep(seconds)
    return ctx.execution_id


@app.flow("steps")
async def steps(ctx: FlowContext, n: int) -> list[Any]:
    return [await ctx.execute(echo, i) for i in range(n)]


@app.flow("pay")
async def pay(ctx: FlowContext, amount: int) -> str:
    return await ctx.execute(charge, amount)


@app.flow("retrying")
async def retrying(ctx: FlowContext, key: str) -> int:
    return await ctx.execute(flaky, key)


@app.flow("catch_failure")
async def catch_failure(ctx: FlowContext, key: str) -> dict[str, Any]:
    try:
        return {"attempt": await ctx.execute(flaky, key)}
    except EffectFailedError as exc:
        return {"failed": exc.effect, "type": exc.error_type, "code": exc.error_code}


@app.flow("terminal_flow")
async def terminal_flow(ctx: FlowContext, reason: str) -> str:
    await ctx.execute(terminal, reason)
    return "unreachable"


@app.flow("timed_step")
async def timed_step(ctx: FlowContext, seconds: float) -> str:
    try:
        return await ctx.execute(sleepy, seconds)
    except EffectFailedError as exc:
        return exc.error_code


@app.flow("raises")
async def raises(ctx: FlowContext, message: str) -> None:
    await ctx.execute(echo, message)
    raise ValueError(message)


@app.flow("sleeper")
async def sleeper(ctx: FlowContext, seconds: float) -> dict[str, float]:
    before = ctx.now().timestamp()
    await ctx.execute(echo, "before")
    await ctx.sleep(seconds)
    after = ctx.now().timestamp()
    await ctx.execute(echo, "after")
    return {"slept": after - before}


@app.flow("receiver")
async def receiver(ctx: FlowContext, spec: dict[str, Any]) -> Any:
    """Takes ``spec["n"]`` messages on ``spec["topic"]``; ``None`` for one that timed out."""
    got: list[Any] = []
    for _ in range(spec.get("n", 1)):
        try:
            got.append(await ctx.recv(spec.get("topic", "t"), timeout=spec.get("timeout")))
        except MessageTimeoutError:
            got.append(None)
    return got


@app.flow("topics")
async def topics(ctx: FlowContext, _: None) -> list[Any]:
    return [await ctx.recv("b"), await ctx.recv("a")]


@app.flow("sender")
async def sender(ctx: FlowContext, spec: dict[str, Any]) -> str:
    for payload in spec["payloads"]:
        await ctx.send(spec["to"], spec.get("topic", "t"), payload)
    return "sent"


@app.flow("publisher")
async def publisher(ctx: FlowContext, n: int) -> str:
    for i in range(n):
        await ctx.set_event("progress", i)
    await ctx.set_event("stage", "waiting")
    await ctx.recv("go")
    await ctx.set_event("stage", "done")
    return "ok"


@app.flow("awakeable")
async def awakeable(ctx: FlowContext, timeout: float | None) -> Any:
    try:
        return {"value": await ctx.suspend("callback", f"{ctx.execution_id}:cb", timeout)}
    except GateTimeoutError:
        return {"timed_out": True}


@app.flow("race")
async def race(ctx: FlowContext, seconds: float) -> str:
    """Inngest's ``waitForEvent`` against a sleep, as a race of two awaits."""
    waiter = asyncio.ensure_future(ctx.suspend("signal", ctx.execution_id))
    timer = asyncio.ensure_future(ctx.sleep(seconds))
    done, _ = await asyncio.wait({waiter, timer}, return_when=asyncio.FIRST_COMPLETED)
    if waiter in done:
        timer.cancel()
        return f"signal:{waiter.result()}"
    waiter.cancel()
    return "timer"


@app.flow("child")
async def child(ctx: FlowContext, value: int) -> int:
    return await ctx.execute(echo, value * 2)


@app.flow("failing_child")
async def failing_child(ctx: FlowContext, value: int) -> int:
    raise ValueError(f"child {value} failed")


@app.flow("fan_out")
async def fan_out(ctx: FlowContext, values: list[int]) -> int:
    handles = [await ctx.start_flow(child, v) for v in values]
    return sum(await asyncio.gather(*(h.result() for h in handles)))


@app.flow("parent_of_failure")
async def parent_of_failure(ctx: FlowContext, value: int) -> dict[str, Any]:
    from loom.errors import ChildFlowFailedError

    try:
        return {"out": await ctx.execute_flow(failing_child, value)}
    except ChildFlowFailedError as exc:
        return {"status": exc.status, "message": str(exc)}


@app.flow("saga")
async def saga(ctx: FlowContext, items: list[str]) -> list[str]:
    done: list[str] = []
    try:
        for item in items:
            done.append(await ctx.execute(echo, f"book {item}"))
        await ctx.suspend("confirm", ctx.execution_id)
        return done
    except asyncio.CancelledError:
        for item in reversed(items[: len(done)]):
            await ctx.execute(echo, f"undo {item}")
        raise


@app.flow("waits_forever")
async def waits_forever(ctx: FlowContext, _: None) -> None:
    await ctx.execute(echo, "started")
    await ctx.suspend("never", ctx.execution_id)


@app.flow("deadline", timeout=60)
async def deadline(ctx: FlowContext, _: None) -> str:
    await ctx.suspend("approval", ctx.execution_id)
    return "approved"


@app.flow("queued")
async def queued(ctx: FlowContext, seconds: float) -> str:
    return await ctx.execute(slow_work, seconds)


@app.flow("decisions")
async def decisions(ctx: FlowContext, _: None) -> list[Any]:
    first = [str(ctx.uuid()), ctx.random(), ctx.now().timestamp()]
    await ctx.execute(echo, "between")
    await ctx.suspend("go", ctx.execution_id)
    return [*first, str(ctx.uuid())]


@app.flow("counter")
async def counter(ctx: FlowContext, total: int) -> int:
    for _ in range(2):
        total += await ctx.recv("add")
    if total > 100:
        return total
    await ctx.continue_as_new(total)


@app.flow("tree")
async def tree(ctx: FlowContext, _: None) -> None:
    await ctx.start_flow(waits_forever, None)
    await ctx.suspend("never", ctx.execution_id)


@app.flow("parallel")
async def parallel(ctx: FlowContext, values: list[int]) -> list[int]:
    return list(await asyncio.gather(*(ctx.execute(echo, v) for v in values)))


@app.flow("wait_event")
async def wait_event(ctx: FlowContext, timeout: float) -> Any:
    """Inngest ``step.waitForEvent(event, timeout)``: the event's data, or None."""
    await ctx.execute(echo, "before")
    try:
        data = await ctx.recv("order.paid", timeout=timeout)
    except MessageTimeoutError:
        data = None
    await ctx.execute(echo, "after")
    return data


@app.flow("cancel_on")
async def cancel_on(ctx: FlowContext, seconds: float) -> str:
    """Inngest ``cancelOn``: a "cancel" message ends the run before its sleep is over."""
    try:
        await ctx.recv("cancel", timeout=seconds)
    except MessageTimeoutError:
        return await ctx.execute(echo, "reminder sent")
    return "cancelled by event"


@app.flow("map_children")
async def map_children(ctx: FlowContext, values: list[int]) -> list[int]:
    """AWS durable ``context.map`` over child contexts: one child execution per item."""
    return list(await asyncio.gather(*(ctx.execute_flow(child, v) for v in values)))


@app.flow("wait_for_condition")
async def wait_for_condition(ctx: FlowContext, target: int) -> int:
    """AWS durable ``waitForCondition``: poll a step, waiting between checks."""
    polls = 0
    while True:
        polls += 1
        seen = await ctx.execute(echo, polls)
        if seen >= target:
            return polls
        await ctx.sleep(10)


@app.flow("named_steps")
async def named_steps(ctx: FlowContext, _: None) -> list[str]:
    first = await ctx.execute(echo, "a")
    asyncio_sleep_done = await ctx.execute(echo, "b")
    return [first, asyncio_sleep_done]


@app.flow("submitter")
async def submitter(ctx: FlowContext, timeout: float) -> Any:
    """AWS durable ``waitForCallback(submitter, {timeout})``: publish the callback id for an
    outside system, then wait for it to call back."""
    callback_id = f"{ctx.execution_id}:cb:{ctx.uuid()}"
    await ctx.set_event("callback_id", callback_id)
    try:
        return await ctx.suspend("callback", callback_id, timeout)
    except GateTimeoutError:
        return "callback timed out"


@app.effect("big")
async def big(ctx: EffectContext, size: int) -> str:
    _note(ctx, "big")
    return "x" * size


@app.flow("big_step")
async def big_step(ctx: FlowContext, size: int) -> int:
    value = await ctx.execute(big, size)
    await ctx.suspend("go", ctx.execution_id)
    return len(value)


SLOW_FAILURES: dict[str, int] = {}
"""How many more times ``slow_retry`` fails for an execution (set by the test)."""


@app.effect("slow_retry", retry=Retry(max_attempts=3, initial_interval=60, jitter=0.0))
async def slow_retry(ctx: EffectContext, _: None) -> int:
    _note(ctx, "slow_retry")
    if SLOW_FAILURES.get(ctx.execution_id, 0) > 0:
        SLOW_FAILURES[ctx.execution_id] -= 1
        raise RuntimeError(f"attempt {ctx.attempt} failed")
    return ctx.attempt


@app.flow("backoff")
async def backoff(ctx: FlowContext, _: None) -> int:
    return await ctx.execute(slow_retry, None)


@app.flow("slow_cleanup")
async def slow_cleanup(ctx: FlowContext, _: None) -> str:
    try:
        await ctx.suspend("never", ctx.execution_id)
    except asyncio.CancelledError:
        await ctx.sleep(10)  # a durable wait inside the cleanup
        await ctx.execute(echo, "cleaned")
        raise
    return "unreachable"


@app.flow("two_recv")
async def two_recv(ctx: FlowContext, _: None) -> list[Any]:
    return list(await asyncio.gather(ctx.recv("t"), ctx.recv("t")))


@app.flow("awaits_child")
async def awaits_child(ctx: FlowContext, _: None) -> dict[str, Any]:
    from loom.errors import ChildFlowFailedError

    try:
        return {"out": await ctx.execute_flow(waits_forever, None)}
    except ChildFlowFailedError as exc:
        return {"status": exc.status}


@app.flow("timed_parent", timeout=10)
async def timed_parent(ctx: FlowContext, _: None) -> None:
    await ctx.execute_flow(waits_forever, None)


app.schedule("*/5 * * * *", flow="steps", input=1, name="every5")


@app.flow("busy_receiver")
async def busy_receiver(ctx: FlowContext, seconds: float) -> list[Any]:
    """Receives while its steps keep it busy: messages arrive during a step."""
    got: list[Any] = []
    for _ in range(2):
        await ctx.execute(slow_work, seconds)
        got.append(await ctx.recv("t"))
    return got


@app.effect("not_json")
async def not_json(ctx: EffectContext, _: None) -> float:
    _note(ctx, "not_json")
    return float("nan")


@app.flow("bad_output")
async def bad_output(ctx: FlowContext, _: None) -> str:
    try:
        await ctx.execute(not_json, None)
    except EffectFailedError as exc:
        return exc.error_code
    return "stored"


@app.flow("two_slow")
async def two_slow(ctx: FlowContext, seconds: float) -> str:
    await ctx.execute(slow_work, seconds)
    await ctx.execute(slow_work, seconds)
    return "done"


@app.flow("two_gates")
async def two_gates(ctx: FlowContext, _: None) -> list[Any]:
    """Two awakeables awaited together (Restate ``CombineablePromise.all``)."""
    return list(
        await asyncio.gather(
            ctx.suspend("left", ctx.execution_id), ctx.suspend("right", ctx.execution_id)
        )
    )


@app.flow("fire_and_forget")
async def fire_and_forget(ctx: FlowContext, on_cancel: str) -> str:
    """Restate's one-way ``ctx.send`` to another handler, Inngest's ``step.sendEvent``."""
    handle = await ctx.start_flow(waits_forever, None, on_cancel=on_cancel)
    del handle
    return "sent"


@app.flow("invoke_with_timeout")
async def invoke_with_timeout(ctx: FlowContext, seconds: float) -> str:
    """Inngest ``step.invoke(..., timeout)``: give up on a child that takes too long."""
    try:
        return await asyncio.wait_for(ctx.execute_flow(waits_forever, None), seconds)
    except TimeoutError:
        return "gave up"


@app.flow("parallel_waits")
async def parallel_waits(ctx: FlowContext, seconds: list[float]) -> list[str]:
    """AWS durable ``parallel`` branches that each ``wait`` their own duration."""

    async def branch(wait: float) -> str:
        await ctx.sleep(wait)
        return await ctx.execute(echo, f"after {wait:g}")

    return list(await asyncio.gather(*(branch(s) for s in seconds)))


@app.flow("sleep_until")
async def sleep_until(ctx: FlowContext, at: float) -> str:
    """Inngest ``step.sleepUntil(date)``: a wait to an absolute time (past: none)."""
    await ctx.sleep(at - ctx.now().timestamp())
    return await ctx.execute(echo, "woke")


@app.flow("entity")
async def entity(ctx: FlowContext, total: int) -> None:
    """A Restate virtual object's state as an entity: published values outlive each run."""
    await ctx.set_event("total", total)
    if total == 0:
        await ctx.set_event("opened", True)
    total += await ctx.recv("add")
    await ctx.continue_as_new(total)
