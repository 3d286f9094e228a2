"""Temporal's continue-as-new, patching, versioning and replay scenarios, ported to Loom.

Continue-as-new keeps the id and starts a fresh history; ``workflow.patched`` branches old
histories from new ones; the replayer detects nondeterminism when code changes the order or
kind of its steps. Loom's counterparts: ``ctx.continue_as_new``, ``ctx.patched``, flow
versions, ``loom.testing.replay`` and parking on divergence (README, "Deploying new code
under running executions"). SQLite on disk, a fake clock, every execute call replayed.
"""

from __future__ import annotations

from typing import Any

import pytest

from loom import EffectContext, FlowContext, Loom, NondeterminismError
from loom.testing import replay
from loom.wire import ExecutionPackage
from tests.peers.temporal.harness import EnvFactory


def entity_app(log: list[str]) -> Loom:
    app = Loom("temporal-can")

    @app.effect("work")
    def work(ctx: EffectContext, name: str) -> str:
        log.append(f"{ctx.idempotency_key}:{name}")
        return name

    @app.flow("counter")
    async def counter(ctx: FlowContext, state: dict[str, Any]) -> dict[str, Any]:
        total = state["total"]
        for _ in range(2):
            total += await ctx.recv("add")
        await ctx.set_event("total", total)
        if total >= state["stop_at"]:
            return {"total": total, "runs": state["runs"]}
        await ctx.continue_as_new({**state, "total": total, "runs": state["runs"] + 1})

    @app.flow("hop")
    async def hop(ctx: FlowContext, n: int) -> int:
        await ctx.execute(work, f"hop {n}")
        if n < 30:
            await ctx.continue_as_new(n + 1)
        return n

    return app


async def test_continue_as_new_keeps_the_id_passes_arguments_and_carries_signals(
    make_env: EnvFactory,
):
    """Temporal: test_workflow_continue_as_new — the next run gets the new arguments and the
    same workflow id; signals sent meanwhile reach the new run. Loom: messages the ended run
    did not take are carried over in order; published state too."""
    env = make_env(entity_app([]))
    start = {"total": 0, "stop_at": 10, "runs": 1}
    await env.start("counter", start, execution_id="acct")
    last = None
    for n in (1, 2, 3, 4):
        last = await env.runtime.send("acct", "add", n)
    assert last is not None and last.status == "completed"
    assert last.output == {"total": 10, "runs": 2}
    state = await env.runtime.load_state("acct")
    assert state.run == 2
    assert await env.runtime.get_event("acct", "total") == 10


async def test_messages_buffered_across_runs_are_not_lost(make_env: EnvFactory):
    """Temporal: signals received before continue-as-new but not handled must be drained or
    they are lost (a known pitfall). Loom promises more: untaken messages move to the next
    run."""
    env = make_env(entity_app([]))
    await env.start("counter", {"total": 0, "stop_at": 1000, "runs": 1}, execution_id="buf")
    for n in range(7):  # three runs take two each; the seventh waits in the fourth run
        await env.runtime.send("buf", "add", n)
    state = await env.runtime.load_state("buf")
    assert state.run == 4
    assert state.input == {"total": 0 + 1 + 2 + 3 + 4 + 5, "stop_at": 1000, "runs": 4}
    await env.runtime.send("buf", "add", 100)
    assert await env.runtime.get_event("buf", "total") == 6 + 100 + 15


async def test_many_continues_in_one_call_reset_the_history(make_env: EnvFactory):
    """Temporal: test_workflow_continue_as_new with many iterations; each run's history
    starts empty. Loom: 30 runs in a row, each step run once with its run's key, and the
    current run's log holds one run only."""
    log: list[str] = []
    env = make_env(entity_app(log))
    r = await env.start("hop", 1, execution_id="hop")
    assert (r.status, r.output) == ("completed", 30)
    assert len(log) == 30 and len(set(log)) == 30
    state = await env.runtime.load_state("hop")
    assert state.run == 30 and len(state.steps) == 1


def versioned_app(*, patched: bool, order: str = "ab", version: int | None = None) -> Loom:
    app = Loom("temporal-versions")

    @app.effect("a")
    def a(ctx: EffectContext, _: None) -> str:
        return "a"

    @app.effect("b")
    def b(ctx: EffectContext, _: None) -> str:
        return "b"

    @app.effect("notify")
    def notify(ctx: EffectContext, _: None) -> str:
        return "notified"

    async def body(ctx: FlowContext, _: None) -> list[Any]:
        out: list[Any] = []
        if patched and ctx.patched("notify-first"):
            out.append(await ctx.execute(notify))
        steps = {"a": a, "b": b}
        if order == "sleep":
            await ctx.sleep(1)
        else:
            out.append(await ctx.execute(steps[order[0]]))
        out.append(await ctx.suspend("approval", ctx.execution_id))
        out.append(await ctx.execute(steps[order[-1]]))
        return out

    app.flow("order", version=version or 1)(body)
    return app


async def test_patched_branches_old_histories_from_new_ones(make_env: EnvFactory):
    """Temporal: test_workflow_patch — a running workflow started before the patch takes
    the old path on replay, a new one the patched path. Loom: ``ctx.patched`` is False for
    the history recorded without it, True for a new execution."""
    env = make_env(versioned_app(patched=False))
    await env.start("order", None, execution_id="old")
    env.deploy(versioned_app(patched=True))
    await env.start("order", None, execution_id="new")
    old = await env.runtime.resume("old", "approval", "old", "ok")
    new = await env.runtime.resume("new", "approval", "new", "ok")
    assert old.output == ["a", "ok", "b"]
    assert new.output == ["notified", "a", "ok", "b"]


async def test_a_changed_step_order_parks_the_execution_as_nondeterministic(
    make_env: EnvFactory,
):
    """Temporal: test_workflow_nondeterminism / replayer tests — code that runs its
    activities in another order fails the workflow task with a nondeterminism error. Loom:
    the execution parks ``suspended`` with a ``nondeterminism`` reason, nothing invoked;
    the old code deployed again (a fix), ``retry`` runs it to its end."""
    env = make_env(versioned_app(patched=False, order="ab"))
    await env.start("order", None, execution_id="nd")
    history = await env.history("nd")
    env.deploy(versioned_app(patched=False, order="ba"))
    r = await env.runtime.resume("nd", "approval", "nd", "ok")
    assert r.status == "suspended"
    state = await env.runtime.load_state("nd")
    assert state.parked_reason is not None and "nondeterminism" in state.parked_reason
    with pytest.raises(NondeterminismError):
        await replay(versioned_app(patched=False, order="ba"), history)
    env.deploy(versioned_app(patched=False, order="ab"))
    fixed = await env.runtime.retry("nd")
    assert (fixed.status, fixed.output) == ("completed", ["a", "ok", "b"])


async def test_a_changed_kind_of_step_is_detected_on_replay(make_env: EnvFactory):
    """Temporal: replacing an activity by a timer is a nondeterminism error in the
    replayer. Loom: ``replay`` of the recorded history against the changed code raises."""
    env = make_env(versioned_app(patched=False, order="ab"))
    await env.start("order", None, execution_id="kind")
    await env.runtime.resume("kind", "approval", "kind", "ok")
    history = await env.history("kind")
    assert (await replay(versioned_app(patched=False, order="ab"), history)).output == [
        "a",
        "ok",
        "b",
    ]
    with pytest.raises(NondeterminismError):
        await replay(versioned_app(patched=False, order="sleep"), history)


def two_versions() -> Loom:
    app = Loom("temporal-versions")

    @app.flow("greet", version=1)
    async def greet_v1(ctx: FlowContext, name: str) -> str:
        return f"v1 {await ctx.suspend('go', ctx.execution_id)} {name}"

    @app.flow("greet", version=2)
    async def greet_v2(ctx: FlowContext, name: str) -> str:
        return f"v2 {name}"

    return app


async def test_worker_versioning_keeps_running_executions_on_their_version(
    make_env: EnvFactory,
):
    """Temporal: worker versioning / build ids — running workflows stay on the build they
    started with, new ones go to the new build. Loom: flow versions side by side; an
    execution runs to its end on the version recorded at its start."""
    one = Loom("temporal-versions")

    @one.flow("greet", version=1)
    async def greet_v1(ctx: FlowContext, name: str) -> str:
        return f"v1 {await ctx.suspend('go', ctx.execution_id)} {name}"

    env = make_env(one)
    await env.start("greet", "ada", execution_id="g-old")
    env.deploy(two_versions())
    new = await env.start("greet", "bob", execution_id="g-new")
    assert new.output == "v2 bob"
    old = await env.runtime.resume("g-old", "go", "g-old", "hi")
    assert old.output == "v1 hi ada"
    pinned = await env.start("greet", "cy", execution_id="g-pin", version=1)
    assert pinned.status == "suspended"


async def test_a_replay_of_a_completed_history_reproduces_its_result(make_env: EnvFactory):
    """Temporal: ``Replayer.replay_workflow`` of a recorded history succeeds with the same
    code. Loom: ``loom.testing.replay`` reaches the same output without invoking
    anything, and an execute call on the ended execution runs nothing."""
    env = make_env(entity_app([]))
    r = await env.start("hop", 29, execution_id="rp")
    assert r.output == 30
    outcome = await replay(env.runtime.app, await env.history("rp"))
    assert (outcome.status, outcome.output) == ("completed", 30)
    again = await env.runtime.execute(ExecutionPackage(execution_id="rp", reason="manual"))
    assert again.output == 30
