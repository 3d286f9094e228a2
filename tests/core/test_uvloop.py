"""Flows run on uvloop, the event loop uvicorn and other servers pick when it is installed.

Loom wraps the running loop's ``call_at``/``call_later`` to keep a flow's asyncio timers on
flow time (``loom.kernel.loop_timers``). uvloop's ``call_at`` calls ``self.call_later``: a wrapper
of ``call_later`` that went back to ``call_at`` for other code's timers recursed without
end, and the first timer of any execution on uvloop raised ``RecursionError``. Here the
loop-timer scenarios of ``test_loop_timers`` and a batch of concurrent flows on SQLite run
on a real uvloop loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest
import uvloop

from loom import EffectContext, FlowContext, Loom
from loom.runtime import Runtime
from loom.store import SqliteEventStore
from tests.core import test_loop_timers as scenarios

T = TypeVar("T")


def _on_uvloop(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        assert type(runner.get_loop()).__module__.startswith("uvloop")
        return runner.run(make())


@pytest.mark.parametrize(
    "scenario",
    [
        scenarios.test_an_effects_own_timers_are_not_flow_timers,
        scenarios.test_a_timer_cancelled_before_any_append_leaves_nothing,
        scenarios.test_a_step_that_beats_its_deadline_is_not_cut_short,
        scenarios.test_a_flow_waiting_on_asyncio_sleep_suspends_and_the_dispatcher_wakes_it,
        scenarios.test_a_reply_before_the_deadline_wins_and_one_after_it_loses,
    ],
    ids=lambda f: f.__name__.removeprefix("test_"),
)
def test_loop_timer_scenarios_hold_on_uvloop(
    scenario: Callable[[], Coroutine[Any, Any, None]],
) -> None:
    _on_uvloop(scenario)


def test_a_step_cut_short_by_its_deadline_runs_once_on_uvloop(tmp_path: Path) -> None:
    cut_short = scenarios.test_a_non_idempotent_step_cut_short_runs_once_and_keeps_its_outcome
    _on_uvloop(lambda: cut_short("sqlite", tmp_path))


app = Loom("on-uvloop")


@app.effect("double")
async def double(ctx: EffectContext, n: int) -> int:
    await asyncio.sleep(0)  # the effect's own loop time
    return 2 * n


@app.flow("sum_doubles")
async def sum_doubles(ctx: FlowContext, n: int) -> int:
    total = 0
    for i in range(n):
        total += await ctx.execute(double, i)
    return total


def test_concurrent_flows_complete_on_uvloop_with_sqlite(tmp_path: Path) -> None:
    async def run() -> list[Any]:
        store = SqliteEventStore(tmp_path / "loom.db")
        rt = Runtime(app, store)
        try:
            return list(
                await asyncio.gather(
                    *(rt.start("sum_doubles", 5, execution_id=f"u{i}") for i in range(20))
                )
            )
        finally:
            await store.aclose()

    results = _on_uvloop(run)
    assert [(r.status, r.output) for r in results] == [("completed", 20)] * 20


async def test_the_task_factory_passes_on_what_newer_loops_give_it():
    """uvloop on Python 3.13 calls the loop's task factory with ``eager_start=``, and newer
    asyncio passes ``name=``: the factory hands such options on to the task."""
    from loom.kernel.context import task_factory

    async def nothing() -> int:
        return 7

    task = task_factory(asyncio.get_running_loop(), nothing(), name="passed-on")
    assert task.get_name() == "passed-on" and await task == 7
