"""Ports of AWS Lambda durable functions' SDK test scenarios (steps with retry strategies,
``wait``, callbacks with timeouts, ``waitForCallback`` with a submitter, ``map``/``parallel``
and ``invoke`` as child contexts, ``waitForCondition``, replay consistency, checkpoints of
large results) onto Loom, over SQLite on disk.

A durable function is a Loom flow, a step an effect, ``context.wait`` ``ctx.sleep``, a
callback a gate resolved with ``Runtime.resume``, a child context or chained invoke a child
flow.
"""

from __future__ import annotations

from pathlib import Path

from loom import EffectContext, FlowContext, Loom
from loom.blobs import LocalBlobStore
from loom.runtime import Runtime
from loom.store.sqlite import SqliteEventStore
from loom.testing import replay
from tests.peers.others import apps
from tests.peers.others.conftest import Engine


def _ran(effect: str) -> list[str]:
    return [line for line in apps.LEDGER if line.startswith(f"{effect}:")]


async def test_wait_for_callback_hands_the_id_to_a_submitter(engine: Engine):
    """AWS ``waitForCallback``: the submitter gets a callback id, an outside system completes
    it, the function gets the result. Loom: the flow publishes the id (``set_event``), the
    caller reads it (``get_event``) and resumes the gate with it."""
    started = await engine.runtime.start("submitter", 300.0, execution_id="cb-1")
    assert started.status == "suspended"
    callback_id = await engine.runtime.get_event("cb-1", "callback_id")
    assert callback_id.startswith("cb-1:cb:")
    done = await engine.runtime.resume("cb-1", "callback", callback_id, {"approved": True})
    assert (done.status, done.output) == ("completed", {"approved": True})


async def test_a_callback_id_is_the_same_after_a_restart(engine: Engine):
    """AWS: the callback id is checkpointed, so a replay does not mint a new one."""
    await engine.runtime.start("submitter", 300.0, execution_id="cb-2")
    before = await engine.runtime.get_event("cb-2", "callback_id")
    runtime = await engine.restart()
    assert await runtime.get_event("cb-2", "callback_id") == before
    done = await runtime.resume("cb-2", "callback", before, "ok")
    assert done.output == "ok"


async def test_a_callback_times_out(engine: Engine):
    """AWS ``createCallback({timeout})``: past the timeout the function gets a timeout error
    (caught here), and a stale callback id does not complete anything."""
    await engine.runtime.start("submitter", 300.0, execution_id="cb-3")
    (done,) = await engine.skip(301)
    assert (done.status, done.output) == ("completed", "callback timed out")


async def test_wait_for_condition_polls_until_it_holds(engine: Engine):
    """AWS ``waitForCondition``: a check step, a wait, and again, until the condition holds;
    each check runs once however many times the function is replayed."""
    started = await engine.runtime.start("wait_for_condition", 3, execution_id="wc-1")
    assert started.status == "suspended"
    await engine.restart()
    (second,) = await engine.skip(10)
    assert second.status == "suspended"
    (done,) = await engine.skip(10)
    assert (done.status, done.output) == ("completed", 3)
    assert len(_ran("echo")) == 3


async def test_map_runs_one_child_per_item_once(engine: Engine):
    """AWS ``context.map``: one child context per item, results in item order; a re-run of
    the parent does not start the children again (their ids derive from the parent's)."""
    done = await engine.runtime.start("map_children", [1, 2, 3], execution_id="map-1")
    assert (done.status, done.output) == ("completed", [2, 4, 6])
    again = await engine.runtime.start("map_children", [1, 2, 3], execution_id="map-1")
    assert again.output == [2, 4, 6]
    children = [r.execution_id for r in await engine.runtime.list() if ".child." in r.execution_id]
    assert len(children) == 3 and all(c.startswith("map-1.child.") for c in children)
    assert len(_ran("echo")) == 3


async def test_a_failing_invoke_raises_into_the_caller(engine: Engine):
    """AWS ``context.invoke`` of a function that fails: the caller gets the error and may
    handle it. Loom: ``ChildFlowFailedError`` with the child's status and message."""
    done = await engine.runtime.start("parent_of_failure", 7, execution_id="inv-1")
    assert done.status == "completed"
    assert done.output["status"] == "failed"
    assert "child 7 failed" in done.output["message"]


async def test_parallel_branches_each_run_once(engine: Engine):
    """AWS ``context.parallel``: every branch runs once and the results keep their order."""
    done = await engine.runtime.start("parallel", [5, 6], execution_id="par-1")
    assert done.output == [5, 6]
    assert len(_ran("echo")) == 2


async def test_a_large_step_result_is_checkpointed_and_replayed(tmp_path: Path):
    """AWS checkpoints a step result over the payload limit separately and replays it; Loom
    puts a value over the inline threshold in the blob store (``LOOM_BLOBS``; the CLI's
    default is a directory next to the SQLite file) and serves it on replay after a restart
    without running the step again. Without a blob store such a value is a configuration
    error, not the flow's failure (Loom's documented choice)."""
    engine = Engine(tmp_path / "loom.db", options={"blobs": LocalBlobStore(tmp_path / "blobs")})
    apps.LEDGER.clear()
    await engine.runtime.start("big_step", 2_000_000, execution_id="big-1")
    stored = [e for e in await engine.runtime.history("big-1") if e.type == "EffectCompleted"]
    assert list(stored[0].output) == ["$blob"]
    runtime = await engine.restart()
    done = await runtime.resume("big-1", "go", "big-1", None)
    assert (done.status, done.output) == ("completed", 2_000_000)
    assert _ran("big") == ["big:big-1:1"]
    await runtime.store.aclose()


async def test_a_recorded_history_replays_against_the_code(engine: Engine):
    """AWS durable functions replay the handler against the checkpoint log on every
    invocation; Loom's ``loom.testing.replay`` does so in memory, invoking nothing."""
    await engine.runtime.start("sleeper", 5, execution_id="rp-1")
    await engine.skip(5)
    history = await engine.runtime.history("rp-1")
    outcome = await replay(apps.app, history)
    assert outcome.status == "completed"
    assert len(_ran("echo")) == 2  # the replay invoked nothing


async def test_changed_code_under_a_running_execution_is_parked_not_run(tmp_path: Path):
    """AWS durable functions fail an execution whose replay does not match its checkpoints
    (a non-deterministic change); Loom parks it (``nondeterminism: …``) and invokes nothing
    of the new code until an operator retries it on fixed code."""
    calls: list[str] = []

    def build(first: str) -> Loom:
        app = Loom("changing")

        @app.effect("a")
        async def a(ctx: EffectContext, _: None) -> str:
            calls.append(f"a:{ctx.step_id}")
            return "a"

        @app.effect("b")
        async def b(ctx: EffectContext, _: None) -> str:
            calls.append(f"b:{ctx.step_id}")
            return "b"

        @app.flow("f")
        async def f(ctx: FlowContext, _: None) -> str:
            await ctx.execute(a if first == "a" else b, None)
            await ctx.suspend("go", ctx.execution_id)
            return "done"

        return app

    store = SqliteEventStore(str(tmp_path / "loom.db"))
    old = Runtime(build("a"), store)
    await old.start("f", None, execution_id="nd-1")
    new = Runtime(build("b"), store)
    parked = await new.resume("nd-1", "go", "nd-1", None)
    assert parked.status == "suspended" and parked.parked_reason is not None
    assert "nondeterminism" in parked.parked_reason
    assert calls == ["a:1"]  # the changed step was never invoked
    fixed = Runtime(build("a"), store)
    done = await fixed.retry("nd-1", by="ops")
    assert (done.status, done.output) == ("completed", "done")
    assert calls == ["a:1"]
    await store.aclose()


async def test_parallel_branches_wait_their_own_durations(engine: Engine):
    """AWS ``parallel`` with a ``wait`` in each branch: the function wakes at the earliest
    wait, runs that branch on, and completes when the last wait is over."""
    started = await engine.runtime.start("parallel_waits", [10, 20], execution_id="pw-1")
    assert started.wake_at == engine.clock.now + 10
    (first,) = await engine.skip(10)
    assert first.status == "suspended" and _ran("echo") == ["echo:pw-1:1.2"]
    (done,) = await engine.skip(10)
    assert (done.status, done.output) == ("completed", ["after 10", "after 20"])
    assert len(_ran("echo")) == 2
