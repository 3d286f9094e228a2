"""Integers of any size are exact, as Python and JSON make them.

A Python int has no size limit and neither has a JSON number; the events keep one exact.
The folded state's snapshot codec (orjson) holds only -2**63..2**64-1: beyond, it refused
to write the state, so a start with such an input wrote the execution and then answered an
error, and every later read of it failed; and it read a longer integer back as a float.
Here such integers go through every place a value is recorded and come back exact, from
the snapshot as from the log.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from loom import EffectContext, FlowContext, Loom
from loom.kernel.snapshot_json import dumps, loads
from loom.kernel.state import ExecutionState
from loom.runtime import Runtime
from loom.store import SqliteEventStore
from loom.wire import ExecutionPackage

app = Loom("bigints")
HUGE = 2**200 + 1
EDGES = [2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1, 10**18, 10**19, HUGE]


@app.effect("times")
async def times(ctx: EffectContext, n: int) -> int:
    return n * HUGE


@app.flow("big")
async def big(ctx: FlowContext, value: dict[str, Any]) -> dict[str, Any]:
    doubled = await ctx.execute(times, value["n"])
    await ctx.set_event("seen", {"n": value["n"], "text": str(value["n"])})
    extra = await ctx.suspend("more", "k")
    return {"n": value["n"], "doubled": doubled, "extra": extra, "edges": value["edges"]}


@pytest.mark.parametrize("value", [*EDGES, [HUGE, {"k": -HUGE}], "digits 12345678901234567890"])
def test_the_codec_round_trips_exactly(value: Any):
    assert loads(dumps(value)) == value
    assert type(loads(dumps(value))) is type(value)


def test_the_codec_writes_a_dataclass_with_a_huge_int_as_its_public_fields():
    state = ExecutionState(execution_id="e", flow="f", input=HUGE)
    again = ExecutionState.from_json(state.to_json())
    assert again.input == HUGE and again == state


async def test_huge_integers_survive_every_record_and_the_snapshot(tmp_path: Path):
    runtime = Runtime(app, SqliteEventStore(tmp_path / "l.db"), snapshot_every=2)
    value = {"n": 3**100, "edges": EDGES}
    waiting = await runtime.start("big", value, execution_id="b")
    assert waiting.status == "suspended"
    assert waiting.state["input"] == value
    # A new runtime rebuilds from the stored snapshot, not from this one's memory.
    assert (await runtime.store.load("b")).snapshot is not None
    again = Runtime(app, SqliteEventStore(tmp_path / "l.db"))
    assert (await again.get_event("b", "seen")) == {"n": 3**100, "text": str(3**100)}
    await again.resume("b", "more", "k", {"m": -HUGE})
    done = await again.execute(ExecutionPackage(execution_id="b", reason="resume"))
    assert done.status == "completed"
    assert done.output == {
        "n": 3**100,
        "doubled": 3**100 * HUGE,
        "extra": {"m": -HUGE},
        "edges": EDGES,
    }
