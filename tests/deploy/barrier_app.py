"""A Loom app whose one step returns only once N steps are running at the same time.

``LOOM_TEST_BARRIER`` sets N. Served with fewer than N request threads (or sync-effect
threads), the barrier never fills and its wait times out: the flow fails instead of
completing. ``tests/deploy/test_concurrency.py`` serves it as the container does.
"""

from __future__ import annotations

import os
import threading

from loom import EffectContext, FlowContext, Loom, Retry

app = Loom("barrier")

_BARRIER = threading.Barrier(
    int(os.environ.get("LOOM_TEST_BARRIER", "1")),
    timeout=float(os.environ.get("LOOM_TEST_BARRIER_TIMEOUT", "60")),
)


@app.effect("barrier.meet", retry=Retry(max_attempts=1))
def meet(ctx: EffectContext, who: str) -> str:
    """Block (in a worker thread) until the barrier is full."""
    _BARRIER.wait()
    return who


@app.flow("meet")
async def meet_flow(ctx: FlowContext, who: str) -> str:
    """One step at the barrier."""
    return await ctx.execute("barrier.meet", who)
