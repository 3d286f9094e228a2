"""The app the message crash tests run in child processes.

``msg.receiver`` takes three messages on ``cmd`` and notes each with ``note``, which appends
``key payload`` to the file named by ``LOOM_TEST_SIDE_FILE`` (so the test counts real
invocations across process deaths). ``msg.sender`` sends 1, 2 and 3 to the execution its
input names.
"""

from __future__ import annotations

import os
from typing import Any

from loom import EffectContext, FlowContext, Loom

app = Loom("message-crashes")


@app.effect("note")
def note(ctx: EffectContext, payload: Any) -> Any:
    with open(os.environ["LOOM_TEST_SIDE_FILE"], "a", encoding="utf-8") as side:
        side.write(f"{ctx.idempotency_key} {payload}\n")
        side.flush()
        os.fsync(side.fileno())
    return payload


@app.flow("msg.receiver")
async def receiver(ctx: FlowContext, _: None) -> list[Any]:
    return [await ctx.execute(note, await ctx.recv("cmd")) for _ in range(3)]


@app.flow("msg.sender")
async def sender(ctx: FlowContext, to: str) -> str:
    for n in (1, 2, 3):
        await ctx.send(to, "cmd", n)
    return "sent"


@app.flow("msg.counter")
async def counter(ctx: FlowContext, total: int) -> int:
    """Adds two messages on ``add`` per run; ``stop`` ends it."""
    for _ in range(2):
        got = await ctx.recv("add")
        if got == "stop":
            return total
        total += int(await ctx.execute(note, got))
    await ctx.continue_as_new(total)
