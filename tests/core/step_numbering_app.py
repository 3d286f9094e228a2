"""Flows whose step ids depend on how ``asyncio.wait_for`` runs its awaitable, and a command
line that records or replays one on the interpreter it runs on (the cross-version tests run
it under another Python).

``python -m tests.core.step_numbering_app record``: run ``deadlines`` live, print its history.
``python -m tests.core.step_numbering_app replay FILE``: replay the history in ``FILE``,
print the outcome and the effects invoked.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from loom import EffectContext, FlowContext, Loom
from loom.events import EVENTS_ADAPTER, event_to_dict
from loom.runtime import Runtime
from loom.store.memory import InMemoryEventStore
from loom.testing import replay

app = Loom("numbering")
CALLS: list[str] = []  # idempotency keys of the effects invoked, in order


@app.effect("note", idempotent=False)
async def note(ctx: EffectContext, what: str) -> str:
    CALLS.append(ctx.idempotency_key)
    return what


@app.effect("nap", idempotent=False)
async def nap(ctx: EffectContext, seconds: float) -> str:
    CALLS.append(ctx.idempotency_key)
    await asyncio.sleep(seconds)
    return "woke"


@app.flow("deadlines")
async def deadlines(ctx: FlowContext, _: None) -> dict[str, Any]:
    """``wait_for`` met in time and with no time at all, tasks, a step, then a ``wait_for``
    that cuts a step short (last: a fork cut before it finds every earlier step settled)."""
    fast = await asyncio.wait_for(ctx.execute(note, "fast"), 30)
    try:  # ``timeout <= 0``: a task on every Python, cancelled before it runs
        zero = await asyncio.wait_for(ctx.execute(note, "never"), 0)
    except TimeoutError:
        zero = "timed out"
    pair = await asyncio.gather(ctx.execute(note, "a"), ctx.execute(note, "b"))
    last = await ctx.execute(note, "last")
    try:
        slow = await asyncio.wait_for(ctx.execute(nap, 0.3), 0.05)
    except TimeoutError:
        slow = "timed out"
    return {"fast": fast, "slow": slow, "zero": zero, "pair": pair, "last": last}


@app.flow("cut")
async def cut(ctx: FlowContext, _: None) -> list[str]:
    """A step cut short by ``wait_for`` in the flow's own scope, then two more steps."""
    try:
        slow = await asyncio.wait_for(ctx.execute(nap, 0.3), 0.05)
    except TimeoutError:
        slow = "timed out"
    return [slow, await ctx.execute(note, "a"), await ctx.execute(note, "b")]


@app.flow("nested")
async def nested(ctx: FlowContext, _: None) -> list[str]:
    """``wait_for`` around a coroutine that creates tasks of its own, then a step."""

    async def both() -> list[str]:
        got = await asyncio.gather(ctx.execute(note, "a"), ctx.execute(note, "b"))
        return [*got, await asyncio.ensure_future(ctx.execute(note, "c"))]

    return [*await asyncio.wait_for(both(), 30), await ctx.execute(note, "d")]


@app.flow("parent")
async def parent(ctx: FlowContext, _: None) -> Any:
    """A child flow started from inside a ``wait_for``."""
    return await asyncio.wait_for(ctx.execute_flow(deadlines, None), 30)


@app.flow("twice")
async def twice(ctx: FlowContext, round: int) -> str:
    """A ``wait_for`` around a step in each of two runs (continue-as-new between)."""
    got = await asyncio.wait_for(ctx.execute(note, f"round {round}"), 30)
    if round == 1:
        await ctx.continue_as_new(2)
    return got


async def record() -> list[dict[str, Any]]:
    """Run ``deadlines`` live on a fresh store; its history as JSON-able dicts."""
    rt = Runtime(app, InMemoryEventStore())
    done = await rt.start("deadlines", None, execution_id="d")
    assert done.status == "completed", done
    return [event_to_dict(e) for e in await rt.history("d")]


async def replay_history(history: list[dict[str, Any]]) -> dict[str, Any]:
    """Replay ``history``: the outcome and what was invoked."""
    outcome = await replay(app, EVENTS_ADAPTER.validate_python(history))
    return {"status": outcome.status, "output": outcome.output, "calls": CALLS}


def main(argv: list[str]) -> None:
    """The command line (see the module docstring)."""
    import loom

    if argv[0] == "record":
        result: Any = asyncio.run(record())
    else:
        result = asyncio.run(replay_history(json.loads(Path(argv[1]).read_text())))
    print(json.dumps({"python": list(sys.version_info[:2]), "loom": loom.__file__, "r": result}))


if __name__ == "__main__":
    main(sys.argv[1:])
