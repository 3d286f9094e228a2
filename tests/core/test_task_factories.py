"""Flows run beside another library's task factory on the same event loop.

Error reporters and tracers (Sentry's asyncio integration, for one) install a task factory
that wraps every task. Loom numbers the tasks a flow creates through the loop's task
factory, and used to refuse to run when another one was installed. Now it composes: a
factory installed before Loom keeps building every task, Loom's scoping in front of it; a
factory installed after Loom, wrapping the one it found, is left as it is. Either way the
step ids are those of a loop with no other factory, so histories replay across the two, and
the other factory still sees every task. The factories here are small stand-ins written the
way such libraries write theirs.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from loom import EffectContext, FlowContext, Loom
from loom.kernel.task_factories import ComposedTaskFactory
from loom.runtime import Runtime
from loom.store import SqliteEventStore
from loom.wire import ExecutionPackage

app = Loom("factories")
CALLS: list[str] = []


@app.effect("echo")
async def echo(ctx: EffectContext, n: int) -> int:
    CALLS.append(ctx.idempotency_key)
    return n


@app.flow("fan")
async def fan(ctx: FlowContext, n: int) -> int:
    """Tasks made by ``gather``, by ``create_task`` and by ``wait``, then a plain step."""
    first = await asyncio.gather(*(ctx.execute(echo, i) for i in range(n)))
    made = asyncio.create_task(ctx.execute(echo, 100))
    done, _ = await asyncio.wait([asyncio.ensure_future(ctx.execute(echo, 200))])
    return sum(first) + await made + done.pop().result() + await ctx.execute(echo, 300)


Factory = Callable[..., "asyncio.Future[Any]"]


class Recording:
    """A factory in the modern style: passes ``context=`` and options on, counts tasks."""

    def __init__(self) -> None:
        self.seen = 0

    def __call__(
        self, loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any], **kw: Any
    ) -> asyncio.Task[Any]:
        self.seen += 1
        return asyncio.Task(coro, loop=loop, **kw)


class Dropping(Recording):
    """A factory written before tasks took a context: it drops ``context=`` and builds the
    task in the current context."""

    def __call__(
        self, loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any], **kw: Any
    ) -> asyncio.Task[Any]:
        self.seen += 1
        return asyncio.Task(coro, loop=loop)


def wrapping(loop: asyncio.AbstractEventLoop, seen: list[str]) -> Factory:
    """A factory installed after Loom's, which wraps every coroutine and calls the factory
    it found, the way Sentry's integration does."""
    found = loop.get_task_factory()
    assert found is not None

    async def wrapped(coro: Coroutine[Any, Any, Any]) -> Any:
        seen.append("ran")
        return await coro

    def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kw: Any) -> asyncio.Future[Any]:
        return found(loop, wrapped(coro), **kw)

    return factory


async def _run(db: Path, execution_id: str) -> tuple[int, list[str]]:
    store = SqliteEventStore(db)
    try:
        runtime = Runtime(app, store)
        result = await runtime.start("fan", 3, execution_id=execution_id)
        history = await runtime.history(execution_id)
        steps = [e.step_id for e in history if getattr(e, "step_id", None)]
        return result.output, sorted({str(s) for s in steps})
    finally:
        await store.aclose()


def _on_loop(install: Callable[[asyncio.AbstractEventLoop], object], make: Any) -> Any:
    with asyncio.Runner() as runner:
        install(runner.get_loop())
        return runner.run(make())


@pytest.fixture
def plain(tmp_path: Path) -> tuple[int, list[str]]:
    """The result and step ids of the flow on a loop with no other factory."""
    return _on_loop(lambda _: None, lambda: _run(tmp_path / "plain.db", "f"))


@pytest.mark.parametrize("kind", [Recording, Dropping])
def test_a_factory_installed_before_loom_builds_every_task_and_the_steps_keep_their_ids(
    tmp_path: Path, plain: tuple[int, list[str]], kind: type[Recording]
):
    theirs = kind()
    loops: list[asyncio.AbstractEventLoop] = []

    def install(loop: asyncio.AbstractEventLoop) -> None:
        loop.set_task_factory(theirs)  # type: ignore[arg-type]
        loops.append(loop)

    CALLS.clear()
    assert _on_loop(install, lambda: _run(tmp_path / "l.db", "f")) == plain
    assert theirs.seen >= 5  # the three gathered steps, create_task, wait's future
    assert sorted(CALLS) == sorted(f"f:{s}" for s in plain[1])  # each step ran once
    assert isinstance(loops[0].get_task_factory(), ComposedTaskFactory)


def test_a_factory_installed_after_loom_wrapping_it_is_kept(
    tmp_path: Path, plain: tuple[int, list[str]]
):
    ran: list[str] = []

    async def two_runs() -> list[tuple[int, list[str]]]:
        first = await _run(tmp_path / "a.db", "f")  # installs Loom's factory
        loop = asyncio.get_running_loop()
        theirs = wrapping(loop, ran)
        loop.set_task_factory(theirs)
        second = await _run(tmp_path / "b.db", "f")
        assert loop.get_task_factory() is theirs  # not replaced: it calls Loom's already
        return [first, second]

    assert _on_loop(lambda _: None, two_runs) == [plain, plain]
    assert len(ran) >= 5


def test_a_factory_that_replaced_looms_is_composed_with_on_the_next_run(
    tmp_path: Path, plain: tuple[int, list[str]]
):
    theirs = Recording()

    async def two_runs() -> list[tuple[int, list[str]]]:
        first = await _run(tmp_path / "a.db", "f")
        asyncio.get_running_loop().set_task_factory(theirs)  # type: ignore[arg-type]
        return [first, await _run(tmp_path / "b.db", "f")]

    assert _on_loop(lambda _: None, two_runs) == [plain, plain]
    assert theirs.seen >= 5


def test_a_history_recorded_beside_another_factory_replays_without_it(tmp_path: Path):
    """Recorded on a loop with another factory, executed again on a plain loop: every step
    is served from the log, nothing runs twice."""
    db = tmp_path / "l.db"
    _on_loop(lambda loop: loop.set_task_factory(Recording()), lambda: _run(db, "f"))  # type: ignore[arg-type]
    CALLS.clear()

    async def again() -> Any:
        store = SqliteEventStore(db)
        try:
            package = ExecutionPackage(execution_id="f", reason="start")
            return await Runtime(app, store).execute(package)
        finally:
            await store.aclose()

    result = _on_loop(lambda _: None, again)
    assert (result.status, result.output, CALLS) == ("completed", 603, [])


def test_tasks_outside_flows_are_built_by_the_other_factory_alone(tmp_path: Path):
    theirs = Recording()

    async def outside() -> str:
        await _run(tmp_path / "l.db", "f")
        before = theirs.seen
        task = asyncio.get_running_loop().create_task(asyncio.sleep(0, "x"))
        assert theirs.seen == before + 1
        return await task

    assert _on_loop(lambda loop: loop.set_task_factory(theirs), outside) == "x"  # type: ignore[arg-type]


@app.flow("collected")
async def collected(ctx: FlowContext, n: int) -> list[int]:
    """Steps with the garbage collector freeing, in the flow's task, async generators a
    library left started and unclosed (a store client's streaming reads do): the event
    loop's finalizer hook makes a task to close each, in the context current then."""
    got = [await ctx.execute(echo, 1)]
    for _ in range(n):
        _leave_an_async_generator()
    gc.collect()
    got.append(await ctx.execute(echo, 2))
    await asyncio.sleep(0)  # the closing tasks are built now, in the flow's task context
    got.append(await ctx.execute(echo, 3))
    return got


def _leave_an_async_generator() -> None:
    async def stream() -> AsyncIterator[int]:
        yield 1
        yield 2

    started = stream()
    with contextlib.suppress(StopIteration):
        started.__anext__().send(None)  # type: ignore[attr-defined]  # first item: it is live
    cycle: list[Any] = [started]
    cycle.append(cycle)  # only the cyclic collector frees it


@pytest.mark.parametrize("theirs", [None, Recording])
def test_async_generators_the_collector_frees_in_a_flow_take_no_step_id(
    tmp_path: Path, theirs: type[Recording] | None
):
    async def go() -> tuple[Any, list[str]]:
        store = SqliteEventStore(tmp_path / f"{theirs}.db")
        try:
            runtime = Runtime(app, store)
            result = await runtime.start("collected", 5, execution_id="g")
            steps = [e.step_id for e in await runtime.history("g") if getattr(e, "step_id", None)]
            return result.output, steps
        finally:
            await store.aclose()

    install = (lambda _: None) if theirs is None else (lambda loop: loop.set_task_factory(theirs()))  # type: ignore[arg-type]
    assert _on_loop(install, go) == ([1, 2, 3], ["1", "2", "3"])
