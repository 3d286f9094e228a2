"""A store failure while a cancelled parent tells its child is the store's, not the flow's:
the parent still ends ``cancelled`` (never ``failed`` with ``store_unavailable``), and the
child is cancelled all the same, by the parent's end."""

from __future__ import annotations

from typing import Any

from loom import FlowContext, Loom
from loom.errors import StoreUnavailableError
from loom.runtime import Runtime
from loom.store.base import EventStore, LoadedLog
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
