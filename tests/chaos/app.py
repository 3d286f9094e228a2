"""The app the chaos runs serve (``LOOM_APP=tests.chaos.app:app``).

Every effect invocation is a line in the ledger (``$LOOM_CHAOS_LEDGER``, one JSON object a
line, written with ``O_APPEND``): the invocation is the line, so a worker killed after
writing it had *performed* the effect, and one killed before had not. That is what settles
a step parked in doubt, and what the invariants count.

``order`` runs a mix of idempotent and non-idempotent steps, published values, a durable
timer, a child flow (``leg``), a message exchange with a partner execution and one
``continue_as_new``; the ``queued`` flow runs on a queue whose concurrency the invariants
check from the ledger's start and end lines.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from datetime import timedelta
from typing import Any

from loom import EffectContext, FlowContext, Loom, Retry
from loom.errors import MessageTimeoutError

app = Loom("chaos")

QUEUE = "tight"
QUEUE_LIMIT = 2
app.queue(QUEUE, concurrency=QUEUE_LIMIT, lease_ttl=3.0)


def note(ctx: EffectContext, phase: str) -> None:
    """One ledger line: which invocation, of what, by which process, when."""
    path = os.environ.get("LOOM_CHAOS_LEDGER")
    if not path:
        return
    line = {
        "key": ctx.idempotency_key,
        "effect": ctx.effect,
        "phase": phase,
        "who": os.environ.get("LOOM_CHAOS_INCARNATION", str(os.getpid())),
        "t": time.time(),
    }
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(line) + "\n").encode())  # one short O_APPEND write: whole
    finally:
        os.close(fd)


# Both effects get 50 attempts: an attempt cut short by a kill counts as one, and the
# default budget of three would fail steps (and their parents, and leave their partners
# waiting) that were merely interrupted three times.


async def _work() -> None:
    await asyncio.sleep(random.uniform(0.0, 0.02))  # widen the windows a kill can land in


@app.effect("chaos.reserve", retry=Retry(max_attempts=50))
async def reserve(ctx: EffectContext, n: int) -> dict[str, Any]:
    """Idempotent: safe to run again under its key."""
    note(ctx, "start")
    try:
        await _work()
    finally:  # (cancelled too: only a kill leaves an invocation without its end)
        note(ctx, "end")
    return {"reserved": n, "key": ctx.idempotency_key}


def charged(key: str) -> dict[str, Any]:
    """What ``charge`` returns for ``key`` (an operator's ``performed`` verdict says the same)."""
    return {"charge": key}


@app.effect("chaos.charge", idempotent=False, retry=Retry(max_attempts=50))
async def charge(ctx: EffectContext, n: int) -> dict[str, Any]:
    """Not idempotent: its ledger line is the charge; it must not happen twice."""
    note(ctx, "start")
    try:
        await _work()
    finally:
        note(ctx, "end")
    return charged(ctx.idempotency_key)


async def steps(ctx: FlowContext, first: int, count: int) -> list[Any]:
    out: list[Any] = []
    for i in range(first, first + count):
        if i % 3 == 2:
            out.append(await ctx.execute(charge, i))
        else:
            out.append(await ctx.execute(reserve, i))
        if i % 4 == 0:
            await ctx.set_event("progress", i)
    return out


@app.flow("leg")
async def leg(ctx: FlowContext, spec: dict[str, Any]) -> dict[str, Any]:
    """A child: one step of each kind."""
    return {"leg": [await ctx.execute(reserve, 0), await ctx.execute(charge, 2)]}


@app.flow("order")
async def order(ctx: FlowContext, spec: dict[str, Any]) -> dict[str, Any]:
    """Run 0: the first half of the steps, then ``continue_as_new``. Run 1: a timer, the
    second half, the child, then a message to the partner and one from it."""
    total, half = int(spec["steps"]), int(spec["steps"]) // 2
    if not spec.get("run"):
        await steps(ctx, 0, half)
        await ctx.continue_as_new({**spec, "run": 1})
    await ctx.sleep(timedelta(milliseconds=50))
    done = await steps(ctx, half, total - half)
    kid = await ctx.execute_flow(leg, {"of": ctx.execution_id}) if spec.get("kid") else None
    got = None
    if spec.get("partner"):
        await ctx.send(spec["partner"], "ping", {"from": ctx.execution_id})
        try:  # a partner that failed never sends: this one ends all the same (a wait long
            # enough for a slow partner: one that gave up would refuse the partner's send)
            got = await ctx.recv("ping", timeout=timedelta(minutes=10))
        except MessageTimeoutError:
            got = "timed out"
    return {"steps": len(done), "kid": kid, "got": got}


@app.flow("queued")
async def queued(ctx: FlowContext, spec: dict[str, Any]) -> dict[str, Any]:
    """Steps on the tight queue: at most ``QUEUE_LIMIT`` of these run at once."""
    return {"steps": len(await steps(ctx, 0, int(spec["steps"])))}
