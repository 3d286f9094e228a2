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
from loom import events as ev
from loom.errors import ChildFlowFailedError, ChildIdTakenError, ReservedExecutionIdError
from loom.runtime import Runtime
from loom.store import EventStore
from loom.testing import FakeClock, LoomTestEnv, replay

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


@app.flow("careful")
async def careful(ctx: FlowContext, n: int) -> dict[str, Any]:
    """Starts a child; reports a taken id instead of failing, then goes on with a step."""
    try:
        return {"child": await ctx.execute_flow(leaf, n)}
    except ChildIdTakenError as exc:
        return {
            "taken": [exc.code, exc.child_id, exc.holder_flow, exc.holder_parent],
            "after": await ctx.execute(square, n),
        }


@app.flow("careless")
async def careless(ctx: FlowContext, n: int) -> int:
    return await ctx.execute_flow(leaf, n)


def squatter(eid: str, flow: str, parent: dict[str, str] | None) -> ev.ExecutionStarted:
    """An execution holding a child's id: written to the store directly (as one made before
    outside starts of that form were refused would be)."""
    return ev.ExecutionStarted(execution_id=eid, flow=flow, input=1, at=0.0, parent=parent)


@pytest.mark.parametrize(
    ("flow", "parent", "holder_parent"),
    [
        ("waiter", None, None),  # started from outside, by another flow
        ("leaf", {"execution_id": "other", "step_id": "1"}, "other"),  # another parent's
        ("leaf", {"execution_id": "fam", "step_id": "9"}, "fam"),  # another step's
    ],
)
async def test_a_taken_child_id_fails_the_start_in_the_flow_and_replays(
    store: EventStore, flow: str, parent: dict[str, str] | None, holder_parent: str | None
) -> None:
    await store.create(squatter("fam.child.1", flow, parent))
    env = LoomTestEnv(app, store=store)  # replays every execute call against its log
    done = await env.start("careful", 3, execution_id="fam")
    assert done.status == "completed" and done.parked_reason is None
    assert done.output == {
        "taken": ["child_id_taken", "fam.child.1", flow, holder_parent],
        "after": 9,
    }
    history = await store.read("fam")
    failed = [e for e in history if isinstance(e, ev.EffectFailed)]
    assert [(e.step_id, e.effect, e.error.code) for e in failed] == [
        ("1", "loom.child:leaf", "child_id_taken")
    ]
    assert "fam.child.1" in failed[0].error.message and flow in failed[0].error.message
    assert (await store.load("fam.child.1")).events[0].flow == flow  # the holder untouched
    outcome = await replay(app, history)  # from the log alone: the store is not asked
    assert (outcome.status, outcome.output) == ("completed", done.output)


async def test_an_uncaught_taken_child_id_fails_the_parent(store: EventStore) -> None:
    await store.create(squatter("fam.child.1", "waiter", None))
    env = LoomTestEnv(app, store=store)
    done = await env.start("careless", 3, execution_id="fam")
    assert done.status == "failed" and done.error is not None
    assert done.error["code"] == "child_id_taken"


@pytest.mark.parametrize(
    "eid", ["fam.child.1", "fam.child.2.1", "fam#run2.child.3", "a.child.1.child.2"]
)
async def test_an_outside_start_of_a_child_id_is_refused(store: EventStore, eid: str) -> None:
    rt = Runtime(app, store, clock=FakeClock())
    with pytest.raises(ReservedExecutionIdError) as caught:
        await rt.start("leaf", 1, execution_id=eid)
    assert caught.value.code == "reserved_execution_id" and eid in caught.value.message
    assert await store.list() == []
    assert (await rt.start("leaf", 1, execution_id="orig")).status == "completed"
    with pytest.raises(ReservedExecutionIdError):  # a fork is an outside start too
        await rt.fork("orig", new_id=eid, from_step="1")
    assert [s.execution_id for s in await store.list()] == ["orig"]
    # Ids that only look alike are anyone's.
    for free in ["fam.child", "fam.child.x", "fam.children.1", "fam.child.1a", "child.1"]:
        assert (await rt.start("leaf", 1, execution_id=free)).status == "completed"
