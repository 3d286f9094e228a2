"""A replay that asks for a new step while a recorded one was never asked for parks.

Step ids are positions in the flow's task tree, so the same flow code can number its steps
differently when what creates tasks changes under it. The case that happens without anyone
touching the flow: ``asyncio.wait_for(ctx.execute(...), t)`` wraps the step in a task on
Python 3.11 (step ``1.1``) and awaits it in the flow's own task from Python 3.12 on (step
``1``). An execution started on a 3.11 worker and resumed on a 3.12 one used to find no
record of step ``1`` and invoke the effect again: a non-idempotent charge ran twice.

A flow that runs one task at a time asks for its recorded steps in the order it recorded
them, so a request for a step the log does not hold, while the log holds a step this replay
never asked for, is a divergence: the execution parks with a reason naming both steps, and
nothing is invoked. With several tasks open the check stays off (a live step of one task may
legitimately start before another task reaches its recorded one).
"""

from __future__ import annotations

import asyncio

from loom import EffectContext, FlowContext, Loom
from loom.ops.replay_check import Checked, ReplayChecker
from loom.runtime import Runtime
from loom.store.memory import InMemoryEventStore
from loom.wire import ExecutionPackage

CALLS: list[str] = []


def shop(in_a_task: bool) -> Loom:
    """The flow ``pay``: a charge (in a task of its own when ``in_a_task``, as 3.11's
    ``wait_for`` does), then an approval gate."""
    app = Loom("shop")

    @app.effect("charge", idempotent=False)
    async def charge(ctx: EffectContext, amount: int) -> str:  # pyright: ignore[reportUnusedFunction]
        CALLS.append(ctx.idempotency_key)
        return "charged"

    @app.flow("pay")
    async def pay(ctx: FlowContext, amount: int) -> str:  # pyright: ignore[reportUnusedFunction]
        step = ctx.execute(charge, amount)
        got = await (asyncio.ensure_future(step) if in_a_task else step)
        approved = await ctx.suspend("approve", ctx.execution_id)
        return f"{got} {approved}"

    return app


async def test_a_step_renumbered_under_the_flow_parks_instead_of_running_again():
    CALLS.clear()
    store = InMemoryEventStore()
    recorded = await Runtime(shop(in_a_task=True), store).start("pay", 5, execution_id="p")
    assert recorded.status == "suspended" and CALLS == ["p:1.1"]
    resumed = await Runtime(shop(in_a_task=False), store).resume("p", "approve", "p", "yes")
    assert CALLS == ["p:1.1"]  # never invoked again, under any key
    reason = resumed.parked_reason or ""
    assert resumed.status == "suspended" and reason.startswith("nondeterminism")
    assert "step 1:" in reason and "step 1.1 (effect 'charge', completed)" in reason
    # The numbering the log was recorded with (a 3.11 worker) lets it finish.
    done = await Runtime(shop(in_a_task=True), store).execute(ExecutionPackage(execution_id="p"))
    assert (done.status, done.output, done.parked_reason) == ("completed", "charged yes", None)
    assert CALLS == ["p:1.1"]


async def test_the_same_code_resumes_as_before():
    CALLS.clear()
    store = InMemoryEventStore()
    for in_a_task, eid in ((True, "t"), (False, "f")):
        rt = Runtime(shop(in_a_task), store)
        assert (await rt.start("pay", 5, execution_id=eid)).status == "suspended"
        done = await rt.resume(eid, "approve", eid, "yes")
        assert (done.status, done.output) == ("completed", "charged yes")
    assert CALLS == ["t:1.1", "f:1"]


app = Loom("fan")
SEEN: list[str] = []


@app.effect("note")
async def note(ctx: EffectContext, what: str) -> str:
    SEEN.append(ctx.step_id)
    return what


@app.flow("both")
async def both(ctx: FlowContext, _: None) -> list[str]:
    async def slow() -> str:  # its step is new on the resume; quick's is recorded
        await ctx.suspend("go", ctx.execution_id)
        return await ctx.execute(note, "slow")

    async def quick() -> str:
        return await ctx.execute(note, "quick")

    return list(await asyncio.gather(slow(), quick()))


async def test_a_replay_of_several_tasks_with_recorded_and_new_steps_completes():
    SEEN.clear()
    store = InMemoryEventStore()
    rt = Runtime(app, store)
    assert (await rt.start("both", None, execution_id="b")).status == "suspended"
    done = await rt.resume("b", "go", "b", None)
    assert (done.status, done.output) == ("completed", ["slow", "quick"])
    assert SEEN == ["2.1", "1.2"]  # quick's step ran once, before the suspension


async def test_the_replay_check_reports_the_renumbered_step_before_a_deploy():
    CALLS.clear()
    store = InMemoryEventStore()
    await Runtime(shop(in_a_task=True), store).start("pay", 5, execution_id="p")
    seen: list[Checked] = []
    await ReplayChecker(shop(in_a_task=False), store).run(seen.append)
    [checked] = seen
    assert checked.divergence is not None and checked.divergence.step_id == "1"
    assert "step 1.1" in checked.divergence.code + checked.divergence.history
    assert CALLS == ["p:1.1"]


prims = Loom("prims")


@prims.effect("note")
async def note2(ctx: EffectContext, what: str) -> str:
    return what


@prims.flow("child")
async def child(ctx: FlowContext, _: None) -> str:
    return "child done"


@prims.flow("parent")
async def parent(ctx: FlowContext, _: None) -> list[str]:
    await ctx.set_event("stage", "started")  # recorded as a step of its own (loom.set_event)
    await ctx.start_flow("child", None)  # and a child start (loom.child:child)
    await ctx.suspend("go", ctx.execution_id)
    return [await ctx.execute(note2, "after")]


async def test_steps_of_other_primitives_replayed_before_a_new_step_are_not_a_divergence():
    """A child start and a published event are step records too, served by their own
    primitives: a new effect step after them, on a resume, runs."""
    rt = Runtime(prims, InMemoryEventStore())
    assert (await rt.start("parent", None, execution_id="pa")).status == "suspended"
    done = await rt.resume("pa", "go", "pa", None)
    assert (done.status, done.output, done.parked_reason) == ("completed", ["after"], None)
