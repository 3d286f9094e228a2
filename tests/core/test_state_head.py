"""A snapshot's first line, written through orjson's own dataclass support, is the state's
public fields in declaration order, as it was when built field by field."""

from __future__ import annotations

from dataclasses import fields

import orjson

from loom import FlowContext, Loom
from loom.kernel.fold import ExecutionState
from loom.runtime import Runtime
from loom.store import InMemoryEventStore

app = Loom("head")


@app.flow("wait")
async def wait(ctx: FlowContext, n: int) -> int:
    await ctx.suspend("go", f"k{n}", timeout=60)
    return n


async def test_a_snapshots_first_line_holds_every_public_field_in_order():
    """``head_json`` writes the state through orjson's dataclass support: exactly the public
    fields, in declaration order, the meter as a dict."""
    rt = Runtime(app, InMemoryEventStore())
    await rt.start("wait", 3, execution_id="w1", capabilities={"c"}, budgets={"max_attempts": 2.0})
    state = await rt.load_state("w1")
    state.mailbox["t"] = 1  # every container holds something
    state.patches.append("p")
    expected = {f.name: getattr(state, f.name) for f in fields(ExecutionState) if f.name[0] != "_"}
    expected["meter"] = state.meter.__dict__
    assert state.head_json() == orjson.dumps(expected)
    assert ExecutionState.from_json(state.to_json()) == state
