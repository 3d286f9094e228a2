"""A queue lease renewed too late stops its call before the next effect starts.

A call holds its execution's queue lease and renews it every third of ``lease_ttl``. When
the store or the process stalls past the ttl, the lease lapses by the clock and another
execution is admitted in its place; the first call must then start no effect more (it
gives its claim back and waits in the queue again), or the queue runs more than its
concurrency. The stall is made with the runtime's clock: it jumps past the ttl while the
first execution's worker is paused after an effect, so no renewal happens in between (an
effect in flight through such a stall cannot be called back: what is checked is that no
effect *starts* on a lapsed lease).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter

from loom import EffectContext, FlowContext, Loom
from loom.primitives.queues import QueueRef
from loom.runtime import Runtime
from loom.store.base import EventStore
from loom.wire import ExecutionPackage

TTL = 600.0  # (the heartbeat's real-time beat, a third of it, never comes in a test)
IN_FLIGHT: set[str] = set()
PEAK: list[int] = [0]
INVOKED: Counter[tuple[str, str]] = Counter()
_GATES: dict[str, asyncio.Event] = {}
_INSIDE: dict[str, asyncio.Event] = {}
STALLS = {"a/first"}  # what a's worker does after this effect stalls past the lease's ttl


def _event(events: dict[str, asyncio.Event], key: str) -> asyncio.Event:
    return events.setdefault(key, asyncio.Event())


def make_app() -> Loom:
    app = Loom("queue_lapse")
    app.queue("one", concurrency=1, lease_ttl=TTL)

    @app.effect("step")
    async def step(ctx: EffectContext, name: str) -> str:
        """In flight while it waits on its gate, or (``STALLS``) done at once and the
        worker paused after it, before the engine goes on."""
        key = f"{ctx.execution_id}/{name}"
        INVOKED[(ctx.execution_id, name)] += 1
        IN_FLIGHT.add(ctx.execution_id)
        PEAK[0] = max(PEAK[0], len(IN_FLIGHT))
        if key in STALLS:
            IN_FLIGHT.discard(ctx.execution_id)
        _event(_INSIDE, key).set()
        try:
            await _event(_GATES, key).wait()
        finally:
            IN_FLIGHT.discard(ctx.execution_id)
        return name

    @app.flow("work")
    async def work(ctx: FlowContext, _: None) -> list[str]:
        return [await ctx.execute(step, "first"), await ctx.execute(step, "second")]

    return app


def _reset() -> None:
    IN_FLIGHT.clear()
    PEAK[0] = 0
    INVOKED.clear()
    _GATES.clear()
    _INSIDE.clear()


async def test_a_call_whose_lease_lapsed_starts_no_effect_more(store: EventStore) -> None:
    _reset()
    now = [time.time()]
    rt = Runtime(make_app(), store, clock=lambda: now[0])
    for eid in ("a", "b"):
        await rt.start("work", None, execution_id=eid, queue=QueueRef("one"), run=False)
    first = asyncio.ensure_future(rt.execute(ExecutionPackage(execution_id="a")))
    await asyncio.wait_for(_event(_INSIDE, "a/first").wait(), 10)
    now[0] += TTL + 1  # a stall: a's lease lapses by the clock, never renewed meanwhile
    _event(_GATES, "b/first").set()
    second = asyncio.ensure_future(rt.execute(ExecutionPackage(execution_id="b")))
    await asyncio.wait_for(_event(_INSIDE, "b/second").wait(), 10)  # b runs in a's place
    _event(_GATES, "a/first").set()  # a's worker goes on, while b's effect is in flight
    waiting = await asyncio.wait_for(first, 10)
    assert (waiting.status, IN_FLIGHT, PEAK[0]) == ("running", {"b"}, 1)
    assert INVOKED[("a", "second")] == 0  # it stopped before its next effect
    _event(_GATES, "b/second").set()
    assert (await asyncio.wait_for(second, 10)).status == "completed"
    _event(_GATES, "a/second").set()
    done = await asyncio.wait_for(rt.execute(ExecutionPackage(execution_id="a")), 10)
    assert (done.status, done.output) == ("completed", ["first", "second"])
    assert dict(INVOKED) == {(e, s): 1 for e in "ab" for s in ("first", "second")}
    assert PEAK[0] == 1
    assert (await store.leases().depth("one", rt.clock())).in_flight == 0


async def test_a_late_renewal_that_still_holds_goes_on(store: EventStore) -> None:
    """The same stall with nobody admitted meanwhile: the renewal made before the next
    effect takes the lease again, and the call runs on to its end."""
    _reset()
    now = [time.time()]
    rt = Runtime(make_app(), store, clock=lambda: now[0])
    await rt.start("work", None, execution_id="a", queue=QueueRef("one"), run=False)
    first = asyncio.ensure_future(rt.execute(ExecutionPackage(execution_id="a")))
    await asyncio.wait_for(_event(_INSIDE, "a/first").wait(), 10)
    now[0] += TTL + 1
    _event(_GATES, "a/first").set()
    _event(_GATES, "a/second").set()
    done = await asyncio.wait_for(first, 10)
    assert (done.status, done.output) == ("completed", ["first", "second"])
    assert dict(INVOKED) == {("a", "first"): 1, ("a", "second"): 1}
