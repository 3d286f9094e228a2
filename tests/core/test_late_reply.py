"""A reply after a gate's recorded deadline is a no-op: the timeout wins.

The outcome follows the deadline recorded in ``ExecutionSuspended.wake_at`` and the reply's
own recorded time, not when the timer's execute call happens to be delivered.
"""

from __future__ import annotations

from datetime import timedelta

from loom import FlowContext, GateTimeoutError, Loom
from loom import events as ev
from loom.fold import fold
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
    env = LoomTestEnv(make_app())
    started = await env.start("approval", None, execution_id="e")
    assert started.status == "suspended"
    env.clock.now += 6 * 60  # the timer task is late: no execute call for six minutes
    result = await env.runtime.resume("e", "approve", "k", "yes")
    assert (result.status, result.output) == ("completed", "timed out")


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
