"""Ports of DBOS Transact's workflow tests (``test_dbos.py``, ``test_failures.py``,
``test_workflow_management.py``) onto Loom, in one process over SQLite on disk.

A DBOS workflow is a Loom flow, a step an effect, a workflow id an execution id. Where Loom
deliberately differs, the test's docstring says what Loom promises instead.
"""

from __future__ import annotations

import pytest

from loom import events as ev
from loom.errors import (
    EventNotFoundError,
    ExecutionConflictError,
    ExecutionFinishedError,
    NotForkableError,
    UnknownExecutionError,
)
from tests.peers.others import apps
from tests.peers.others.conftest import Engine


def _ran(effect: str) -> list[str]:
    return [line for line in apps.LEDGER if line.startswith(f"{effect}:")]


async def test_a_second_start_with_the_same_id_returns_the_first_result_and_runs_nothing(
    engine: Engine,
):
    """DBOS ``test_idempotency``/``SetWorkflowID``: starting a workflow id that already ran
    returns its result; its steps do not run again."""
    first = await engine.runtime.start("steps", 3, execution_id="wf-1")
    assert (first.status, first.output) == ("completed", [0, 1, 2])
    again = await engine.runtime.start("steps", 3, execution_id="wf-1")
    assert (again.status, again.output) == ("completed", [0, 1, 2])
    assert len(_ran("echo")) == 3


async def test_a_second_start_after_a_restart_runs_nothing_either(engine: Engine):
    """DBOS: idempotency holds across a process restart (the id is in the database)."""
    await engine.runtime.start("steps", 2, execution_id="wf-2")
    seqs = len(await engine.runtime.history("wf-2"))
    runtime = await engine.restart()
    again = await runtime.start("steps", 2, execution_id="wf-2")
    assert again.output == [0, 1]
    assert len(_ran("echo")) == 2
    assert len(await runtime.history("wf-2")) == seqs  # nothing appended by the repeat


async def test_a_second_start_with_another_input_is_refused(engine: Engine):
    """DBOS returns the first workflow's handle whatever the second's arguments; Loom
    refuses a repeat with another input (``ExecutionConflictError``, 409 over HTTP), so a
    caller reusing an id by mistake learns it, and nothing is written."""
    await engine.runtime.start("steps", 1, execution_id="wf-3")
    with pytest.raises(ExecutionConflictError):
        await engine.runtime.start("steps", 2, execution_id="wf-3")
    with pytest.raises(ExecutionConflictError):
        await engine.runtime.start("pay", 1, execution_id="wf-3")
    assert len(_ran("echo")) == 1


async def test_a_second_start_of_a_waiting_workflow_does_not_run_its_steps_again(
    engine: Engine,
):
    """DBOS: a start with the id of a workflow still pending returns its handle; the
    steps it already ran are not re-executed."""
    first = await engine.runtime.start("waits_forever", None, execution_id="wf-4")
    assert first.status == "suspended"
    again = await engine.runtime.start("waits_forever", None, execution_id="wf-4")
    assert again.status == "suspended"
    assert len(_ran("echo")) == 1


async def test_a_pending_workflow_is_recovered_after_a_restart_from_its_last_step(
    engine: Engine,
):
    """DBOS ``test_recovery``: a workflow interrupted between steps resumes after a restart
    without re-running completed steps. Here: a start recorded but never run, then a new
    process's execute call runs it once."""
    await engine.runtime.start("steps", 2, execution_id="wf-5", run=False)
    assert _ran("echo") == []
    await engine.restart()
    result = await engine.execute("wf-5", "sweep")
    assert (result.status, result.output) == ("completed", [0, 1])
    again = await engine.execute("wf-5", "sweep")  # a recovery delivered twice
    assert again.output == [0, 1]
    assert len(_ran("echo")) == 2


async def test_a_step_is_retried_until_it_succeeds_with_the_same_key(engine: Engine):
    """DBOS ``@DBOS.step(retries_allowed=True, max_attempts=4)``: a flaky step is retried and
    the workflow gets the first success. Loom also keeps the idempotency key per step."""
    apps.FLAKY["k"] = 2
    result = await engine.runtime.start("retrying", "k", execution_id="wf-6")
    assert (result.status, result.output) == ("completed", 3)
    assert _ran("flaky") == ["flaky:wf-6:1"] * 3
    retried = [e for e in await engine.runtime.history("wf-6") if e.type == "EffectRetried"]
    assert len(retried) == 2


async def test_a_step_out_of_attempts_raises_into_the_workflow(engine: Engine):
    """DBOS ``test_step_retries``: past ``max_attempts`` the step raises (DBOS's
    ``DBOSMaxStepRetriesExceeded``); Loom raises ``EffectFailedError`` naming the effect and
    the last error's type, which the flow may catch."""
    apps.FLAKY["k"] = 10
    result = await engine.runtime.start("catch_failure", "k", execution_id="wf-7")
    assert result.status == "completed"
    assert result.output == {"failed": "flaky", "type": "RuntimeError", "code": "error"}
    assert len(_ran("flaky")) == 4


async def test_an_uncaught_step_failure_fails_the_workflow_and_a_restart_keeps_it(
    engine: Engine,
):
    """DBOS: a workflow whose step exhausted its retries ends in ERROR, and recovery does
    not run it again."""
    apps.FLAKY["k"] = 10
    result = await engine.runtime.start("retrying", "k", execution_id="wf-8")
    assert result.status == "failed"
    assert "flaky" in str(result.error)
    runtime = await engine.restart()
    again = await runtime.start("retrying", "k", execution_id="wf-8")
    assert again.status == "failed"
    assert len(_ran("flaky")) == 4


async def test_an_exception_in_workflow_code_fails_it_with_its_message(engine: Engine):
    """DBOS ``test_exception_workflow``: the workflow's exception is its recorded outcome."""
    result = await engine.runtime.start("raises", "bad input", execution_id="wf-9")
    assert result.status == "failed"
    assert result.error is not None and "bad input" in result.error["message"]
    assert len(_ran("echo")) == 1


async def test_send_and_recv_deliver_in_order(engine: Engine):
    """DBOS ``test_send_recv``: messages sent to a workflow are received in order."""
    await engine.runtime.start("receiver", {"n": 3}, execution_id="wf-10")
    for payload in ("a", "b"):
        await engine.runtime.send("wf-10", "t", payload)
    done = await engine.runtime.send("wf-10", "t", {"c": 1})
    assert (done.status, done.output) == ("completed", ["a", "b", {"c": 1}])


async def test_recv_times_out_and_the_workflow_goes_on(engine: Engine):
    """DBOS ``recv(timeout_seconds=…)`` returns ``None`` after the timeout; Loom raises
    ``MessageTimeoutError`` at the recorded deadline (here the flow turns it into None)."""
    started = await engine.runtime.start("receiver", {"n": 2, "timeout": 30}, execution_id="wf-11")
    assert started.status == "suspended"
    await engine.runtime.send("wf-11", "t", "first")
    assert (await engine.skip(10)) == []  # not yet due
    (done,) = await engine.skip(25)
    assert (done.status, done.output) == ("completed", ["first", None])


async def test_a_message_sent_after_recv_timed_out_is_not_taken_by_it(engine: Engine):
    """DBOS: a message that arrives after a recv timed out stays for a later recv, it is
    never retro-fitted into the timed-out one."""
    await engine.runtime.start("receiver", {"n": 1, "timeout": 5}, execution_id="wf-12")
    (done,) = await engine.skip(6)
    assert done.output == [None]
    with pytest.raises(ExecutionFinishedError):
        await engine.runtime.send("wf-12", "t", "late")


async def test_messages_are_kept_per_topic(engine: Engine):
    """DBOS ``test_send_recv`` with topics: a recv on one topic leaves the others' messages
    buffered for their own recv."""
    await engine.runtime.start("topics", None, execution_id="wf-13")
    await engine.runtime.send("wf-13", "a", "on a")
    done = await engine.runtime.send("wf-13", "b", "on b")
    assert (done.status, done.output) == ("completed", ["on b", "on a"])


async def test_a_message_with_the_same_id_is_delivered_once(engine: Engine):
    """DBOS ``send(idempotency_key=…)``: a repeated send is one message."""
    await engine.runtime.start("receiver", {"n": 2}, execution_id="wf-14")
    await engine.runtime.send("wf-14", "t", "x", message_id="m-1")
    again = await engine.runtime.send("wf-14", "t", "x", message_id="m-1")
    assert again.status == "suspended"
    done = await engine.runtime.send("wf-14", "t", "y", message_id="m-2")
    assert done.output == ["x", "y"]


async def test_a_message_to_an_unknown_workflow_is_a_clear_error(engine: Engine):
    """DBOS raises on ``send`` to a nonexistent destination; Loom raises
    ``UnknownExecutionError`` naming the id, and writes nothing."""
    with pytest.raises(UnknownExecutionError, match="nobody"):
        await engine.runtime.send("nobody", "t", 1)
    assert await engine.runtime.list() == []


async def test_workflow_to_workflow_messages_are_sent_exactly_once(engine: Engine):
    """DBOS ``DBOS.send`` from a workflow is a step: replays and recoveries do not send it
    again."""
    await engine.runtime.start("receiver", {"n": 2}, execution_id="wf-15")
    sent = await engine.runtime.start(
        "sender", {"to": "wf-15", "payloads": [1, 2]}, execution_id="wf-16"
    )
    assert sent.status == "completed"
    await engine.runtime.start("sender", {"to": "wf-15", "payloads": [1, 2]}, execution_id="wf-16")
    assert (await engine.runtime.result("wf-15")).output == [1, 2]
    received = [e for e in await engine.runtime.history("wf-15") if e.type == "MessageReceived"]
    assert len(received) == 2


async def test_set_event_and_get_event_read_the_latest_value(engine: Engine):
    """DBOS ``test_set_get_events``: a workflow publishes values callers read while it runs;
    the latest set wins, and an unset key is a clear error after the wait."""
    await engine.runtime.start("publisher", 3, execution_id="wf-17")
    assert await engine.runtime.get_event("wf-17", "progress") == 2
    assert await engine.runtime.get_event("wf-17", "stage") == "waiting"
    with pytest.raises(EventNotFoundError):
        await engine.runtime.get_event("wf-17", "never", timeout=0.2)
    await engine.runtime.send("wf-17", "go", None)
    assert await engine.runtime.get_event("wf-17", "stage") == "done"


async def test_published_values_survive_a_restart_and_the_end(engine: Engine):
    """DBOS: events outlive the workflow; ``get_event`` after it completed still answers."""
    await engine.runtime.start("publisher", 1, execution_id="wf-18")
    await engine.runtime.send("wf-18", "go", None)
    runtime = await engine.restart()
    assert await runtime.get_event("wf-18", "stage") == "done"
    assert await runtime.get_event("wf-18", "progress") == 0


async def test_get_event_of_an_unknown_workflow_is_a_clear_error(engine: Engine):
    """DBOS returns ``None`` for an unknown workflow; Loom says the execution is unknown."""
    with pytest.raises(UnknownExecutionError):
        await engine.runtime.get_event("nobody", "stage")


async def test_a_durable_sleep_survives_a_restart_and_runs_the_earlier_step_once(
    engine: Engine,
):
    """DBOS ``test_sleep``/``test_durable_sleep``: a workflow sleeping when the process dies
    wakes at the recorded wake time, not a fresh full sleep, and its earlier step is not
    run again."""
    started = await engine.runtime.start("sleeper", 3600, execution_id="wf-19")
    assert started.status == "suspended"
    await engine.restart()
    assert await engine.skip(3000) == []
    (done,) = await engine.skip(601)
    assert done.status == "completed"
    assert done.output["slept"] >= 3600
    assert _ran("echo") == ["echo:wf-19:2", "echo:wf-19:5"]


async def test_a_woken_sleeper_delivered_twice_completes_once(engine: Engine):
    """DBOS: two recoveries of the same woken workflow run its remaining step once."""
    await engine.runtime.start("sleeper", 10, execution_id="wf-20")
    engine.clock.now += 11
    first = await engine.execute("wf-20")
    second = await engine.execute("wf-20")
    assert first.status == second.status == "completed"
    assert len(_ran("echo")) == 2


async def test_listing_filters_workflows_by_status(engine: Engine):
    """DBOS ``list_workflows(status=…)``: filter by status."""
    await engine.runtime.start("steps", 1, execution_id="done-1")
    await engine.runtime.start("waits_forever", None, execution_id="wait-1")
    await engine.runtime.start("raises", "x", execution_id="fail-1")
    assert [r.execution_id for r in await engine.runtime.list("completed")] == ["done-1"]
    assert [r.execution_id for r in await engine.runtime.list("suspended")] == ["wait-1"]
    assert [r.execution_id for r in await engine.runtime.list("failed")] == ["fail-1"]
    assert {r.execution_id for r in await engine.runtime.list()} == {"done-1", "wait-1", "fail-1"}
    row = (await engine.runtime.list("failed"))[0]
    assert row.flow == "raises"


async def test_cancel_stops_a_waiting_workflow_and_a_restart_keeps_it_cancelled(
    engine: Engine,
):
    """DBOS ``cancel_workflow``: a cancelled workflow runs no further step, also after a
    restart. DBOS may later ``resume_workflow`` the same id; Loom's cancel is final (the flow
    gets ``CancelledError`` and cleans up) and a fork runs it again under a new id."""
    await engine.runtime.start("waits_forever", None, execution_id="wf-21")
    cancelled = await engine.runtime.cancel("wf-21", "by test")
    assert cancelled.status == "cancelled"
    runtime = await engine.restart()
    assert (await runtime.start("waits_forever", None, execution_id="wf-21")).status == (
        "cancelled"
    )
    with pytest.raises(ExecutionFinishedError):
        await runtime.resume("wf-21", "never", "wf-21", None)
    assert len(_ran("echo")) == 1


async def test_cancel_of_a_finished_workflow_is_refused(engine: Engine):
    """DBOS: cancelling a completed workflow leaves it completed; Loom says it already
    ended (409 over HTTP) and changes nothing."""
    await engine.runtime.start("steps", 1, execution_id="wf-22")
    with pytest.raises(ExecutionFinishedError):
        await engine.runtime.cancel("wf-22")
    assert (await engine.runtime.result("wf-22")).status == "completed"


async def test_cancel_of_an_unknown_workflow_is_a_clear_error(engine: Engine):
    """DBOS: cancelling a nonexistent workflow id; Loom: ``UnknownExecutionError``."""
    with pytest.raises(UnknownExecutionError):
        await engine.runtime.cancel("nobody")


async def test_fork_reuses_the_steps_before_the_fork_point(engine: Engine):
    """DBOS ``fork_workflow(id, start_step)``: the new workflow reuses the recorded outputs
    of the steps before ``start_step`` and runs the rest again."""
    await engine.runtime.start("steps", 3, execution_id="wf-23")
    forked = await engine.runtime.fork("wf-23", "3", new_id="wf-23-fork")
    assert (forked.status, forked.output) == ("completed", [0, 1, 2])
    assert _ran("echo") == [f"echo:wf-23:{i}" for i in (1, 2, 3)] + ["echo:wf-23-fork:3"]
    started = (await engine.runtime.history("wf-23-fork"))[0]
    assert isinstance(started, ev.ExecutionStarted) and started.forked_from is not None
    again = await engine.runtime.fork("wf-23", "3", new_id="wf-23-fork")  # idempotent
    assert again.output == [0, 1, 2] and len(_ran("echo")) == 4


async def test_restart_is_a_fork_from_the_first_step(engine: Engine):
    """DBOS ``restart_workflow``: run a workflow again from the start under a new id."""
    await engine.runtime.start("steps", 2, execution_id="wf-24")
    again = await engine.runtime.fork("wf-24", "1", new_id="wf-24-again")
    assert again.output == [0, 1]
    assert len(_ran("echo")) == 4


async def test_fork_from_a_step_the_log_does_not_hold_is_refused(engine: Engine):
    """DBOS rejects a ``start_step`` past the workflow's steps; Loom refuses it with
    ``NotForkableError`` and writes nothing."""
    await engine.runtime.start("steps", 1, execution_id="wf-25")
    with pytest.raises(NotForkableError):
        await engine.runtime.fork("wf-25", "9", new_id="wf-25-fork")
    with pytest.raises(UnknownExecutionError):
        await engine.runtime.result("wf-25-fork")


async def test_a_workflow_timeout_cancels_it_at_its_deadline(engine: Engine):
    """DBOS ``SetWorkflowTimeout``: past its deadline a workflow is cancelled, and the
    deadline survives a restart (it is recorded at the start)."""
    await engine.runtime.start("deadline", None, execution_id="wf-26")
    await engine.restart()
    assert await engine.skip(30) == []
    (done,) = await engine.skip(31)
    assert done.status == "cancelled"


async def test_a_start_may_override_the_workflow_timeout(engine: Engine):
    """DBOS: a per-start timeout wins over the workflow's."""
    await engine.runtime.start("deadline", None, execution_id="wf-27", timeout=5)
    (done,) = await engine.skip(6)
    assert done.status == "cancelled"


async def test_a_resume_before_the_deadline_completes_the_workflow(engine: Engine):
    """DBOS: a workflow that finishes before its timeout is not cancelled afterwards."""
    await engine.runtime.start("deadline", None, execution_id="wf-28")
    done = await engine.runtime.resume("wf-28", "approval", "wf-28", "ok")
    assert (done.status, done.output) == ("completed", "approved")
    assert await engine.skip(120) == []
    assert (await engine.runtime.result("wf-28")).status == "completed"


async def test_a_failed_workflow_is_redriven_once_from_the_failure(engine: Engine):
    """DBOS's dead-letter queue (``max_recovery_attempts`` exceeded, then resumed by an
    operator): Loom lists failed executions as dead letters and re-drives each as a fork
    from its failure; a second re-drive starts nothing new."""
    from loom.ops.deadletters import find, redrive

    await engine.runtime.start("raises", "boom", execution_id="wf-29")
    letters = await find(engine.runtime, "failed")
    assert [row.execution_id for row in letters] == ["wf-29"]
    (first,) = await redrive(engine.runtime, letters, by="ops")
    assert first.new_execution_id is not None and first.new_execution_id != "wf-29"
    (second,) = await redrive(engine.runtime, letters, by="ops")
    assert second.new_execution_id == first.new_execution_id
    assert len(_ran("echo")) == 1  # the step before the failure is reused by the fork
    assert (await engine.runtime.result("wf-29")).status == "failed"


async def test_a_long_backoff_waits_on_a_durable_timer_across_a_restart(engine: Engine):
    """DBOS step retries with ``interval_seconds``/``backoff_rate``: a backoff longer than a
    worker should sleep through ends the call and the next attempt runs on a durable timer
    at the recorded time, its attempt count kept across the restart."""
    apps.SLOW_FAILURES["bk-1"] = 2
    first = await engine.runtime.start("backoff", None, execution_id="bk-1")
    assert first.status == "suspended" and first.wake_at == engine.clock.now + 60
    await engine.restart()
    assert await engine.skip(30) == []
    (second,) = await engine.skip(31)
    assert second.status == "suspended"  # attempt 2 failed; the next wait doubles
    assert await engine.skip(100) == []
    (done,) = await engine.skip(21)
    assert (done.status, done.output) == ("completed", 3)
    assert _ran("slow_retry") == ["slow_retry:bk-1:1"] * 3


async def test_cancelling_an_enqueued_workflow_runs_none_of_it(engine: Engine):
    """DBOS ``test_cancel_queued_workflow``: a workflow cancelled while it waits in a queue
    never runs a step."""
    from loom.primitives.queues import QueueRef

    await engine.runtime.start("steps", 2, execution_id="wf-30", run=False, queue=QueueRef("one"))
    done = await engine.runtime.cancel("wf-30", "not wanted")
    assert done.status == "cancelled"
    assert (await engine.execute("wf-30", "start")).status == "cancelled"  # a late delivery
    assert _ran("echo") == []


async def test_get_event_waits_for_a_value_set_later(engine: Engine):
    """DBOS ``get_event(timeout_seconds=…)`` blocks until the workflow sets the key."""
    import asyncio

    await engine.runtime.start("publisher", 1, execution_id="wf-31", run=False)

    async def run_later() -> None:
        await asyncio.sleep(0.3)
        await engine.execute("wf-31", "start")

    runner = asyncio.create_task(run_later())
    assert await engine.runtime.get_event("wf-31", "stage", timeout=10) == "waiting"
    await runner


async def test_two_concurrent_receives_take_one_message_each(engine: Engine):
    """DBOS: two ``recv`` calls on one topic each take a different message."""
    await engine.runtime.start("two_recv", None, execution_id="wf-32")
    await engine.runtime.send("wf-32", "t", "x")
    done = await engine.runtime.send("wf-32", "t", "y")
    assert (done.status, sorted(done.output)) == ("completed", ["x", "y"])


async def test_a_cancelled_child_fails_the_awaiting_parent_with_its_status(engine: Engine):
    """DBOS: cancelling a child workflow makes the parent's ``get_result`` raise; Loom's
    parent gets ``ChildFlowFailedError`` with status ``cancelled``."""
    await engine.runtime.start("awaits_child", None, execution_id="wf-33")
    child = await engine.runtime.cancel("wf-33.child.1")
    assert child.status == "cancelled"
    parent = await engine.runtime.result("wf-33")
    assert (parent.status, parent.output) == ("completed", {"status": "cancelled"})


async def test_restart_of_a_workflow_whose_first_step_starts_children(engine: Engine):
    """DBOS ``restart_workflow`` works whatever the workflow's steps are, and
    ``test_restart_fromsteps_childwf``: a fork from after a child's start reuses that child
    (it does not run again), a fork from the start runs a new one. Loom: a fork from step 1
    starts both children anew; one from step 2 reuses the first child's recorded result
    and starts only the second (it used to be refused with ``NotForkableError``)."""
    await engine.runtime.start("fan_out", [1, 2], execution_id="wf-34")
    again = await engine.runtime.fork("wf-34", "1", new_id="wf-34-again")
    assert (again.status, again.output) == ("completed", 6)
    assert (await engine.runtime.result("wf-34-again.child.2")).output == 4
    late = await engine.runtime.fork("wf-34", "2", new_id="wf-34-late")
    assert (late.status, late.output) == ("completed", 6)
    ids = {row.execution_id for row in await engine.runtime.list()}
    assert "wf-34-late.child.2" in ids and "wf-34-late.child.1" not in ids
    started = [e for e in await engine.runtime.history("wf-34-late") if e.type == "ChildStarted"]
    assert [e.child_id for e in started] == ["wf-34.child.1", "wf-34-late.child.2"]  # type: ignore[union-attr]


async def test_restart_of_a_workflow_that_sent_and_published(engine: Engine):
    """DBOS ``restart_workflow`` of a workflow whose first step is a ``send``: the restarted
    one sends again (a new sender, so a new message), and one that publishes first may be
    restarted too."""
    await engine.runtime.start("receiver", {"n": 2}, execution_id="wf-35")
    await engine.runtime.start("sender", {"to": "wf-35", "payloads": ["a"]}, execution_id="wf-36")
    await engine.runtime.fork("wf-36", "1", new_id="wf-36-again")
    assert (await engine.runtime.result("wf-35")).output == ["a", "a"]
    await engine.runtime.start("publisher", 1, execution_id="wf-37")
    restarted = await engine.runtime.fork("wf-37", "1", new_id="wf-37-again")
    assert restarted.status == "suspended"
    assert await engine.runtime.get_event("wf-37-again", "stage") == "waiting"


async def test_a_scheduled_workflow_runs_once_per_tick(engine: Engine):
    """DBOS ``@DBOS.scheduled``: one run per tick however many schedulers fire it; the
    tick's time names the run. Ticks missed for longer than the grace are skipped (DBOS
    also does not back-fill by default)."""
    import asyncio

    from loom.primitives.schedules import fire_due

    engine.clock.now = 1_700_000_100.0  # 22:15:00 UTC, on a tick of */5
    # Deployed a minute before: a schedule's first run is the first tick after it was
    # declared (DBOS too starts none from before the launch).
    assert await fire_due(engine.runtime, engine.clock.now - 60, grace=60) == []
    first, second = await asyncio.gather(
        fire_due(engine.runtime, grace=60), fire_due(engine.runtime, grace=60)
    )
    ticks = {f.execution_id for f in first + second}
    assert ticks == {"schedule:every5@2023-11-14T22:15:00Z"}
    assert [r.execution_id for r in await engine.runtime.list()] == [next(iter(ticks))]
    engine.clock.now += 300
    (later,) = await fire_due(engine.runtime, grace=60)
    assert later.execution_id.endswith("22:20:00Z") and later.started
    engine.clock.now += 3600  # an hour down: only the ticks within the grace run
    missed = await fire_due(engine.runtime, grace=60)
    assert [f.execution_id[-9:] for f in missed] == ["23:20:00Z"]
    assert len(_ran("echo")) == 3


async def test_a_sleeping_workflow_does_not_hold_its_queue_slot(engine: Engine):
    """DBOS counts a queued workflow against the queue's concurrency until it finishes,
    sleeping included. Loom leases a slot per execute call (a suspended execution frees
    it; documented in ``loom.primitives.queues``): two sleepers on a queue of one both reach their
    sleep, and both finish."""
    from loom.primitives.queues import QueueRef

    for eid in ("wf-38", "wf-39"):
        started = await engine.runtime.start("sleeper", 60, execution_id=eid, queue=QueueRef("one"))
        assert started.status == "suspended"
    assert _ran("echo") == ["echo:wf-38:2", "echo:wf-39:2"]  # both ran up to the sleep
    done = await engine.skip(61)
    assert [r.status for r in done] == ["completed", "completed"]


async def test_a_purged_workflow_id_may_be_started_again(engine: Engine):
    """DBOS ``delete_workflow``/garbage collection: once a finished workflow is deleted its
    id is free; a start with it runs afresh. Live workflows are never purged."""
    from loom.ops.retention import purge_finished

    await engine.runtime.start("steps", 1, execution_id="wf-40")
    await engine.runtime.start("waits_forever", None, execution_id="wf-41")
    # The store stamps an execution's end with its own clock: "finished before now".
    summary = await purge_finished(engine.runtime.store, None, older_than=-1.0)
    assert summary.purged == 1
    with pytest.raises(UnknownExecutionError):
        await engine.runtime.result("wf-40")
    assert (await engine.runtime.result("wf-41")).status == "suspended"
    again = await engine.runtime.start("steps", 2, execution_id="wf-40")
    assert again.output == [0, 1]
    assert _ran("echo") == ["echo:wf-40:1", "echo:wf-41:1", "echo:wf-40:1", "echo:wf-40:2"]
