"""Temporal's batch operations (``temporal workflow cancel|signal|reset --query ...``, the
operator service's ``StartBatchOperation``) and DBOS's workflow management by filter
(``list_workflows(status=, name=, start_time=, end_time=)`` then ``cancel_workflow``/
``resume_workflow`` each), ported to Loom's bulk operations.

Temporal's CLI counts the workflows a query selects and asks before it acts; Loom's dry run
counts and lists, and writes nothing. SQLite on disk, a fake clock, every execute call
checked by a replay.
"""

from __future__ import annotations

import asyncio
from typing import Any

from loom import EffectContext, FlowContext, Loom
from loom.ops.bulk import Selection
from tests.peers.temporal.harness import EnvFactory


def batch_app(log: list[str], broken: set[str]) -> Loom:
    app = Loom("temporal-batch")

    @app.effect("work")
    def work(ctx: EffectContext, name: str) -> str:
        log.append(f"{ctx.execution_id}:{name}")
        if name in broken:
            raise RuntimeError(f"{name} broke")
        return name

    @app.flow("awaiting_signal")
    async def awaiting_signal(ctx: FlowContext, _: None) -> Any:
        try:
            value = await ctx.suspend("proceed", f"{ctx.execution_id}:proceed")
        except asyncio.CancelledError:
            await ctx.execute(work, "cleanup")
            raise
        return await ctx.execute(work, f"proceeded {value}")

    @app.flow("other_type")
    async def other_type(ctx: FlowContext, _: None) -> Any:
        return await ctx.suspend("proceed", f"{ctx.execution_id}:proceed")

    @app.flow("two_steps")
    async def two_steps(ctx: FlowContext, name: str) -> str:
        await ctx.execute(work, "first")
        return await ctx.execute(work, name)

    return app


async def test_batch_cancel_by_query_with_a_count_first(make_env: EnvFactory):
    """Temporal: ``temporal workflow cancel --query "WorkflowType='awaiting_signal' AND
    ExecutionStatus='Running'"`` counts, asks, then cancels each (each one's cancellation
    handlers run). Loom: ``bulk("cancel", Selection(flow=..., status=...))``, dry run first."""
    log: list[str] = []
    env = make_env(batch_app(log, set()))
    for n in range(3):
        await env.start("awaiting_signal", None, execution_id=f"w{n}")
    await env.start("other_type", None, execution_id="o")
    query = Selection(flow="awaiting_signal", status="suspended")
    counted = await env.runtime.bulk("cancel", query, by="ops", dry_run=True)
    assert counted.count == 3 and log == []
    done = await env.runtime.bulk("cancel", query, by="ops", reason="batch")
    assert done.count == 3
    assert sorted(log) == [f"w{n}:cleanup" for n in range(3)]
    assert (await env.runtime.result("o")).status == "suspended"


async def test_batch_signal_by_query(make_env: EnvFactory):
    """Temporal: ``temporal workflow signal --query ... --name proceed --input '"go"'``.
    Loom: a bulk resume of each selected execution's open gate ``proceed``."""
    log: list[str] = []
    env = make_env(batch_app(log, set()))
    for n in range(2):
        await env.start("awaiting_signal", None, execution_id=f"s{n}")
    done = await env.runtime.bulk(
        "resume", Selection(flow="awaiting_signal"), on="proceed", payload="go", by="ops"
    )
    assert [(i.execution_id, i.outcome) for i in done.items] == [
        ("s1", "completed"),
        ("s0", "completed"),
    ]
    assert sorted(log) == ["s0:proceeded go", "s1:proceeded go"]


async def test_batch_reset_of_failed_workflows(make_env: EnvFactory):
    """Temporal: ``temporal workflow reset --query "ExecutionStatus='Failed'" --type
    LastWorkflowTask`` re-runs failed workflows from their failure after a fix; DBOS resumes
    them. Loom: a bulk retry re-drives each failed execution as a fork from the step that
    failed it, the steps before reused; a second one starts nothing new."""
    log: list[str] = []
    broken = {"b"}
    env = make_env(batch_app(log, broken))
    for eid in ("f1", "f2"):
        assert (await env.start("two_steps", "b", execution_id=eid)).status == "failed"
    broken.clear()
    log.clear()
    done = await env.runtime.bulk("retry", Selection(status="failed"), by="ops")
    assert [(i.action, i.outcome) for i in done.items] == [("fork", "completed")] * 2
    assert [line.split(".redrive-")[0] + line[-2:] for line in sorted(log)] == ["f1:b", "f2:b"]
    assert all(".redrive-" in line for line in log)  # only the failed step ran, in the fork
    again = await env.runtime.bulk("retry", Selection(status="failed"), by="ops")
    assert {i.action for i in again.items} == {"none"}


async def test_management_by_start_time_window(make_env: EnvFactory):
    """DBOS: ``list_workflows(start_time=, end_time=)`` then ``cancel_workflow`` each. Loom:
    a selection by creation time, each bound checked against the store's record."""
    env = make_env(batch_app([], set()))
    for n in range(3):
        await env.start("other_type", None, execution_id=f"t{n}")
        await asyncio.sleep(0.01)
    created = {row.execution_id: row.created_at for row in await env.runtime.list()}
    window = Selection(created_from=created["t1"], created_before=created["t2"])
    done = await env.runtime.bulk("cancel", window, by="ops")
    assert [i.execution_id for i in done.items] == ["t1"]
    assert [(await env.runtime.result(f"t{n}")).status for n in range(3)] == [
        "suspended",
        "cancelled",
        "suspended",
    ]
