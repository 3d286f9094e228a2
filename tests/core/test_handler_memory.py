"""Sessions whose flow registered update or query handlers are freed when their call ends.

The handlers are closures over the flow's locals (its ``ctx`` holds the session): kept in a
map keyed weakly by the session, each value held its own key, so every such session (and
every replay a query or a validation made) stayed in memory for the process's life.
"""

from __future__ import annotations

import gc

from loom import FlowContext, Loom
from loom.kernel.session import Session
from loom.testing import LoomTestEnv


def make_app() -> Loom:
    app = Loom("handler-memory")

    @app.flow("counter")
    async def counter(ctx: FlowContext, _: None) -> int:
        total = [0]

        def add(n: int) -> int:  # (it holds ``ctx``, so the session, as most handlers do)
            total[0] += n if ctx.execution_id else 0
            return total[0]

        ctx.set_update_handler("add", add)
        ctx.set_query_handler("total", lambda: total[0])
        await ctx.suspend("go", ctx.execution_id)
        return total[0]

    return app


def _sessions() -> int:
    gc.collect()
    return sum(isinstance(o, Session) for o in gc.get_objects())


async def test_sessions_with_handlers_are_not_kept() -> None:
    env = LoomTestEnv(make_app())
    before = _sessions()
    for i in range(10):
        await env.start("counter", None, execution_id=f"c{i}")
        assert await env.runtime.update(f"c{i}", "add", 2) == 2
        assert await env.runtime.query(f"c{i}", "total") == 2
    assert _sessions() == before
