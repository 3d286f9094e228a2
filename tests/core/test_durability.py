"""Batched durability: which appends a session makes, and what each one carries (SQLite).

The store is the real SQLite store; a subclass records each append's events so the tests
see where the durable points fall.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from loom import EffectContext, FlowContext, Loom
from loom.errors import ConfigurationError
from loom.events import Event, ExecutionResumed, ExecutionStarted
from loom.runtime import Runtime
from loom.store import AppendRequest, InMemoryEventStore, LoadedLog, Snapshot, SqliteEventStore
from loom.wire import ExecutionPackage


class RecordingStore(SqliteEventStore):
    """SQLite, remembering the event types of every append."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.appends: list[list[str]] = []
        self.created: list[list[str]] = []

    async def create(
        self, started: ExecutionStarted, then: Sequence[Event] = ()
    ) -> tuple[bool, ExecutionStarted]:
        self.created.append([e.type for e in [started, *then]])
        return await super().create(started, then)

    async def append(self, request: AppendRequest) -> int:
        self.appends.append([e.type for e in request.events])
        return await super().append(request)


def make_app(durability: str) -> Loom:
    app = Loom("durability", durability=durability)

    @app.effect("idem")
    async def idem(ctx: EffectContext, n: int) -> int:
        return n

    @app.effect("once", idempotent=False)
    async def once(ctx: EffectContext, n: int) -> int:
        return n

    @app.flow("steps")
    async def steps(ctx: FlowContext, n: int) -> int:
        return sum([await ctx.execute("idem", i) for i in range(n)])

    @app.flow("mixed")
    async def mixed(ctx: FlowContext, _: None) -> int:
        a = await ctx.execute("idem", 1)
        b = await ctx.execute("idem", 2)
        c = await ctx.execute("once", 3)
        return a + b + c + await ctx.execute("idem", 4)

    return app


@pytest.fixture
def store(tmp_path: Path) -> RecordingStore:
    return RecordingStore(tmp_path / "loom.db")


async def test_a_start_run_here_claims_with_the_create(store: RecordingStore) -> None:
    """Run inline, the start writes its first claim with the create: no append of its own."""
    result = await Runtime(make_app("strict"), store).start("steps", 3)
    assert result.status == "completed" and result.output == 3
    assert store.created == [["ExecutionStarted", "ExecutionClaimed"]]
    assert store.appends == [
        ["EffectCompleted"],
        ["EffectCompleted"],
        ["EffectCompleted", "ExecutionCompleted"],
    ]
    history = await store.read(result.execution_id)
    assert [e.seq for e in history] == list(range(1, 7))


async def test_strict_writes_each_step_and_the_claim_without_a_status_change(
    store: RecordingStore,
) -> None:
    """An execute of a started execution (a dispatched one) writes its claim first; each
    step is written before the next effect runs; the last one rides the end."""
    runtime = Runtime(make_app("strict"), store)
    started = await runtime.start("steps", 3, run=False)
    result = await runtime.execute(ExecutionPackage(execution_id=started.execution_id))
    assert result.status == "completed" and result.output == 3
    assert store.created == [["ExecutionStarted"]]
    assert store.appends == [
        ["ExecutionClaimed"],
        ["EffectCompleted"],
        ["EffectCompleted"],
        ["EffectCompleted", "ExecutionCompleted"],
    ]


async def test_batched_idempotent_steps_reach_the_store_with_the_end(
    store: RecordingStore,
) -> None:
    result = await Runtime(make_app("batched"), store).start("steps", 10)
    assert result.status == "completed" and result.output == 45
    assert store.created == [["ExecutionStarted", "ExecutionClaimed"]]
    assert store.appends == [[*["EffectCompleted"] * 10, "ExecutionCompleted"]]
    history = await store.read(result.execution_id)
    assert [e.seq for e in history] == list(range(1, 14))
    assert [getattr(e, "step_id", None) for e in history[2:12]] == [str(i) for i in range(1, 11)]


class CountingStore(SqliteEventStore):
    """SQLite served off the loop (as by a worker), naming every call the runtime makes:
    each one is a trip to the writer thread or a reader thread."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.serve_off_loop()
        self.calls: list[str] = []

    async def create(
        self, started: ExecutionStarted, then: Sequence[Event] = ()
    ) -> tuple[bool, ExecutionStarted]:
        self.calls.append("create")
        return await super().create(started, then)

    async def append(self, request: AppendRequest) -> int:
        self.calls.append(f"append {len(request.events)}")
        return await super().append(request)

    async def load(self, execution_id: str) -> LoadedLog:
        self.calls.append("load")
        return await super().load(execution_id)

    async def read(self, execution_id: str, after_seq: int = 0) -> list[Event]:
        self.calls.append("read")
        return await super().read(execution_id, after_seq)

    async def save_snapshot(self, execution_id: str, snapshot: Snapshot) -> None:
        self.calls.append("save_snapshot")
        await super().save_snapshot(execution_id, snapshot)


async def test_batched_steps_between_durable_points_never_reach_the_store(
    tmp_path: Path,
) -> None:
    """Idempotent steps cost in-memory work only: a served store sees the same calls for a
    3-step and a 60-step execution (the start with its claim, one append at the end)."""
    store = CountingStore(tmp_path / "loom.db")
    runtime = Runtime(make_app("batched"), store, snapshot_min_tail=100)
    try:
        made: list[list[str]] = []
        for n in (3, 60):
            store.calls = []
            assert (await runtime.start("steps", n)).status == "completed"
            made.append(store.calls)
    finally:
        await store.aclose()
    assert made == [["create", "append 4"], ["create", "append 61"]]


async def test_an_intent_record_is_a_durable_point(store: RecordingStore) -> None:
    result = await Runtime(make_app("batched"), store).start("mixed", None)
    assert result.status == "completed" and result.output == 10
    assert store.appends == [
        ["EffectCompleted", "EffectCompleted", "EffectStarted"],
        ["EffectCompleted"],  # a non-idempotent step's outcome is never left unforced
        ["EffectCompleted", "ExecutionCompleted"],
    ]


async def test_a_flow_may_ask_for_batched_in_a_strict_app(store: RecordingStore) -> None:
    app = make_app("strict")

    @app.flow("quick", durability="batched")
    async def quick(ctx: FlowContext, _: None) -> int:
        return await ctx.execute("idem", 1) + await ctx.execute("idem", 2)

    assert (await Runtime(app, store).start("quick", None)).output == 3
    assert len(store.appends) == 1


async def test_unforced_events_stay_within_the_store_limit(tmp_path: Path) -> None:
    class Limited(RecordingStore):
        max_append_events = 4

    store = Limited(tmp_path / "loom.db")
    result = await Runtime(make_app("batched"), store).start("steps", 10)
    assert result.status == "completed" and result.output == 45
    assert all(len(a) <= 4 for a in store.appends), store.appends
    assert sum(len(a) for a in store.appends) == 11  # the claim rode the create


async def test_a_foreign_append_between_durable_points_is_merged(store: RecordingStore) -> None:
    """A resume lands while completions are unforced: they are written after it."""
    app = make_app("batched")
    runtime = Runtime(app, store)

    @app.effect("interloper")
    async def interloper(ctx: EffectContext, _: None) -> None:
        last = (await store.load(ctx.execution_id)).last_seq
        early = ExecutionResumed(seq=last + 1, on="go", correlation_key="k", payload=7, at=1.0)
        await store.append(AppendRequest(ctx.execution_id, last, [early]))

    @app.flow("gated")
    async def gated(ctx: FlowContext, _: None) -> int:
        a = await ctx.execute("idem", 1)
        await ctx.execute("interloper", None)
        b = await ctx.execute("idem", 2)
        return a + b + await ctx.suspend("go", "k")

    result = await runtime.start("gated", None)
    assert result.status == "completed" and result.output == 10
    history = await store.read(result.execution_id)
    assert [e.seq for e in history] == list(range(1, len(history) + 1))
    # The claim rode the create; the unforced completion went after the resume.
    assert [e.type for e in history][:3] == [
        "ExecutionStarted",
        "ExecutionClaimed",
        "ExecutionResumed",
    ]
    completed = [e.step_id for e in history if e.type == "EffectCompleted"]
    assert completed == ["1", "2", "3"]


async def test_a_snapshot_where_the_call_stops_rides_the_last_append() -> None:
    class Counting(InMemoryEventStore):
        saved = 0

        async def save_snapshot(self, execution_id: str, snapshot: Any) -> None:
            self.saved += 1
            await super().save_snapshot(execution_id, snapshot)

    store = Counting()
    runtime = Runtime(make_app("strict"), store, snapshot_min_tail=5)
    result = await runtime.start("steps", 6)
    loaded = await store.load(result.execution_id)
    assert loaded.snapshot is not None and loaded.snapshot.seq == 9 and loaded.events == []
    assert store.saved == 0  # no write of its own


def test_an_unknown_durability_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="durability"):
        Loom("x", durability="sometimes")
    with pytest.raises(ConfigurationError, match="durability"):
        Loom("x").flow("f", durability="eventually")(make_app("strict").flows["steps"].fn)


async def test_a_batched_flow_wakes_from_a_timer(store: RecordingStore) -> None:
    """The claim that resumes an expired gate is written at once; the steps after it wait."""
    app = make_app("batched")

    @app.flow("nap")
    async def nap(ctx: FlowContext, _: None) -> int:
        first = await ctx.execute("idem", 1)
        await ctx.sleep(0.05)
        return first + await ctx.execute("idem", 2) + await ctx.execute("idem", 3)

    runtime = Runtime(app, store)
    started = await runtime.start("nap", None)
    assert started.status == "suspended"
    await asyncio.sleep(0.1)
    done = await runtime.execute(ExecutionPackage(execution_id=started.execution_id))
    assert done.status == "completed" and done.output == 6
    assert store.appends[-2:] == [
        ["ExecutionClaimed", "ExecutionResumed"],
        ["EffectCompleted", "EffectCompleted", "ExecutionCompleted"],
    ]
    history = await store.read(started.execution_id)
    assert [e.seq for e in history] == list(range(1, len(history) + 1))
