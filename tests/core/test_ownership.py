"""Ownership, nondeterminism parking and snapshots, on SQLite files."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from loom import EffectContext, FlowContext, Loom
from loom import events as ev
from loom.errors import ExecutionSupersededError
from loom.kernel.claims import HOST
from loom.kernel.fold import ExecutionState, fold
from loom.runtime import Runtime
from loom.store import AppendRequest, SqliteEventStore
from loom.wire import ExecutionPackage


def app_with(calls: list[str], order: tuple[str, str] = ("a", "b")) -> Loom:
    app = Loom("own")

    @app.effect("a")
    async def a(ctx: EffectContext, _: None) -> str:
        calls.append(f"a:{ctx.step_id}")
        return "A"

    @app.effect("b")
    async def b(ctx: EffectContext, _: None) -> str:
        calls.append(f"b:{ctx.step_id}")
        return "B"

    @app.flow("two")
    async def two(ctx: FlowContext, _: None) -> list[Any]:
        first = await ctx.execute(order[0], None)
        gate = await ctx.suspend("go", "k")
        second = await ctx.execute(order[1], None)
        return [first, gate, second]

    @app.flow("steps")
    async def steps(ctx: FlowContext, n: int) -> int:
        for _ in range(n):
            await ctx.execute(a, None)
        return n

    return app


async def _claim(store: SqliteEventStore, eid: str, holder: str, until: float) -> None:
    last = (await store.summary(eid)).last_seq
    await store.append(
        AppendRequest(eid, last, [ev.ExecutionClaimed(seq=last + 1, holder=holder, until=until)])
    )


async def test_a_live_claim_by_another_holder_supersedes(tmp_path: Path):
    calls: list[str] = []
    store = SqliteEventStore(tmp_path / "l.db")
    rt = Runtime(app_with(calls), store)
    await rt.start("steps", 2, execution_id="c1", run=False)
    await _claim(store, "c1", "elsewhere:77:1", until=rt.clock() + 60)
    count = len(await rt.history("c1"))
    with pytest.raises(ExecutionSupersededError):
        await rt.execute(ExecutionPackage(execution_id="c1"))
    assert calls == [] and len(await rt.history("c1")) == count


@pytest.mark.parametrize(
    "holder,until_offset",
    [
        (f"{HOST}:999999:1", 60.0),  # a process of this machine that no longer exists
        ("elsewhere:77:1", -1.0),  # an expired lease
    ],
)
async def test_dead_or_expired_claims_do_not_block(
    tmp_path: Path, holder: str, until_offset: float
):
    calls: list[str] = []
    store = SqliteEventStore(tmp_path / "l.db")
    rt = Runtime(app_with(calls), store)
    await rt.start("steps", 2, execution_id="c2", run=False)
    await _claim(store, "c2", holder, until=rt.clock() + until_offset)
    result = await rt.execute(ExecutionPackage(execution_id="c2"))
    assert result.status == "completed" and calls == ["a:1", "a:2"]


async def test_an_overtaken_holder_stops_and_invokes_nothing_more(tmp_path: Path):
    calls: list[str] = []
    store = SqliteEventStore(tmp_path / "l.db")
    app = Loom("over")
    entered, release = asyncio.Event(), asyncio.Event()

    @app.effect("slow")
    async def slow(ctx: EffectContext, _: None) -> str:
        calls.append(ctx.step_id)
        if ctx.step_id == "1":
            entered.set()
            await release.wait()
        return "ok"

    @app.flow("f")
    async def f(ctx: FlowContext, _: None) -> None:
        await ctx.execute(slow, None)
        await ctx.execute(slow, None)

    rt = Runtime(app, store)
    await rt.start("f", None, execution_id="o1", run=False)
    task = asyncio.create_task(rt.execute(ExecutionPackage(execution_id="o1")))
    await entered.wait()
    await _claim(store, "o1", "elsewhere:1:1", until=rt.clock() + 60)  # someone took over
    release.set()
    with pytest.raises(ExecutionSupersededError):
        await task
    assert calls == ["1"]  # step 2 never ran
    types = [e.type for e in await rt.history("o1")]
    assert types == ["ExecutionStarted", "ExecutionClaimed", "ExecutionClaimed"]


async def test_a_resume_during_a_run_is_merged_not_fatal(tmp_path: Path):
    store = SqliteEventStore(tmp_path / "l.db")
    app = Loom("merge")
    entered, release = asyncio.Event(), asyncio.Event()

    @app.effect("wait")
    async def wait(ctx: EffectContext, _: None) -> str:
        entered.set()
        await release.wait()
        return "ok"

    @app.flow("f")
    async def f(ctx: FlowContext, _: None) -> Any:
        await ctx.execute(wait, None)
        return await ctx.suspend("go", "k")

    rt = Runtime(app, store)
    await rt.start("f", None, execution_id="m1", run=False)
    task = asyncio.create_task(rt.execute(ExecutionPackage(execution_id="m1")))
    await entered.wait()
    other = Runtime(app, store)  # a second process delivering an early resume
    await other.resume("m1", "go", "k", "payload")
    release.set()
    result = await task
    assert (result.status, result.output) == ("completed", "payload")


async def test_changed_code_parks_with_a_reason_and_invokes_nothing(tmp_path: Path):
    calls: list[str] = []
    store = SqliteEventStore(tmp_path / "l.db")
    await Runtime(app_with(calls), store).start("two", None, execution_id="n1")
    assert calls == ["a:1"]
    changed = Runtime(app_with(calls, order=("b", "a")), store)  # a redeploy swapped steps
    result = await changed.resume("n1", "go", "k", 1)
    assert result.status == "suspended"
    assert result.parked_reason and "step 1" in result.parked_reason
    assert "'a'" in result.parked_reason and "'b'" in result.parked_reason
    assert calls == ["a:1"]
    assert (await store.summary("n1")).parked_reason == result.parked_reason
    # Deploying the right code again lets it finish.
    fixed = Runtime(app_with(calls), store)
    done = await fixed.execute(ExecutionPackage(execution_id="n1"))
    assert (done.status, done.output, done.parked_reason) == ("completed", ["A", 1, "B"], None)


async def test_snapshots_stand_in_for_the_log_prefix(tmp_path: Path):
    calls: list[str] = []
    store = SqliteEventStore(tmp_path / "l.db")
    rt = Runtime(app_with(calls), store, snapshot_every=7, snapshot_min_tail=1)
    result = await rt.start("steps", 30, execution_id="s1")
    assert result.status == "completed"
    loaded = await store.load("s1")
    assert loaded.snapshot is not None and loaded.snapshot.seq > 20
    from_snapshot = fold(loaded.events, ExecutionState.from_json(loaded.snapshot.state))
    from_log = fold(await store.read("s1"))
    assert from_snapshot == from_log


def test_the_fold_is_pure():
    events: list[ev.Event] = [
        ev.ExecutionStarted(seq=1, execution_id="p", flow="f", input=1, at=1.0),
        ev.ExecutionClaimed(seq=2, holder="h", until=9.0, at=1.0),
        ev.EffectCompleted(seq=3, step_id="1", effect="e", output={"x": 1}, at=2.0),
        ev.ExecutionSuspended(seq=4, step_id="2", on="go", correlation_key="k", at=2.0),
    ]
    first, second = fold(events), fold(events)
    assert first == second and first is not second
    assert (first.status, first.claim, first.last_seq) == ("suspended", None, 4)
    assert os.environ.get("LOOM_CRASH_AT") is None


async def test_a_long_effect_keeps_its_claim_alive(tmp_path: Path):
    store = SqliteEventStore(tmp_path / "l.db")
    app = Loom("long")

    @app.effect("slow")
    async def slow(ctx: EffectContext, _: None) -> str:
        await asyncio.sleep(0.35)  # several claim TTLs below
        return "done"

    @app.flow("f")
    async def f(ctx: FlowContext, _: None) -> str:
        return await ctx.execute(slow, None)

    rt = Runtime(app, store, claim_ttl=0.1)
    result = await rt.start("f", None, execution_id="h1")
    assert result.status == "completed"
    claims = [e for e in await rt.history("h1") if e.type == "ExecutionClaimed"]
    assert len(claims) >= 3  # the first claim, then extensions while the effect ran
    untils = [c.until for c in claims]  # type: ignore[attr-defined]
    assert untils == sorted(untils)


async def test_a_worker_without_the_flow_writes_nothing(tmp_path: Path):
    from loom.errors import UnknownFlowError

    store = SqliteEventStore(tmp_path / "l.db")
    await Runtime(app_with([]), store).start("steps", 1, execution_id="u1", run=False)
    stranger = Runtime(Loom("other"), store)
    with pytest.raises(UnknownFlowError):
        await stranger.execute(ExecutionPackage(execution_id="u1"))
    assert len(await stranger.history("u1")) == 1


class _FlakyTimers:
    """Fails the first timer dispatch, as a Cloud Tasks outage would."""

    inline = False

    def __init__(self) -> None:
        self.timers: list[str] = []
        self.failed = False

    async def dispatch(self, package: Any, dispatch_id: str, not_before: Any = None) -> None:
        if not_before is not None and not self.failed:
            self.failed = True
            raise ConnectionError("queue unavailable")
        if not_before is not None:
            self.timers.append(dispatch_id)


async def test_a_retried_delivery_rearms_a_timer_whose_dispatch_failed(tmp_path: Path):
    app = Loom("timer")

    @app.flow("nap")
    async def nap(ctx: FlowContext, _: None) -> str:
        await ctx.sleep(60)
        return "up"

    dispatcher = _FlakyTimers()
    rt = Runtime(app, SqliteEventStore(tmp_path / "l.db"), dispatcher=dispatcher)  # type: ignore[arg-type]
    await rt.start("nap", None, execution_id="t1")
    with pytest.raises(ConnectionError):
        await rt.execute(ExecutionPackage(execution_id="t1"))
    assert (await rt.result("t1")).status == "suspended"
    again = await rt.execute(ExecutionPackage(execution_id="t1"))  # the task is retried
    assert again.status == "suspended"
    assert dispatcher.timers == [f"t1:{again.last_seq}:timer"]


class _FailingStore(SqliteEventStore):
    """Refuses appends once armed, as a store that went away would."""

    armed = False

    async def append(self, request: AppendRequest) -> int:
        if self.armed:
            from loom.errors import StoreError

            raise StoreError("the store is unavailable")
        return await super().append(request)


async def test_a_store_failure_is_not_the_flows_to_swallow(tmp_path: Path):
    from loom.errors import StoreError

    store = _FailingStore(tmp_path / "l.db")
    app = Loom("abort")
    calls: list[str] = []

    @app.effect("e")
    async def e(ctx: EffectContext, _: None) -> str:
        calls.append(ctx.step_id)
        store.armed = True  # the outcome of this step cannot be recorded
        return "ok"

    @app.flow("f")
    async def f(ctx: FlowContext, _: None) -> str:
        try:
            await ctx.execute(e, None)
        except Exception:
            return "swallowed"
        return await ctx.execute(e, None)

    rt = Runtime(app, store)
    await rt.start("f", None, execution_id="a1", run=False)
    with pytest.raises(StoreError, match="unavailable"):
        await rt.execute(ExecutionPackage(execution_id="a1"))
    assert calls == ["1"]  # nothing ran after the failed append
    store.armed = False
    types = [ev.type for ev in await rt.history("a1")]
    assert "ExecutionCompleted" not in types
