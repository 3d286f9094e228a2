"""Ports of Inngest SDK test scenarios (``step.run`` memoization, ``step.sleep``,
``step.waitForEvent`` with a timeout, parallel steps, ``NonRetriableError``, retries,
cancellation, concurrency keys and throttling) onto Loom, over SQLite on disk.

An Inngest function run is a Loom execution, ``step.run`` an effect, an event sent to a
waiting run a message on a topic. Inngest's ``debounce`` and ``priority`` have no Loom
counterpart (a deliberate difference: Loom's queues bound concurrency and rate only).
"""

from __future__ import annotations

import asyncio

from loom.primitives.queues import QueueRef, depths
from loom.wire import ExecutionPackage
from tests.peers.others import apps
from tests.peers.others.conftest import Engine


def _ran(effect: str) -> list[str]:
    return [line for line in apps.LEDGER if line.startswith(f"{effect}:")]


async def test_step_run_results_are_memoized_across_re_entries(engine: Engine):
    """Inngest re-enters the function once per step and serves finished steps from state;
    each step body runs once. Loom: a flow resumed after a wait replays finished steps from
    the log."""
    await engine.runtime.start("wait_event", 60, execution_id="ing-1")
    await engine.runtime.send("ing-1", "order.paid", {"amount": 5})
    assert _ran("echo") == ["echo:ing-1:1", "echo:ing-1:3"]


async def test_wait_for_event_returns_the_event_data(engine: Engine):
    """Inngest ``step.waitForEvent``: the matching event's data is the step's result."""
    started = await engine.runtime.start("wait_event", 3600, execution_id="ing-2")
    assert started.status == "suspended"
    done = await engine.runtime.send("ing-2", "order.paid", {"amount": 5})
    assert (done.status, done.output) == ("completed", {"amount": 5})


async def test_wait_for_event_returns_none_on_timeout(engine: Engine):
    """Inngest ``step.waitForEvent`` returns ``null`` when the timeout passes. Loom's
    ``recv`` raises ``MessageTimeoutError`` instead (a deliberate difference: a timeout is
    not a value); a flow that wants Inngest's shape catches it, as here."""
    await engine.runtime.start("wait_event", 3600, execution_id="ing-3")
    (done,) = await engine.skip(3601)
    assert (done.status, done.output) == ("completed", None)
    assert _ran("echo") == ["echo:ing-3:1", "echo:ing-3:3"]


async def test_an_event_sent_before_the_wait_is_not_lost(engine: Engine):
    """Inngest only matches events sent after ``waitForEvent`` starts; Loom's mailbox
    buffers a message that arrives first (a deliberate difference: nothing is lost)."""
    await engine.runtime.start("wait_event", 60, execution_id="ing-4", run=False)
    await engine.runtime.send("ing-4", "order.paid", "early")
    done = await engine.execute("ing-4", "start")
    assert done.output == "early"


async def test_step_sleep_suspends_and_resumes(engine: Engine):
    """Inngest ``step.sleep``: the run sleeps without holding a worker and resumes later."""
    started = await engine.runtime.start("sleeper", 86400, execution_id="ing-5")
    assert started.status == "suspended"
    assert started.wake_at == engine.clock.now + 86400
    (done,) = await engine.skip(86400)
    assert done.status == "completed"


async def test_parallel_steps_run_once_each_in_order_of_the_call(engine: Engine):
    """Inngest parallel steps (``Promise.all`` of ``step.run``): every step runs once and
    the results come back in call order."""
    done = await engine.runtime.start("parallel", [3, 1, 2], execution_id="ing-6")
    assert done.output == [3, 1, 2]
    assert sorted(_ran("echo")) == ["echo:ing-6:1.1", "echo:ing-6:2.1", "echo:ing-6:3.1"]


async def test_a_non_retriable_error_stops_the_retries(engine: Engine):
    """Inngest ``NonRetriableError``: the step is not retried and the run fails."""
    done = await engine.runtime.start("terminal_flow", "fatal", execution_id="ing-7")
    assert done.status == "failed"
    assert len(_ran("terminal")) == 1


async def test_a_transient_error_is_retried_with_the_attempt_number(engine: Engine):
    """Inngest retries a failed step with ``attempt`` counting up; Loom's ``ctx.attempt``."""
    apps.FLAKY["x"] = 3
    done = await engine.runtime.start("retrying", "x", execution_id="ing-8")
    assert done.output == 4


async def test_a_cancel_event_ends_a_waiting_run(engine: Engine):
    """Inngest ``cancelOn``: a matching event cancels the run before its next step."""
    await engine.runtime.start("cancel_on", 3600, execution_id="ing-9")
    done = await engine.runtime.send("ing-9", "cancel", None)
    assert (done.status, done.output) == ("completed", "cancelled by event")
    assert _ran("echo") == []
    await engine.runtime.start("cancel_on", 3600, execution_id="ing-10")
    (late,) = await engine.skip(3601)
    assert late.output == "reminder sent"


async def test_a_concurrency_limit_holds_and_the_rest_runs_later(engine: Engine):
    """Inngest ``concurrency: {limit: 2}``: at most two runs step at once; the others wait
    and run later, not dropped."""
    ids = [f"ing-c{i}" for i in range(5)]
    for eid in ids:
        await engine.runtime.start(
            "queued", 0.3, execution_id=eid, run=False, queue=QueueRef("two")
        )
    first = await asyncio.gather(
        *(engine.runtime.execute(ExecutionPackage(execution_id=e)) for e in ids)
    )
    assert sorted(r.status for r in first) == ["completed"] * 2 + ["running"] * 3
    assert (await depths(engine.runtime))["two"].waiting == 3
    for eid in [r.execution_id for r in first if r.status == "running"]:
        assert (await engine.execute(eid)).status == "completed"
    assert len(_ran("slow_work")) == 5


async def test_throttling_spaces_the_starts(engine: Engine):
    """Inngest ``throttle: {limit: 1, period: 1s}``: runs beyond the rate start later.
    Loom: a queue's ``rate_per_second``."""
    for i in range(3):
        await engine.runtime.start("queued", 0.0, execution_id=f"ing-t{i}", queue=QueueRef("slow"))
    statuses = [(await engine.runtime.result(f"ing-t{i}")).status for i in range(3)]
    assert statuses == ["completed", "running", "running"]
    engine.clock.now += 1.1
    assert (await engine.execute("ing-t1")).status == "completed"
    assert (await engine.execute("ing-t2")).status == "running"  # one per second
    engine.clock.now += 1.1
    assert (await engine.execute("ing-t2")).status == "completed"


async def test_an_event_id_deduplicates_the_run(engine: Engine):
    """Inngest's event ``id`` deduplicates: the same event sent twice starts one run.
    Loom: the execution id of the start, also on a queue."""
    ref = QueueRef("keyed", "cust-1")
    await engine.runtime.start("queued", 0.0, execution_id="evt-1", queue=ref)
    await engine.runtime.start("queued", 0.0, execution_id="evt-1", queue=ref)
    assert _ran("slow_work") == ["slow_work:evt-1:1"]
    assert len(await engine.runtime.list()) == 1


async def test_an_event_after_the_wait_timed_out_is_kept_for_the_next_wait(engine: Engine):
    """Inngest drops an event that arrives after ``waitForEvent`` timed out. Loom decides
    the timeout by recorded times: a message sent after the deadline (before any worker
    fired the timer) loses to the timeout, and is kept in the mailbox for the next receive
    rather than lost."""
    await engine.runtime.start("receiver", {"n": 2, "timeout": 30}, execution_id="ing-11")
    engine.clock.now += 40
    done = await engine.runtime.send("ing-11", "t", "late")
    assert (done.status, done.output) == ("completed", [None, "late"])


async def test_a_function_timeout_cancels_the_children_it_waits_on(engine: Engine):
    """Inngest ``timeouts.finish`` / DBOS workflow timeouts propagate to children: past the
    parent's deadline the parent is cancelled, and so is the child it was waiting on."""
    await engine.runtime.start("timed_parent", None, execution_id="ing-12")
    (done,) = await engine.skip(11)
    assert done.status == "cancelled"
    assert (await engine.runtime.result("ing-12.child.1")).status == "cancelled"


async def test_an_invoke_with_a_timeout_gives_up_on_a_slow_child(engine: Engine):
    """Inngest ``step.invoke`` with ``timeout``: past it the caller gets an error and goes
    on; the child it gave up on is cancelled when the caller ends (Loom's default). The
    parent used to suspend on its timer while the child was still starting, so the child
    was created but never recorded: an orphan the parent's end left running."""
    started = await engine.runtime.start("invoke_with_timeout", 30.0, execution_id="ing-13")
    assert started.status == "suspended"
    (child,) = [r.execution_id for r in await engine.runtime.list() if ".child." in r.execution_id]
    recorded = [e for e in await engine.runtime.history("ing-13") if e.type == "ChildStarted"]
    assert [e.child_id for e in recorded] == [child]
    (done,) = await engine.skip(31)
    assert (done.status, done.output) == ("completed", "gave up")
    assert (await engine.runtime.result(child)).status == "cancelled"


async def test_sleep_until_a_time_in_the_past_returns_at_once(engine: Engine):
    """Inngest ``step.sleepUntil`` with a date already past goes straight on; the start
    reports the end. A date ahead waits until it."""
    done = await engine.runtime.start("sleep_until", engine.clock.now - 60, execution_id="su-1")
    assert (done.status, done.output) == ("completed", "woke")
    ahead = await engine.runtime.start("sleep_until", engine.clock.now + 60, execution_id="su-2")
    assert ahead.status == "suspended" and ahead.wake_at == engine.clock.now + 60
