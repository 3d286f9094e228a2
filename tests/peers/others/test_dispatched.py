"""Scenarios the peers run against a live engine rather than a test clock: DBOS queues that
drain on their own, Inngest sleeps that wake on their own, Restate timers. The runtime here
has the in-process dispatcher ``loom serve`` uses (real timers, real re-dispatch of queued
work), over SQLite on disk."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from loom.dispatch.inprocess import InProcessDispatcher
from loom.primitives.queues import QueueRef
from loom.runtime import Runtime
from loom.store.sqlite import SqliteEventStore
from loom.workers.local import LocalWorkerRuntime
from tests.peers.others import apps


@pytest.fixture
async def live(tmp_path: Path) -> AsyncIterator[Runtime]:
    """A runtime whose dispatcher runs executions and timers in this process."""
    apps.LEDGER.clear()
    runtime = Runtime(apps.app, SqliteEventStore(str(tmp_path / "loom.db")))
    runtime.dispatcher = InProcessDispatcher(LocalWorkerRuntime(runtime))
    yield runtime
    await runtime.store.aclose()


async def _inside_a_step(count: int = 1) -> None:
    """Wait until ``count`` effect invocations began (the effects note theirs first)."""
    for _ in range(300):
        if len(apps.LEDGER) >= count:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"no effect began: {apps.LEDGER}")


async def _until(runtime: Runtime, ids: list[str], status: str, within: float) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        states = [(await runtime.result(e)).status for e in ids]
        if all(s == status for s in states):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"not all {status} within {within} s: {states}")


async def test_a_queue_drains_on_its_own_within_its_concurrency(live: Runtime):
    """DBOS ``test_queue_concurrency``: enqueue more than the limit; every workflow runs,
    never more than the limit at once, with nobody calling execute by hand."""
    ids = [f"dq-{i}" for i in range(4)]
    for eid in ids:
        await live.start("queued", 0.2, execution_id=eid, queue=QueueRef("one"))
    await _until(live, ids, "completed", within=60)
    spans: list[tuple[float, float]] = []
    for eid in ids:
        history = await live.history(eid)
        claimed = next(e.at for e in history if e.type == "ExecutionClaimed")
        spans.append((claimed, history[-1].at))
    spans.sort()
    assert all(later[0] >= earlier[1] for earlier, later in itertools.pairwise(spans))
    assert len(apps.LEDGER) == 4


async def test_a_short_sleep_wakes_on_its_own(live: Runtime):
    """Inngest ``step.sleep("1s")`` / Restate ``ctx.sleep``: the run wakes when the timer
    is due, without an outside call, and the step before it ran once."""
    started = await live.start("sleeper", 0.5, execution_id="ds-1")
    assert started.status == "suspended"
    await _until(live, ["ds-1"], "completed", within=30)
    assert apps.LEDGER == ["echo:ds-1:2", "echo:ds-1:5"]


async def test_a_receive_timeout_fires_on_its_own(live: Runtime):
    """DBOS ``recv(timeout_seconds=1)`` returns ``None`` after a second of real time."""
    await live.start("receiver", {"n": 1, "timeout": 0.5}, execution_id="dr-1")
    await _until(live, ["dr-1"], "completed", within=30)
    assert (await live.result("dr-1")).output == [None]


async def test_a_zero_sleep_completes_in_the_start_call(live: Runtime):
    """Restate ``ctx.sleep(0)`` through the in-process dispatcher: it runs the due timer at
    once, and the start reports the end (it used to report the suspension it had left)."""
    done = await live.start("sleeper", 0, execution_id="ds-0")
    assert done.status == "completed" and 0 <= done.output["slept"] < 30


async def test_messages_sent_while_the_workflow_runs_a_step_are_not_lost(live: Runtime):
    """DBOS ``test_send_recv`` with the receiver busy: messages sent while the workflow is
    inside a step (its execute call holds the claim) reach the next ``recv``, in order."""
    running = asyncio.create_task(live.start("busy_receiver", 0.5, execution_id="db-1"))
    await _inside_a_step()
    await live.send("db-1", "t", "first")
    await _inside_a_step(2)
    await live.send("db-1", "t", "second")
    await running
    await _until(live, ["db-1"], "completed", within=30)
    assert (await live.result("db-1")).output == ["first", "second"]
    received = [e for e in await live.history("db-1") if e.type == "MessageReceived"]
    assert len(received) == 2


async def test_a_cancel_during_a_step_lets_it_finish_and_runs_no_further_step(live: Runtime):
    """DBOS ``cancel_workflow`` of a workflow inside a step: the step runs to its end (its
    outcome recorded), no later step starts, and the workflow ends cancelled."""
    running = asyncio.create_task(live.start("two_slow", 0.6, execution_id="dc-1"))
    await _inside_a_step()
    assert (await live.cancel("dc-1", "stop")).status == "running"  # delivered at the next await
    await running
    await _until(live, ["dc-1"], "cancelled", within=30)
    assert apps.LEDGER == ["slow_work:dc-1:1"]
    types = [e.type for e in await live.history("dc-1")]
    assert types.count("EffectCompleted") == 1


async def test_two_awakeables_resolved_at_once_both_arrive(live: Runtime):
    """Restate ``all`` over two awakeables, resolved concurrently by two callers: both
    values reach the handler, in the order it awaited them."""
    await live.start("two_gates", None, execution_id="dg-1")
    await asyncio.gather(
        live.resume("dg-1", "right", "dg-1", "R"), live.resume("dg-1", "left", "dg-1", "L")
    )
    await _until(live, ["dg-1"], "completed", within=30)
    assert (await live.result("dg-1")).output == ["L", "R"]
