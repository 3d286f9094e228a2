"""Fork: a new execution reuses the original's recorded prefix and runs the rest anew.

On SQLite (on disk) and the Firestore emulator: a flow fails on a bug, the bug is fixed,
and the fork runs again from the failing step without re-running the steps before it; the
original's log is not touched; a gate in the prefix is reused with its payload; a blob of the
prefix survives the original's purge; a repeat of the fork is idempotent; what cannot be
reused is refused with a clear error and nothing written.
"""

from __future__ import annotations

from typing import Any

import pytest

from loom import EffectContext, FlowContext, Loom
from loom import events as ev
from loom.blobs import InMemoryBlobStore
from loom.errors import ExecutionConflictError, NotForkableError, StoreUnavailableError
from loom.ops.fork import cut_seq, prefix
from loom.runtime import Runtime
from loom.store import EventStore
from loom.store.base import AppendRequest
from loom.testing import FakeClock
from loom.wire import ExecutionPackage
from tests.flowcontrol.apps import Calls, pipeline_app


def _runtime(store: EventStore, calls: Calls, **options: Any) -> Runtime:
    return Runtime(
        pipeline_app(calls), store, blobs=InMemoryBlobStore(), clock=FakeClock(), **options
    )


async def _failed_original(runtime: Runtime, calls: Calls) -> list[ev.Event]:
    calls.bug = True
    failed = await runtime.start("pipeline", 4, execution_id="orig")
    assert failed.status == "failed" and calls.ran == ["fetch", "transform"]
    calls.bug = False
    return await runtime.history("orig")


async def test_fork_reuses_the_prefix_and_reruns_the_rest(store: EventStore):
    calls = Calls()
    runtime = _runtime(store, calls)
    before = await _failed_original(runtime, calls)
    runtime.clock.now += 100  # type: ignore[attr-defined]
    forked = await runtime.fork("orig", "3", new_id="fixed", by="ops")
    assert forked.status == "suspended" and [w.on for w in forked.waiting_on] == ["approval"]
    assert calls.ran == ["fetch", "transform", "transform"]  # fetch was served from the copy
    done = await runtime.resume("fixed", "approval", "order-4", "yes")
    assert done.status == "completed" and calls.ran[-1] == "store"
    original_when = next(e for e in before if isinstance(e, ev.DecisionRecorded)).value
    assert done.output == {"when": original_when, "saved": {"stored": [41, "yes"]}}
    assert await runtime.history("orig") == before  # the original is untouched
    started = (await runtime.history("fixed"))[0]
    assert isinstance(started, ev.ExecutionStarted) and started.by == "ops"
    assert started.forked_from == ev.ForkOrigin(
        execution_id="orig", step_id="3", seq=cut_seq(before, "3")
    )


async def test_a_gate_before_the_cut_is_reused_with_its_payload(store: EventStore):
    calls = Calls()
    runtime = _runtime(store, calls)
    await runtime.start("pipeline", 1, execution_id="orig")
    first = await runtime.resume("orig", "approval", "order-1", {"ok": 1})
    assert first.status == "completed"
    again = await runtime.fork("orig", "5", new_id="again")
    assert again.status == "completed" and again.output == first.output
    assert calls.ran == ["fetch", "transform", "store", "store"]
    from_gate = await runtime.fork("orig", "4", new_id="from-gate")
    assert from_gate.status == "suspended"  # the resume came after the cut: send it again
    assert calls.ran == ["fetch", "transform", "store", "store"]


async def test_a_fork_of_a_fork_reuses_both_copies(store: EventStore):
    calls = Calls()
    runtime = _runtime(store, calls)
    await _failed_original(runtime, calls)
    await runtime.fork("orig", "3", new_id="f1")
    await runtime.resume("f1", "approval", "order-4", "ok")
    second = await runtime.fork("f1", "5", new_id="f2")
    assert (second.status, second.output["saved"]) == ("completed", {"stored": [41, "ok"]})
    assert calls.ran == ["fetch", "transform", "transform", "store", "store"]


async def test_a_timer_before_the_cut_is_not_slept_again(store: EventStore):
    calls = Calls()
    runtime = _runtime(store, calls)
    assert (await runtime.start("nap", 2, execution_id="napper")).status == "suspended"
    runtime.clock.now += 60  # type: ignore[attr-defined]
    woke = await runtime.execute(ExecutionPackage(execution_id="napper", reason="timer"))
    assert woke.status == "completed"
    again = await runtime.fork("napper", "2", new_id="napper-2")
    assert (again.status, again.output) == ("completed", 20)
    keys = [
        e.correlation_key
        for e in await runtime.history("napper-2")
        if e.type == "ExecutionSuspended"
    ]  # type: ignore[union-attr]
    assert keys == ["napper-2:1"]  # the timer's key names the fork, as its replay asks


async def test_a_blob_in_the_prefix_outlives_the_original(store: EventStore):
    calls = Calls()
    runtime = _runtime(store, calls, blob_threshold=1)  # every output is a blob
    await _failed_original(runtime, calls)
    stored = [e for e in await runtime.history("orig") if isinstance(e, ev.EffectCompleted)]
    assert "$blob" in stored[0].output
    await runtime.fork("orig", "3", new_id="copy", run=False)
    await runtime.payloads.blobs.delete_prefix("orig/")  # type: ignore[union-attr]
    await store.delete_execution("orig")
    ran = await runtime.execute(ExecutionPackage(execution_id="copy"))
    assert ran.status == "suspended" and calls.ran == ["fetch", "transform", "transform"]


async def test_a_repeat_is_idempotent_and_an_interrupted_fork_is_completed(store: EventStore):
    calls = Calls()
    runtime = _runtime(store, calls)
    await _failed_original(runtime, calls)
    real_append = store.append

    async def lost(request: AppendRequest) -> int:
        raise StoreUnavailableError("the store went away")

    store.append = lost  # type: ignore[method-assign]  # the second write of the fork fails
    with pytest.raises(StoreUnavailableError):
        await runtime.fork("orig", "3", new_id="f")
    store.append = real_append  # type: ignore[method-assign]
    half = await runtime.result("f")
    assert half.status == "suspended" and (half.parked_reason or "").startswith("fork:")
    assert calls.ran == ["fetch", "transform"]  # nothing ran from scratch
    done = await runtime.fork("orig", "3", new_id="f")
    assert done.status == "suspended" and calls.ran[-1] == "transform"
    length = len(await runtime.history("f"))
    assert (await runtime.fork("orig", "3", new_id="f")).status == "suspended"
    assert len(await runtime.history("f")) == length and calls.ran.count("transform") == 2
    with pytest.raises(ExecutionConflictError):
        await runtime.fork("orig", "1", new_id="f")  # the id is a fork from another step


async def test_what_cannot_be_forked_is_refused_and_nothing_is_written(store: EventStore):
    calls = Calls()
    runtime = _runtime(store, calls)
    before = await _failed_original(runtime, calls)
    with pytest.raises(NotForkableError, match=r"no step '9'.*1, 2, 3"):
        await runtime.fork("orig", "9", new_id="x")
    with pytest.raises(ExecutionConflictError):
        await runtime.fork("orig", "3", new_id="orig")
    assert await runtime.history("orig") == before
    assert [r.execution_id for r in await runtime.list()] == ["orig"]


def _long_app() -> Loom:
    app = Loom("long")

    @app.effect("noop")
    async def noop(ctx: EffectContext, n: int) -> int:  # pyright: ignore[reportUnusedFunction]
        return n

    @app.flow("many")
    async def many(ctx: FlowContext, n: int) -> int:  # pyright: ignore[reportUnusedFunction]
        for i in range(n):
            await ctx.execute(noop, i)
        return n

    return app


async def test_a_long_prefix_is_copied_in_one_append(store: EventStore):
    """600 steps and their claim: more than the 499 events one Firestore append took when
    every event was a document of its own; the copy is still one append."""
    runtime = Runtime(_long_app(), store, clock=FakeClock())
    assert (await runtime.start("many", 600, execution_id="long")).status == "completed"
    forked = await runtime.fork("long", "599", new_id="long-fork")
    assert forked.status == "completed" and forked.output == 600
    copied = await runtime.history("long-fork")
    assert [e.seq for e in copied] == list(range(1, len(copied) + 1))
    assert sum(isinstance(e, ev.EffectCompleted) for e in copied) == 600


async def test_a_prefix_one_append_cannot_carry_is_refused_before_anything_is_written(
    store: EventStore,
):
    runtime = Runtime(_long_app(), store, clock=FakeClock())
    await runtime.start("many", 50, execution_id="long")
    store.max_batch_bytes = 2_000  # as if the store took only this much in one append
    with pytest.raises(NotForkableError, match="fork from an earlier step") as info:
        await runtime.fork("long", "40", new_id="too-long")
    assert info.value.details["max_bytes"] == 2_000
    assert [r.execution_id for r in await runtime.list()] == ["long"]  # nothing written
    assert (await runtime.fork("long", "3", new_id="short")).status == "completed"


def _log(*events: ev.Event) -> list[ev.Event]:
    ev.number(events, 0, 1.0)
    return list(events)


def _start() -> ev.ExecutionStarted:
    return ev.ExecutionStarted(execution_id="e", flow="f")


def test_a_step_in_doubt_before_the_cut_is_refused():
    log = _log(
        _start(),
        ev.EffectStarted(step_id="1.1", effect="charge", idempotency_key="e:1.1"),
        ev.EffectInDoubt(step_id="1.1", effect="charge"),
        ev.DecisionRecorded(step_id="1.2", kind="now", value=5.0),
    )
    with pytest.raises(NotForkableError, match=r"'1\.1' is in doubt"):
        prefix(log, cut_seq(log, "1.2"), "1.2")


def test_a_sibling_without_its_outcome_at_the_cut_runs_again():
    log = _log(
        _start(),
        ev.ExecutionClaimed(holder="h", until=9.0),
        ev.EffectStarted(step_id="1.1", effect="charge", idempotency_key="e:1.1"),
        ev.EffectCompleted(step_id="1.3", effect="fetch", output=3),
        ev.EffectStarted(step_id="1.2", effect="charge", idempotency_key="e:1.2"),
        ev.EffectCompleted(step_id="1.1", effect="charge", output=1),
    )
    kept = prefix(log, cut_seq(log, "1.2"), "1.2")
    assert [(e.type, getattr(e, "step_id", None)) for e in kept] == [("EffectCompleted", "1.3")]
    assert cut_seq(log, "1") == 3  # a task's step: its first inner step cuts


def test_an_event_a_fork_does_not_know_is_refused():
    log = _log(
        _start(),
        ev.ExecutionCancelled(reason="x"),
        ev.DecisionRecorded(step_id="2", kind="now", value=1),
    )
    with pytest.raises(NotForkableError, match="ExecutionCancelled"):
        prefix(log, 3, "2")
