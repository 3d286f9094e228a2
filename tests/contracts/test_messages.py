"""Messages between executions (``ctx.send``/``ctx.recv``/``Runtime.send``) on every store.

The runtime runs with no dispatcher, so a control call runs the execution inline until it
blocks: what a message does to its receiver is visible when the call returns.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from loom import FlowContext, Loom
from loom.errors import (
    ExecutionFinishedError,
    InputError,
    MessageTimeoutError,
    UnknownExecutionError,
)
from loom.kernel.fold import fold
from loom.runtime import Runtime
from loom.store.base import EventStore
from loom.wire import ExecutionPackage


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def make_app() -> Loom:
    app = Loom("messages")

    @app.flow("inbox")
    async def inbox(ctx: FlowContext, n: int) -> list[Any]:
        return [await ctx.recv("cmd") for _ in range(n)]

    @app.flow("two_topics")
    async def two_topics(ctx: FlowContext, _: None) -> list[Any]:
        b = await ctx.recv("b")
        a = await ctx.recv("a")
        return [a, b]

    @app.flow("pinger")
    async def pinger(ctx: FlowContext, args: dict[str, Any]) -> str:
        for payload in args["payloads"]:
            await ctx.send(args["to"], "cmd", payload)
        return "sent"

    @app.flow("patient")
    async def patient(ctx: FlowContext, _: None) -> list[Any]:
        got: list[Any] = []
        for _ in range(2):
            try:
                got.append(await ctx.recv("cmd", timeout=timedelta(minutes=5)))
            except MessageTimeoutError:
                got.append("timeout")
        return got

    @app.flow("careless")
    async def careless(ctx: FlowContext, to: str) -> str:
        try:
            await ctx.send(to, "cmd", 1)
        except UnknownExecutionError:
            return "unknown"
        except ExecutionFinishedError:
            return "finished"
        return "sent"

    @app.flow("gated")
    async def gated(ctx: FlowContext, _: None) -> Any:
        return await ctx.suspend("approval", "k")

    return app


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def rt(store: EventStore, clock: Clock) -> Runtime:
    return Runtime(make_app(), store, clock=clock)


async def test_messages_queue_in_arrival_order_and_wake_the_receiver(rt: Runtime) -> None:
    await rt.start("inbox", 3, execution_id="box")
    first = await rt.send("box", "cmd", {"n": 1})
    assert first.status == "suspended"
    await rt.send("box", "cmd", {"n": 1})  # the same payload again is a second message
    done = await rt.send("box", "cmd", {"n": 3})
    assert done.status == "completed"
    assert done.output == [{"n": 1}, {"n": 1}, {"n": 3}]


async def test_messages_before_recv_are_buffered(rt: Runtime) -> None:
    await rt.start("two_topics", execution_id="tt", run=False)
    await rt.send("tt", "a", "A1")
    await rt.send("tt", "a", "A2")
    done = await rt.send("tt", "b", "B1")
    assert (done.status, done.output) == ("completed", ["A1", "B1"])


async def test_a_message_id_delivers_once(rt: Runtime) -> None:
    await rt.start("inbox", 2, execution_id="box")
    await rt.send("box", "cmd", "x", message_id="m-1")
    again = await rt.send("box", "cmd", "x", message_id="m-1")
    assert again.status == "suspended"  # still waiting for its second message
    history = await rt.history("box")
    assert [e.type for e in history].count("MessageReceived") == 1
    done = await rt.send("box", "cmd", "y", message_id="m-2")
    assert done.output == ["x", "y"]


async def test_flow_to_flow_and_replay_sends_nothing_twice(rt: Runtime) -> None:
    await rt.start("inbox", 2, execution_id="box")
    sent = await rt.start("pinger", {"to": "box", "payloads": ["p", "q"]}, execution_id="pi")
    assert sent.output == "sent"
    box = await rt.result("box")
    assert (box.status, box.output) == ("completed", ["p", "q"])
    # Replaying the sender from its log (a crash after both sends) delivers nothing again.
    events = await rt.history("pi")
    ids = [e.message_id for e in await rt.history("box") if e.type == "MessageReceived"]
    assert ids == ["pi:1", "pi:2"]
    state = fold(events)
    assert [state.steps[s]["effect"] for s in ("1", "2")] == ["loom.send", "loom.send"]


async def test_the_receiver_dedupes_a_send_replayed_after_a_crash(rt: Runtime) -> None:
    """A sender that delivered but died before recording it sends again on replay: the
    receiver keeps one copy (the message id is the sender's step key)."""
    await rt.start("inbox", 2, execution_id="box")
    await rt.send("box", "cmd", "p", message_id="pi:1")  # what the dead attempt delivered
    await rt.start("pinger", {"to": "box", "payloads": ["p", "q"]}, execution_id="pi")
    box = await rt.result("box")
    assert box.output == ["p", "q"]
    received = [e for e in await rt.history("box") if e.type == "MessageReceived"]
    assert [e.message_id for e in received] == ["pi:1", "pi:2"]


async def test_unknown_and_finished_receivers_are_clear_errors(rt: Runtime) -> None:
    with pytest.raises(UnknownExecutionError):
        await rt.send("nobody", "cmd", 1)
    await rt.start("inbox", 0, execution_id="done")
    with pytest.raises(ExecutionFinishedError, match="completed"):
        await rt.send("done", "cmd", 1)
    with pytest.raises(InputError, match="topic"):
        await rt.send("done", "", 1)
    # From a flow, the error is raised into it (and recorded, so replay raises it again).
    assert (await rt.start("careless", "nobody", execution_id="c1")).output == "unknown"
    assert (await rt.start("careless", "done", execution_id="c2")).output == "finished"
    failed = fold(await rt.history("c2")).steps["1"]
    assert failed["status"] == "failed"


async def test_recv_timeout_keeps_late_messages_for_the_next_recv(
    rt: Runtime, clock: Clock
) -> None:
    await rt.start("patient", execution_id="pt")
    clock.now += 600  # past the first recv's deadline, before any message
    done = await rt.send("pt", "cmd", "late")  # after the recorded deadline: timeout won
    assert (done.status, done.output) == ("completed", ["timeout", "late"])


async def test_messages_and_gates_do_not_mix(rt: Runtime) -> None:
    await rt.start("gated", execution_id="g")
    waiting = await rt.send("g", "approval", "not a resume")
    assert waiting.status == "suspended"
    done = await rt.resume("g", "approval", "k", "yes")
    assert done.output == "yes"


def make_more_app() -> Loom:
    app = make_app()

    @app.flow("self_mail")
    async def self_mail(ctx: FlowContext, _: None) -> Any:
        await ctx.send(ctx.execution_id, "note", "to myself")
        return await ctx.recv("note")

    @app.flow("two_readers")
    async def two_readers(ctx: FlowContext, _: None) -> list[Any]:
        return list(await asyncio.gather(ctx.recv("cmd"), ctx.recv("cmd")))

    return app


async def test_a_recv_times_out_when_its_timer_fires(store: EventStore, clock: Clock) -> None:
    rt = Runtime(make_app(), store, clock=clock)
    waiting = await rt.start("patient", execution_id="tp")
    assert waiting.wake_at is not None
    clock.now = waiting.wake_at + 1
    fired = await rt.execute(ExecutionPackage(execution_id="tp", reason="timer"))
    assert fired.status == "suspended"  # the first recv timed out, the second waits
    done = await rt.send("tp", "cmd", "x")
    assert (done.status, done.output) == ("completed", ["timeout", "x"])


async def test_a_flow_can_message_itself(store: EventStore, clock: Clock) -> None:
    rt = Runtime(make_more_app(), store, clock=clock)
    done = await rt.start("self_mail", execution_id="me")
    assert (done.status, done.output) == ("completed", "to myself")


async def test_concurrent_recvs_take_one_message_each(store: EventStore, clock: Clock) -> None:
    rt = Runtime(make_more_app(), store, clock=clock)
    await rt.start("two_readers", execution_id="tr")
    await rt.send("tr", "cmd", "a")
    done = await rt.send("tr", "cmd", "b")
    assert done.status == "completed"
    assert sorted(done.output) == ["a", "b"]


async def test_a_receiver_this_worker_cannot_run_does_not_fail_the_sender(
    store: EventStore, clock: Clock
) -> None:
    """Another service's execution on the same store: the message is delivered, and the
    sender's worker, which lacks the receiver's flow, does not fail the sender for it."""
    other = Loom("other")

    @other.flow("elsewhere")
    async def elsewhere(ctx: FlowContext, _: None) -> Any:
        return await ctx.recv("cmd")

    await Runtime(other, store, clock=clock).start("elsewhere", execution_id="far")
    rt = Runtime(make_app(), store, clock=clock)
    sent = await rt.start("pinger", {"to": "far", "payloads": ["x"]}, execution_id="near")
    assert (sent.status, sent.output) == ("completed", "sent")
    done = await Runtime(other, store, clock=clock).execute(ExecutionPackage(execution_id="far"))
    assert (done.status, done.output) == ("completed", "x")
