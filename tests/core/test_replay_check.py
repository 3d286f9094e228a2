"""``loom.ops.replay_check``: which stored executions the current code would not replay."""

from __future__ import annotations

from typing import Any

from loom import EffectContext, FlowContext, Loom
from loom.app import Retry
from loom.ops.replay_check import Checked, ReplayChecker
from loom.runtime import Runtime
from loom.store.memory import InMemoryEventStore
from loom.testing import FakeClock
from loom.wire import ExecutionPackage


def make_app(body: str, versions: tuple[int, ...] = (1,)) -> Loom:
    """The flow ``order`` whose steps are ``body`` (effect names, ``G`` for the gate)."""
    app = Loom("shop")

    async def fx(ctx: EffectContext, value: Any) -> str:
        return ctx.effect

    for name in "abcd":
        app.effect(name)(fx)

    async def order(ctx: FlowContext, _: None) -> str:
        out = ""
        for op in body:
            if op == "G":
                await ctx.suspend("approval", ctx.execution_id)
            else:
                out += await ctx.execute(op)
        return out

    for version in versions:
        app.flow("order", version=version)(order)
    return app


async def run_check(app: Loom, store: InMemoryEventStore, **options: Any) -> list[Checked]:
    seen: list[Checked] = []
    await ReplayChecker(app, store, **options).run(seen.append)
    return seen


def diverging(seen: list[Checked]) -> dict[str, Any]:
    return {c.summary.execution_id: c.divergence for c in seen if c.divergence is not None}


async def seeded(body: str, ids: list[str], clock: FakeClock | None = None) -> InMemoryEventStore:
    store = InMemoryEventStore()
    rt = Runtime(make_app(body), store, clock=clock or FakeClock())
    for eid in ids:
        await rt.start("order", execution_id=eid)
    return store


async def test_unchanged_code_replays_every_live_execution():
    store = await seeded("aGb", [f"e{i}" for i in range(7)])
    seen = await run_check(make_app("aGb"), store, page=3, concurrency=2)
    assert sorted(c.summary.execution_id for c in seen) == [f"e{i}" for i in range(7)]
    assert diverging(seen) == {}


async def test_a_changed_step_names_the_execution_the_step_and_both_sides():
    store = await seeded("aGb", ["e1"])
    found = diverging(await run_check(make_app("cGb"), store))
    d = found["e1"]
    assert (d.flow, d.version, d.status, d.step_id) == ("order", "1", "suspended", "1")
    assert "'a'" in d.history and "'c'" in d.code


async def test_a_removed_trailing_step_is_caught_though_the_replay_itself_succeeds():
    store = await seeded("ab", ["e1"])  # completed with two steps
    d = diverging(await run_check(make_app("a"), store))["e1"]
    assert (d.step_id, d.status, d.history) == ("2", "completed", "effect 'b' (completed)")
    assert "never reaches" in d.code


async def test_steps_added_after_the_end_of_the_history_are_not_a_divergence():
    store = await seeded("aG", ["e1"])
    assert diverging(await run_check(make_app("aGbcd"), store)) == {}


async def test_a_deleted_version_with_live_executions_diverges_at_the_start():
    store = await seeded("aG", ["e1"])
    v2_only = Loom("shop")
    v2_only.effects = make_app("aG").effects

    @v2_only.flow("order", version=2)
    async def order(ctx: FlowContext, _: None) -> str:
        return await ctx.execute("a")

    d = diverging(await run_check(v2_only, store))["e1"]
    assert (d.version, d.step_id) == ("1", None)
    assert "no version 1" in d.code


async def test_finished_executions_are_sampled_and_must_end_the_same_way():
    store = InMemoryEventStore()
    rt = Runtime(make_app("a"), store, clock=FakeClock())
    for i in range(3):
        await rt.start("order", execution_id=f"done{i}")
    seen = await run_check(make_app("ab"), store, sample=2)
    assert len(seen) == 2  # the two newest completed ones
    d = next(iter(diverging(seen).values()))
    assert (d.step_id, d.status) == ("2", "completed")
    assert await run_check(make_app("ab"), store, sample=0) == []


async def test_a_parked_execution_that_now_replays_is_reported_as_continuing():
    store = await seeded("aG", ["p"])
    await Runtime(make_app("bG"), store, clock=FakeClock()).resume("p", "approval", "p")
    assert (await store.summary("p")).parked_reason is not None
    seen = await run_check(make_app("aGc"), store)
    assert [(c.summary.execution_id, c.parked, c.divergence) for c in seen] == [("p", True, None)]


async def test_a_step_that_waited_on_durable_backoffs_replays_cleanly():
    """A retry backoff too long to wait inline is a timer gate ``{step}/retry{n}`` in the
    history; once the step succeeded, a replay is served its outcome and never waits on
    those timers again, which is no divergence."""
    app = Loom("shop")

    @app.effect("flaky", retry=Retry(max_attempts=3, initial_interval=20.0, jitter=0.0))
    async def flaky(ctx: EffectContext, _: None) -> int:
        if ctx.attempt < 3:
            raise RuntimeError(f"attempt {ctx.attempt} failed")
        return ctx.attempt

    @app.flow("order")
    async def order(ctx: FlowContext, _: None) -> int:
        return await ctx.execute("flaky")

    store, clock = InMemoryEventStore(), FakeClock()
    rt = Runtime(app, store, clock=clock, max_inline_backoff=5.0)
    await rt.start("order", execution_id="o1")
    for _ in range(2):  # each backoff is a durable timer: due, then run
        clock.now += 60
        await rt.execute(ExecutionPackage(execution_id="o1", reason="timer"))
    assert (await rt.result("o1")).output == 3
    gates = [e.step_id for e in await rt.history("o1") if e.type == "ExecutionSuspended"]
    assert gates == ["1/retry2", "1/retry3"]
    seen = await run_check(app, store)
    assert diverging(seen) == {}


async def test_an_execution_stopped_by_its_budget_replays_cleanly():
    """A budget stops an execution before the step that would exceed it; the replay stops
    there too, as the live run did, rather than going on to that step."""
    store = InMemoryEventStore()
    rt = Runtime(make_app("ab"), store, clock=FakeClock())
    ended = await rt.start("order", execution_id="o1", budgets={"max_effect_calls": 1})
    assert ended.status == "failed" and ended.error is not None
    assert ended.error["code"] == "budget_exceeded"
    seen = await run_check(make_app("ab"), store)
    assert diverging(seen) == {}
