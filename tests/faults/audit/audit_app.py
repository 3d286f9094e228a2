"""The app the fault audit runs in real ``loom serve`` and CLI processes.

Every invocation of an effect appends ``key attempt`` to the ledger file named by
``LOOM_TEST_SIDE_FILE`` (fsync'd) before doing anything else, so a test counts real
invocations across process deaths. The effects then misbehave in the ways the audit tries:
``sys.exit`` and ``KeyboardInterrupt`` inside an effect (sync, in its worker thread, and
async), a ``BaseException`` subclass that is no ``Exception``, and a sync effect that hangs
past its timeout.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time

from loom import EffectContext, FlowContext, Loom, Retry

app = Loom("audit")


class Escape(BaseException):
    """A ``BaseException`` that is neither a signal of the engine nor an ``Exception``."""


def record(ctx: EffectContext) -> None:
    """Append this invocation to the ledger, durably."""
    with open(os.environ["LOOM_TEST_SIDE_FILE"], "a", encoding="utf-8") as side:
        side.write(f"{ctx.idempotency_key} {ctx.attempt}\n")
        side.flush()
        os.fsync(side.fileno())


def _misbehave(how: str) -> None:
    if how == "slow":  # a moment, so that racing workers overlap
        time.sleep(0.5)
    if how == "exit":
        sys.exit(3)
    if how == "interrupt":
        raise KeyboardInterrupt
    if how == "escape":
        raise Escape("an effect raised a BaseException")


@app.effect("audit.sync_once", idempotent=False)
def sync_once(ctx: EffectContext, how: str) -> str:
    record(ctx)
    _misbehave(how)
    return f"done:{ctx.idempotency_key}"


@app.effect("audit.async_once", idempotent=False)
async def async_once(ctx: EffectContext, how: str) -> str:
    record(ctx)
    _misbehave(how)
    return f"done:{ctx.idempotency_key}"


@app.effect("audit.sync_idempotent")
def sync_idempotent(ctx: EffectContext, how: str) -> str:
    record(ctx)
    _misbehave(how)
    return f"done:{ctx.idempotency_key}"


@app.effect("audit.hangs", timeout=0.5, retry=Retry(max_attempts=1))
def hangs(ctx: EffectContext, seconds: float) -> str:
    record(ctx)
    time.sleep(seconds)  # a blocking call a thread cannot be made to leave
    return "late"


@app.flow("audit.once")
async def flow_once(ctx: FlowContext, args: dict[str, str]) -> str:
    """One non-idempotent effect, misbehaving as ``args["how"]`` says, then a second step."""
    effect = sync_once if args.get("kind") == "sync" else async_once
    try:
        first = await ctx.execute(effect, args["how"])
    except Exception as exc:  # the engine's signals and a BaseException must not land here
        return f"caught {type(exc).__name__}"
    return first


@app.flow("audit.idempotent")
async def flow_idempotent(ctx: FlowContext, how: str) -> str:
    """One idempotent sync effect, misbehaving as ``how`` says."""
    return await ctx.execute(sync_idempotent, how)


@app.flow("audit.hangs")
async def flow_hangs(ctx: FlowContext, seconds: float) -> str:
    """A sync effect that blocks past its timeout; the flow handles the timeout."""
    try:
        return await ctx.execute(hangs, seconds)
    except Exception as exc:
        return f"gave up: {type(exc).__name__}"


@app.flow("audit.flow_exits")
async def flow_exits(ctx: FlowContext, how: str) -> str:
    """Flow code itself raising ``SystemExit``/``KeyboardInterrupt`` after a recorded step."""
    first = await ctx.execute(sync_idempotent, "ok")
    _misbehave(how)
    return first


@app.flow("audit.gate")
async def flow_gate(ctx: FlowContext, value: int) -> int:
    """A recorded step, then a gate: an execution that waits with a log behind it."""
    first = await ctx.execute(sync_idempotent, "ok")
    got = await ctx.suspend(on="go", correlation_key=f"{ctx.execution_id}:go")
    return len(first) + value + int(got or 0)


def unrecordable(kind: str) -> object:
    """A value the effect or flow returns that JSON cannot hold, and what it fails with."""
    if kind == "bytes":
        return b"\xff\xfe"  # not UTF-8: UnicodeDecodeError
    if kind == "big":  # exact JSON, but over the log's inline limit (256 KiB)
        return "x" * (300 * 1024)
    nested: list[object] = []
    for _ in range(5000):  # deeper than the serializer goes: ValueError
        nested = [nested]
    return nested


@app.effect("audit.charge", idempotent=False, retry=Retry(max_attempts=3, initial_interval=0.01))
async def charge(ctx: EffectContext, kind: str) -> object:
    record(ctx)
    return unrecordable(kind)


@app.effect("audit.charge_sync", idempotent=False, retry=Retry(max_attempts=3), timeout=10)
def charge_sync(ctx: EffectContext, kind: str) -> object:
    record(ctx)
    return unrecordable(kind)


@app.effect("audit.big_idempotent", retry=Retry(max_attempts=3, initial_interval=0.01))
def big_idempotent(ctx: EffectContext, kind: str) -> object:
    record(ctx)
    return unrecordable(kind)


@app.flow("audit.unrecordable_output")
async def flow_unrecordable_output(ctx: FlowContext, args: dict[str, str]) -> str:
    """A non-idempotent effect (with retries) whose output cannot be recorded."""
    effect = {"sync": charge_sync, "idempotent": big_idempotent}.get(args["effect"], charge)
    try:
        await ctx.execute(effect, args["kind"])
    except Exception as exc:
        return f"caught {type(exc).__name__}"
    return "recorded"


@app.flow("audit.length")
async def flow_length(ctx: FlowContext, text: str) -> int:
    """A child flow: the length of its input."""
    return len(text)


@app.flow("audit.big_values")
async def flow_big_values(ctx: FlowContext, where: str) -> str:
    """A value the flow records itself over the inline limit: published, or a child's input."""
    try:
        if where == "event":
            await ctx.set_event("big", unrecordable("big"))
        else:
            await ctx.execute_flow(flow_length, unrecordable("big"))
    except Exception as exc:
        return f"caught {type(exc).__name__}"
    return "recorded"


@app.flow("audit.unrecordable_result")
async def flow_unrecordable_result(ctx: FlowContext, kind: str) -> object:
    """A flow whose own result cannot be recorded."""
    return unrecordable(kind)


@app.effect("audit.quick", timeout=5, retry=Retry(max_attempts=1))
def quick(ctx: EffectContext, _: None) -> str:
    record(ctx)
    return "quick"


@app.flow("audit.quick")
async def flow_quick(ctx: FlowContext, _: None) -> str:
    """A sync effect with a timeout that returns at once."""
    try:
        return await ctx.execute(quick, None)
    except Exception as exc:
        return f"gave up: {type(exc).__name__}"


class Unprintable(Exception):
    """An exception whose message cannot be read: its ``__str__`` raises."""

    def __str__(self) -> str:
        raise RuntimeError("no message")


@app.effect("audit.fails", idempotent=False, retry=Retry(max_attempts=2, initial_interval=0.01))
async def fails(ctx: EffectContext, how: str) -> str:
    record(ctx)
    if how == "unprintable":
        raise Unprintable()
    raise ValueError("x" * int(how))  # an error carrying a whole response body, say


@app.flow("audit.fails")
async def flow_fails(ctx: FlowContext, how: str) -> str:
    """A non-idempotent effect that fails; the flow handles its failure."""
    try:
        await ctx.execute(fails, how)
    except Exception as exc:
        return f"caught {type(exc).__name__}"
    return "returned"


@app.flow("audit.raises")
async def flow_raises(ctx: FlowContext, how: str) -> str:
    """A flow that raises an exception of the same kinds itself."""
    if how == "unprintable":
        raise Unprintable()
    raise ValueError("y" * int(how))


@app.effect("audit.self_cancels", retry=Retry(max_attempts=2, initial_interval=0.01))
async def self_cancels(ctx: EffectContext, _: None) -> str:
    record(ctx)
    raise asyncio.CancelledError  # a library's own cancelled call, say: nobody cancelled us


@app.flow("audit.self_cancels")
async def flow_self_cancels(ctx: FlowContext, _: None) -> str:
    """An effect that raises ``CancelledError`` though nothing cancelled it."""
    try:
        return await ctx.execute(self_cancels, None)
    except Exception as exc:
        return f"caught {type(exc).__name__}"
