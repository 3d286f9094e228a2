"""Cancellation with cleanup and flow timeouts on every event store.

The same scenarios run over memory, SQLite (on and off the loop) and the Firestore emulator:
a cancel handed to a suspended flow whose saga compensates; a cancel that lands while an
effect runs (the holder's append conflicts and merges it); a flow deadline stored as the
execution's wake-up time, found by the store's due listing and ending it ``cancelled``.
Each log must replay to where it ended.
"""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from loom import EffectContext, FlowContext, Loom
from loom.runtime import Runtime
from loom.store import EventStore
from loom.testing import FakeClock, replay
from loom.wire import ExecutionPackage

app = Loom("cancel-contract")
calls: Counter[str] = Counter()
HOOK: dict[str, Runtime] = {}


@pytest.fixture(autouse=True)
def _fresh() -> None:
    calls.clear()
    HOOK.clear()


@app.effect("book")
async def book(ctx: EffectContext, what: str) -> str:
    calls[f"book {what}"] += 1
    rt = HOOK.get("cancel-while")
    if rt is not None and what == "car":
        await rt.cancel(ctx.execution_id, "while booking", by="mid")
    return f"ref-{what}"


@app.effect("undo", idempotent=False)
async def undo(ctx: EffectContext, ref: str) -> None:
    calls[f"undo {ref}"] += 1


@app.flow("trip", timeout=3600, cleanup_timeout=120)
async def trip(ctx: FlowContext, items: list[str]) -> list[str]:
    refs: list[str] = []
    try:
        for item in items:
            refs.append(await ctx.execute(book, item))
        await ctx.suspend("confirm", ctx.execution_id)
        return refs
    except asyncio.CancelledError:
        for ref in reversed(refs):
            await ctx.execute(undo, ref)
        raise


async def _types(store: EventStore, eid: str) -> list[str]:
    return [e.type for e in await store.read(eid)]


async def _replays_to_cancelled(store: EventStore, eid: str) -> None:
    outcome = await replay(app, await store.read(eid))
    assert outcome.status == "cancelled"


async def test_a_cancel_runs_the_compensations_once_and_ends_cancelled(store: EventStore):
    rt = Runtime(app, store, clock=FakeClock())
    started = await rt.start("trip", ["hotel", "flight"], execution_id="c-1")
    assert started.status == "suspended"
    result = await rt.cancel("c-1", "changed plans", by="alice")
    assert (result.status, result.error and result.error["message"]) == (
        "cancelled",
        "changed plans",
    )
    assert calls == Counter(
        {"book hotel": 1, "book flight": 1, "undo ref-flight": 1, "undo ref-hotel": 1}
    )
    kinds = await _types(store, "c-1")
    delivered = kinds.index("CancelDelivered")
    assert kinds.index("CancelRequested") < delivered
    assert kinds[delivered:].count("EffectStarted") == 2  # the compensations come after it
    assert kinds.count("CancelRequested") == kinds.count("CancelDelivered") == 1
    assert kinds[-1] == "ExecutionCancelled"
    [summary] = await store.list("cancelled")
    assert summary.execution_id == "c-1"
    await _replays_to_cancelled(store, "c-1")


async def test_a_cancel_that_lands_while_an_effect_runs_is_merged_and_handed_over(
    store: EventStore,
):
    rt = Runtime(app, store, clock=FakeClock())
    HOOK["cancel-while"] = rt
    result = await rt.start("trip", ["hotel", "car", "boat"], execution_id="c-2")
    assert result.status == "cancelled"
    # "car" finished and is compensated; "boat" never started.
    assert calls == Counter(
        {"book hotel": 1, "book car": 1, "undo ref-car": 1, "undo ref-hotel": 1}
    )
    events = await store.read("c-2")
    kinds = [e.type for e in events]
    assert kinds.index("CancelRequested") < kinds.index("CancelDelivered")
    assert events[-1].type == "ExecutionCancelled" and events[-1].by == "mid"  # type: ignore[union-attr]
    await _replays_to_cancelled(store, "c-2")


async def test_the_flow_deadline_is_the_wake_time_and_cancels_with_cleanup(store: EventStore):
    clock = FakeClock()
    rt = Runtime(app, store, clock=clock)
    await rt.start("trip", ["hotel"], execution_id="c-3")
    assert await store.list("suspended", due_before=clock.now + 3599) == []
    clock.now += 3600
    [due] = await store.list("suspended", due_before=clock.now)
    assert due.execution_id == "c-3"
    result = await rt.execute(ExecutionPackage(execution_id="c-3", reason="timer"))
    assert result.status == "cancelled"
    assert calls["undo ref-hotel"] == 1
    requested = [e for e in await store.read("c-3") if e.type == "CancelRequested"]
    assert [e.by for e in requested] == ["loom.timeout"]  # type: ignore[union-attr]
    await _replays_to_cancelled(store, "c-3")
