"""A queue lease belongs to the call that took it: one execution delivered twice at once
never frees the slot it runs in, so the queue never runs more than its concurrency."""

from __future__ import annotations

import asyncio

from loom import EffectContext, FlowContext, Loom
from loom.primitives.queues import QueueRef
from loom.runtime import Runtime
from loom.store.base import EventStore
from loom.wire import ExecutionPackage
from tests.concurrency.paused import PausedLoads

IN_FLIGHT: set[str] = set()
PEAK: list[int] = [0]
_GATES: dict[str, asyncio.Event] = {}
_INSIDE: dict[str, asyncio.Event] = {}


def _inside(execution_id: str) -> asyncio.Event:
    return _INSIDE.setdefault(execution_id, asyncio.Event())


def make_app() -> Loom:
    app = Loom("queue_owners")
    app.queue("one", concurrency=1)

    @app.effect("hold")
    async def hold(ctx: EffectContext, _: None) -> str:
        IN_FLIGHT.add(ctx.execution_id)
        PEAK[0] = max(PEAK[0], len(IN_FLIGHT))
        _inside(ctx.execution_id).set()
        try:
            await _GATES.setdefault(ctx.execution_id, asyncio.Event()).wait()
        finally:
            IN_FLIGHT.discard(ctx.execution_id)
        return "done"

    @app.flow("work")
    async def work(ctx: FlowContext, _: None) -> str:
        return await ctx.execute(hold, None)

    return app


async def test_a_second_delivery_never_frees_the_slot_the_first_runs_in(store: EventStore):
    IN_FLIGHT.clear()
    PEAK[0] = 0
    _GATES.clear()
    _INSIDE.clear()
    paused = PausedLoads(store)
    rt = Runtime(make_app(), paused)
    for eid in ("a", "b"):
        await rt.start("work", None, execution_id=eid, queue=QueueRef("one"), run=False)
    paused.hold("a", loads=2)  # both deliveries of ``a`` decide before either claims
    deliveries = [
        asyncio.ensure_future(rt.execute(ExecutionPackage(execution_id="a"))) for _ in range(2)
    ]
    await paused.all_arrived.wait()
    paused.go.set()
    await _inside("a").wait()
    # The losing delivery ends (superseded, or waiting for the slot) while ``a`` runs.
    done, _ = await asyncio.wait(deliveries, timeout=10, return_when=asyncio.FIRST_COMPLETED)
    assert len(done) == 1
    # ``b`` must wait, not run: the slot is a's (run, it would block here on its effect).
    waiting = await asyncio.wait_for(rt.execute(ExecutionPackage(execution_id="b")), 10)
    assert (waiting.status, IN_FLIGHT) == ("running", {"a"})
    _GATES.setdefault("a", asyncio.Event()).set()
    await asyncio.gather(*deliveries, return_exceptions=True)
    assert (await rt.result("a")).status == "completed"
    _GATES.setdefault("b", asyncio.Event()).set()
    assert (await rt.execute(ExecutionPackage(execution_id="b"))).status == "completed"
    assert PEAK[0] == 1
    assert (await store.leases().depth("one", rt.clock())).in_flight == 0
