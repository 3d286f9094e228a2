"""Ports of Restate's SDK and e2e test scenarios (idempotent invocations, awakeables,
``ctx.run`` with retries and terminal errors, sleep, cancellation, keyed serialization,
durable state) onto Loom, in one process over SQLite on disk.

A Restate invocation is a Loom execution, an idempotency key its execution id, an awakeable a
gate (``ctx.suspend``) resolved from outside by ``Runtime.resume``, a virtual object's key a
queue's partition key, and ``ctx.run`` an effect.
"""

from __future__ import annotations

import asyncio

import pytest

from loom import events as ev
from loom.errors import ExecutionFinishedError, GateTimedOutError, UnknownExecutionError
from loom.primitives.queues import QueueRef
from loom.wire import ExecutionPackage
from tests.peers.others import apps
from tests.peers.others.conftest import Engine


def _ran(effect: str) -> list[str]:
    return [line for line in apps.LEDGER if line.startswith(f"{effect}:")]


async def test_an_invocation_with_the_same_idempotency_key_runs_once(engine: Engine):
    """Restate ``idempotency-key`` header: a second call with the key gets the first call's
    response and the handler's side effects happen once. A non-idempotent effect included."""
    first = await engine.runtime.start("pay", 42, execution_id="idem-1")
    second = await engine.runtime.start("pay", 42, execution_id="idem-1")
    assert first.output == second.output == "ch-idem-1:1-42"
    assert _ran("charge") == ["charge:idem-1:1"]


async def test_concurrent_invocations_with_one_key_run_the_handler_once(engine: Engine):
    """Restate attaches a concurrent duplicate to the running invocation; Loom's start is
    idempotent by id even when both race: one execution, each effect once."""
    results = await asyncio.gather(
        *(engine.runtime.start("pay", 7, execution_id="idem-2") for _ in range(4)),
        return_exceptions=True,
    )
    done = await engine.runtime.result("idem-2")
    assert done.output == "ch-idem-2:1-7"
    assert _ran("charge") == ["charge:idem-2:1"]
    for result in results:  # each caller learns where it stands, or that a holder has it
        assert not isinstance(result, BaseException) or type(result).__name__ == (
            "ExecutionSupersededError"
        )


async def test_an_awakeable_is_resolved_from_outside(engine: Engine):
    """Restate ``ctx.awakeable()`` resolved by ``/restate/awakeables/{id}/resolve``: the
    handler suspends until an outside party completes it, then gets the payload."""
    started = await engine.runtime.start("awakeable", None, execution_id="aw-1")
    assert started.status == "suspended"
    (gate,) = started.waiting_on
    assert (gate.on, gate.correlation_key) == ("callback", "aw-1:cb")
    done = await engine.runtime.resume("aw-1", "callback", "aw-1:cb", {"ok": True})
    assert (done.status, done.output) == ("completed", {"value": {"ok": True}})


async def test_an_awakeable_resolved_twice_keeps_the_first_value(engine: Engine):
    """Restate: completing an awakeable twice; the second completion has no effect on the
    handler. Loom: a repeated resume (same gate and key) is a no-op, even after the end, so
    an at-least-once caller may send it again."""
    await engine.runtime.start("awakeable", None, execution_id="aw-2")
    await engine.runtime.resume("aw-2", "callback", "aw-2:cb", "first")
    seqs = len(await engine.runtime.history("aw-2"))
    again = await engine.runtime.resume("aw-2", "callback", "aw-2:cb", "second")
    assert (again.status, again.output) == ("completed", {"value": "first"})
    assert len(await engine.runtime.history("aw-2")) == seqs


async def test_an_awakeable_resolved_before_it_is_awaited_is_buffered(engine: Engine):
    """Restate: an awakeable completed before the handler awaits it is delivered when it
    does. Loom buffers an early resume (non-strict) until the gate opens."""
    await engine.runtime.start("awakeable", None, execution_id="aw-3", run=False)
    await engine.runtime.resume("aw-3", "callback", "aw-3:cb", "early")
    done = await engine.execute("aw-3", "start")
    assert (done.status, done.output) == ("completed", {"value": "early"})


async def test_an_awakeable_with_a_timeout_expires(engine: Engine):
    """Restate ``awakeable.promise.orTimeout``, AWS durable callbacks' ``timeout``: past
    the timeout the handler gets a timeout error (here caught). A resolution arriving later
    lost to the timeout: Loom refuses it (``GateTimedOutError``, 409 ``gate_timed_out``), as
    AWS refuses a callback that timed out, appending nothing."""
    await engine.runtime.start("awakeable", 60.0, execution_id="aw-4")
    (done,) = await engine.skip(61)
    assert (done.status, done.output) == ("completed", {"timed_out": True})
    seqs = len(await engine.runtime.history("aw-4"))
    with pytest.raises(GateTimedOutError, match="timed out"):
        await engine.runtime.resume("aw-4", "callback", "aw-4:cb", "late")
    assert len(await engine.runtime.history("aw-4")) == seqs
    assert (await engine.runtime.result("aw-4")).output == {"timed_out": True}


async def test_a_resume_for_another_awakeable_does_not_wake_the_handler(engine: Engine):
    """Restate rejects an unknown awakeable id. Loom buffers a resume no gate waits for (an
    event may come before its gate opens; ``loom resume --strict`` refuses it): the handler
    stays suspended on its own gate, and the right resume still completes it."""
    await engine.runtime.start("awakeable", None, execution_id="aw-5")
    other = await engine.runtime.resume("aw-5", "callbak", "aw-5:cb", "typo")
    assert other.status == "suspended"
    done = await engine.runtime.resume("aw-5", "callback", "aw-5:cb", "right")
    assert done.output == {"value": "right"}


async def test_a_resume_of_an_unknown_invocation_is_a_clear_error(engine: Engine):
    """Restate answers 404 for an unknown invocation; Loom raises ``UnknownExecutionError``."""
    with pytest.raises(UnknownExecutionError):
        await engine.runtime.resume("nobody", "callback", "k", None)


async def test_ctx_run_with_a_terminal_error_is_not_retried(engine: Engine):
    """Restate ``TerminalError`` in ``ctx.run``: no retry, the invocation fails with it."""
    result = await engine.runtime.start("terminal_flow", "no way", execution_id="run-1")
    assert result.status == "failed"
    assert result.error is not None and "no way" in result.error["message"]
    assert _ran("terminal") == ["terminal:run-1:1"]


async def test_ctx_run_is_retried_and_its_result_journaled(engine: Engine):
    """Restate ``ctx.run`` retry policy: transient errors are retried; the journaled result
    is served on a re-invocation instead of running the closure again."""
    apps.FLAKY["r"] = 1
    first = await engine.runtime.start("retrying", "r", execution_id="run-2")
    assert first.output == 2
    runtime = await engine.restart()
    assert (await runtime.start("retrying", "r", execution_id="run-2")).output == 2
    assert len(_ran("flaky")) == 2


async def test_ctx_run_with_a_timeout_fails_the_attempt(engine: Engine):
    """Restate ``ctx.run`` with ``max_retry_duration``/an inactivity timeout: a closure that
    overruns fails; Loom's effect ``timeout=`` cancels the attempt with code ``timeout``."""
    result = await engine.runtime.start("timed_step", 5.0, execution_id="run-3")
    assert (result.status, result.output) == ("completed", "timeout")


async def test_a_durable_sleep_resumes_after_the_timer(engine: Engine):
    """Restate ``ctx.sleep``: the invocation suspends and resumes after the duration."""
    started = await engine.runtime.start("sleeper", 5, execution_id="sl-1")
    assert started.status == "suspended" and started.waiting_on[0].on == "loom.timer"
    (done,) = await engine.skip(5)
    assert done.status == "completed"


async def test_a_zero_sleep_completes_without_an_outside_wake(engine: Engine):
    """Restate ``ctx.sleep(0)`` returns at once. Loom records a timer already due; with no
    dispatcher the start runs it inline and reports where the execution got to (it used to
    report the suspension it had already left behind)."""
    done = await engine.runtime.start("sleeper", 0, execution_id="sl-2")
    assert done.status == "completed"
    assert (await engine.runtime.result("sl-2")).status == "completed"


async def test_a_zero_timeout_receive_returns_at_once(engine: Engine):
    """Restate/DBOS: a receive with a zero timeout and nothing buffered times out at once."""
    done = await engine.runtime.start("receiver", {"n": 1, "timeout": 0}, execution_id="rx-0")
    assert (done.status, done.output) == ("completed", [None])


async def test_cancel_runs_compensations_in_reverse(engine: Engine):
    """Restate's saga pattern under ``cancel invocation``: the handler sees the cancellation
    at its suspension point and runs its compensations durably."""
    await engine.runtime.start("saga", ["hotel", "car"], execution_id="c-1")
    done = await engine.runtime.cancel("c-1", "user cancelled")
    assert done.status == "cancelled"
    assert [line.split(":")[0] for line in apps.LEDGER] == ["echo"] * 4
    outputs = [
        e.output for e in await engine.runtime.history("c-1") if isinstance(e, ev.EffectCompleted)
    ]
    assert outputs == ["book hotel", "book car", "undo car", "undo hotel"]


async def test_cancel_is_idempotent_for_a_cancelled_invocation(engine: Engine):
    """Restate: cancelling an invocation twice; the second is refused as already ended."""
    await engine.runtime.start("waits_forever", None, execution_id="c-2")
    await engine.runtime.cancel("c-2")
    with pytest.raises(ExecutionFinishedError):
        await engine.runtime.cancel("c-2")


async def test_cancelling_a_parent_cancels_its_running_children(engine: Engine):
    """Restate cancels the call tree of a cancelled invocation; Loom cancels the children a
    parent still runs when it ends (unless started with ``on_cancel="abandon"``)."""
    started = await engine.runtime.start("tree", None, execution_id="c-3")
    assert started.status == "suspended"
    child = await engine.runtime.result("c-3.child.1")
    assert child.status == "suspended"
    await engine.runtime.cancel("c-3")
    assert (await engine.runtime.result("c-3.child.1")).status == "cancelled"


async def test_a_virtual_object_key_runs_one_invocation_at_a_time(engine: Engine):
    """Restate virtual objects: invocations for one key are serialized, other keys run in
    parallel. Loom: a queue's partition key."""
    for i, key in enumerate(["alice", "alice", "bob"]):
        ref = QueueRef("keyed", key)
        await engine.runtime.start("queued", 0.3, execution_id=f"vo-{i}", run=False, queue=ref)
    results = await asyncio.gather(
        *(engine.runtime.execute(ExecutionPackage(execution_id=f"vo-{i}")) for i in range(3))
    )
    status = {r.execution_id: r.status for r in results}
    assert status["vo-2"] == "completed"  # bob is not held up by alice
    assert sorted([status["vo-0"], status["vo-1"]]) == ["completed", "running"]
    waiting = next(e for e in ("vo-0", "vo-1") if status[e] == "running")
    assert [e.type for e in await engine.runtime.history(waiting)] == ["ExecutionStarted"]
    assert (await engine.execute(waiting)).status == "completed"


async def test_durable_state_across_runs_with_continue_as_new(engine: Engine):
    """Restate virtual-object state (``ctx.get``/``ctx.set``) that outlives invocations;
    Loom's entity pattern: messages fold into the input of the next run."""
    await engine.runtime.start("counter", 0, execution_id="obj-1")
    for n in (1, 2, 3, 4):
        await engine.runtime.send("obj-1", "add", n)
    state = await engine.runtime.load_state("obj-1")
    assert (state.run, state.input) == (3, 10)
    await engine.restart()
    await engine.runtime.send("obj-1", "add", 50)
    done = await engine.runtime.send("obj-1", "add", 50)
    assert (done.status, done.output) == ("completed", 110)


async def test_random_uuid_and_time_are_journaled(engine: Engine):
    """Restate ``ctx.rand``/``ctx.uuid``/``ctx.time`` are deterministic on replay: values
    taken before a suspension come back the same after a restart."""
    await engine.runtime.start("decisions", None, execution_id="det-1")
    recorded = [
        e.value for e in await engine.runtime.history("det-1") if e.type == "DecisionRecorded"
    ]
    await engine.restart()
    done = await engine.runtime.resume("det-1", "go", "det-1", None)
    assert done.output[:3] == recorded
    assert done.output[3] not in recorded and done.output[3] != done.output[0]


async def test_a_cancelled_handler_may_wait_durably_in_its_cleanup(engine: Engine):
    """Restate: a cancelled handler's compensation may itself suspend (sleep) and still
    completes later, ending cancelled."""
    await engine.runtime.start("slow_cleanup", None, execution_id="c-4")
    during = await engine.runtime.cancel("c-4")
    assert during.status == "suspended"
    (done,) = await engine.skip(11)
    assert done.status == "cancelled"
    assert _ran("echo") == ["echo:c-4:3"]


async def test_a_result_that_cannot_be_serialized_fails_the_step_without_a_rerun(
    engine: Engine,
):
    """Restate: a ``ctx.run`` result its serde cannot write is a terminal error, the closure
    is not retried. Loom: a value JSON cannot hold exactly (``NaN``) fails the step with
    code ``invalid_output`` and the effect is not invoked again (it ran)."""
    done = await engine.runtime.start("bad_output", None, execution_id="serde-1")
    assert (done.status, done.output) == ("completed", "invalid_output")
    assert _ran("not_json") == ["not_json:serde-1:1"]


async def test_a_one_way_call_outlives_its_caller_only_when_abandoned(engine: Engine):
    """Restate's one-way ``ctx.send`` starts an invocation that runs on its own. Loom's
    children are cancelled when their parent ends (a deliberate difference: no orphans by
    default); ``on_cancel="abandon"`` gives Restate's behaviour."""
    done = await engine.runtime.start("fire_and_forget", "abandon", execution_id="ow-1")
    assert done.output == "sent"
    assert (await engine.runtime.result("ow-1.child.1")).status == "suspended"
    await engine.runtime.start("fire_and_forget", "cancel", execution_id="ow-2")
    assert (await engine.runtime.result("ow-2.child.1")).status == "cancelled"


async def test_object_state_published_in_an_earlier_run_stays_readable(engine: Engine):
    """Restate virtual-object state (``ctx.get`` from another handler) persists across
    invocations. Loom: values an entity published carry over continue-as-new, and a value
    set only in the first run is still read after later runs; a restart keeps them."""
    await engine.runtime.start("entity", 0, execution_id="vo-state")
    for n in (5, 7):
        await engine.runtime.send("vo-state", "add", n)
    runtime = await engine.restart()
    assert await runtime.get_event("vo-state", "total") == 12
    assert await runtime.get_event("vo-state", "opened") is True
    assert (await runtime.load_state("vo-state")).run == 3
