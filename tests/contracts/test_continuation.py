"""Continue-as-new on every store: a fresh history per run, one execution id, nothing lost.

The runtime runs with no dispatcher, so the next run starts inline when a run continues.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from loom import FlowContext, Loom
from loom import events as ev
from loom.errors import ExecutionFinishedError, InvalidPayloadError
from loom.ops.replay_check import Checked, ReplayChecker
from loom.primitives import messages
from loom.runtime import Runtime
from loom.store.base import EventStore
from loom.testing import LoomTestEnv
from loom.wire import ExecutionPackage


def make_app() -> Loom:
    app = Loom("continuation")

    @app.flow("counter")
    async def counter(ctx: FlowContext, state: dict[str, int]) -> dict[str, int]:
        """Adds what arrives on ``add``; continues every 3 messages; ``stop`` ends it."""
        total = state["total"]
        for _ in range(3):
            got = await ctx.recv("add")
            if got == "stop":
                return {"total": total, "runs": state["runs"]}
            total += got
            await ctx.set_event("total", total)
        await ctx.continue_as_new({"total": total, "runs": state["runs"] + 1})

    @app.flow("gate_after")
    async def gate_after(ctx: FlowContext, n: int) -> Any:
        if n == 0:
            await ctx.continue_as_new(1)
        return await ctx.suspend("go", "k")

    @app.flow("bad_input")
    async def bad_input(ctx: FlowContext, n: int) -> Any:
        await ctx.continue_as_new("not a number")

    @app.flow("in_flight")
    async def in_flight(ctx: FlowContext, args: dict[str, Any]) -> Any:
        """Run 1 continues while another task's step is in flight (awaited after, or not):
        ``slow`` is running from before the continue until the continue is in the log."""
        if args["run"] == 2:
            return await ctx.suspend("go", "k") if args["wait"] else "run 2"
        started, release = _events(ctx.execution_id)
        quick = asyncio.ensure_future(ctx.execute("quick", None))
        pending = asyncio.ensure_future(ctx.execute("slow", None))
        await quick  # in the log before the continue
        await started.wait()
        try:
            await ctx.continue_as_new({**args, "run": 2})
        finally:
            release.set()  # the continue is appended (or failed): let slow finish now
            if args["await_after"]:
                await pending

    @app.effect("slow")
    async def slow(ctx: Any, _: None) -> str:
        started, release = _events(ctx.execution_id)
        started.set()
        await release.wait()
        return "done"

    @app.effect("quick")
    async def quick(ctx: Any, _: None) -> str:
        return "quick"

    @app.flow("ticker")
    async def ticker(ctx: FlowContext, args: dict[str, Any]) -> list[str]:
        """Sends and keys one step per run, at the same step id every run."""
        keys = [*args["keys"], await ctx.execute("key_of", None)]
        await ctx.send(args["to"], "tick", len(keys))
        if len(keys) < 3:
            await ctx.continue_as_new({**args, "keys": keys})
        return keys

    @app.effect("key_of")
    async def key_of(ctx: Any, _: None) -> str:
        return ctx.idempotency_key

    @app.flow("ticks")
    async def ticks(ctx: FlowContext, _: None) -> list[Any]:
        return [await ctx.recv("tick") for _ in range(3)]

    return app


START = {"total": 0, "runs": 1}
# Per execution: ``slow`` has started; the flow lets it finish (the test's own handshake).
_EVENTS: dict[str, tuple[asyncio.Event, asyncio.Event]] = {}


def _events(execution_id: str) -> tuple[asyncio.Event, asyncio.Event]:
    return _EVENTS.setdefault(execution_id, (asyncio.Event(), asyncio.Event()))


@pytest.fixture(autouse=True)
def _fresh_events() -> None:
    _EVENTS.clear()  # (each test runs on a loop of its own)


@pytest.fixture
def rt(store: EventStore) -> Runtime:
    return Runtime(make_app(), store)


async def test_runs_continue_with_a_fresh_history_and_the_same_id(rt: Runtime) -> None:
    await rt.start("counter", START, execution_id="c")
    for n in range(7):
        await rt.send("c", "add", n)
    state = await rt.load_state("c")
    assert (state.run, state.status) == (3, "suspended")  # 3 + 3 messages, then a third run
    assert state.input == {"total": 15, "runs": 3}
    assert set(state.steps) == {"2"}  # run 3's history only: its first recv took message 7
    assert await rt.get_event("c", "total") == 21  # published values carry over
    done = await rt.send("c", "add", "stop")
    result = await rt.result("c")
    assert (result.status, result.output) == ("completed", {"total": 21, "runs": 3}), done
    history = await rt.history("c")
    chain = [e.run for e in history if e.type == "ExecutionContinued"]
    assert chain == [2, 3]
    # Loading reads the current run: a snapshot stands at its start.
    loaded = await rt.store.load("c")
    assert loaded.snapshot is not None and loaded.snapshot.seq >= state.run_started_seq


async def test_messages_the_ended_run_did_not_take_are_carried_over(rt: Runtime) -> None:
    """Five messages wait in the mailbox before the flow first runs (delivered without a
    wake-up, so no run takes one as it comes): run 1 takes three and continues; the two it
    did not take must reach run 2, each once."""
    await rt.start("counter", START, execution_id="m", run=False)
    for n in [1, 2, 3, 4, 5]:
        await messages.deliver(rt, "m", "add", n, message_id=f"m{n}")
    assert (await rt.load_state("m")).run == 1  # nothing ran yet
    await rt.execute(ExecutionPackage(execution_id="m"))
    state = await rt.load_state("m")
    assert state.run == 2 and state.input == {"total": 6, "runs": 2}
    assert await rt.get_event("m", "total") == 15  # run 2 took 4 and 5 at once
    await rt.send("m", "add", 5, message_id="m5")  # a retried send across the boundary
    await rt.send("m", "add", "stop")
    result = await rt.result("m")
    assert result.output == {"total": 15, "runs": 2}  # 4 and 5 once each, then stop


async def test_resumes_and_cancels_reach_the_current_run(rt: Runtime) -> None:
    await rt.start("gate_after", 0, execution_id="g")
    state = await rt.load_state("g")
    assert (state.run, state.status) == (2, "suspended")
    done = await rt.resume("g", "go", "k", "yes")
    assert (await rt.result("g")).output == "yes", done
    await rt.start("gate_after", 0, execution_id="g2")
    await rt.cancel("g2", "enough")
    with pytest.raises(ExecutionFinishedError):
        await rt.send("g2", "add", 1)


async def test_a_bad_next_input_fails_the_run_clearly(rt: Runtime) -> None:
    failed = await rt.start("bad_input", 0, execution_id="b")
    assert failed.status == "failed" and failed.error is not None
    assert failed.error["code"] == InvalidPayloadError.code
    assert (await rt.load_state("b")).run == 1


def _in_flight(wait: bool, await_after: bool) -> dict[str, Any]:
    return {"run": 1, "wait": wait, "await_after": await_after}


@pytest.mark.parametrize("await_after", [True, False])
async def test_a_step_in_flight_in_another_task_is_abandoned(
    rt: Runtime, await_after: bool
) -> None:
    """The run continues; the step that landed first stays in the ended run, the one in
    flight is recorded nowhere, and nothing lands in the next run's history."""
    done = await rt.start("in_flight", _in_flight(False, await_after), execution_id="f")
    assert (done.status, done.output) == ("completed", "run 2")
    await asyncio.sleep(0.05)  # the released slow effect finished (or was cancelled) by now
    history = await rt.history("f")
    cont = next(e.seq for e in history if isinstance(e, ev.ExecutionContinued))
    steps = [
        (e.type, getattr(e, "effect", None), e.seq < cont)
        for e in history
        if "step_id" in e.__dict__ and e.type.startswith("Effect")
    ]
    assert steps == [("EffectCompleted", "quick", True)]
    assert (await rt.load_state("f")).steps == {}


async def test_live_and_replay_agree_on_a_continue_with_a_step_in_flight(
    store: EventStore,
) -> None:
    """The test toolkit replays every execute call and the pre-deploy check replays the
    store: neither reports a divergence, and the run was not failed."""
    env = LoomTestEnv(make_app(), store=store)
    for n, await_after in enumerate([True, False]):
        got = await env.start("in_flight", _in_flight(True, await_after), execution_id=f"r{n}")
        assert got.status == "suspended" and (await env.runtime.load_state(f"r{n}")).run == 2
    seen: list[Checked] = []
    await ReplayChecker(make_app(), store).run(seen.append)
    assert sorted(c.summary.execution_id for c in seen) == ["r0", "r1"]
    assert [c.divergence for c in seen] == [None, None]
    done = await env.runtime.resume("r0", "go", "k", "yes")
    assert (done.status, done.output) == ("completed", "yes")


async def test_step_keys_differ_from_run_to_run(rt: Runtime) -> None:
    """Step ids restart every run; idempotency keys and message ids must not."""
    await rt.start("ticks", None, execution_id="rx")
    await rt.start("ticker", {"to": "rx", "keys": []}, execution_id="tk")
    assert (await rt.result("tk")).output == ["tk:1", "tk#run2:1", "tk#run3:1"]
    received = [e.message_id for e in await rt.history("rx") if e.type == "MessageReceived"]
    assert received == ["tk:2", "tk#run2:2", "tk#run3:2"]
    assert (await rt.result("rx")).output == [1, 2, 3]


async def test_a_message_redelivered_runs_later_is_still_a_repeat(rt: Runtime) -> None:
    """A sender whose step re-ran after the receiver continued as new twice (its worker died
    between the delivery and its record) delivers the same message id again: it is refused
    as a repeat, not taken a second time (ids stay known for days, not for one run)."""
    await rt.start("counter", START, execution_id="r")
    await rt.send("r", "add", 100, message_id="once")
    for n in range(6):  # two more runs: the first took "once" and 2 of these
        await rt.send("r", "add", n, message_id=f"m{n}")
    assert (await rt.load_state("r")).run == 3
    again = await rt.send("r", "add", 100, message_id="once")
    assert again.status == "suspended"
    await rt.send("r", "add", "stop")
    result = await rt.result("r")
    assert result.output == {"total": 115, "runs": 3}  # 100 once, then 0..5
