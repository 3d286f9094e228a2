"""Temporal's signal and query scenarios, ported to Loom's messages, gates and published state.

Temporal's signals map to ``ctx.recv`` (a mailbox per topic) and ``ctx.suspend`` (a gate keyed
by a correlation key); its queries to published state (``ctx.set_event`` read with
``Runtime.get_event``). Every test runs on SQLite on disk and every execute call is checked by
a replay of the whole log.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from loom import EffectContext, FlowContext, Loom
from loom.errors import (
    EventNotFoundError,
    ExecutionFinishedError,
    MessageTimeoutError,
    UnknownExecutionError,
)
from loom.runtime import Runtime
from tests.peers.temporal.harness import EnvFactory

RUNTIMES: dict[str, Runtime] = {}


def signals_app() -> Loom:
    app = Loom("temporal-signals")

    @app.effect("signals_itself")
    async def signals_itself(ctx: EffectContext, value: str) -> str:
        # A client's signal landing while this activity runs (the execution is claimed).
        await RUNTIMES["rt"].send(ctx.execution_id, "add", value)
        return "activity done"

    @app.flow("signal_during_activity")
    async def signal_during_activity(ctx: FlowContext, _: None) -> list[Any]:
        first = await ctx.execute(signals_itself, "sent mid-activity")
        return [first, await ctx.recv("add")]

    @app.flow("signals_self")
    async def signals_self(ctx: FlowContext, _: None) -> Any:
        await ctx.send(ctx.execution_id, "note", "to myself")
        return await ctx.recv("note")

    @app.flow("fan_out_steps")
    async def fan_out_steps(ctx: FlowContext, n: int) -> list[Any]:
        return list(await asyncio.gather(*(ctx.execute(echo, i) for i in range(n))))

    @app.effect("echo")
    def echo(ctx: EffectContext, value: Any) -> Any:
        return value

    @app.flow("collect")
    async def collect(ctx: FlowContext, n: int) -> list[Any]:
        got: list[Any] = []
        for _ in range(n):
            got.append(await ctx.recv("add"))
            await ctx.set_event("count", len(got))
        return got

    @app.flow("step_then_collect")
    async def step_then_collect(ctx: FlowContext, n: int) -> list[Any]:
        await ctx.execute(echo, "first")
        await ctx.set_event("ready", True)
        await ctx.suspend("go", ctx.execution_id)  # signals arrive while it waits here
        return [await ctx.recv("add") for _ in range(n)]

    @app.flow("two_topics")
    async def two_topics(ctx: FlowContext, _: None) -> list[Any]:
        b = await ctx.recv("b")
        a1 = await ctx.recv("a")
        a2 = await ctx.recv("a")
        return [b, a1, a2]

    @app.flow("recv_timeout")
    async def recv_timeout(ctx: FlowContext, _: None) -> list[Any]:
        out: list[Any] = []
        try:
            out.append(await ctx.recv("ping", timeout=60))
        except MessageTimeoutError:
            out.append("timed out")
        out.append(await ctx.recv("ping"))
        return out

    @app.flow("query_state")
    async def query_state(ctx: FlowContext, _: None) -> str:
        await ctx.set_event("stage", "started")
        await ctx.set_event("stage", "waiting")
        await ctx.set_event("payload", {"nested": [1, {"deep": "é"}], "none": None})
        value = await ctx.suspend("finish", ctx.execution_id)
        await ctx.set_event("stage", f"finished with {value}")
        return "done"

    @app.flow("wait_any")
    async def wait_any(ctx: FlowContext, _: None) -> str:
        approve = asyncio.ensure_future(ctx.recv("approve"))
        reject = asyncio.ensure_future(ctx.recv("reject"))
        done, pending = await asyncio.wait({approve, reject}, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        return "approved" if approve in done else "rejected"

    @app.flow("gate_buffer")
    async def gate_buffer(ctx: FlowContext, _: None) -> list[Any]:
        first = await ctx.execute(echo, "before the gate")
        got = await ctx.suspend("approval", "k1")
        return [first, got]

    @app.flow("handler_style")
    async def handler_style(ctx: FlowContext, _: None) -> list[str]:
        # Temporal's "signal handler appends to a list, main loop waits on a condition":
        # here a task drains the mailbox while the main task waits for "done".
        seen: list[str] = []

        async def drain() -> None:
            while True:
                seen.append(await ctx.recv("item"))

        drainer = asyncio.ensure_future(drain())
        await ctx.recv("done")
        await asyncio.sleep(0)
        drainer.cancel()
        return seen

    return app


async def test_a_signal_sent_before_the_flow_waits_is_buffered(make_env: EnvFactory):
    """Temporal: a signal that arrives before the workflow's wait condition is checked is not
    lost (test_workflow_signal_and_query sends signals right after start). Loom: a message
    delivered before ``ctx.recv`` asks for it is buffered in the mailbox."""
    env = make_env(signals_app())
    await env.start("step_then_collect", 2, execution_id="s1")
    for value in ("x", "y"):
        r = await env.runtime.send("s1", "add", value)
        assert r.status == "suspended"  # still at the gate: the messages wait in the mailbox
    done = await env.runtime.resume("s1", "go", "s1")
    assert (done.status, done.output) == ("completed", ["x", "y"])


async def test_signals_are_received_in_arrival_order_and_none_is_lost(make_env: EnvFactory):
    """Temporal: many signals of one name are delivered in order, none dropped. Loom: one
    ``recv`` per message, in arrival order, including ones buffered while the flow ran."""
    env = make_env(signals_app())
    await env.start("collect", 20, execution_id="c1")
    results = [await env.runtime.send("c1", "add", i) for i in range(20)]
    assert results[-1].status == "completed"
    assert results[-1].output == list(range(20))
    assert await env.runtime.get_event("c1", "count") == 20


async def test_a_signal_repeated_with_the_same_request_id_is_delivered_once(
    make_env: EnvFactory,
):
    """Temporal dedupes a signal retried with the same request id. Loom: a repeated
    ``message_id`` is a no-op."""
    env = make_env(signals_app())
    await env.start("collect", 2, execution_id="d1")
    await env.runtime.send("d1", "add", "a", message_id="m-1")
    await env.runtime.send("d1", "add", "a", message_id="m-1")
    assert (await env.runtime.result("d1")).status == "suspended"
    done = await env.runtime.send("d1", "add", "b", message_id="m-2")
    assert done.output == ["a", "b"]


async def test_a_signal_to_a_finished_or_unknown_execution_is_refused(make_env: EnvFactory):
    """Temporal: signalling a completed workflow fails with 'workflow execution already
    completed', an unknown one with 'not found'. Loom: ``ExecutionFinishedError`` and
    ``UnknownExecutionError``, nothing appended."""
    env = make_env(signals_app())
    await env.start("collect", 1, execution_id="f1")
    await env.runtime.send("f1", "add", 1)
    before = await env.types("f1")
    with pytest.raises(ExecutionFinishedError):
        await env.runtime.send("f1", "add", 2)
    assert await env.types("f1") == before
    with pytest.raises(UnknownExecutionError):
        await env.runtime.send("nobody", "add", 1)


async def test_signals_on_other_topics_wait_for_their_own_receiver(make_env: EnvFactory):
    """Temporal: signals of different names go to their own handlers whatever the arrival
    order. Loom: each topic is its own queue; a message on ``a`` waits while the flow waits
    on ``b``."""
    env = make_env(signals_app())
    await env.start("two_topics", None, execution_id="t1")
    await env.runtime.send("t1", "a", "a1")
    await env.runtime.send("t1", "a", "a2")
    assert (await env.runtime.result("t1")).status == "suspended"
    done = await env.runtime.send("t1", "b", "b1")
    assert done.output == ["b1", "a1", "a2"]


async def test_a_wait_for_a_signal_times_out_and_a_late_signal_is_not_lost(
    make_env: EnvFactory,
):
    """Temporal: ``workflow.wait_condition(..., timeout=)`` raises on timeout and a signal
    arriving later is still handled. Loom: ``recv(timeout=)`` raises ``MessageTimeoutError``
    and the late message goes to the next ``recv``."""
    env = make_env(signals_app())
    await env.start("recv_timeout", None, execution_id="r1")
    [woken] = await env.skip(61)
    assert woken.status == "suspended"
    done = await env.runtime.send("r1", "ping", "late")
    assert done.output == ["timed out", "late"]


async def test_a_query_reads_the_latest_state_while_the_flow_waits(make_env: EnvFactory):
    """Temporal: a query answers from the workflow's current state while it blocks, and
    after it completed. Loom: ``get_event`` reads the latest published value while the
    execution is suspended, and still after it ended."""
    env = make_env(signals_app())
    r = await env.start("query_state", None, execution_id="q1")
    assert r.status == "suspended"
    assert await env.runtime.get_event("q1", "stage") == "waiting"
    assert await env.runtime.get_event("q1", "payload") == {
        "nested": [1, {"deep": "é"}],
        "none": None,
    }
    await env.runtime.resume("q1", "finish", "q1", 7)
    assert await env.runtime.get_event("q1", "stage") == "finished with 7"


async def test_a_query_for_an_unknown_name_is_a_clear_error(make_env: EnvFactory):
    """Temporal: a query of an unregistered name fails the query (not the workflow). Loom:
    ``EventNotFoundError`` naming the key; the execution is untouched."""
    env = make_env(signals_app())
    await env.start("query_state", None, execution_id="q2")
    with pytest.raises(EventNotFoundError, match="nope"):
        await env.runtime.get_event("q2", "nope")
    with pytest.raises(UnknownExecutionError):
        await env.runtime.get_event("never-started", "stage")
    assert (await env.runtime.result("q2")).status == "suspended"


async def test_the_first_of_two_signals_decides_the_branch(make_env: EnvFactory):
    """Temporal: ``asyncio.wait`` over two conditions takes whichever signal came first, and
    replay takes the same branch. Loom: two ``recv`` racers; the first message wins, the
    loser is cancelled, and the replay agrees."""
    env = make_env(signals_app())
    await env.start("wait_any", None, execution_id="w1")
    done = await env.runtime.send("w1", "reject", "no")
    assert done.output == "rejected"
    await env.start("wait_any", None, execution_id="w2")
    assert (await env.runtime.send("w2", "approve", "yes")).output == "approved"


async def test_a_resume_before_its_gate_opens_is_buffered_and_a_duplicate_ignored(
    make_env: EnvFactory,
):
    """Temporal's signal-with-start: the signal lands before the workflow's first task runs.
    Loom: a start without running it (``run=False``), then a resume: it is recorded
    before the gate opens, runs the execution, and the gate finds it. The same resume
    again is a no-op; another one after the end is refused."""
    env = make_env(signals_app())
    created = await env.start("gate_buffer", None, execution_id="g1", run=False)
    assert created.status == "running"
    result = await env.runtime.resume("g1", "approval", "k1", "early")  # runs it
    assert (result.status, result.output) == ("completed", ["before the gate", "early"])
    types = await env.types("g1")
    assert types.index("ExecutionResumed") < types.index("ExecutionClaimed")
    again = await env.runtime.resume("g1", "approval", "k1", "duplicate")  # a no-op
    assert (again.status, again.output) == ("completed", ["before the gate", "early"])
    assert await env.types("g1") == types
    with pytest.raises(ExecutionFinishedError):
        await env.runtime.resume("g1", "approval", "other-key", "late")


async def test_signal_with_start_through_the_mailbox(make_env: EnvFactory):
    """Temporal's signal-with-start: start and signal as one call. Loom: start with
    ``run=False``, send the message, and the send runs the receiver, which finds it."""
    env = make_env(signals_app())
    await env.start("collect", 1, execution_id="sws", run=False)
    done = await env.runtime.send("sws", "add", "hello")
    assert (done.status, done.output) == ("completed", ["hello"])


async def test_a_handler_task_drains_signals_while_the_main_task_waits(make_env: EnvFactory):
    """Temporal: signal handlers mutate state while the main coroutine waits on a
    condition. Loom: a flow task loops on ``recv`` while the root awaits another topic; what
    it took is the result, and the replay agrees."""
    env = make_env(signals_app())
    await env.start("handler_style", None, execution_id="h1")
    for item in ("a", "b", "c"):
        await env.runtime.send("h1", "item", item)
    done = await env.runtime.send("h1", "done", None)
    assert (done.status, done.output) == ("completed", ["a", "b", "c"])


async def test_a_signal_during_an_activity_is_kept_for_the_next_wait(make_env: EnvFactory):
    """Temporal: a signal that arrives while an activity runs is delivered to the workflow
    with its next task. Loom: the message is recorded while the execution is claimed; the
    running call sees it and the flow's ``recv`` takes it, in the same call."""
    env = make_env(signals_app())
    RUNTIMES["rt"] = env.runtime
    r = await env.start("signal_during_activity", None, execution_id="sda")
    assert (r.status, r.output) == ("completed", ["activity done", "sent mid-activity"])
    types = await env.types("sda")
    assert types.index("MessageReceived") < types.index("EffectCompleted")


async def test_fifty_concurrent_activities_get_stable_ids(make_env: EnvFactory):
    """Temporal: many activities started at once complete and replay in any interleaving.
    Loom: fifty gathered steps, results in order, each step id distinct, the replay agrees."""
    env = make_env(signals_app())
    r = await env.start("fan_out_steps", 50, execution_id="fan")
    assert r.output == list(range(50))
    steps = {e.step_id for e in await env.history("fan") if e.type == "EffectCompleted"}  # type: ignore[attr-defined]
    assert len(steps) == 50


async def test_a_workflow_may_signal_itself(make_env: EnvFactory):
    """Temporal: a workflow signalling its own id through an external handle receives it.
    Loom: ``ctx.send`` to its own id lands in its mailbox; the next ``recv`` takes it."""
    env = make_env(signals_app())
    r = await env.start("signals_self", None, execution_id="me")
    assert (r.status, r.output) == ("completed", "to myself")
