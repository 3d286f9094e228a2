"""Child options and handles on every event store.

A parent names its child's id, gives it an execution timeout, pins the flow version it runs
and puts it on a queue; it cancels the child and sends it messages through the handle. Each
execute call is checked by a replay of its log (``LoomTestEnv``), and the logs replay from
the log alone afterwards.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from loom import ChildFlowFailedError, ChildIdTakenError, EffectContext, FlowContext, Loom
from loom import events as ev
from loom.errors import NondeterminismError, ReservedExecutionIdError, UnknownFlowVersionError
from loom.primitives.queues import QueueRef
from loom.store import EventStore
from loom.testing import LoomTestEnv, replay
from loom.wire import ExecutionPackage

app = Loom("child-options")
app.queue("kids", concurrency=2)
calls: Counter[str] = Counter()


@pytest.fixture(autouse=True)
def _fresh() -> None:
    calls.clear()


@app.effect("note")
async def note(ctx: EffectContext, what: str) -> str:
    calls[f"{ctx.idempotency_key}:{what}"] += 1
    return what


@app.flow("kid", version=1)
async def kid_v1(ctx: FlowContext, name: str) -> str:
    return f"v1:{name}"


@app.flow("kid", version=2)
async def kid_v2(ctx: FlowContext, name: str) -> str:
    return f"v2:{name}"


@app.flow("listener")
async def listener(ctx: FlowContext, topic: str) -> Any:
    try:
        return await ctx.recv(topic)
    except asyncio.CancelledError:
        await ctx.execute(note, "cleanup")  # the child's cleanup runs as flow code
        raise


@app.flow("named")
async def named(ctx: FlowContext, spec: dict[str, Any]) -> Any:
    """Starts ``kid`` under the id ``spec["id"]`` with the other options of ``spec``."""
    child = await ctx.start_flow(
        "kid",
        spec.get("name", "a"),
        execution_id=spec["id"],
        version=spec.get("version"),
        timeout=spec.get("timeout"),
        queue=QueueRef("kids") if spec.get("queue") else None,
    )
    return {"id": child.execution_id, "out": await child}


@app.flow("tolerant")
async def tolerant(ctx: FlowContext, child_id: str) -> Any:
    try:
        return await ctx.execute_flow("kid", "a", execution_id=child_id)
    except ChildIdTakenError as exc:
        return {
            "taken": exc.child_id,
            "holder": exc.holder_flow,
            "then": await ctx.execute(note, "x"),
        }


@app.flow("canceller")
async def canceller(ctx: FlowContext, reason: str) -> Any:
    child = await ctx.start_flow(listener, "go", execution_id=f"{ctx.execution_id}-kid")
    await child.cancel(reason)
    try:
        return await child
    except ChildFlowFailedError as exc:
        return {"status": exc.status, "message": exc.error.get("message")}


@app.flow("messenger")
async def messenger(ctx: FlowContext, payload: Any) -> Any:
    child = await ctx.start_flow(listener, "go")
    await child.send("go", payload)
    got = await child
    await child.cancel()  # it ended: nothing to cancel, the step is still recorded
    return got


@app.flow("timed")
async def timed(ctx: FlowContext, seconds: float) -> Any:
    try:
        return await ctx.execute_flow(listener, "never", timeout=seconds)
    except ChildFlowFailedError as exc:
        return exc.status


async def test_a_child_runs_under_the_id_its_parent_names(store: EventStore):
    env = LoomTestEnv(app, store=store)
    done = await env.start("named", {"id": "order-7-invoice"}, execution_id="order-7")
    assert (done.status, done.output) == ("completed", {"id": "order-7-invoice", "out": "v2:a"})
    child = await env.runtime.result("order-7-invoice")
    assert child.state is not None and child.state["parent"] == {
        "execution_id": "order-7",
        "step_id": "1",
    }
    history = await store.read("order-7")
    (started,) = [e for e in history if isinstance(e, ev.ChildStarted)]
    assert (started.child_id, started.explicit_id) == ("order-7-invoice", True)
    assert (await replay(app, history)).output == done.output


async def test_a_child_runs_the_version_its_parent_pins_and_its_own_timeout(store: EventStore):
    env = LoomTestEnv(app, store=store)
    spec = {"id": "k-1", "version": 1, "timeout": 90.0, "queue": True}
    done = await env.start("named", spec, execution_id="p-1")
    assert done.output == {"id": "k-1", "out": "v1:a"}  # not the latest (v2)
    first = (await store.read("k-1"))[0]
    assert isinstance(first, ev.ExecutionStarted)
    assert (first.flow_version, first.queue) == ("1", "kids")
    assert first.deadline == pytest.approx(first.at + 90.0)
    # A version this deployment lacks is raised into the flow: no child is started.
    failed = await env.start("named", {"id": "k-2", "version": 9}, execution_id="p-4")
    assert failed.status == "failed" and failed.error is not None
    assert failed.error["code"] == UnknownFlowVersionError.code
    assert "k-2" not in {row.execution_id for row in await store.list()}


async def test_a_child_past_its_timeout_is_cancelled_and_its_parent_sees_it(store: EventStore):
    env = LoomTestEnv(app, store=store)
    waiting = await env.start("timed", 30.0, execution_id="t-1")
    assert waiting.status == "suspended"
    assert await env.skip(20) == []  # not due yet
    await env.skip(11)  # the child's deadline: it is cancelled, its cleanup runs
    assert (await env.runtime.result("t-1")).output == "cancelled"
    assert calls == Counter({"t-1.child.1:2:cleanup": 1})
    cancels = [e for e in await store.read("t-1.child.1") if isinstance(e, ev.CancelRequested)]
    assert [c.by for c in cancels] == ["loom.timeout"]


async def test_a_taken_explicit_id_is_reported_to_the_parent_and_replays(store: EventStore):
    env = LoomTestEnv(app, store=store)
    await env.start("listener", "t", execution_id="squatted")  # someone else's, from outside
    done = await env.start("tolerant", "squatted", execution_id="tol")
    assert done.output == {"taken": "squatted", "holder": "listener", "then": "x"}
    history = await store.read("tol")
    assert [e.type for e in history if e.type in ("ChildStarted", "EffectFailed")] == [
        "EffectFailed"
    ]
    assert (await replay(app, history)).output == done.output  # the log alone tells it


async def test_an_explicit_id_of_an_engine_form_is_refused_before_anything(store: EventStore):
    env = LoomTestEnv(app, store=store)
    await env.start("listener", "t", execution_id="victim")
    done = await env.start("named", {"id": "victim.child.1"}, execution_id="sly")
    assert done.status == "failed" and done.error is not None
    assert done.error["code"] == ReservedExecutionIdError.code
    assert "victim.child.1" not in {row.execution_id for row in await store.list()}


async def test_the_handle_cancels_the_child_which_cleans_up(store: EventStore):
    env = LoomTestEnv(app, store=store)
    done = await env.start("canceller", "not needed", execution_id="c-1")
    assert done.output == {"status": "cancelled", "message": "not needed"}
    assert calls == Counter({"c-1-kid:2:cleanup": 1})
    history = await store.read("c-1")
    (asked,) = [e for e in history if isinstance(e, ev.ChildCancelRequested)]
    assert (asked.step_id, asked.child_id, asked.reason) == ("2", "c-1-kid", "not needed")
    cancels = [e for e in await store.read("c-1-kid") if isinstance(e, ev.CancelRequested)]
    assert [(c.by, c.reason) for c in cancels] == [("loom.parent.handle", "not needed")]
    assert (await replay(app, history)).output == done.output
    # A replay of the parent asks nothing again: one request in the child's log.
    await env.runtime.execute(ExecutionPackage(execution_id="c-1"))
    assert len([e for e in await store.read("c-1-kid") if e.type == "CancelRequested"]) == 1


async def test_the_handle_sends_the_child_a_message(store: EventStore):
    env = LoomTestEnv(app, store=store)
    done = await env.start("messenger", {"hello": 1}, execution_id="m-1")
    assert (done.status, done.output) == ("completed", {"hello": 1})
    kid = await store.read("m-1.child.1")
    (received,) = [e for e in kid if isinstance(e, ev.MessageReceived)]
    assert (received.sender, received.message_id) == ("m-1", "m-1:2")
    types = [
        e.type for e in await store.read("m-1") if e.type in ("MessageSent", "ChildCancelRequested")
    ]
    assert types == ["MessageSent", "ChildCancelRequested"]
    assert [e.type for e in kid].count("CancelRequested") == 0  # it had ended: left alone


@app.flow("looper")
async def looper(ctx: FlowContext, run: int) -> Any:
    try:
        out = await ctx.execute_flow("kid", f"run{run}", execution_id="loop-kid")
    except ChildIdTakenError as exc:
        return {"run": run, "taken": exc.holder_parent}
    if run == 1:
        await ctx.continue_as_new(2)
    return out


async def test_a_second_run_never_takes_the_first_runs_child_for_its_own(store: EventStore):
    """An explicit id is the same in every run of a parent that continued as new; run 2's
    start finds run 1's child (same parent id, same step) and is told the id is taken,
    where it used to be handed run 1's child, which had ended and would never tell it."""
    env = LoomTestEnv(app, store=store)
    done = await env.start("looper", 1, execution_id="lp")
    assert (done.status, done.output) == ("completed", {"run": 2, "taken": "lp"})
    assert (await env.runtime.result("loop-kid")).output == "v2:run1"


@app.flow("renamed")
async def renamed(ctx: FlowContext, spec: dict[str, Any]) -> Any:
    child = await ctx.start_flow("kid", "a", execution_id=f"{spec['id']}-renamed")
    return {"id": child.execution_id, "out": await child}


@app.flow("unnamed")
async def unnamed(ctx: FlowContext, spec: dict[str, Any]) -> Any:
    return {"id": "?", "out": await ctx.execute_flow("kid", "a")}


def _with_named(fn: Any) -> Loom:
    """This app's flows and effects with ``named`` replaced by ``fn`` (a redeploy)."""
    other = Loom("child-options")
    other.effects.update(app.effects)
    for name, versions in app.versions.items():
        for version, defn in versions.items():
            other.flow(name, version=version)(fn if name == "named" else defn.fn)
    return other


@pytest.mark.parametrize("changed", [renamed, unnamed])
async def test_code_that_names_the_child_otherwise_diverges(store: EventStore, changed: Any):
    env = LoomTestEnv(app, store=store)
    await env.start("named", {"id": "n-kid"}, execution_id="n-1")
    with pytest.raises(NondeterminismError, match="explicit id"):
        await replay(_with_named(changed), await store.read("n-1"))
