"""An append that fails (or is cut off) after the session folded its events leaves the
session's state ahead of the log; the next append must reload first, never number its
events after a seq the log does not hold.

The case the simulator met: a claim extension (the heartbeat's append, made while a long
effect runs) is cut off while it waits for the store (the session ending cancels it); the
step's completion and the end then came numbered one too far, and the store refused it as malformed (a 500)
instead of the execution completing.
"""

from __future__ import annotations

import asyncio

from loom import EffectContext, FlowContext, Loom
from loom.runtime import Runtime
from loom.store.base import AppendRequest, EventStore
from tests.concurrency.paused import PausedLoads


def _in_a_heartbeat() -> bool:
    """Whether the current task is a session's heartbeat (its coroutine is the beat's
    ``Session.append([])``), not the flow's or the execute call's own."""
    task = asyncio.current_task()
    return task is not None and task.get_coro().__qualname__ == "Session.append"  # type: ignore[union-attr]


class CutsOffOneExtension(PausedLoads):
    """The store, whose answer to the first claim extension a heartbeat appends never comes:
    the beat's task is cancelled while it waits (as a session that ends cuts it off)."""

    cut = 0

    async def append(self, request: AppendRequest) -> int:
        if not self.cut and _in_a_heartbeat():
            self.cut += 1
            raise asyncio.CancelledError  # (what the beat's await raises when cancelled)
        return await super().append(request)


def make_app() -> Loom:
    app = Loom("unsure")

    @app.effect("slow")
    async def slow(ctx: EffectContext, _: None) -> str:
        await asyncio.sleep(0.6)  # long enough for the heartbeat to extend the claim
        return "done"

    @app.flow("long")
    async def long(ctx: FlowContext, _: None) -> str:
        return await ctx.execute(slow, None)

    return app


async def test_a_claim_extension_cut_off_does_not_misnumber_what_follows(store: EventStore):
    cuts = CutsOffOneExtension(store)
    rt = Runtime(make_app(), cuts, claim_ttl=0.3)  # a beat every 0.1 s while the step runs
    result = await rt.start("long", None, execution_id="u")
    assert cuts.cut == 1
    assert (result.status, result.output) == ("completed", "done")
    seqs = [e.seq for e in await rt.history("u")]
    assert seqs == list(range(1, len(seqs) + 1))
