"""Strict durability holds an idempotent step's completion until the next effect (SQLite).

The store is the real SQLite store on disk. Tests that need "what is durable right now" open
a second store on the same file: it sees committed transactions only, as a worker
restarting after a crash would.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from loom import EffectContext, EffectFailedError, FlowContext, Loom
from loom.events import ExecutionResumed
from loom.runtime import Runtime
from loom.store import AppendRequest, SqliteEventStore
from tests.core.test_durability import RecordingStore, make_app


@pytest.fixture
def store(tmp_path: Path) -> RecordingStore:
    return RecordingStore(tmp_path / "loom.db")


async def _durable_steps(path: Path, execution_id: str) -> list[str]:
    """Step ids whose completion is committed to the database at ``path`` now."""
    other = SqliteEventStore(path)
    try:
        events = await other.read(execution_id)
    finally:
        await other.aclose()
    return [e.step_id for e in events if e.type == "EffectCompleted"]


async def test_ten_idempotent_steps_write_the_last_with_the_end(store: RecordingStore) -> None:
    result = await Runtime(make_app("strict"), store).start("steps", 10)
    assert result.status == "completed" and result.output == 45
    assert store.created == [["ExecutionStarted", "ExecutionClaimed"]]  # run inline
    assert store.appends == [
        *[["EffectCompleted"]] * 9,
        ["EffectCompleted", "ExecutionCompleted"],
    ]
    history = await store.read(result.execution_id)
    assert [e.seq for e in history] == list(range(1, 14))


async def test_an_intent_record_and_a_non_idempotent_outcome_are_never_held(
    store: RecordingStore,
) -> None:
    result = await Runtime(make_app("strict"), store).start("mixed", None)
    assert result.status == "completed" and result.output == 10
    assert store.appends == [
        ["EffectCompleted"],  # step 1, forced before step 2's effect runs
        # Step 2 is forced before step 3's cancel check, and so before its intent record:
        # a cancel that landed meanwhile is seen before a non-idempotent effect starts.
        ["EffectCompleted"],
        ["EffectStarted"],
        ["EffectCompleted"],  # step 3 is not idempotent: written at once
        ["EffectCompleted", "ExecutionCompleted"],
    ]


async def test_no_effect_runs_before_the_previous_step_is_durable(tmp_path: Path) -> None:
    """Each effect, as it starts, reads what a restarted worker would find: every step
    before it, whatever kind of effect comes next and whatever the flow decided between."""
    path = tmp_path / "loom.db"
    app = Loom("hold")
    seen: dict[str, list[str]] = {}

    @app.effect("probe")
    async def probe(ctx: EffectContext, _: None) -> int:
        seen[ctx.step_id] = await _durable_steps(path, ctx.execution_id)
        return len(seen)

    @app.effect("probe.once", idempotent=False)
    async def probe_once(ctx: EffectContext, _: None) -> int:
        return await probe(ctx, None)

    @app.flow("probes")
    async def probes(ctx: FlowContext, _: None) -> int:
        total = await ctx.execute(probe, None) + await ctx.execute(probe, None)
        ctx.now()  # a decision between two steps
        total += await ctx.execute(probe_once, None)
        return total + await ctx.execute(probe, None) + await ctx.execute(probe, None)

    result = await Runtime(app, SqliteEventStore(path)).start("probes", None)
    assert result.status == "completed" and result.output == 15
    steps = ["1", "2", "4", "5", "6"]  # step 3 is the decision
    assert seen == {step: steps[:i] for i, step in enumerate(steps)}
    assert await _durable_steps(path, result.execution_id) == steps


async def test_a_child_starts_only_after_the_parent_steps_are_durable(tmp_path: Path) -> None:
    path = tmp_path / "loom.db"
    app = Loom("hold")
    seen: list[list[str]] = []

    @app.effect("idem")
    async def idem(ctx: EffectContext, n: int) -> int:
        return n

    @app.effect("look")
    async def look(ctx: EffectContext, parent: str) -> None:
        seen.append(await _durable_steps(path, parent))

    @app.flow("kid")
    async def kid(ctx: FlowContext, parent: str) -> None:
        await ctx.execute(look, parent)

    @app.flow("parent")
    async def parent(ctx: FlowContext, _: None) -> int:
        n = await ctx.execute(idem, 1)
        await ctx.execute_flow(kid, ctx.execution_id)
        return n

    result = await Runtime(app, SqliteEventStore(path)).start("parent", None)
    assert result.status == "completed" and result.output == 1
    assert seen == [["1"]]


async def test_a_message_is_delivered_only_after_the_sender_steps_are_durable(
    tmp_path: Path,
) -> None:
    path = tmp_path / "loom.db"
    seen: list[list[str]] = []

    class Watching(SqliteEventStore):
        async def append(self, request: AppendRequest) -> int:
            if any(e.type == "MessageReceived" for e in request.events):
                sender = next(e for e in request.events if e.type == "MessageReceived")
                seen.append(await _durable_steps(path, sender.sender))  # type: ignore[union-attr]
            return await super().append(request)

    app = Loom("hold")

    @app.effect("idem")
    async def idem(ctx: EffectContext, n: int) -> int:
        return n

    @app.flow("inbox")
    async def inbox(ctx: FlowContext, _: None) -> int:
        return await ctx.recv("n")

    @app.flow("sender")
    async def sender(ctx: FlowContext, to: str) -> int:
        n = await ctx.execute(idem, 2)
        await ctx.send(to, "n", n)
        return n

    runtime = Runtime(app, Watching(path))
    box = await runtime.start("inbox", None)
    assert box.status == "suspended"
    assert (await runtime.start("sender", box.execution_id)).status == "completed"
    assert seen == [["1"]]


async def test_a_foreign_append_in_the_hold_window_is_merged(store: RecordingStore) -> None:
    """A resume lands while an idempotent completion is held: it is written after it."""
    app = make_app("strict")

    @app.effect("interloper")
    async def interloper(ctx: EffectContext, _: None) -> None:
        last = (await store.load(ctx.execution_id)).last_seq
        early = ExecutionResumed(seq=last + 1, on="go", correlation_key="k", payload=7, at=1.0)
        await store.append(AppendRequest(ctx.execution_id, last, [early]))

    @app.flow("gated")
    async def gated(ctx: FlowContext, _: None) -> int:
        a = await ctx.execute("idem", 1)
        await ctx.execute(interloper, None)
        b = await ctx.execute("idem", 2)
        return a + b + await ctx.suspend("go", "k")

    result = await Runtime(app, store).start("gated", None)
    assert result.status == "completed" and result.output == 10
    history = await store.read(result.execution_id)
    assert [e.seq for e in history] == list(range(1, len(history) + 1))
    kinds = [(e.type, getattr(e, "step_id", None)) for e in history]
    assert kinds.index(("ExecutionResumed", None)) < kinds.index(("EffectCompleted", "2"))
    assert [s for t, s in kinds if t == "EffectCompleted"] == ["1", "2", "3"]


@pytest.mark.parametrize("durability", ["strict", "batched"])
async def test_an_output_the_store_refuses_fails_its_own_step(
    tmp_path: Path, durability: str
) -> None:
    """A completion the store would refuse is not held: the step fails where it ran, and
    the flow never sees the output."""
    app = Loom("hold", durability=durability)
    calls: list[str] = []

    @app.effect("big")
    async def big(ctx: EffectContext, _: None) -> str:
        calls.append(ctx.idempotency_key)
        return "x" * 50_000

    @app.flow("over")
    async def over(ctx: FlowContext, _: None) -> str:
        try:
            return (await ctx.execute(big, None))[:3]
        except EffectFailedError as exc:
            return exc.error_code

    store = SqliteEventStore(tmp_path / "loom.db", max_event_bytes=20_000)
    result = await Runtime(app, store).start("over", None)
    assert (result.status, result.output) == ("completed", "store_limit")
    assert len(calls) == 1
    types = [e.type for e in await store.read(result.execution_id)]
    assert "EffectFailed" in types and "EffectCompleted" not in types


@pytest.mark.parametrize("durability", ["strict", "batched"])
async def test_a_result_the_store_refuses_does_not_blame_a_held_step(
    tmp_path: Path, durability: str
) -> None:
    """The end is refused while step 1's completion rides it: the execution fails with
    ``store_limit``, and step 1 is recorded as it was, completed."""
    app = Loom("hold", durability=durability)

    @app.effect("small")
    async def small(ctx: EffectContext, _: None) -> int:
        return 5

    @app.flow("huge")
    async def huge(ctx: FlowContext, _: None) -> str:
        return "x" * (await ctx.execute(small, None) * 10_000)

    store = SqliteEventStore(tmp_path / "loom.db", max_event_bytes=20_000)
    result = await Runtime(app, store).start("huge", None)
    assert result.status == "failed" and result.error is not None
    assert result.error["code"] == "store_limit"
    history = await store.read(result.execution_id)
    assert [e.type for e in history][-2:] == ["EffectCompleted", "ExecutionFailed"]
    assert [e.seq for e in history] == list(range(1, len(history) + 1))
