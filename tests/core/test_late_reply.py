"""A reply after a gate's recorded deadline loses: the timeout wins, and the reply is refused.

The outcome follows the deadline recorded in ``ExecutionSuspended.wake_at`` and the reply's
own recorded time, not when the timer's execute call happens to be delivered. The reply's
sender hears it lost (``GateTimedOutError``, 409 ``gate_timed_out``, naming the gate and
when it timed out), whether the timeout is recorded yet or not; an exact redelivery of a
reply that was accepted stays an idempotent success.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from loom import FlowContext, GateTimeoutError, Loom
from loom import events as ev
from loom.errors import GateTimedOutError
from loom.kernel.fold import fold
from loom.runtime import Runtime
from loom.store.memory import InMemoryEventStore
from loom.testing import LoomTestEnv


def make_app() -> Loom:
    app = Loom("late")

    @app.flow("approval")
    async def approval(ctx: FlowContext, _: None) -> str:
        try:
            return await ctx.suspend("approve", "k", timeout=timedelta(minutes=5))
        except GateTimeoutError:
            return "timed out"

    return app


async def test_a_reply_after_the_deadline_loses_to_the_timeout_even_if_the_timer_is_late():
    # (Before, this reply was appended and answered 200 though the timeout took the gate:
    # its sender never learnt it lost. It is refused now, with nothing appended.)
    env = LoomTestEnv(make_app())
    started = await env.start("approval", None, execution_id="e")
    assert started.status == "suspended"
    count = len(await env.history("e"))
    env.clock.now += 6 * 60  # the timer task is late: no execute call for six minutes
    with pytest.raises(GateTimedOutError) as refused:
        await env.runtime.resume("e", "approve", "k", "yes")
    _names_the_gate(refused.value, started.execution_id)
    assert len(await env.history("e")) == count  # nothing appended
    [result] = await env.skip(0)  # the timer's call, when it comes, ends it
    assert (result.status, result.output) == ("completed", "timed out")


async def test_a_reply_after_a_recorded_timeout_is_refused_not_taken_for_a_redelivery():
    # (Before, the timeout's resume under the same key made this reply look like a
    # redelivery of an accepted one: answered 200 with the execution's state.)
    env = LoomTestEnv(make_app())
    await env.start("approval", None, execution_id="e")
    [timed_out] = await env.skip(timedelta(minutes=6))
    assert timed_out.output == "timed out"
    count = len(await env.history("e"))
    for _ in range(2):  # its redelivery is refused the same way
        with pytest.raises(GateTimedOutError) as refused:
            await env.runtime.resume("e", "approve", "k", "late")
        _names_the_gate(refused.value, "e")
    assert len(await env.history("e")) == count


async def test_a_redelivery_of_an_accepted_reply_stays_a_success_after_the_deadline():
    env = LoomTestEnv(make_app())
    await env.start("approval", None, execution_id="e")
    env.clock.now += 4 * 60
    first = await env.runtime.resume("e", "approve", "k", "yes")
    count = len(await env.history("e"))
    env.clock.now += 10 * 60  # long past the deadline the accepted reply beat
    again = await env.runtime.resume("e", "approve", "k", "yes")
    assert (again.status, again.output) == (first.status, first.output) == ("completed", "yes")
    assert len(await env.history("e")) == count


def _names_the_gate(exc: GateTimedOutError, eid: str) -> None:
    assert exc.code == "gate_timed_out"
    assert "'approve'" in exc.message and "'k'" in exc.message and eid in exc.message
    assert exc.details["on"] == "approve" and exc.details["correlation_key"] == "k"
    assert exc.details["step_id"] == "1"
    wake_at = exc.details["timed_out_at"]
    assert isinstance(wake_at, float) and wake_at > 0


async def test_a_reply_before_the_deadline_wins():
    env = LoomTestEnv(make_app())
    await env.start("approval", None, execution_id="e")
    env.clock.now += 4 * 60
    result = await env.runtime.resume("e", "approve", "k", "yes")
    assert (result.status, result.output) == ("completed", "yes")
    assert await env.skip(timedelta(minutes=10)) == []  # the deadline passing does nothing


def test_the_fold_decides_by_the_recorded_times_alone():
    def log(reply_at: float) -> list[ev.Event]:
        return [
            ev.ExecutionStarted(execution_id="e", flow="f", seq=1, at=0.0),
            ev.ExecutionSuspended(
                step_id="1", on="approve", correlation_key="k", wake_at=300.0, seq=2, at=0.0
            ),
            ev.ExecutionResumed(
                on="approve", correlation_key="k", payload="yes", seq=3, at=reply_at
            ),
        ]

    late = fold(log(360.0)).resumes
    assert [(r["timed_out"], r["payload"]) for r in late.values()] == [(True, None)]
    on_time = fold(log(299.0)).resumes
    assert [(r["timed_out"], r["payload"]) for r in on_time.values()] == [(False, "yes")]
    at_deadline = fold(log(300.0)).resumes  # a tie goes to the timer, as when it fires
    assert [r["timed_out"] for r in at_deadline.values()] == [True]


async def test_a_reply_the_deadline_overtakes_on_its_way_into_the_log_is_refused():
    """The deadline passes between the check and the append (the clock moves on): the fold
    gives the gate to the timeout by the reply's recorded time, and the reply is refused
    all the same; its record counts as the timeout, so the flow goes on at once."""
    now = [0.0]
    ticks: list[float] = []

    def clock() -> float:
        return ticks.pop(0) if ticks else now[0]

    rt = Runtime(make_app(), InMemoryEventStore(), clock=clock)
    started = await rt.start("approval", None, execution_id="e")
    assert started.status == "suspended"
    now[0], ticks[:] = 400.0, [299.0]  # the check still sees 299; the append sees 400
    with pytest.raises(GateTimedOutError):
        await rt.resume("e", "approve", "k", "yes")
    assert (await rt.result("e")).output == "timed out"
    resumed = [e for e in await rt.history("e") if e.type == "ExecutionResumed"]
    assert [e.at for e in resumed] == [400.0]  # the reply itself, recorded as the timeout
