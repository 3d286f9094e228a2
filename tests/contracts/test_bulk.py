"""Bulk operations (cancel, resume, retry what a filter selects) on every event store.

Selected by flow, status, creation time and ids, oldest first, with a dry run that writes
nothing and a count; each execution gets the control call an operator would make for it
alone, and a second run of the same operation does nothing twice.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from loom import EffectContext, FlowContext, Loom
from loom import events as ev
from loom.errors import InputError
from loom.ops.bulk import Selection
from loom.store import EventStore, ExecutionSummary
from loom.testing import LoomTestEnv

app = Loom("bulk")
calls: Counter[str] = Counter()
FAIL: set[str] = set()


@pytest.fixture(autouse=True)
def _fresh() -> None:
    calls.clear()
    FAIL.clear()


@app.effect("note")
async def note(ctx: EffectContext, what: str) -> str:
    calls[f"{ctx.execution_id}:{what}"] += 1
    if what in FAIL:
        raise RuntimeError(f"{what} broke")
    return what


@app.flow("approval")
async def approval(ctx: FlowContext, _: None) -> Any:
    try:
        answer = await ctx.suspend("approve", f"{ctx.execution_id}:approve")
    except asyncio.CancelledError:
        await ctx.execute(note, "undo")
        raise
    return await ctx.execute(note, f"approved {answer}")


@app.flow("other")
async def other(ctx: FlowContext, _: None) -> Any:
    return await ctx.suspend("approve", f"{ctx.execution_id}:approve")


@app.flow("two_gates")
async def two_gates(ctx: FlowContext, _: None) -> Any:
    return await asyncio.gather(ctx.suspend("approve", "a"), ctx.suspend("approve", "b"))


@app.flow("fragile")
async def fragile(ctx: FlowContext, what: str) -> Any:
    await ctx.execute(note, "first")
    return await ctx.execute(note, what)


async def _history_sizes(store: EventStore) -> dict[str, int]:
    return {row.execution_id: row.last_seq for row in await store.list()}


async def test_a_dry_run_counts_and_writes_nothing_then_the_cancel_cleans_each_up(
    store: EventStore,
):
    env = LoomTestEnv(app, store=store)
    for n in range(3):
        await env.start("approval", None, execution_id=f"a{n}")
        env.clock.now += 1
    await env.start("other", None, execution_id="o1")
    await env.start("fragile", "done", execution_id="f1")  # completed: never selected
    before = await _history_sizes(store)
    plan = await env.runtime.bulk("cancel", Selection(flow="approval"), by="ops", dry_run=True)
    assert (plan.count, plan.more) == (3, False)
    assert [(i.execution_id, i.action, i.outcome) for i in plan.items] == [
        ("a2", "cancel", None),  # newest first
        ("a1", "cancel", None),
        ("a0", "cancel", None),
    ]
    assert await _history_sizes(store) == before  # a dry run writes nothing
    done = await env.runtime.bulk("cancel", Selection(flow="approval"), by="ops", reason="bulk")
    assert done.count == 3 and {i.outcome for i in done.items} == {"cancelled"}
    undone = Counter({k: n for k, n in calls.items() if k.endswith(":undo")})
    assert undone == Counter({"a0:undo": 1, "a1:undo": 1, "a2:undo": 1})
    for n in range(3):
        (asked,) = [e for e in await store.read(f"a{n}") if isinstance(e, ev.CancelRequested)]
        assert (asked.by, asked.reason) == ("ops", "bulk")
    assert (await env.runtime.result("o1")).status == "suspended"
    again = await env.runtime.bulk("cancel", Selection(flow="approval"), by="ops")
    assert (again.count, again.items) == (0, [])  # nothing left to cancel


async def test_a_selection_by_time_range_ids_and_limit(store: EventStore):
    env = LoomTestEnv(app, store=store)
    for n in range(5):
        await env.start("approval", None, execution_id=f"t{n}")
        await asyncio.sleep(0.01)  # the store stamps creation with its own clock
    created = {row.execution_id: row.created_at for row in await store.list()}
    window = Selection(created_from=created["t1"], created_before=created["t4"])
    plan = await env.runtime.bulk("cancel", window, by="ops", dry_run=True)
    assert [i.execution_id for i in plan.items] == ["t3", "t2", "t1"]
    limited = await env.runtime.bulk("cancel", Selection(limit=2), by="ops", dry_run=True)
    assert ([i.execution_id for i in limited.items], limited.more) == (["t4", "t3"], True)
    named = Selection(execution_ids=["t4", "nobody", "t0"], flow="approval")
    done = await env.runtime.bulk("cancel", named, by="ops")
    assert done.count == 2
    assert [(i.execution_id, i.action, i.detail) for i in done.items] == [
        ("t4", "cancel", None),
        ("t0", "cancel", None),
        ("nobody", "skip", "unknown execution"),
    ]
    again = await env.runtime.bulk("cancel", named, by="ops")
    assert [(i.execution_id, i.action) for i in again.items] == [
        ("t4", "skip"),
        ("nobody", "skip"),
        ("t0", "skip"),
    ]
    assert again.items[0].detail == "cancelled: cancel acts on running, suspended, in_doubt"


async def test_a_bulk_resume_answers_each_open_gate_once(store: EventStore):
    env = LoomTestEnv(app, store=store)
    for n in range(2):
        await env.start("approval", None, execution_id=f"r{n}")
    await env.start("two_gates", None, execution_id="two")
    done = await env.runtime.bulk("resume", on="approve", payload="yes", by="ops")
    assert done.count == 2
    assert [(i.execution_id, i.action, i.detail) for i in done.items] == [
        ("two", "skip", "2 open gates on approve: name the correlation_key to resume"),
        ("r1", "resume", "approve/r1:approve"),
        ("r0", "resume", "approve/r0:approve"),
    ]
    assert calls == Counter({"r0:approved yes": 1, "r1:approved yes": 1})
    keyed = Selection(execution_ids=["two", "r0"])
    both = await env.runtime.bulk("resume", keyed, on="approve", correlation_key="a", by="ops")
    assert [(i.execution_id, i.action) for i in both.items] == [("two", "resume"), ("r0", "skip")]
    templated = Selection(execution_ids=["r1"], status="running")
    again = await env.runtime.bulk(
        "resume", templated, on="approve", correlation_key="{execution_id}:approve", by="ops"
    )
    assert [i.action for i in again.items] == ["skip"]  # completed: nothing waits
    resumes = [e for e in await store.read("r0") if isinstance(e, ev.ExecutionResumed)]
    assert [(e.correlation_key, e.by) for e in resumes] == [("r0:approve", "ops")]


async def test_a_bulk_retry_redrives_failed_ones_once_and_lifts_parks(store: EventStore):
    env = LoomTestEnv(app, store=store)
    FAIL.add("boom")
    for n in range(2):
        assert (await env.start("fragile", "boom", execution_id=f"x{n}")).status == "failed"
    FAIL.clear()
    done = await env.runtime.bulk("retry", Selection(flow="fragile"), by="ops")
    assert [(i.execution_id, i.action, i.outcome) for i in done.items] == [
        ("x1", "fork", "completed"),
        ("x0", "fork", "completed"),
    ]
    assert calls["x0:first"] == 1  # reused by the re-drive
    again = await env.runtime.bulk("retry", Selection(flow="fragile"), by="ops")
    assert again.count == 0 and {i.action for i in again.items} == {"none"}


async def test_one_refusal_refuses_the_whole_operation(store: EventStore):
    env = LoomTestEnv(app, store=store)
    for n in range(3):
        await env.start("approval", None, execution_id=f"s{n}")

    def only_mine(row: ExecutionSummary) -> None:
        if row.execution_id == "s1":
            raise PermissionError(f"not yours: {row.execution_id}")

    with pytest.raises(PermissionError, match="s1"):
        await env.runtime.bulk("cancel", by="ops", authorize=only_mine)
    assert {(await env.runtime.result(f"s{n}")).status for n in range(3)} == {"suspended"}


@pytest.mark.parametrize(
    ("operation", "options", "message"),
    [
        ("cancel", {"status": "completed"}, "cancel acts on"),
        ("retry", {"status": "running"}, "retry acts on"),
        ("cancel", {"limit": 0}, "limit must be"),
        ("cancel", {"created_from": 5.0, "created_before": 5.0}, "time range is empty"),
    ],
)
async def test_a_selection_an_operation_cannot_act_on_is_refused(
    store: EventStore, operation: Any, options: dict[str, Any], message: str
):
    env = LoomTestEnv(app, store=store)
    with pytest.raises(InputError, match=message):
        await env.runtime.bulk(operation, Selection(**options), by="ops")


async def test_a_bulk_resume_of_looms_own_gates_is_refused(store: EventStore):
    env = LoomTestEnv(app, store=store)
    with pytest.raises(InputError, match="Loom's own") as caught:
        await env.runtime.bulk("resume", on="loom.timer", by="ops")
    assert caught.value.code == "reserved_gate"
