"""Every write is decided from the state it is conditioned on: a writer whose append
conflicts reloads and decides again, and never writes what it decided on the old state.

Each test makes two writers race on purpose (``PausedLoads`` holds one writer's load
while the other moves the log on) and checks the log that comes out, on every store.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from loom import EffectContext, FlowContext, Loom
from loom.errors import ExecutionFinishedError
from loom.runtime import Runtime
from loom.store.base import EventStore
from loom.wire import ExecutionPackage
from tests.concurrency.paused import PausedLoads

LEDGER: list[str] = []  # every real invocation of ``charge``, by idempotency key
_INSIDE: dict[str, asyncio.Event] = {}
_RELEASE: dict[str, asyncio.Event] = {}


def _event(table: dict[str, asyncio.Event], key: str) -> asyncio.Event:
    return table.setdefault(key, asyncio.Event())


def make_app() -> Loom:
    app = Loom("stale")

    @app.effect("charge", idempotent=False)
    async def charge(ctx: EffectContext, amount: int) -> str:
        LEDGER.append(ctx.idempotency_key)
        _event(_INSIDE, ctx.execution_id).set()
        await _event(_RELEASE, ctx.execution_id).wait()
        return f"receipt for {amount}"

    @app.flow("pay")
    async def pay(ctx: FlowContext, amount: int) -> str:
        receipt = await ctx.execute(charge, amount)
        await ctx.suspend("ship", f"{ctx.execution_id}:ship")
        return receipt

    @app.flow("approve")
    async def approve(ctx: FlowContext, _: None) -> Any:
        return await ctx.suspend("approval", "k")

    @app.flow("child")
    async def child(ctx: FlowContext, n: int) -> int:
        await ctx.suspend("go", "k")
        return n * 2

    @app.flow("parent")
    async def parent(ctx: FlowContext, n: int) -> int:
        return await ctx.execute_flow("child", n)

    return app


@pytest.fixture(autouse=True)
def _fresh() -> None:
    LEDGER.clear()
    _INSIDE.clear()
    _RELEASE.clear()


async def test_a_step_completed_while_another_call_decided_is_never_parked_in_doubt(
    store: EventStore,
):
    """A delivery loads the log while another worker is inside a non-idempotent step; that
    worker records the outcome; the first one, finding the claim expired, must not park the
    completed step in doubt (a ``not_performed`` verdict would then charge twice)."""
    app = make_app()
    worker_a = Runtime(app, store)
    paused = PausedLoads(store)
    # Worker B's clock is an hour ahead: A's claim has expired from where B stands.
    worker_b = Runtime(app, paused, clock=lambda: time.time() + 3600)
    await worker_a.start("pay", 5, execution_id="p", run=False)
    package = ExecutionPackage(execution_id="p")
    running = asyncio.ensure_future(worker_a.execute(package))
    await _event(_INSIDE, "p").wait()  # A is inside the charge: its intent is in the log
    paused.hold("p")
    late = asyncio.ensure_future(worker_b.execute(package))
    await paused.all_arrived.wait()  # B decides from a log whose charge has no outcome
    _event(_RELEASE, "p").set()
    assert (await running).status == "suspended"  # A recorded the charge and stopped
    paused.go.set()
    assert (await late).status == "suspended"
    history = await worker_a.history("p")
    assert [e.type for e in history if e.type.startswith("Effect")] == [
        "EffectStarted",
        "EffectCompleted",
    ]
    assert LEDGER == ["p:1"]
    done = await worker_a.resume("p", "ship", "p:ship")
    assert (done.status, done.output) == ("completed", "receipt for 5")
    assert LEDGER == ["p:1"]  # charged once


async def test_the_same_resume_delivered_twice_at_once_lands_once(store: EventStore):
    paused = PausedLoads(store)
    rt = Runtime(make_app(), paused)
    assert (await rt.start("approve", None, execution_id="a")).status == "suspended"
    paused.hold("a", loads=2)  # both deliveries decide from the suspended state
    first, second = (
        asyncio.ensure_future(rt.resume("a", "approval", "k", "yes")) for _ in range(2)
    )
    await paused.all_arrived.wait()
    paused.go.set()
    results = await asyncio.gather(first, second)  # both succeed: the second is a repeat
    assert {r.status for r in results} <= {"running", "completed"}
    history = await rt.history("a")
    assert [e.type for e in history].count("ExecutionResumed") == 1
    assert history[-1].type == "ExecutionCompleted"
    assert (await store.summary("a")).status == "completed"


async def test_a_resume_decided_before_a_cancel_is_refused_after_it(store: EventStore):
    paused = PausedLoads(store)
    rt = Runtime(make_app(), paused)
    await rt.start("approve", None, execution_id="c")
    paused.hold("c")
    resume = asyncio.ensure_future(rt.resume("c", "approval", "k", "yes"))
    await paused.all_arrived.wait()  # it decided: the gate is open, the execution suspended
    assert (await rt.cancel("c", "changed my mind")).status == "cancelled"
    paused.go.set()
    with pytest.raises(ExecutionFinishedError):
        await resume
    history = await rt.history("c")
    assert history[-1].type == "ExecutionCancelled"
    assert "ExecutionResumed" not in [e.type for e in history]
    assert (await store.summary("c")).status == "cancelled"


async def test_a_childs_result_told_twice_at_once_reaches_its_parent_once(store: EventStore):
    """The child's end is told to its parent after every execute call that finds it ended:
    a redelivery of the ended child racing the call that ended it must not hand the parent
    its result twice."""
    paused = PausedLoads(store)
    rt = Runtime(make_app(), paused)
    assert (await rt.start("parent", 21, execution_id="par")).status == "suspended"
    child_id = next(r.execution_id for r in await rt.list() if r.execution_id != "par")
    paused.hold("par", loads=2)  # both tellings decide from the waiting parent
    ending = asyncio.ensure_future(rt.resume(child_id, "go", "k"))
    while (await store.summary(child_id)).status != "completed":  # noqa: ASYNC110  (a store)
        await asyncio.sleep(0.01)
    again = asyncio.ensure_future(rt.execute(ExecutionPackage(execution_id=child_id)))
    await paused.all_arrived.wait()
    paused.go.set()
    await asyncio.gather(ending, again)
    history = await rt.history("par")
    assert [e.type for e in history].count("ExecutionResumed") == 1
    assert history[-1].type == "ExecutionCompleted"
    assert (await rt.result("par")).output == 42
