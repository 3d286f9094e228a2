"""Ports of DBOS Transact's fork tests (``test_workflow_management.py``: ``test_fork_events``,
``test_restart_fromsteps_childwf``, ``test_fork_version``, forks of workflows that sent
messages) onto Loom's forks, which now go through child flows, messages and published
values. One process over SQLite on disk, every execute call checked by a replay.

A DBOS step number is a Loom step id; ``fork_workflow(id, n)`` is ``Runtime.fork(id, str(n))``.
Where Loom deliberately differs, the test's docstring says what Loom promises instead.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from loom import EffectContext, FlowContext, Loom
from loom import events as ev
from loom.store import SqliteEventStore
from loom.testing import LoomTestEnv
from loom.wire import ExecutionPackage

app = Loom("dbos-fork")
RAN: list[str] = []


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[LoomTestEnv]:
    RAN.clear()
    made = LoomTestEnv(app, store=SqliteEventStore(tmp_path / "loom.db"))
    yield made
    await made.store.aclose()


@app.effect("step")
def step(ctx: EffectContext, name: str) -> str:
    RAN.append(f"{name}@{ctx.execution_id}")
    return name


@app.flow("events")
async def events(ctx: FlowContext, _: None) -> str:
    await ctx.set_event("key", 0)  # 1
    await ctx.set_event("key", 1)  # 2
    await ctx.execute(step, "two")  # 3
    await ctx.set_event("key", 2)  # 4
    await ctx.recv("go")  # 5: the fork blocks here, as DBOS's blocks on an event
    return ctx.execution_id


async def test_fork_events(env: LoomTestEnv):
    """DBOS ``test_fork_events``: a fork from each step reads, before it advances, the value
    the key had at that step; once unblocked each completes with the final value."""
    await env.start("events", None, execution_id="ev")
    await env.runtime.send("ev", "go", None)
    assert await env.runtime.get_event("ev", "key") == 2
    expected = {"1": None, "2": 0, "3": 1, "4": 1, "5": 2}
    for cut, value in expected.items():
        fork = await env.runtime.fork("ev", cut, new_id=f"ev-{cut}", run=False)
        published = (await env.runtime.load_state(fork.execution_id)).published
        if value is None:
            assert "key" not in published
        else:
            assert await env.runtime.get_event(fork.execution_id, "key") == value
    again = await env.runtime.fork("ev-5", "4", new_id="ev-5-4", run=False)  # a fork of a fork
    assert await env.runtime.get_event(again.execution_id, "key") == 1
    for fork_id in [*(f"ev-{cut}" for cut in expected), "ev-5-4"]:
        await env.runtime.execute(ExecutionPackage(execution_id=fork_id))
        done = await env.runtime.send(fork_id, "go", None)
        assert (done.status, done.output) == ("completed", fork_id)
        assert await env.runtime.get_event(fork_id, "key") == 2


@app.flow("child_wf")
async def child_wf(ctx: FlowContext, name: str) -> str:
    return await ctx.execute(step, f"child {name}")


@app.flow("simple_with_child")
async def simple_with_child(ctx: FlowContext, _: None) -> None:
    await ctx.execute(step, "one")  # 1
    handle = await ctx.start_flow(child_wf, "c")  # 2
    await handle  # (its end: a resume, no step id of its own)
    await ctx.execute(step, "three")  # 3


async def test_restart_fromsteps_childwf(env: LoomTestEnv):
    """DBOS ``test_restart_fromsteps_childwf``: a fork from the child's start runs a new
    child; a fork from after the child's result reuses it (it does not run again)."""
    await env.start("simple_with_child", None, execution_id="w")
    assert RAN == ["one@w", "child c@w.child.2", "three@w"]
    RAN.clear()
    await env.runtime.fork("w", "2", new_id="w-2")
    assert RAN == ["child c@w-2.child.2", "three@w-2"]
    RAN.clear()
    await env.runtime.fork("w", "3", new_id="w-3")
    assert RAN == ["three@w-3"]  # the child's result was reused
    started = [e for e in await env.history("w-3") if isinstance(e, ev.ChildStarted)]
    assert [e.child_id for e in started] == ["w.child.2"]


@app.flow("simple", version=1)
async def simple_v1(ctx: FlowContext, x: int) -> int:
    return int(await ctx.execute(step, str(x + 1))) + int(await ctx.execute(step, str(x + 2)))


@app.flow("simple", version=2)
async def simple_v2(ctx: FlowContext, x: int) -> int:
    return int(await ctx.execute(step, str(x + 1))) + int(await ctx.execute(step, str(x + 2)))


async def test_fork_version(env: LoomTestEnv):
    """DBOS ``test_fork_version``: a fork may run another application version. Loom: a fork
    runs the flow version named (default: the latest registered), recorded on its start."""
    await env.start("simple", 1, execution_id="v", version=1)
    forked = await env.runtime.fork("v", "2", new_id="v-2", version=2)
    assert forked.output == 5
    first = (await env.history("v-2"))[0]
    assert isinstance(first, ev.ExecutionStarted) and first.flow_version == "2"


@app.flow("mailbox")
async def mailbox(ctx: FlowContext, n: int) -> list[Any]:
    return [await ctx.recv("t") for _ in range(n)]


@app.flow("sender_then_step")
async def sender_then_step(ctx: FlowContext, to: str) -> str:
    await ctx.send(to, "t", "hello")  # 1
    return await ctx.execute(step, "after")  # 2


async def test_a_fork_after_a_send_does_not_send_again(env: LoomTestEnv):
    """DBOS: ``send`` is a step of the sender, so a fork after it replays it from its
    checkpoint and the destination gets nothing new; a fork from it sends anew. Loom: the
    same, the receiver holding each message once by its id."""
    await env.start("mailbox", 2, execution_id="box")
    await env.start("sender_then_step", "box", execution_id="s")
    await env.runtime.fork("s", "2", new_id="s-2")
    received = [e for e in await env.history("box") if isinstance(e, ev.MessageReceived)]
    assert [e.message_id for e in received] == ["s:1"]
    await env.runtime.fork("s", "1", new_id="s-1")
    received = [e for e in await env.history("box") if isinstance(e, ev.MessageReceived)]
    assert [e.message_id for e in received] == ["s:1", "s-1:1"]
    assert (await env.runtime.result("box")).output == ["hello", "hello"]
