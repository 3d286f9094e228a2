"""Forks through child flows, messages and published values, on every event store.

A fork (and a dead-letter re-drive, which is one) used to refuse any prefix holding a child
start, a message sent or a value published (``NotForkableError``). It now reuses them (see
``loom.ops.fork``): children are never started twice, messages sent are not sent again,
published values and the mailbox are carried as they stood at the cut.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from loom import ChildFlowFailedError, EffectContext, FlowContext, Loom
from loom import events as ev
from loom.blobs import InMemoryBlobStore
from loom.ops.deadletters import find, redrive
from loom.store import EventStore
from loom.testing import LoomTestEnv, replay
from loom.wire import ExecutionPackage

app = Loom("fork-through")
calls: Counter[str] = Counter()
FAIL: dict[str, bool] = {}


@pytest.fixture(autouse=True)
def _fresh() -> None:
    calls.clear()
    FAIL.clear()


@app.effect("step")
async def step(ctx: EffectContext, what: str) -> str:
    calls[f"{ctx.idempotency_key}:{what}"] += 1
    if FAIL.get(what):
        raise RuntimeError(f"{what} broke")
    return what


@app.flow("inbox")
async def inbox(ctx: FlowContext, n: int) -> list[Any]:
    return [await ctx.recv("t") for _ in range(n)]


@app.flow("kid")
async def kid(ctx: FlowContext, name: str) -> str:
    got = await ctx.recv("go")
    return await ctx.execute(step, f"{name}:{got}")


@app.flow("quick")
async def quick(ctx: FlowContext, name: str) -> str:
    return await ctx.execute(step, f"quick:{name}")


@app.flow("report")
async def report(ctx: FlowContext, spec: dict[str, Any]) -> Any:
    """Publishes progress, sends a message, runs a child, takes a message, then charges."""
    await ctx.set_event("progress", {"done": 0})  # step 1
    await ctx.send(spec["to"], "t", "from report")  # step 2
    summary = await ctx.execute_flow(quick, "q")  # step 3 (its wait: 3/child)
    await ctx.set_event("progress", {"done": 1, "summary": summary})  # step 4
    note = await ctx.recv("note")  # step 5
    await ctx.set_event("big", "x" * 2000)  # step 6 (over the blob threshold)
    return await ctx.execute(step, f"charge:{note}")  # step 7


async def _failed_report(env: LoomTestEnv) -> None:
    await env.start("inbox", 2, execution_id="box")
    await env.start("report", {"to": "box"}, execution_id="rep")
    FAIL["charge:hi"] = True
    done = await env.runtime.send("rep", "note", "hi")
    assert done.status == "failed"
    FAIL.clear()


def _env(store: EventStore) -> LoomTestEnv:
    return LoomTestEnv(app, store=store, blobs=InMemoryBlobStore(), blob_threshold=1024)


async def test_a_failed_execution_that_published_sent_and_started_a_child_is_redriven(
    store: EventStore,
):
    env = _env(store)
    await _failed_report(env)
    (letter,) = await redrive(env.runtime, await find(env.runtime, "failed"), by="ops")
    assert (letter.action, letter.error, letter.status) == ("fork", None, "completed")
    fork = letter.new_execution_id
    assert fork is not None and (await env.runtime.result(fork)).output == "charge:hi"
    # The child ran once, for the original; the message was sent once; the charge ran
    # again (the failed step) under the fork's key.
    assert calls["rep.child.3:1:quick:q"] == 1
    assert [row.execution_id for row in await store.list()].count(f"{fork}.child.3") == 0
    received = [e for e in await store.read("box") if isinstance(e, ev.MessageReceived)]
    assert [e.message_id for e in received] == ["rep:2"]
    assert calls[f"{fork}:7:charge:hi"] == 1
    # Published values are the fork's own, the large one under its id in the blob store.
    assert await env.runtime.get_event(fork, "progress") == {"done": 1, "summary": "quick:q"}
    assert await env.runtime.get_event(fork, "big") == "x" * 2000
    history = await store.read(fork)
    (big,) = [e for e in history if isinstance(e, ev.EventPublished) and e.key == "big"]
    assert fork in str(big.value) and "rep/" not in str(big.value)
    assert (await replay(app, history, env.runtime.payloads.blobs)).output == "charge:hi"


@pytest.mark.parametrize(
    ("cut", "progress"),
    [("1", None), ("2", {"done": 0}), ("4", {"done": 0}), ("5", {"done": 1, "summary": "quick:q"})],
)
async def test_a_fork_carries_what_was_published_before_its_cut(
    store: EventStore, cut: str, progress: Any
):
    """DBOS ``test_fork_events``: the fork reads, before it runs, the value each key had at
    the cut; once it runs, it publishes the rest itself."""
    env = _env(store)
    await _failed_report(env)
    await env.runtime.fork("rep", cut, new_id=f"f{cut}", run=False)
    if progress is None:
        assert "progress" not in (await env.runtime.load_state(f"f{cut}")).published
    else:
        assert await env.runtime.get_event(f"f{cut}", "progress") == progress
    # Sends before the cut are not sent again; from the cut on they are (a new message).
    await env.runtime.execute(ExecutionPackage(execution_id=f"f{cut}"))
    ids = [e.message_id for e in await store.read("box") if isinstance(e, ev.MessageReceived)]
    assert ids == (["rep:2", f"f{cut}:2"] if cut in ("1", "2") else ["rep:2"])


async def test_a_fork_carries_the_mailbox_as_it_stood_at_the_cut(store: EventStore):
    env = _env(store)
    await _failed_report(env)
    forked = await env.runtime.fork("rep", "7", new_id="after-note")
    assert (forked.status, forked.output) == ("completed", "charge:hi")  # "hi" was in it
    early = await env.runtime.fork("rep", "5", new_id="before-note")
    assert early.status == "suspended"  # the message came at the cut: not the fork's
    done = await env.runtime.send("before-note", "note", "again")
    assert done.output == "charge:again"


@app.flow("overseer")
async def overseer(ctx: FlowContext, _: None) -> Any:
    child = await ctx.start_flow(kid, "k")  # step 1
    await ctx.execute(step, "meanwhile")  # step 2
    await ctx.suspend("ok", f"{ctx.execution_id}:ok")  # step 3
    try:
        return await child
    except ChildFlowFailedError as exc:
        return f"child {exc.status}"


async def test_a_child_still_running_is_shared_with_the_fork_and_runs_once(store: EventStore):
    env = _env(store)
    assert (await env.start("overseer", None, execution_id="o")).status == "suspended"
    forked = await env.runtime.fork("o", "3", new_id="o-fork")
    assert forked.status == "suspended"
    assert [e.type for e in await store.read("o.child.1")][-1] == "ChildShared"
    await env.runtime.resume("o-fork", "ok", "o-fork:ok")
    await env.runtime.send("o.child.1", "go", "now")  # the child ends: both are told
    await env.runtime.resume("o", "ok", "o:ok")
    assert (await env.runtime.result("o")).output == "k:now"
    assert (await env.runtime.result("o-fork")).output == "k:now"
    assert calls["o.child.1:2:k:now"] == 1
    assert [row.execution_id for row in await store.list()].count("o-fork.child.1") == 0
    assert (await replay(app, await store.read("o-fork"))).output == "k:now"


async def test_the_forks_end_leaves_a_child_it_shares_running(store: EventStore):
    env = _env(store)
    await env.start("overseer", None, execution_id="o2")
    await env.runtime.fork("o2", "3", new_id="o2-fork")
    await env.runtime.cancel("o2-fork", "not this one")
    assert (await env.runtime.result("o2-fork")).status == "cancelled"
    assert (await env.runtime.result("o2.child.1")).status == "suspended"  # still the origin's
    await env.runtime.send("o2.child.1", "go", "later")
    await env.runtime.resume("o2", "ok", "o2:ok")
    assert (await env.runtime.result("o2")).output == "k:later"


async def test_a_child_that_ended_after_the_cut_is_reused_with_its_end(store: EventStore):
    env = _env(store)
    await env.start("overseer", None, execution_id="o3")
    await env.runtime.send("o3.child.1", "go", "early")  # ends while the parent waits on ok
    forked = await env.runtime.fork("o3", "2", new_id="o3-fork")  # cut before its end
    assert forked.status == "suspended"
    ends = [
        e
        for e in await store.read("o3-fork")
        if isinstance(e, ev.ExecutionResumed) and e.on == "loom.child"
    ]
    assert [(e.correlation_key, e.by) for e in ends] == [("o3.child.1", "loom.fork")]
    done = await env.runtime.resume("o3-fork", "ok", "o3-fork:ok")
    assert done.output == "k:early"
    assert calls["o3.child.1:2:k:early"] == 1 and calls["o3-fork:2:meanwhile"] == 1


async def test_a_child_its_parents_end_cancelled_is_started_anew(store: EventStore):
    env = _env(store)
    await env.start("overseer", None, execution_id="o4")
    await env.runtime.cancel("o4", "stop")  # its end cancels the running child with it
    assert (await env.runtime.result("o4.child.1")).status == "cancelled"
    forked = await env.runtime.fork("o4", "3", new_id="o4-fork")
    assert forked.status == "suspended"
    started = [e for e in await store.read("o4-fork") if isinstance(e, ev.ChildStarted)]
    assert [e.child_id for e in started] == ["o4-fork.child.1"]
    await env.runtime.resume("o4-fork", "ok", "o4-fork:ok")
    done = await env.runtime.send("o4-fork.child.1", "go", "again")
    assert (await env.runtime.result("o4-fork")).output == "k:again", done


@app.flow("pair")
async def pair(ctx: FlowContext, _: None) -> str:
    return "+".join([await ctx.recv("go"), await ctx.recv("go")])


@app.flow("handler")
async def handler(ctx: FlowContext, _: None) -> Any:
    child = await ctx.start_flow(pair, None)  # step 1
    await child.send("go", "first")  # step 2
    await ctx.execute(step, "after")  # step 3: fails the first time
    await child.send("go", "second")  # step 4
    return await child


async def test_what_the_prefix_did_with_a_child_started_anew_is_done_again(store: EventStore):
    """The original fails with its child waiting for a second message; its end cancels the
    child. The re-drive starts the child anew, and the message the prefix sent the old
    child through its handle goes to the new one: it gets both."""
    env = _env(store)
    FAIL["after"] = True
    assert (await env.start("handler", None, execution_id="hd")).status == "failed"
    assert (await env.runtime.result("hd.child.1")).status == "cancelled"
    FAIL.clear()
    (letter,) = await redrive(env.runtime, await find(env.runtime, "failed"), by="ops")
    fork = letter.new_execution_id
    assert letter.status == "completed" and fork is not None and fork.startswith("hd.redrive-")
    assert (await env.runtime.result(fork)).output == "first+second"
    new = [e.message_id for e in await store.read(f"{fork}.child.1") if e.type == "MessageReceived"]  # type: ignore[union-attr]
    assert new == [f"{fork}:2", f"{fork}:4"]
    old = [e.message_id for e in await store.read("hd.child.1") if e.type == "MessageReceived"]  # type: ignore[union-attr]
    assert old == ["hd:2"]
    assert (await replay(app, await store.read(fork))).output == "first+second"


@app.flow("streamer")
async def streamer(ctx: FlowContext, source: str) -> str:
    """Reads a value another execution published, streams two values, then charges."""
    seen = await ctx.get_event(source, "progress", timeout=5)  # step 1
    await ctx.write_stream("out", {"seen": seen})  # step 2
    await ctx.write_stream("out", "second")  # step 3
    return await ctx.execute(step, "stream-charge")  # step 4


async def test_a_fork_reuses_a_value_read_and_the_stream_written_before_its_cut(
    store: EventStore,
):
    """DBOS forks through events and streams: a failed execution that read another's value
    and streamed progress is re-driven; the fork is served the value as it was read (the
    source has moved on since) and its stream holds the values from before the cut once."""
    env = _env(store)
    await env.start("report", {"to": "nobody"}, execution_id="src")  # publishes done: 0
    FAIL["stream-charge"] = True
    assert (await env.start("streamer", "src", execution_id="s")).status == "failed"
    FAIL.clear()
    original = calls["s:4:stream-charge"]
    await env.runtime.fork("s", "4", new_id="s-fork", run=False)
    forked = await env.runtime.execute(ExecutionPackage(execution_id="s-fork"))
    assert (forked.status, forked.output) == ("completed", "stream-charge")
    chunk = await env.runtime.read_stream("s-fork", "out")
    assert chunk.values == [{"seen": {"done": 0}}, "second"] and chunk.closed
    assert calls["s-fork:4:stream-charge"] == 1 and calls["s:4:stream-charge"] == original
    assert (await replay(app, await store.read("s-fork"))).output == "stream-charge"
