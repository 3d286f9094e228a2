"""Child flows on the in-memory test env (every execute call is replayed and checked)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from loom import EffectContext, FlowContext, Loom
from loom.errors import ChildFlowFailedError
from loom.testing import LoomTestEnv, replay


def family(log: list[str]) -> Loom:
    app = Loom("family")

    @app.effect("work")
    def work(ctx: EffectContext, n: int) -> int:
        log.append(f"work {n} {ctx.execution_id}")
        if n < 0:
            raise ValueError(f"bad {n}")
        return n * 10

    @app.flow("child")
    async def child(ctx: FlowContext, n: int) -> int:
        return await ctx.execute(work, n)

    @app.flow("gated_child")
    async def gated_child(ctx: FlowContext, key: str) -> Any:
        try:
            return await ctx.suspend("go", key)
        except asyncio.CancelledError:
            log.append(f"child {key} cleaned up")
            raise

    @app.flow("parent")
    async def parent(ctx: FlowContext, ns: list[int]) -> list[int]:
        return [await ctx.execute_flow(child, n) for n in ns]

    @app.flow("fanout")
    async def fanout(ctx: FlowContext, ns: list[int]) -> list[int]:
        handles = [await ctx.start_flow("child", n) for n in ns]
        return list(await asyncio.gather(*(h.result() for h in handles)))

    @app.flow("catches")
    async def catches(ctx: FlowContext, n: int) -> str:
        try:
            await ctx.execute_flow(child, n)
        except ChildFlowFailedError as exc:
            return f"{exc.status}: {exc.error['message']}"
        return "ok"

    @app.flow("waits")
    async def waits(ctx: FlowContext, keys: list[str]) -> Any:
        a = await ctx.start_flow(gated_child, keys[0])
        b = await ctx.start_flow(gated_child, keys[1], on_cancel="abandon")
        return [await a, await b]

    return app


async def test_execute_flow_returns_the_childs_output_and_records_the_lineage():
    log: list[str] = []
    env = LoomTestEnv(family(log))
    result = await env.start("parent", [1, 2], execution_id="p")
    assert (result.status, result.output) == ("completed", [10, 20])
    assert log == ["work 1 p.child.1", "work 2 p.child.2"]
    child = await env.runtime.result("p.child.1")
    assert child.status == "completed" and child.state["parent"] == {
        "execution_id": "p",
        "step_id": "1",
    }
    assert result.state["children"]["2"]["child_id"] == "p.child.2"
    assert (await replay(env.app, await env.history("p"))).output == [10, 20]


async def test_start_flow_fans_out_and_gathers():
    log: list[str] = []
    env = LoomTestEnv(family(log))
    result = await env.start("fanout", [1, 2, 3], execution_id="f")
    assert (result.status, result.output) == ("completed", [10, 20, 30])
    assert sorted(log) == [f"work {n} f.child.{n}" for n in (1, 2, 3)]


async def test_a_failed_child_raises_a_typed_error_carrying_its_error():
    env = LoomTestEnv(family([]))
    result = await env.start("catches", -1, execution_id="c")
    assert result.status == "completed"
    assert result.output == "failed: effect 'work' failed at step 1: bad -1"


async def test_a_suspended_child_resumes_its_parent_through_dispatch():
    env = LoomTestEnv(family([]))
    started = await env.start("waits", ["k1", "k2"], execution_id="w")
    assert started.status == "suspended"
    await env.runtime.resume("w.child.1", "go", "k1", "one")
    assert (await env.runtime.result("w")).status == "suspended"
    await env.runtime.resume("w.child.2", "go", "k2", "two")
    done = await env.runtime.result("w")
    assert (done.status, done.output) == ("completed", ["one", "two"])


async def test_cancelling_a_parent_cancels_its_children_unless_abandoned():
    log: list[str] = []
    env = LoomTestEnv(family(log))
    await env.start("waits", ["k1", "k2"], execution_id="x")
    result = await env.runtime.cancel("x", "stop")
    assert result.status == "cancelled"
    first = await env.runtime.result("x.child.1")
    assert first.status == "cancelled"
    assert "child k1 cleaned up" in log
    second = await env.runtime.result("x.child.2")
    assert second.status == "suspended"  # abandoned: it goes on


async def test_an_unknown_child_flow_fails_the_parent_clearly():
    app = Loom("bad")

    @app.flow("p")
    async def p(ctx: FlowContext, _: None) -> None:
        await ctx.execute_flow("nope")

    env = LoomTestEnv(app)
    result = await env.start("p", None, execution_id="u")
    assert result.status == "failed"
    assert result.error is not None and "nope" in result.error["message"]


@pytest.mark.parametrize("policy", ["never"])
async def test_a_bad_policy_is_refused(policy: str):
    app = Loom("bad")

    @app.flow("c")
    async def c(ctx: FlowContext, _: None) -> None:
        return None

    @app.flow("p")
    async def p(ctx: FlowContext, _: None) -> None:
        await ctx.start_flow(c, None, on_cancel=policy)

    env = LoomTestEnv(app)
    result = await env.start("p", None, execution_id="b")
    assert result.status == "failed" and "on_cancel" in (result.error or {})["message"]


async def test_a_child_cancelled_on_its_own_raises_in_the_parent_as_cancelled():
    log: list[str] = []
    app = family(log)

    @app.flow("tolerant")
    async def tolerant(ctx: FlowContext, key: str) -> str:
        try:
            return await ctx.execute_flow("gated_child", key)
        except ChildFlowFailedError as exc:
            return f"{exc.status}: {exc.error['message']} ({exc.child_id})"

    env = LoomTestEnv(app)
    assert (await env.start("tolerant", "k", execution_id="t")).status == "suspended"
    await env.runtime.cancel("t.child.1", "not needed", by="ops")
    result = await env.runtime.result("t")
    assert (result.status, result.output) == ("completed", "cancelled: not needed (t.child.1)")
    assert "child k cleaned up" in log


async def test_a_childs_outcome_cannot_be_forged_through_a_resume():
    from loom.errors import InputError

    env = LoomTestEnv(family([]))
    await env.start("waits", ["k1", "k2"], execution_id="g")
    forged = {"status": "completed", "output": "forged", "error": None}
    with pytest.raises(InputError, match="has not ended"):
        await env.runtime.resume("g", "loom.child", "g.child.1", forged)
    await env.start("child", 3, execution_id="stranger")
    with pytest.raises(InputError, match="not a child flow"):
        await env.runtime.resume("g", "loom.child", "stranger", forged)
    assert [e.type for e in await env.history("g")].count("ExecutionResumed") == 0
    await env.runtime.resume("g.child.1", "go", "k1", "real")  # the child's end tells it
    await env.runtime.resume("g.child.2", "go", "k2", "real too")
    assert (await env.runtime.result("g")).output == ["real", "real too"]
