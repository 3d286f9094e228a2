"""Updates (``ctx.set_update_handler`` / ``Runtime.update``) on every store.

The runtime runs with no dispatcher, so an update runs its execution inline until it blocks:
the handler has answered when the call returns, unless a live session holds the execution.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from loom import EffectContext, FlowContext, Loom
from loom.errors import (
    ExecutionFinishedError,
    InvalidPayloadError,
    UnknownUpdateError,
    UpdateConflictError,
    UpdateFailedError,
    UpdateRejectedError,
    UpdateTimeoutError,
)
from loom.kernel.fold import fold
from loom.runtime import Runtime
from loom.store.base import EventStore
from loom.testing import replay
from loom.wire import ExecutionPackage

GATES: dict[str, asyncio.Event] = {}


def make_app(price_effect: str = "price") -> Loom:
    app = Loom("updates")

    @app.effect(price_effect)
    async def price(ctx: EffectContext, item: str) -> int:
        return len(item)

    @app.effect("slow")
    async def slow(ctx: EffectContext, key: str) -> str:
        await GATES[key].wait()
        return "slow done"

    @app.flow("cart")
    async def cart(ctx: FlowContext, _: None) -> list[str]:
        items: list[str] = []
        done = asyncio.Event()

        async def add(item: str) -> int:
            items.append(item)
            place = len(items)  # (before the step: handlers of one call run side by side)
            return await ctx.execute(price, item) + place * 100

        def nonempty(item: str) -> None:
            if not item:
                raise ValueError("an item has a name")

        def checkout() -> int:
            done.set()
            return len(items)

        def boom(why: str) -> None:
            raise RuntimeError(why)

        ctx.set_update_handler("add", add, validator=nonempty)
        ctx.set_update_handler("checkout", checkout)
        ctx.set_update_handler("boom", boom)
        await done.wait()
        await ctx.all_handlers_finished()
        return items

    @app.flow("busy")
    async def busy(ctx: FlowContext, key: str) -> list[str]:
        seen: list[str] = []
        ctx.set_update_handler("note", lambda text: seen.append(text) or len(seen))
        seen.append(await ctx.execute(slow, key))
        await ctx.suspend("go", key)
        return seen

    @app.flow("quick")
    async def quick(ctx: FlowContext, _: None) -> str:
        ctx.set_update_handler("never", lambda: "answered")
        return await ctx.suspend("go", "quick")

    return app


@pytest.fixture
def rt(store: EventStore) -> Runtime:
    return Runtime(make_app(), store)


async def types(rt: Runtime, eid: str) -> list[str]:
    return [e.type for e in await rt.history(eid)]


async def test_an_update_returns_its_handlers_value_and_a_repeat_the_same(rt: Runtime) -> None:
    waiting = await rt.start("cart", execution_id="c")
    assert waiting.status == "suspended"
    assert await rt.update("c", "add", "apple") == 105  # 5 + one item * 100
    assert await rt.update("c", "add", "fig", update_id="u-2") == 203
    before = await types(rt, "c")
    assert await rt.update("c", "add", "fig", update_id="u-2") == 203  # the same answer
    assert await types(rt, "c") == before  # and nothing written
    assert before.count("UpdateAccepted") == 2 and before.count("UpdateCompleted") == 2
    with pytest.raises(UpdateConflictError):
        await rt.update("c", "add", "kiwi", update_id="u-2")
    with pytest.raises(UpdateConflictError):
        await rt.update("c", "checkout", "fig", update_id="u-2")
    assert await types(rt, "c") == before
    assert await rt.update("c", "checkout") == 2
    done = await rt.result("c")
    assert (done.status, done.output) == ("completed", ["apple", "fig"])
    # A finished execution still answers an update it accepted, and refuses a new one.
    assert await rt.update("c", "add", "fig", update_id="u-2") == 203
    with pytest.raises(ExecutionFinishedError):
        await rt.update("c", "add", "pear")
    assert (await replay(rt.app, await rt.history("c"))).output == ["apple", "fig"]


async def test_a_refused_update_writes_nothing(rt: Runtime) -> None:
    await rt.start("cart", execution_id="r")
    before = await rt.history("r")
    with pytest.raises(UpdateRejectedError, match="an item has a name") as refused:
        await rt.update("r", "add", "")
    assert refused.value.code == "update_rejected"
    with pytest.raises(UpdateRejectedError, match="registered: add, boom, checkout") as unknown:
        await rt.update("r", "remove", "apple")
    assert unknown.value.code == "unknown_update_handler"
    with pytest.raises(InvalidPayloadError):
        await rt.update("r", "add", 42)  # the handler takes a str
    assert await rt.history("r") == before
    assert fold(before).updates == {}


async def test_a_handler_that_raises_fails_the_update_not_the_flow(rt: Runtime) -> None:
    await rt.start("cart", execution_id="b")
    with pytest.raises(UpdateFailedError, match="kaput") as failed:
        await rt.update("b", "boom", "kaput", update_id="b-1")
    assert failed.value.error["type"] == "RuntimeError"
    with pytest.raises(UpdateFailedError, match="kaput"):  # a repeat: the same error
        await rt.update("b", "boom", "kaput", update_id="b-1")
    got = await rt.update_outcome("b", "b-1")
    assert (got.status, got.error and got.error["message"]) == ("failed", "kaput")
    assert (await rt.result("b")).status == "suspended"
    assert await rt.update("b", "add", "ok") == 102


async def test_an_update_reaches_a_live_session_while_its_step_is_in_flight(
    rt: Runtime,
) -> None:
    GATES["live"] = asyncio.Event()
    await rt.start("busy", "live", execution_id="live", run=False)
    running = asyncio.ensure_future(rt.execute(ExecutionPackage(execution_id="live")))
    await asyncio.sleep(0.2)  # the session holds the claim, its effect is in flight
    accepted = await rt.start_update("live", "note", "while busy", update_id="n-1")
    assert accepted.status == "accepted"  # this process could not run it: the claim is live
    assert await rt.update_result("live", "n-1", timeout=10) == 1  # the session ran it
    assert not running.done()  # and its effect is still in flight
    GATES["live"].set()
    assert (await asyncio.wait_for(running, 10)).status == "suspended"
    assert (await rt.resume("live", "go", "live")).output == ["while busy", "slow done"]
    history = await types(rt, "live")
    assert history.index("UpdateAccepted") < history.index("UpdateCompleted")
    assert history.index("UpdateCompleted") < history.index("EffectCompleted")
    assert (await replay(rt.app, await rt.history("live"))).output == [
        "while busy",
        "slow done",
    ]


async def test_updates_sent_at_once_are_each_accepted_once_in_their_own_slot(
    rt: Runtime,
) -> None:
    await rt.start("cart", execution_id="many")
    names = [f"item-{i}" for i in range(6)]
    answers = await asyncio.gather(*(rt.update("many", "add", n) for n in names))
    state = await rt.load_state("many")
    assert sorted(rec["slot"] for rec in state.updates.values()) == [1, 2, 3, 4, 5, 6]
    assert sorted(a // 100 for a in answers) == [1, 2, 3, 4, 5, 6]  # each saw its own place
    assert await rt.update("many", "checkout") == 6
    output = (await rt.result("many")).output
    assert sorted(output) == sorted(names)
    assert (await replay(rt.app, await rt.history("many"))).output == output


async def test_an_update_the_flow_ends_before_has_no_answer(rt: Runtime) -> None:
    await rt.start("quick", execution_id="q")
    await rt.resume("q", "go", "quick")
    with pytest.raises(ExecutionFinishedError):
        await rt.start_update("q", "never")
    with pytest.raises(UnknownUpdateError):
        await rt.update_result("q", "nobody")


async def test_an_update_id_of_the_ended_run_still_answers_after_continue_as_new(
    store: EventStore,
) -> None:
    app = Loom("entity")

    @app.flow("counter")
    async def counter(ctx: FlowContext, total: int) -> None:
        state = {"total": total, "more": False}

        async def add(n: int) -> int:
            state["total"] += n
            return state["total"]

        def again() -> None:
            state["more"] = True

        ctx.set_update_handler("add", add)
        ctx.set_update_handler("again", again)
        await ctx.suspend("tick", str(total))
        await ctx.continue_as_new(state["total"])

    rt = Runtime(app, store)
    await rt.start("counter", 1, execution_id="e")
    assert await rt.update("e", "add", 2, update_id="a-1") == 3
    await rt.resume("e", "tick", "1")  # continues as new with 3
    state = await rt.load_state("e")
    assert state.run == 2 and state.updates["a-1"]["status"] == "completed"
    assert await rt.update("e", "add", 2, update_id="a-1") == 3  # answered, not run again
    assert await rt.update("e", "add", 4) == 7  # the new run's handler, its own slot 1
    assert (await rt.load_state("e")).update_slots == 1


async def _until_logged(rt: Runtime, eid: str, event_type: str) -> None:
    """Wait (10 s at most) until ``eid``'s log holds an ``event_type``: a fixed pause lost
    the race on a loaded machine."""
    async with asyncio.timeout(10):
        while event_type not in await types(rt, eid):  # noqa: ASYNC110  # (a store to poll)
            await asyncio.sleep(0.02)


async def test_a_pending_update_fails_when_the_run_continues_as_new(store: EventStore) -> None:
    app = Loom("entity")
    GATES["cont"] = asyncio.Event()

    @app.effect("wait")
    async def wait(ctx: EffectContext, _: None) -> None:
        await GATES["cont"].wait()

    @app.flow("looper")
    async def looper(ctx: FlowContext, n: int) -> None:
        async def slow_add(_: None) -> int:
            await ctx.execute(wait)
            return n

        ctx.set_update_handler("slow", slow_add)
        await ctx.suspend("tick", str(n))
        await ctx.continue_as_new(n + 1)  # does not wait for the handler

    rt = Runtime(app, store)
    await rt.start("looper", 1, execution_id="L")
    pending = asyncio.ensure_future(rt.update("L", "slow", None, update_id="s-1"))
    await _until_logged(rt, "L", "UpdateAccepted")
    assert not pending.done()  # the handler waits in its effect, the session holds it
    with pytest.raises(UpdateTimeoutError, match="s-1"):
        await rt.update_result("L", "s-1", timeout=0.2)
    resumed = asyncio.ensure_future(rt.resume("L", "tick", "1"))
    await _until_logged(rt, "L", "ExecutionContinued")  # the handler still in its effect
    GATES["cont"].set()
    await asyncio.wait_for(resumed, 10)
    with pytest.raises(UpdateFailedError, match="continued as new"):
        await asyncio.wait_for(pending, 10)


async def test_validation_sees_the_updates_accepted_before_it(rt: Runtime) -> None:
    app = Loom("seats")

    @app.flow("seats")
    async def seats(ctx: FlowContext, free: int) -> Any:
        left = {"n": free}

        def book(_: None) -> int:
            left["n"] -= 1
            return left["n"]

        def has_room(_: None) -> None:
            if left["n"] <= 0:
                raise ValueError("sold out")

        ctx.set_update_handler("book", book, validator=has_room)
        return await ctx.suspend("close", "seats")

    rt2 = Runtime(app, rt.store)
    await rt2.start("seats", 2, execution_id="s")
    results = await asyncio.gather(
        *(rt2.update("s", "book") for _ in range(4)), return_exceptions=True
    )
    booked = [r for r in results if isinstance(r, int)]
    refused = [r for r in results if isinstance(r, UpdateRejectedError)]
    assert sorted(booked) == [0, 1] and len(refused) == 2, results
    assert len((await rt2.load_state("s")).updates) == 2


async def test_a_budget_stop_in_a_handler_fails_the_flow_and_the_update(rt: Runtime) -> None:
    await rt.start("cart", execution_id="broke", budgets={"max_effect_calls": 1})
    assert await rt.update("broke", "add", "apple") == 105  # the one effect call allowed
    with pytest.raises(UpdateFailedError, match="failed before the update"):
        await asyncio.wait_for(rt.update("broke", "add", "fig"), 10)
    done = await rt.result("broke")
    assert done.status == "failed" and done.error is not None
    assert done.error["code"] == "budget_exceeded"


async def test_a_handler_that_diverges_parks_a_flow_waiting_on_no_step(rt: Runtime) -> None:
    """The cart's root waits on an ``asyncio.Event`` only a handler sets. Code deployed
    since makes the recorded handler take another step: replaying it parks the execution
    (its handler task stops on the session's signal and ends the flow with it) instead of
    leaving the execute call waiting for ever."""
    await rt.start("cart", execution_id="div")
    assert await rt.update("div", "add", "apple") == 105
    changed = Runtime(make_app(price_effect="price.v2"), rt.store)  # "add" steps elsewhere
    got = await asyncio.wait_for(changed.start_update("div", "add", "fig", update_id="f"), 20)
    assert got.status == "accepted"  # it stays so while the execution is parked
    state = await rt.load_state("div")
    assert state.parked_reason is not None and "'price'" in state.parked_reason
    # Back on the code that recorded it, a retry runs the update's handler.
    await rt.retry("div")
    assert await rt.update_result("div", "f", timeout=10) == 203
    assert await rt.update("div", "checkout") == 2


async def test_a_step_in_flight_can_update_its_own_flow(store: EventStore) -> None:
    """Temporal's ``update/self``: an effect of the flow sends the flow an update and waits
    for its answer while the session holds the execution (the session looks for updates
    while a step is in flight, and runs the handler meanwhile)."""
    app = Loom("self")
    runtimes: list[Runtime] = []

    @app.effect("update_me")
    async def update_me(ctx: EffectContext, _: None) -> Any:
        return await runtimes[0].update(ctx.execution_id, "done", "from the effect", timeout=20)

    @app.flow("selfish")
    async def selfish(ctx: FlowContext, _: None) -> list[Any]:
        seen: list[Any] = []
        ctx.set_update_handler("done", lambda why: seen.append(why) or "handled")
        seen.append(await ctx.execute(update_me))
        return seen

    rt = Runtime(app, store)
    runtimes.append(rt)
    done = await asyncio.wait_for(rt.start("selfish", execution_id="me"), 30)
    assert (done.status, done.output) == ("completed", ["from the effect", "handled"])
    kinds = await types(rt, "me")
    assert (
        kinds.index("UpdateAccepted")
        < kinds.index("UpdateCompleted")
        < kinds.index("EffectCompleted")
    )
    assert (await replay(app, await rt.history("me"))).output == done.output


async def test_an_update_to_a_full_log_is_refused_with_nothing_written(rt: Runtime) -> None:
    from loom.errors import LimitExceededError

    waiting = await rt.start("cart", execution_id="full", budgets={"max_events": 3})
    assert waiting.status == "suspended" and waiting.last_seq == 3
    before = await rt.history("full")
    with pytest.raises(LimitExceededError, match="max_events"):
        await rt.update("full", "add", "apple")
    assert await rt.history("full") == before


async def test_update_ids_stay_known_for_a_week_of_runs(store: EventStore) -> None:
    """As message ids (ADR 0075): a caller retrying an update after the flow continued as new
    twice gets its answer, not a second run of the handler; a week after its run ended the
    id is forgotten."""
    from loom.testing import FakeClock

    app = Loom("entity")

    @app.flow("counter")
    async def counter(ctx: FlowContext, total: int) -> None:
        state = {"total": total}

        def add(n: int) -> int:
            state["total"] += n
            return state["total"]

        ctx.set_update_handler("add", add)
        await ctx.suspend("tick", str(total))
        await ctx.continue_as_new(state["total"])

    clock = FakeClock()
    rt = Runtime(app, store, clock=clock)
    await rt.start("counter", 0, execution_id="e")
    assert await rt.update("e", "add", 1, update_id="once") == 1
    await rt.resume("e", "tick", "0")  # run 2, total 1
    await rt.resume("e", "tick", "1")  # run 3, total 1
    assert await rt.update("e", "add", 1, update_id="once") == 1  # answered, not run again
    assert (await rt.load_state("e")).run == 3
    clock.now += 8 * 24 * 3600
    await rt.resume("e", "tick", "1")  # run 4, a week and a day after run 1 ended
    assert "once" not in (await rt.load_state("e")).updates
    assert await rt.update("e", "add", 1, update_id="once") == 2  # a new update now
