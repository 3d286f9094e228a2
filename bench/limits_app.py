"""The app of ``bench/limits.py``: an execution that never reads its mailbox, and a trivial
flow for the unrelated requests. Runs on checkouts without ``loom.kernel.execution_limits`` too
(a baseline), where nothing bounds the mailbox."""

from __future__ import annotations

from typing import Any

from loom import FlowContext, Loom

app = Loom("bench-limits")

try:  # this checkout: the run may hold the 1,500 messages the benchmark sends
    from loom import Limits  # type: ignore[attr-defined]

    _deaf_options: dict[str, Any] = {"limits": Limits(max_messages=2_000)}
except ImportError:  # an older checkout: no limits at all
    _deaf_options = {}


@app.flow("bench.deaf", **_deaf_options)
async def deaf(ctx: FlowContext, value: Any) -> None:
    """Waits for ever on a gate; messages on any topic pile up unread."""
    await ctx.suspend(on="never", correlation_key=ctx.execution_id)


@app.flow("bench.echo")
async def echo(ctx: FlowContext, value: Any) -> Any:
    """Nothing but a start and an end: an unrelated request's flow."""
    return value
