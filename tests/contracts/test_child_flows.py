"""Child flows on every event store.

The parent and its children share the store: a child's ``ExecutionStarted`` is created by
the parent's step, the child's end resumes the parent (an append to the parent's log while
the parent may hold it), and a parent's end cancels its children. Each store must keep the
lineage (``parent`` on the child, ``ChildStarted`` on the parent) and each log must replay.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from loom import EffectContext, FlowContext, Loom
from loom.errors import ChildFlowFailedError
from loom.runtime import Runtime
from loom.store import EventStore
from loom.testing import FakeClock, replay

app = Loom("children-contract")
calls: Counter[str] = Counter()


@pytest.fixture(autouse=True)
def _fresh() -> None:
    calls.clear()


@app.effect("square")
async def square(ctx: EffectContext, n: int) -> int:
    calls[ctx.idempotency_key] += 1
    if n < 0:
        raise ValueError(f"negative {n}")
    return n * n


@app.flow("leaf")
async def leaf(ctx: FlowContext, n: int) -> int:
    return await ctx.execute(square, n)


@app.flow("waiter")
async def waiter(ctx: FlowContext, key: str) -> Any:
    return await ctx.suspend("go", key)


@app.flow("root")
async def root(ctx: FlowContext, ns: list[int]) -> dict[str, Any]:
    handles = [await ctx.start_flow(leaf, n) for n in ns]
    results: list[Any] = []
    for handle in handles:
        try:
            results.append(await handle)
        except ChildFlowFailedError as exc:
            results.append(exc.status)
    return {"results": results, "waited": await ctx.execute_flow(waiter, ctx.execution_id)}


async def test_children_run_report_back_and_replay(store: EventStore):
    rt = Runtime(app, store, clock=FakeClock())
    started = await rt.start("root", [2, -1, 3], execution_id="r")
    assert started.status == "suspended"  # on the waiter child
    # The failing child's effect used its three attempts (the default retry policy).
    assert calls == Counter({"r.child.1:1": 1, "r.child.2:1": 3, "r.child.3:1": 1})
    kid = await rt.result("r.child.4")
    assert kid.status == "suspended" and kid.state["parent"] == {
        "execution_id": "r",
        "step_id": "4",
    }
    await rt.resume("r.child.4", "go", "r", {"ok": True})
    done = await rt.result("r")
    assert done.status == "completed"
    assert done.output == {"results": [4, "failed", 9], "waited": {"ok": True}}
    assert sorted(s.execution_id for s in await store.list()) == [
        "r",
        "r.child.1",
        "r.child.2",
        "r.child.3",
        "r.child.4",
    ]
    kinds = Counter(e.type for e in await store.read("r"))
    assert kinds["ChildStarted"] == 4 and kinds["ExecutionCompleted"] == 1
    assert (await replay(app, await store.read("r"))).output == done.output


async def test_a_cancelled_parent_cancels_its_running_child(store: EventStore):
    rt = Runtime(app, store, clock=FakeClock())
    await rt.start("root", [1], execution_id="c")
    result = await rt.cancel("c", "stop")
    assert result.status == "cancelled"
    child = await rt.result("c.child.2")
    assert child.status == "cancelled"
    ends = [e for e in await store.read("c.child.2") if e.type == "ExecutionCancelled"]
    assert [e.by for e in ends] == ["loom.parent"]  # type: ignore[union-attr]
    # The child's end still reaches the parent's log (a no-op there: it ended first or
    # records the outcome it was waiting for); the parent replays to cancelled.
    assert (await replay(app, await store.read("c"))).status == "cancelled"


async def test_a_child_started_twice_by_replays_is_one_execution(store: EventStore):
    rt = Runtime(app, store, clock=FakeClock())
    await rt.start("root", [5], execution_id="t")
    before = await store.read("t.child.1")
    await rt.resume("t.child.2", "go", "t", "late")  # the parent runs again: replays step 1
    assert (await rt.result("t")).status == "completed"
    assert await store.read("t.child.1") == before
    assert calls["t.child.1:1"] == 1
