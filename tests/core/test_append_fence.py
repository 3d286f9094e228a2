"""Which appends the runtime marks ``fence``: every one that is not the holder session's own.

A store may write a holder's last append where no other append's page can collide with it
(Firestore: on the execution document, under a precondition); fenced appends must then
collide with it. The holder's own appends stay unfenced (they cost nothing extra); a
control event, a message delivered from outside and a takeover claim are fenced.
"""

from __future__ import annotations

from typing import Any

import pytest

from loom import EffectContext, FlowContext, Loom
from loom import events as ev
from loom.runtime import Runtime
from loom.store import AppendRequest, InMemoryEventStore
from loom.wire import ExecutionPackage


class Recording(InMemoryEventStore):
    """The in-memory store, noting each append's first event type and its fence flag."""

    def __init__(self) -> None:
        super().__init__()
        self.appends: list[tuple[str, bool]] = []

    async def append(self, request: AppendRequest) -> int:
        self.appends.append((request.events[0].type, request.fence))
        return await super().append(request)


def make_app(durability: str) -> Loom:
    app = Loom("fence")

    @app.effect("a")
    async def a(ctx: EffectContext, _: None) -> str:
        return "A"

    @app.flow("gated", durability=durability)  # type: ignore[arg-type]
    async def gated(ctx: FlowContext, _: None) -> list[Any]:
        first = await ctx.execute(a, None)
        got = await ctx.suspend("go", "k")
        message = await ctx.recv("note")
        return [first, got, message]

    return app


@pytest.mark.parametrize("durability", ["strict", "batched"])
async def test_only_appends_from_outside_the_session_are_fenced(durability: str) -> None:
    store = Recording()
    rt = Runtime(make_app(durability), store)
    await rt.start("gated", None, execution_id="x1", run=False)
    await rt.execute(ExecutionPackage(execution_id="x1"))
    assert store.appends[0][0] == "ExecutionClaimed"  # a fresh execution's first claim
    assert all(not fence for _, fence in store.appends)  # the session's own: unfenced
    store.appends.clear()
    await rt.resume("x1", "go", "k", {"ok": 1})
    assert store.appends[0] == ("ExecutionResumed", True)
    assert all(not fence for _, fence in store.appends[1:])  # the session it dispatched
    store.appends.clear()
    await rt.send("x1", "note", "hello")
    assert store.appends[0] == ("MessageReceived", True)
    assert (await rt.result("x1")).status == "completed"


@pytest.mark.parametrize("durability", ["strict", "batched"])
async def test_a_takeover_claim_is_fenced_and_written_at_once(durability: str) -> None:
    store = Recording()
    rt = Runtime(make_app(durability), store)
    await rt.start("gated", None, execution_id="x1", run=False)
    claimed = ev.ExecutionClaimed(seq=2, holder="elsewhere:1:1", until=rt.clock() - 1)
    await store.append(AppendRequest("x1", 1, [claimed]))  # an expired claim
    store.appends.clear()
    await rt.execute(ExecutionPackage(execution_id="x1"))
    assert store.appends[0] == ("ExecutionClaimed", True)
    assert all(not fence for _, fence in store.appends[1:])
