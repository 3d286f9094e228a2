"""asyncio timers inside flows are flow time, backed by the log (``loom.kernel.loop_timers``).

Flow code's ``asyncio.sleep``/``wait_for``/``timeout`` record their deadlines and firings;
an effect's own timers and the engine's stay on the loop's clock; a suspended flow's pending
timer wakes it through the dispatcher; a reply after the recorded deadline loses to the
timer; a step cut short by a deadline keeps its delivery contract.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from pathlib import Path
from typing import Any

import pytest

from loom import EffectContext, FlowContext, Loom
from loom import events as ev
from loom.dispatch.inprocess import InProcessDispatcher
from loom.errors import ConfigurationError
from loom.kernel.fold import fold
from loom.kernel.loop_timers import LOOP_TIMER, install
from loom.runtime import Runtime
from loom.store import SqliteEventStore
from loom.store.memory import InMemoryEventStore
from loom.testing import LoomTestEnv, replay
from loom.wire import ExecutionPackage
from loom.workers.local import LocalWorkerRuntime

app = Loom("loop-timers")
CALLS: list[str] = []


@app.effect("nap")
async def nap(ctx: EffectContext, seconds: float) -> float:
    # The effect's own deadline and sleep: the loop's clock, never recorded as flow timers.
    async with asyncio.timeout(seconds + 5):
        await asyncio.sleep(seconds)
    return seconds


@app.effect("charge", idempotent=False)
async def charge(ctx: EffectContext, seconds: float) -> str:
    CALLS.append(ctx.idempotency_key)
    await asyncio.sleep(seconds)
    return "charged"


@app.flow("guarded")
async def guarded(ctx: FlowContext, seconds: float) -> Any:
    try:
        return await asyncio.wait_for(ctx.execute(charge, seconds), 0.2)
    except TimeoutError:
        return "timed out"


@app.flow("idle_timeout")
async def idle_timeout(ctx: FlowContext, _: None) -> float:
    async with asyncio.timeout(30):  # created and cancelled before anything is appended
        await asyncio.sleep(0)
    return await ctx.execute(nap, 0.01)


@app.flow("plain")
async def plain(ctx: FlowContext, _: None) -> float:
    return await ctx.execute(nap, 0.01)


@app.flow("sleeper")
async def sleeper(ctx: FlowContext, seconds: float) -> str:
    await asyncio.sleep(seconds)
    return "rested"


@app.flow("approval")
async def approval(ctx: FlowContext, seconds: float) -> Any:
    try:
        return await asyncio.wait_for(ctx.suspend("approve", ctx.execution_id), seconds)
    except TimeoutError:
        return "timed out"


def _timer_events(history: list[ev.Event]) -> list[ev.Event]:
    return [
        e
        for e in history
        if (isinstance(e, ev.DecisionRecorded) and e.kind == "timer")
        or getattr(e, "on", None) == LOOP_TIMER
    ]


async def test_an_effects_own_timers_are_not_flow_timers():
    rt = Runtime(app, InMemoryEventStore())
    done = await rt.start("plain", None)
    assert done.status == "completed"
    assert _timer_events(await rt.history(done.execution_id)) == []


async def test_a_timer_cancelled_before_any_append_leaves_nothing():
    rt = Runtime(app, InMemoryEventStore())
    with_timer = await rt.start("idle_timeout", None, execution_id="a")
    without = await rt.start("plain", None, execution_id="b")
    assert with_timer.output == without.output == 0.01
    types = [e.type for e in await rt.history("a")]
    assert types == [e.type for e in await rt.history("b")]


@pytest.mark.parametrize("store_kind", ["memory", "sqlite"])
async def test_a_non_idempotent_step_cut_short_runs_once_and_keeps_its_outcome(
    store_kind: str, tmp_path: Path
):
    """The deadline fires live while the step runs: the flow sees TimeoutError at once, the
    step is not interrupted, its outcome is recorded after the firing and passed over, and
    no replay or redelivery ever invokes it again."""
    CALLS.clear()
    store = InMemoryEventStore() if store_kind == "memory" else SqliteEventStore(tmp_path / "db")
    rt = Runtime(app, store)
    try:
        began = time.monotonic()
        done = await rt.start("guarded", 0.6, execution_id="g")
        assert done.output == "timed out"
        assert time.monotonic() - began >= 0.6  # the call ended once the step had landed
        history = await rt.history("g")
        types = [e.type for e in history]
        fired = types.index("ExecutionResumed")
        assert types.index("EffectStarted") < fired < types.index("EffectCompleted")
        assert (await replay(app, history)).output == "timed out"
        again = await rt.execute(ExecutionPackage(execution_id="g", reason="start"))
        assert again.output == "timed out"
        assert CALLS == ["g:1"]  # wait_for's awaitable is numbered in the flow's scope
    finally:
        if isinstance(store, SqliteEventStore):
            await store.aclose()


async def test_a_step_that_beats_its_deadline_is_not_cut_short():
    CALLS.clear()
    rt = Runtime(app, InMemoryEventStore())
    done = await rt.start("guarded", 0.01, execution_id="quick")
    assert done.output == "charged"
    history = await rt.history("quick")
    assert not any(getattr(e, "on", None) == LOOP_TIMER for e in history)  # never fired
    assert (await replay(app, history)).output == "charged"


async def test_a_flow_waiting_on_asyncio_sleep_suspends_and_the_dispatcher_wakes_it():
    rt = Runtime(app, InMemoryEventStore())
    rt.dispatcher = InProcessDispatcher(LocalWorkerRuntime(rt))
    started = await rt.start("sleeper", 0.3, execution_id="s")
    assert started.status == "suspended"  # the call ended: nothing holds a worker
    gate = next(e for e in await rt.history("s") if isinstance(e, ev.ExecutionSuspended))
    assert gate.on == LOOP_TIMER and gate.wake_at is not None
    for _ in range(100):
        await asyncio.sleep(0.05)
        if (await rt.result("s")).status == "completed":
            break
    assert (await rt.result("s")).output == "rested"
    fired = [e for e in await rt.history("s") if isinstance(e, ev.ExecutionResumed)]
    assert [e.timed_out for e in fired] == [True] and fired[0].at >= gate.wake_at


async def test_a_reply_before_the_deadline_wins_and_one_after_it_loses():
    rt = Runtime(app, InMemoryEventStore())
    await rt.start("approval", 0.2, execution_id="early")
    assert (await rt.resume("early", "approve", "early", "yes")).output == "yes"
    await rt.start("approval", 0.2, execution_id="late")
    await asyncio.sleep(0.3)  # the deadline passes; no dispatcher wakes it
    assert (await rt.resume("late", "approve", "late", "yes")).output == "timed out"
    assert (await replay(app, await rt.history("late"))).output == "timed out"


def test_the_fold_fires_due_loop_timers_before_a_late_reply_earliest_first():
    """Pure: two suspended loop timers both due when a reply lands take places before it,
    in deadline order; one not yet due does not."""
    events: list[ev.Event] = [
        ev.ExecutionStarted(execution_id="x", flow="approval"),
        ev.ExecutionSuspended(step_id="1", on="approve", correlation_key="x"),
        ev.ExecutionSuspended(step_id="t2", on=LOOP_TIMER, correlation_key="x:t2", wake_at=20),
        ev.ExecutionSuspended(step_id="t1", on=LOOP_TIMER, correlation_key="x:t1", wake_at=10),
        ev.ExecutionSuspended(step_id="t3", on=LOOP_TIMER, correlation_key="x:t3", wake_at=99),
        ev.ExecutionResumed(on="approve", correlation_key="x", payload="yes"),
    ]
    for seq, (event, at) in enumerate(zip(events, [0, 1, 1, 1, 1, 30], strict=True), 1):
        object.__setattr__(event, "seq", seq)
        object.__setattr__(event, "at", at)
    state = fold(events)
    seq = {k.split("\x1f")[1]: r["seq"] for k, r in state.resumes.items()}
    assert seq["x:t1"] < seq["x:t2"] < seq["x"] == 6
    assert "x:t3" not in seq


async def test_the_test_env_skips_time_over_asyncio_timers():
    env = LoomTestEnv(app)
    started = await env.start("approval", 60, execution_id="t")
    assert started.status == "suspended"
    assert await env.skip(30) == []  # not due yet
    [woken] = await env.skip(31)
    assert woken.output == "timed out"  # and the always-on replay agreed
    slept = await env.start("sleeper", 3600, execution_id="z")
    assert slept.status == "suspended"
    [done] = await env.skip(3600)
    assert done.output == "rested"


def test_a_loop_whose_call_at_cannot_be_wrapped_is_refused_by_name():
    class SealedLoop:  # like a loop written in C: no attribute can be set on it
        __slots__ = ()

        def call_at(self, *args: Any, **kwargs: Any) -> asyncio.TimerHandle:
            raise AssertionError("never called")

        def call_later(self, *args: Any, **kwargs: Any) -> asyncio.TimerHandle:
            raise AssertionError("never called")

    with pytest.raises(ConfigurationError, match=r"call_at.*SealedLoop"):
        install(SealedLoop())  # type: ignore[arg-type]


@app.effect("echo")
async def echo(ctx: EffectContext, value: int) -> int:
    return value


@app.flow("assorted")
async def assorted(ctx: FlowContext, _: None) -> list[Any]:
    out: list[Any] = []
    try:  # nested: the outer deadline cuts the inner sleep short
        await asyncio.wait_for(asyncio.sleep(10), 1)
    except TimeoutError:
        out.append("outer")
    for i in range(2):  # sleeps in a loop, between steps
        await asyncio.sleep(2)
        out.append(await ctx.execute(echo, i))
    woken = asyncio.Event()
    asyncio.get_running_loop().call_later(5, woken.set)  # a bare loop callback
    await woken.wait()
    queue: asyncio.Queue[int] = asyncio.Queue()
    try:
        await asyncio.wait_for(queue.get(), 3)
    except TimeoutError:
        out.append("queue empty")
    async with asyncio.timeout(100) as deadline:  # moved before anything fired
        deadline.reschedule(asyncio.get_running_loop().time() + 50)
        out.append(await ctx.execute(echo, 9))
    return out


async def test_nested_looped_and_callback_timers_replay_under_the_test_env():
    env = LoomTestEnv(app)  # every execute call below is checked by a full replay
    assert (await env.start("assorted", None, execution_id="a")).status == "suspended"
    results = [await env.skip(seconds) for seconds in (1, 2, 2, 5, 3)]
    assert [r.status for [r] in results] == ["suspended"] * 4 + ["completed"]
    assert results[-1][0].output == ["outer", 0, 1, "queue empty", 9]
    deadlines = [e for e in _timer_events(await env.history("a")) if e.type == "DecisionRecorded"]
    assert len(deadlines) == 7  # the timeout moved before any append left nothing


@app.flow("forever")
async def forever(ctx: FlowContext, _: None) -> str:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.sleep(math.inf), 10)
    await asyncio.sleep(math.inf)  # suspends for good: only a cancel ends it
    return "never"


async def test_an_endless_sleep_suspends_without_a_deadline():
    env = LoomTestEnv(app)
    assert (await env.start("forever", None, execution_id="f")).status == "suspended"
    [woken] = await env.skip(10)  # the finite deadline fires; the endless sleep does not
    assert woken.status == "suspended" and woken.wake_at is None
    recorded = [e for e in _timer_events(await env.history("f")) if e.type == "DecisionRecorded"]
    assert [e.value for e in recorded] == [env.clock.now - 10 + 10]  # only the finite one


@app.flow("rounds")
async def rounds(ctx: FlowContext, n: int) -> str:
    if n == 0:
        try:  # the deadline fires live while the step runs: a firing with no gate
            await asyncio.wait_for(ctx.execute(nap, 0.4), 0.1)
        except TimeoutError:
            await ctx.continue_as_new(1)
    try:  # the next run's first timer has the same id: its firing must be its own
        await asyncio.wait_for(ctx.execute(nap, 0.01), 5)
        return "in time"
    except TimeoutError:
        return "timed out"


async def test_a_timer_of_the_next_run_does_not_take_the_last_runs_firing():
    rt = Runtime(app, InMemoryEventStore())
    await rt.start("rounds", 0, execution_id="r")
    done = await rt.execute(ExecutionPackage(execution_id="r"))  # the next run, if not yet
    assert (done.status, done.output) == ("completed", "in time")
    history = await rt.history("r")
    types = [e.type for e in history]
    late = next(i for i, e in enumerate(history) if getattr(e, "output", None) == 0.4)
    assert late < types.index("ExecutionContinued")  # the abandoned step landed in run 1
