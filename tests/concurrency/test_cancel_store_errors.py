"""A store failure while a cancelled parent tells its child is the store's, not the flow's:
the parent still ends ``cancelled`` (never ``failed`` with ``store_unavailable``), and the
child is cancelled all the same, by the parent's end."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from loom import FlowContext, Loom
from loom.errors import StoreUnavailableError
from loom.events import CancelRequested
from loom.runtime import Runtime
from loom.store.base import AppendRequest, EventStore, LoadedLog
from loom.wire import ExecutionPackage
from tests.concurrency.paused import PausedLoads


class FailsOneChildLoad(PausedLoads):
    """The store, failing the first load of the child once the parent is cancelling."""

    armed = False
    failed = 0

    async def load(self, execution_id: str) -> LoadedLog:
        if self.armed and not self.failed and ".child." in execution_id:
            self.failed += 1
            raise StoreUnavailableError("the store went away for a moment")
        return await super().load(execution_id)


def make_app() -> Loom:
    app = Loom("cancels")

    @app.flow("child")
    async def child(ctx: FlowContext, _: None) -> Any:
        return await ctx.suspend("go", "k")

    @app.flow("parent")
    async def parent(ctx: FlowContext, _: None) -> Any:
        return await ctx.execute_flow("child", None)

    return app


async def test_a_store_failure_telling_the_child_does_not_fail_the_parent(store: EventStore):
    flaky = FailsOneChildLoad(store)
    rt = Runtime(make_app(), flaky)
    assert (await rt.start("parent", None, execution_id="p")).status == "suspended"
    flaky.armed = True
    result = await rt.cancel("p", "stop")
    assert flaky.failed == 1
    assert result.status == "cancelled", result.error
    child = await rt.result("p.child.1")
    assert child.status == "cancelled"


class FailsOneHandOver(PausedLoads):
    """The store, failing the first append that records a cancel's hand-over."""

    failed = 0

    async def append(self, request: AppendRequest) -> int:
        if not self.failed and any(e.type == "CancelDelivered" for e in request.events):
            self.failed += 1
            raise StoreUnavailableError("the store went away for a moment")
        return await super().append(request)


def swallowing_app() -> Loom:
    app = Loom("swallows")

    @app.flow("both")
    async def both(ctx: FlowContext, _: None) -> Any:
        # Branches gathered with return_exceptions: whatever one raises, the flow keeps it.
        return await asyncio.gather(
            ctx.suspend("go", "a"), ctx.suspend("go", "b"), return_exceptions=True
        )

    return app


async def test_a_failed_hand_over_ends_the_call_even_where_the_flow_swallows_errors(
    store: EventStore,
):
    """The hand-over's append fails inside a gathered branch whose error the flow keeps: the
    execute call still ends (the store's error, retried by its delivery), it never waits for
    the cleanup budget; the next call hands the cancel over."""
    flaky = FailsOneHandOver(store)
    rt = Runtime(swallowing_app(), flaky)
    assert (await rt.start("both", None, execution_id="s")).status == "suspended"
    with pytest.raises(StoreUnavailableError):
        await asyncio.wait_for(rt.cancel("s", "stop"), 20)
    assert flaky.failed == 1
    again = await asyncio.wait_for(rt.execute(ExecutionPackage(execution_id="s")), 20)
    assert again.status == "cancelled"


class CancelsWhileSuspending(FailsOneHandOver):
    """The store, where a cancel lands just before the flow's suspension is recorded (the
    suspension conflicts and merges it), and the hand-over's record then fails."""

    cancelled = False

    async def append(self, request: AppendRequest) -> int:
        suspending = any(e.type == "ExecutionSuspended" for e in request.events)
        if suspending and not self.cancelled:
            self.cancelled = True
            cancel = CancelRequested(
                seq=request.expected_seq + 1, reason="stop", by="client", cleanup_s=30.0
            )
            await self.inner.append(
                AppendRequest(request.execution_id, request.expected_seq, [cancel])
            )
        return await super().append(request)


async def test_a_failed_hand_over_to_a_flow_blocked_on_a_gate_ends_the_call(store: EventStore):
    """The hand-over to a flow that waits on its gate is recorded by the session's watcher, not
    by a flow task: its failure must still end the execute call (once, it left the flow
    waiting for good and the call never answered); the next call hands the cancel over."""
    flaky = CancelsWhileSuspending(store)
    rt = Runtime(make_app(), flaky)
    with pytest.raises(StoreUnavailableError):
        await asyncio.wait_for(rt.start("child", None, execution_id="c"), 20)
    assert flaky.cancelled and flaky.failed == 1
    again = await asyncio.wait_for(rt.execute(ExecutionPackage(execution_id="c")), 20)
    assert again.status == "cancelled"
