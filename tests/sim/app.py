"""The simulated app: flows that use every primitive the invariants watch, and effects that
write to the ledger of the world that runs them.

Every effect is :meth:`Ledger.invoke <tests.sim.ledger.Ledger.invoke>`, told by its input
(a ``spec`` dict) how likely it is to fail, how long it takes, and which queue its
execution runs on. Flows catch the failures the workload provokes, so most executions end
``completed`` and the checks see long histories.

To add a flow: register it here with ``@app.flow``, start it from a workload
(:mod:`tests.sim.workloads`), and, if it promises something the generic invariants do not
cover, add an invariant (:mod:`tests.sim.invariants`).
"""

from __future__ import annotations

import asyncio
from typing import Any

from loom import Loom
from loom.app import Retry
from loom.errors import ChildFlowFailedError, EffectFailedError, GateTimeoutError, LoomError
from loom.kernel.context import EffectContext, FlowContext

Spec = dict[str, Any]

_WORLD: list[Any] = []  # the world running now (one run at a time per process)


def bind(world: Any) -> None:
    """Make ``world``'s ledger the one the effects write to."""
    _WORLD[:] = [world]


def unbind() -> None:
    """Forget the world of the run that ended."""
    _WORLD.clear()


def _ledger() -> Any:
    return _WORLD[0].ledger


app = Loom("sim")
app.queue("q1", concurrency=1, lease_ttl=15.0)
app.queue("q2", concurrency=2, lease_ttl=15.0)
app.queue("q3", concurrency=3, worker_concurrency=1, lease_ttl=15.0)

DURABLE = Retry(max_attempts=3, initial_interval=20.0, backoff=1.0, jitter=0.0)
"""Backoffs of 20 s: longer than the runtimes' inline limit, so each waits on a timer."""


@app.effect("sim.charge", idempotent=False, retry=Retry(max_attempts=1))
async def charge(ctx: EffectContext, spec: Spec) -> Any:
    """A payment: non-idempotent, never retried."""
    return await _ledger().invoke(ctx, spec, False)


@app.effect("sim.charge_retry", idempotent=False, retry=Retry(max_attempts=3, initial_interval=0.5))
async def charge_retry(ctx: EffectContext, spec: Spec) -> Any:
    """A non-idempotent call retried inline (each retry recorded before it runs)."""
    return await _ledger().invoke(ctx, spec, False)


@app.effect("sim.fetch", retry=Retry(max_attempts=4, initial_interval=0.2))
async def fetch(ctx: EffectContext, spec: Spec) -> Any:
    """An idempotent read, retried inline."""
    return await _ledger().invoke(ctx, spec, True)


@app.effect("sim.flaky", retry=DURABLE)
async def flaky(ctx: EffectContext, spec: Spec) -> Any:
    """An idempotent call whose retries wait on durable timers."""
    return await _ledger().invoke(ctx, spec, True)


@app.effect("sim.consume")
async def consume(ctx: EffectContext, spec: Spec) -> Any:
    """Takes delivery of something (a message, a child's result); returns ``spec['echo']``."""
    return await _ledger().invoke(ctx, spec, True)


def on(inp: Spec, **more: Any) -> Spec:
    """An effect spec for an execution started with ``inp``: its queue, its durations, and
    its own failure rate if it names one (a scenario's ``fail: 0``)."""
    spec = {"q": inp.get("q"), "p": inp.get("p"), "dur": inp.get("dur", 0.5), **more}
    for name in ("secs", "fail"):
        if name in inp:
            spec[name] = inp[name]
    return spec


async def step(ctx: FlowContext, effect: str, spec: Spec) -> Any:
    """``ctx.execute``, with a failure of the effect as ``None``."""
    try:
        return await ctx.execute(effect, spec)
    except EffectFailedError:
        return None


@app.flow("sim.order")
async def order(ctx: FlowContext, inp: Spec) -> Spec:
    """Fetch, charge, maybe wait for an approval, charge again with retries."""
    quote = await step(ctx, "sim.fetch", on(inp, fail=0.2))
    receipt = await step(ctx, "sim.charge", on(inp, fail=0.1))
    approved: Any = None
    if inp.get("gate"):
        try:
            key = f"{ctx.execution_id}:approve"
            approved = await ctx.suspend("approve", key, timeout=inp.get("gate_timeout"))
        except GateTimeoutError:
            approved = "timed out"
    extra = await step(ctx, "sim.charge_retry", on(inp, fail=0.3))
    return {"quote": quote, "receipt": receipt, "approved": approved, "extra": extra}


@app.flow("sim.queued")
async def queued(ctx: FlowContext, inp: Spec) -> Spec:
    """Steps of an execution started on a queue (the spec names it, for the ledger)."""
    outs = [await step(ctx, "sim.fetch", on(inp, fail=0.1)) for _ in range(inp.get("steps", 2))]
    outs.append(await step(ctx, "sim.charge", on(inp)))
    return {"outs": outs}


@app.flow("sim.child")
async def child(ctx: FlowContext, inp: Spec) -> Spec:
    """A child flow: a read and a charge."""
    got = await step(ctx, "sim.fetch", on(inp, fail=0.1))
    paid = await step(ctx, "sim.charge", on(inp))
    return {"got": got, "paid": paid}


@app.flow("sim.parent")
async def parent(ctx: FlowContext, inp: Spec) -> Spec:
    """One child awaited alone, then two at once; each result taken once."""
    results: list[Any] = []
    try:
        results.append(await ctx.execute_flow("sim.child", {"n": 0, "dur": inp.get("dur", 0.5)}))
    except ChildFlowFailedError as exc:
        results.append(exc.status)
    kids = [await ctx.start_flow("sim.child", {"n": n}) for n in (1, 2)]
    both = await asyncio.gather(*(k.result() for k in kids), return_exceptions=True)
    results.extend(r if not isinstance(r, BaseException) else "failed" for r in both)
    for n, kid in enumerate(kids, start=1):
        await ctx.execute("sim.consume", {"echo": f"child:{kid.execution_id}:{n}"})
    return {"results": results}


@app.flow("sim.mailbox")
async def mailbox(ctx: FlowContext, inp: Spec) -> Spec:
    """Take ``n`` messages, ``k`` per run, continuing as new between runs."""
    got, take = inp["got"], min(inp["k"], inp["n"] - inp["got"])
    for _ in range(take):
        message = await ctx.recv("inbox")
        await ctx.execute("sim.consume", {"echo": f"msg:{message['id']}"})
    got += take
    if got < inp["n"]:
        await ctx.continue_as_new({**inp, "got": got})
    return {"got": got}


@app.flow("sim.sender")
async def sender(ctx: FlowContext, inp: Spec) -> Spec:
    """Send each of ``ids`` to ``to``'s inbox."""
    failed: list[str] = []
    for mid in inp["ids"]:
        try:
            await ctx.send(inp["to"], "inbox", {"id": mid})
        except LoomError:
            failed.append(mid)
    return {"failed": failed}


@app.flow("sim.backoff")
async def backoff(ctx: FlowContext, inp: Spec) -> Spec:
    """Steps that fail their first attempts: ``fails[i]`` attempts fail before one succeeds."""
    outs = [await step(ctx, "sim.flaky", {"fail_until": n + 1, "dur": 0.2}) for n in inp["fails"]]
    return {"outs": outs}


@app.flow("sim.sleeper")
async def sleeper(ctx: FlowContext, inp: Spec) -> Spec:
    """Durable timers between steps."""
    first = await step(ctx, "sim.fetch", on(inp))
    await ctx.sleep(inp.get("nap", 5.0))
    paid = await step(ctx, "sim.charge_retry", on(inp, fail=0.2))
    await ctx.sleep(inp.get("nap", 5.0) / 2)
    return {"first": first, "paid": paid}


@app.flow("sim.pay")
async def pay(ctx: FlowContext, inp: Spec) -> Spec:
    """A charge, then an approval gate (the scenarios' flow: exact durations, no failures)."""
    receipt = await ctx.execute("sim.charge", {"secs": inp.get("secs", 1.0)})
    approved = await ctx.suspend("approve", f"{ctx.execution_id}:approve")
    return {"receipt": receipt, "approved": approved}


@app.flow("sim.retrying")
async def retrying(ctx: FlowContext, inp: Spec) -> Spec:
    """One idempotent step whose first ``fail_until - 1`` attempts fail, retried inline."""
    got = await ctx.execute("sim.fetch", {"fail_until": inp["fail_until"], "secs": 1.0})
    return {"got": got}
