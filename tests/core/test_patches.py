"""``ctx.patched`` / ``ctx.deprecate_patch``: old histories keep the old branch and their step
ids; executions that reach the change on new code take the new branch and record a marker."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from loom import EffectContext, FlowContext, Loom
from loom import events as ev
from loom.errors import ConfigurationError, NondeterminismError
from loom.runtime import Runtime
from loom.store.memory import InMemoryEventStore
from loom.testing import FakeClock, replay
from loom.wire import ExecutionResult


def _effects(app: Loom) -> None:
    async def fx(ctx: EffectContext, value: Any) -> str:
        return f"{ctx.effect}:{ctx.step_id}"

    for name in ("a", "b", "c"):
        app.effect(name)(fx)


def old_app() -> Loom:
    app = Loom("shop")
    _effects(app)

    @app.flow("order")
    async def order(ctx: FlowContext, _: None) -> list[str]:
        first = await ctx.execute("a")
        await ctx.suspend("approval", ctx.execution_id)
        return [first, await ctx.execute("c")]

    return app


def patched_app(deprecated: bool = False) -> Loom:
    app = Loom("shop")
    _effects(app)

    @app.flow("order")
    async def order(ctx: FlowContext, _: None) -> list[str]:
        out = [await ctx.execute("a")]
        if deprecated:
            ctx.deprecate_patch("add-b")
            out.append(await ctx.execute("b"))
        elif ctx.patched("add-b"):
            assert ctx.patched("add-b")  # one answer per execution
            out.append(await ctx.execute("b"))
        await ctx.suspend("approval", ctx.execution_id)
        out.append(await ctx.execute("c"))
        return out

    return app


class Deploys:
    """One store, and a runtime per deployed version of the code."""

    def __init__(self) -> None:
        self.store = InMemoryEventStore()
        self.clock = FakeClock()

    def runtime(self, app: Loom) -> Runtime:
        return Runtime(app, self.store, clock=self.clock)

    async def types(self, eid: str) -> list[str]:
        return [e.type for e in await self.store.read(eid)]

    async def steps(self, eid: str) -> list[tuple[str, str]]:
        return [
            (e.step_id, e.effect)
            for e in await self.store.read(eid)
            if isinstance(e, ev.EffectCompleted)
        ]


async def _finish(rt: Runtime, eid: str) -> ExecutionResult:
    return await rt.resume(eid, "approval", eid, None)


async def test_an_old_execution_keeps_the_old_branch_and_its_step_ids():
    d = Deploys()
    await d.runtime(old_app()).start("order", execution_id="old")
    result = await _finish(d.runtime(patched_app()), "old")
    assert result.status == "completed"
    assert result.output == ["a:1", "c:3"]  # no b, and c keeps the id 3 it would have had
    assert await d.steps("old") == [("1", "a"), ("3", "c")]
    assert "PatchRecorded" not in await d.types("old")


async def test_a_new_execution_takes_the_new_branch_and_records_a_marker():
    d = Deploys()
    rt = d.runtime(patched_app())
    await rt.start("order", execution_id="new")
    result = await _finish(rt, "new")
    assert result.output == ["a:1", "b:2", "c:4"]
    markers = [e for e in await d.store.read("new") if isinstance(e, ev.PatchRecorded)]
    assert [(m.change_id, m.step_id, m.deprecated) for m in markers] == [("add-b", "2", False)]
    # The marker is what replays decide by: the history replays on the same code.
    assert (await replay(patched_app(), await d.store.read("new"))).output == result.output


async def test_an_old_execution_reaching_the_change_live_takes_the_new_branch():
    def later_patch() -> Loom:
        app = Loom("shop")
        _effects(app)

        @app.flow("order")
        async def order(ctx: FlowContext, _: None) -> list[str]:
            first = await ctx.execute("a")
            await ctx.suspend("approval", ctx.execution_id)
            if ctx.patched("c-to-b"):
                return [first, await ctx.execute("b")]
            return [first, await ctx.execute("c")]

        return app

    d = Deploys()
    await d.runtime(old_app()).start("order", execution_id="o")
    result = await _finish(d.runtime(later_patch()), "o")
    assert result.output == ["a:1", "b:3"]  # the gate was the history's end: new code runs
    assert "PatchRecorded" in await d.types("o")


async def test_without_the_patch_the_old_execution_parks():
    def unpatched() -> Loom:
        app = Loom("shop")
        _effects(app)

        @app.flow("order")
        async def order(ctx: FlowContext, _: None) -> list[str]:
            out = [await ctx.execute("a"), await ctx.execute("b")]
            await ctx.suspend("approval", ctx.execution_id)
            return out

        return app

    d = Deploys()
    await d.runtime(old_app()).start("order", execution_id="o")
    result = await _finish(d.runtime(unpatched()), "o")
    assert result.status == "suspended"
    assert "nondeterminism" in (result.parked_reason or "")


async def test_deprecate_patch_replays_marked_histories_and_marks_new_ones():
    d = Deploys()
    rt = d.runtime(patched_app())
    await rt.start("order", execution_id="marked")
    await _finish(rt, "marked")
    cleaned = d.runtime(patched_app(deprecated=True))
    assert (await replay(cleaned.app, await d.store.read("marked"))).output == [
        "a:1",
        "b:2",
        "c:4",
    ]
    await cleaned.start("order", execution_id="fresh")
    result = await _finish(cleaned, "fresh")
    assert result.output == ["a:1", "b:2", "c:4"]
    markers = [e for e in await d.store.read("fresh") if isinstance(e, ev.PatchRecorded)]
    assert [(m.change_id, m.deprecated) for m in markers] == [("add-b", True)]
    # Code that still asks patched("add-b") (a rollback) takes the new branch on that history.
    assert (await replay(patched_app(), await d.store.read("fresh"))).output == result.output


async def test_deprecate_patch_over_an_old_history_diverges_as_it_should():
    d = Deploys()
    await d.runtime(old_app()).start("order", execution_id="old")
    with pytest.raises(NondeterminismError):
        await replay(patched_app(deprecated=True), await d.store.read("old"))


async def test_a_patch_inside_a_child_task_sees_the_positions_under_its_prefix():
    def fan(patch: bool) -> Loom:
        app = Loom("fan")
        _effects(app)

        @app.flow("fan")
        async def flow(ctx: FlowContext, _: None) -> list[str]:
            async def branch() -> str:
                if patch and ctx.patched("branch-b"):
                    return await ctx.execute("b")
                return await ctx.execute("a")

            out = list(await asyncio.gather(branch(), branch()))
            await ctx.suspend("go", "k")
            return out

        return app

    d = Deploys()
    await d.runtime(fan(False)).start("fan", execution_id="f")
    result = await d.runtime(fan(True)).resume("f", "go", "k")
    assert result.output == ["a:1.1", "a:2.1"]  # recorded under 1.1 and 2.1: old branch


async def test_a_finished_history_replays_the_old_branch_of_a_trailing_patch():
    def trailing() -> Loom:
        app = Loom("shop")
        _effects(app)

        @app.flow("order")
        async def order(ctx: FlowContext, _: None) -> list[str]:
            first = await ctx.execute("a")
            await ctx.suspend("approval", ctx.execution_id)
            out = [first, await ctx.execute("c")]
            if ctx.patched("receipt"):
                out.append(await ctx.execute("b"))
            return out

        return app

    d = Deploys()
    rt = d.runtime(old_app())
    await rt.start("order", execution_id="done")
    await _finish(rt, "done")
    outcome = await replay(trailing(), await d.store.read("done"))
    assert (outcome.status, outcome.output) == ("completed", ["a:1", "c:3"])


async def test_a_patch_needs_a_change_id():
    app = Loom("bad")

    @app.flow("f")
    async def f(ctx: FlowContext, _: None) -> bool:
        return ctx.patched("")

    result = await Runtime(app, InMemoryEventStore()).start("f")
    assert result.status == "failed"
    assert ConfigurationError.__name__ in str(result.error)
