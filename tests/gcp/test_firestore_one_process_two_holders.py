"""Two holders of one execution in one worker process, sharing one Firestore store object.

What a chaos run on the emulator saw (1,000 executions of 10 steps, workers killed, every
execution delivered two or three times at once): one log forked. The first holder's end
(its last step and the completion) rode the execution document at seqs 14-15; a second
holder in the same process took over with a claim at 14 and went on at 16 and 17: two
terminal events, step 10 recorded twice with different outputs.

How: the second delivery's load read the execution document and the pages before the first
holder's end landed, and finished after it. The store object is shared, so the end's own
write had refreshed the execution document's update time it remembers; the takeover claim
(fenced by that update time) passed its precondition, and the load had set the log's end
it remembers back to 13, so the page the claim created (14) collided with nothing.

The interleaving is forced here: the second load is held between its page query and its
bookkeeping until the first holder has ended. The takeover is the second holder's own
judgement (its clock is an hour ahead, so the first claim looks expired), as a holder that
outlived its claim TTL looks to any other. The store's log cache no longer holds the
execution (it keeps 256, a busy worker evicts), so the load reads the pages. Everything
else is the real runtime on the real emulator; the log is checked in the raw documents.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from google.cloud import firestore

import loom_gcp._firestore_load as firestore_load
from loom import EffectContext, FlowContext, Loom
from loom.errors import AppendConflictError, ExecutionSupersededError
from loom.events import ExecutionClaimed, ExecutionCompleted, ExecutionStarted
from loom.runtime import Runtime
from loom.store import AppendRequest, StatusChange
from loom.wire import ExecutionPackage
from loom_gcp.firestore import FirestoreEventStore
from tests.gcp.firestore_helpers import PROJECT, step
from tests.gcp.firestore_raw import log_problems, raw_log

pytestmark = pytest.mark.slow

STEPS = 10


class Held:
    """The first holder's last step, held until the test lets it return."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.invocations: list[int] = []


def claim(seq: int, holder: str) -> ExecutionClaimed:
    return ExecutionClaimed(seq=seq, holder=holder, until=time.time() + 60, at=time.time())


def done(seq: int) -> ExecutionCompleted:
    return ExecutionCompleted(seq=seq, output="done", at=time.time())


def ten_steps(held: Held) -> Loom:
    app = Loom("two-holders")

    @app.effect("fx")
    async def fx(ctx: EffectContext, n: int) -> dict[str, Any]:
        held.invocations.append(n)
        if n == STEPS and held.invocations.count(n) == 1:
            held.entered.set()
            await held.release.wait()
        return {"n": n, "call": len(held.invocations)}

    @app.flow("ten")
    async def ten(ctx: FlowContext, _: int) -> int:
        for n in range(1, STEPS + 1):
            await ctx.execute(fx, n)
        return STEPS

    return app


def hold_next_load(monkeypatch: pytest.MonkeyPatch) -> tuple[asyncio.Event, asyncio.Event]:
    """Hold the next load's page read once it has read: (read, go on)."""
    real = firestore_load.read_after
    read, go_on = asyncio.Event(), asyncio.Event()

    async def held_read(*args: Any) -> Any:
        tail = await real(*args)
        if not read.is_set():
            read.set()
            await go_on.wait()
        return tail

    monkeypatch.setattr(firestore_load, "read_after", held_read)
    return read, go_on


async def test_a_takeover_in_the_same_process_never_forks_the_log(
    database: str, client: firestore.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = Held()
    app = ten_steps(held)
    store = FirestoreEventStore(project=PROJECT, database=database)
    first = Runtime(app, store)
    second = Runtime(app, store, clock=lambda: time.time() + 3600)
    await first.start("ten", 0, execution_id="e1", run=False)
    package = ExecutionPackage(execution_id="e1", flow="ten", reason="start", dispatch_id="d1")

    first_call = asyncio.create_task(first.execute(package))
    await asyncio.wait_for(held.entered.wait(), 30)  # steps 1-9 recorded, 10 running
    store._cache.drop("e1")  # pyright: ignore[reportPrivateUsage]  # evicted
    read, go_on = hold_next_load(monkeypatch)
    second_call = asyncio.create_task(second.execute(package))
    await asyncio.wait_for(read.wait(), 30)  # it has read the log before the end
    held.release.set()
    assert (await asyncio.wait_for(first_call, 30)).status == "completed"
    go_on.set()
    try:
        outcome: Any = await asyncio.wait_for(second_call, 30)
    except ExecutionSupersededError as exc:
        outcome = exc

    log = await raw_log(client, "e1")
    assert log_problems(log) == []
    types = [e["type"] for e in log.events()]
    assert types.count("ExecutionCompleted") == 1 and types[-1] == "ExecutionCompleted"
    assert held.invocations == list(range(1, STEPS + 1)), outcome  # step 10 ran once
    assert (await first.result("e1")).status == "completed"
    await store.aclose()


async def test_an_end_after_a_takeover_in_the_same_process_never_forks_the_log(
    database: str, client: firestore.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other order, at the store: a takeover claim lands (its write refreshes the
    update time the store remembers), a third delivery's load that read the log before it
    finishes after it, and the old holder, alive after all, sends its end at the position
    it knows. The end must not ride the execution document on the new claim's update time
    (no page collides with an end there)."""
    store = FirestoreEventStore(project=PROJECT, database=database)
    await store.create(ExecutionStarted(execution_id="e1", flow="f"), [claim(2, "old")])
    assert await store.append(AppendRequest("e1", 2, [step(3, "a")])) == 3
    store._cache.drop("e1")  # pyright: ignore[reportPrivateUsage]  # evicted
    read, go_on = hold_next_load(monkeypatch)
    third = asyncio.create_task(store.load("e1"))
    await asyncio.wait_for(read.wait(), 30)
    assert await store.append(AppendRequest("e1", 3, [claim(4, "new")], fence=True)) == 4
    go_on.set()
    assert (await third).events[-1].seq == 3  # what it read, before the claim
    end = AppendRequest("e1", 3, [step(4, "last"), done(5)], StatusChange("completed"))
    with pytest.raises(AppendConflictError):
        await store.append(end)
    log = await raw_log(client, "e1")
    assert log_problems(log) == []
    assert [e["type"] for e in log.events()][-1] == "ExecutionClaimed"
    await store.aclose()
