"""A message racing a step replays in the order the live run saw.

Recorded live on SQLite in the test (the message is sent from outside while the flow's step
runs), then replayed from the log: the replay must take the branch the live run took.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from loom import EffectContext, FlowContext, Loom
from loom.runtime import Runtime
from loom.store import SqliteEventStore
from loom.testing import replay

app = Loom("message-races")


@app.effect("pause")
async def pause(ctx: EffectContext, seconds: float) -> str:
    await asyncio.sleep(seconds)
    return "step"


@app.flow("race.recv_or_step")
async def recv_or_step(ctx: FlowContext, seconds: float) -> dict[str, Any]:
    got = asyncio.ensure_future(ctx.recv("cmd"))
    step = asyncio.ensure_future(ctx.execute(pause, seconds))
    done, pending = await asyncio.wait({got, step}, return_when=asyncio.FIRST_COMPLETED)
    first = ["message" if t is got else "step" for t in done]
    rest = [await t for t in pending]
    return {"first": first, "rest": rest}


@pytest.mark.parametrize(("seconds", "first"), [(0.6, "message"), (0.0, "step")])
async def test_the_replay_takes_the_live_branch(tmp_path: Path, seconds: float, first: str):
    """``first``: what the flow must have seen first (with a long step, the message may
    also be handed over in the same turn as the step that was appended after it)."""
    store = SqliteEventStore(tmp_path / "loom.db")
    rt = Runtime(app, store)
    live = asyncio.ensure_future(rt.start("race.recv_or_step", seconds, execution_id="r"))
    await asyncio.sleep(0.2)  # the step is running (or done) when the message comes
    await rt.send("r", "cmd", "hi")
    await live
    result = await rt.result("r")
    assert result.status == "completed"
    assert result.output["first"][0] == first
    outcome = await replay(app, await rt.history("r"))
    assert (outcome.status, outcome.output) == ("completed", result.output)
    await store.aclose()
