"""A start that runs its execution inline claims it with the create (``loom.kernel.starts``).

On the real SQLite store: the claim rides the create (no append, no load of its own), a
repeat of the same start while the first still runs invokes nothing, and a start whose
claimer died before anything else was written runs on a repeat.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from pathlib import Path

import pytest

from loom import EffectContext, FlowContext, Loom
from loom.dispatch.inprocess import InProcessDispatcher
from loom.events import Event, ExecutionClaimed, ExecutionStarted
from loom.kernel.claims import ACTIVE_HOLDERS, HOST
from loom.runtime import Runtime
from loom.store import LoadedLog, SqliteEventStore
from loom.workers.local import LocalWorkerRuntime


class Recording(SqliteEventStore):
    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.calls: list[str] = []

    async def create(
        self, started: ExecutionStarted, then: Sequence[Event] = ()
    ) -> tuple[bool, ExecutionStarted]:
        self.calls.append(f"create+{len(then)}")
        return await super().create(started, then)

    async def load(self, execution_id: str) -> LoadedLog:
        self.calls.append("load")
        return await super().load(execution_id)


def make_app(
    gate: asyncio.Event | None = None, entered: asyncio.Event | None = None
) -> tuple[Loom, list[int]]:
    app, invoked = Loom("here"), list[int]()

    @app.effect("work")
    async def work(ctx: EffectContext, n: int) -> int:
        invoked.append(n)
        if entered is not None:
            entered.set()
        if gate is not None:
            await gate.wait()
        return n * 2

    @app.flow("one")
    async def one(ctx: FlowContext, n: int) -> int:
        return await ctx.execute("work", n)

    return app, invoked


@pytest.fixture
def store(tmp_path: Path) -> Recording:
    return Recording(tmp_path / "loom.db")


async def test_the_claim_rides_the_create_and_nothing_is_loaded(store: Recording) -> None:
    app, invoked = make_app()
    result = await Runtime(app, store).start("one", 4, execution_id="h-1")
    assert result.status == "completed" and result.output == 8 and invoked == [4]
    assert store.calls == ["create+1"]
    history = await store.read("h-1")
    assert [e.type for e in history[:2]] == ["ExecutionStarted", "ExecutionClaimed"]
    assert not ACTIVE_HOLDERS  # the holder is released with the call


async def test_a_dispatched_start_claims_in_its_execute(store: Recording) -> None:
    """With a dispatcher the execute runs elsewhere (a worker): the create carries nothing."""
    app, _ = make_app()
    runtime = Runtime(app, store)
    runtime.dispatcher = InProcessDispatcher(LocalWorkerRuntime(runtime))
    result = await runtime.start("one", 4, execution_id="h-2")
    assert result.status == "completed"
    assert store.calls[0] == "create+0"


async def test_a_repeat_while_the_first_runs_invokes_nothing(store: Recording) -> None:
    gate, entered = asyncio.Event(), asyncio.Event()
    app, invoked = make_app(gate, entered)
    runtime = Runtime(app, store)
    first = asyncio.ensure_future(runtime.start("one", 4, execution_id="h-3"))
    await asyncio.wait_for(entered.wait(), 30)
    again = await runtime.start("one", 4, execution_id="h-3")
    assert again.status == "running" and invoked == [4]
    gate.set()
    assert (await first).output == 8 and invoked == [4]


async def test_a_repeat_runs_a_start_whose_claimer_died(store: Recording) -> None:
    """The log a start that claimed with its create leaves when its process dies at once."""
    app, invoked = make_app()
    started = ExecutionStarted(execution_id="h-4", flow="one", input=4, at=1.0)
    dead = _dead_pid()
    claim = ExecutionClaimed(holder=f"{HOST}:{dead}:1", until=1e12, seq=2, at=1.0)
    assert (await store.create(started, [claim]))[0]
    result = await Runtime(app, store).start("one", 4, execution_id="h-4")
    assert result.status == "completed" and result.output == 8 and invoked == [4]


async def test_a_repeat_leaves_a_live_foreign_claim_alone(store: Recording) -> None:
    """Another machine's claim holds for its lease: the repeat reports, runs nothing."""
    app, invoked = make_app()
    started = ExecutionStarted(execution_id="h-5", flow="one", input=4, at=1.0)
    claim = ExecutionClaimed(holder="elsewhere-1234:77:1", until=1e12, seq=2, at=1.0)
    assert (await store.create(started, [claim]))[0]
    result = await Runtime(app, store).start("one", 4, execution_id="h-5")
    assert result.status == "running" and invoked == []


def _dead_pid() -> int:
    """A pid of this machine that no process has (a child that has exited and been reaped)."""
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return pid
