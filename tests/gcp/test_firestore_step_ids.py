"""Step ids of a flow run on the Firestore store are those a replay gives, with no gaps.

A live run on Firestore once recorded steps 1, 2, 3, then 36 to 42 (issue 31, item 5), and
charged under keys ``:36`` and ``:40``: a replay numbers those steps 4 to 10 and would run
them again, a charge included, under other keys. A step id is the next number of the
flow task's scope, and any task created while that scope is current takes one: the
grpc.aio client creates a task per RPC (two for a read), so a store call made inside the
flow's scope consumes ids. Two such paths were found on Firestore:

* the periodic snapshot (``Runtime.snapshot_every`` events): the journal saves it after
  its append, back in the flow's scope; on Firestore that is a read of the execution
  document and a commit, four tasks;
* async generators of the client's streaming reads (``get``, ``get_all``, queries), left
  unclosed and freed by Python's cyclic garbage collector, wherever it happens to run: the
  event loop's finalizer hook creates a task to close each, in the context current at that
  moment, which may be a flow's. Thirteen ids went at once in one run.

The flow below runs many strict or batched steps (durable points), child flows, messages
and published values, with snapshots every few events and the garbage collector run from
the flow between steps (it runs at arbitrary allocations; here it is pinned where it does
the damage). Real emulator, real runtime.
"""

from __future__ import annotations

import gc
from typing import Any

import pytest

from loom import EffectContext, FlowContext, Loom
from loom.runtime import Runtime
from loom.store import EventStore, InMemoryEventStore
from loom.testing import replay
from loom_gcp.firestore import FirestoreEventStore
from tests.gcp.firestore_helpers import PROJECT

pytestmark = pytest.mark.slow

STEPS = 24


def numbered_app(durability: str) -> Loom:
    app = Loom("numbered", durability=durability)

    @app.effect("inc")
    async def inc(ctx: EffectContext, n: int) -> int:
        return n + 1

    @app.effect("charge", idempotent=False)
    async def charge(ctx: EffectContext, n: int) -> str:
        return ctx.idempotency_key

    @app.flow("kid")
    async def kid(ctx: FlowContext, n: int) -> int:
        return await ctx.execute(inc, n)

    @app.flow("many")
    async def many(ctx: FlowContext, n: int) -> dict[str, Any]:
        total, keys = 0, []
        for i in range(n):
            total += await ctx.execute(inc, i)
            gc.collect()  # what the collector does at any allocation, pinned here
            if i % 4 == 0:
                await ctx.set_event("progress", i)
            if i % 6 == 0:
                total += await ctx.execute_flow(kid, i)
            if i % 8 == 0:
                keys.append(await ctx.execute(charge, i))
        await ctx.send(ctx.execution_id, "self", {"x": 1})
        got = await ctx.recv("self")
        return {"total": total, "keys": keys, "got": got, "at": ctx.now().isoformat()}

    return app


def step_ids(events: list[Any]) -> list[str]:
    """The step ids of a history, in the order they first appear."""
    seen: list[str] = []
    for event in events:
        sid = getattr(event, "step_id", None)
        if sid is not None and sid not in seen:
            seen.append(sid)
    return seen


async def numbered_run(app: Loom, store: EventStore, snapshot_every: int) -> list[Any]:
    """Run ``many`` to its end; its history."""
    rt = Runtime(app, store, snapshot_every=snapshot_every)
    result = await rt.start("many", STEPS, execution_id="m1")
    assert result.status == "completed", result
    return await rt.history("m1")


async def check_numbering(database: str, durability: str, snapshot_every: int) -> None:
    app = numbered_app(durability)
    expected = step_ids(await numbered_run(app, InMemoryEventStore(), snapshot_every))
    # 1..N in order, but for ``recv``'s (a ``MessageReceived`` records no step id).
    numbers = [int(sid) for sid in expected]
    assert numbers == sorted(numbers) and len(numbers) == numbers[-1] - 1
    assert len(expected) > STEPS + 10  # steps, events, children, charges, send, now
    store = FirestoreEventStore(project=PROJECT, database=database)
    history = await numbered_run(app, store, snapshot_every)
    await store.aclose()
    assert step_ids(history) == expected
    output = history[-1].output  # type: ignore[union-attr]
    charged = [e.step_id for e in history if e.type == "EffectStarted"]
    assert output["keys"] == [f"m1:{sid}" for sid in charged]  # charged under replay's ids
    replayed = await replay(app, history)
    assert (replayed.status, replayed.output) == ("completed", output)


@pytest.mark.parametrize("durability", ["strict", "batched"])
async def test_step_ids_on_firestore_are_a_replays(database: str, durability: str) -> None:
    """Store calls and collected async generators of the client take no step id."""
    await check_numbering(database, durability, snapshot_every=1000)


async def test_step_ids_with_snapshots_every_few_events_are_a_replays(database: str) -> None:
    await check_numbering(database, "strict", snapshot_every=3)
