"""Golden histories of a fan-out to child flows, replayed against today's code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from examples import fanout

from loom import FlowContext, Loom
from loom.errors import NondeterminismError
from loom.events import EVENTS_ADAPTER, Event, ExecutionCompleted
from loom.testing import replay

HERE = Path(__file__).parent


def load(name: str) -> list[Event]:
    return EVENTS_ADAPTER.validate_python(json.loads((HERE / f"fanout_{name}.json").read_text()))


@pytest.mark.parametrize("name", ["parent", "child_1", "child_2"])
async def test_each_log_replays_to_its_recorded_output(name: str):
    events = load(name)
    final = events[-1]
    assert isinstance(final, ExecutionCompleted)
    outcome = await replay(fanout.app, events)
    assert (outcome.status, outcome.output) == ("completed", final.output)


def test_the_lineage_is_in_the_logs():
    parent = load("parent")
    started = [e for e in parent if e.type == "ChildStarted"]
    assert [(e.step_id, e.child_id) for e in started] == [  # type: ignore[union-attr]
        ("1", "fan.child.1"),
        ("2", "fan.child.2"),
    ]
    first = load("child_1")[0]
    assert first.type == "ExecutionStarted" and first.parent == {  # type: ignore[union-attr]
        "execution_id": "fan",
        "step_id": "1",
    }
    resumes = [e for e in parent if e.type == "ExecutionResumed"]
    assert {e.correlation_key for e in resumes} == {"fan.child.1", "fan.child.2"}  # type: ignore[union-attr]


async def test_a_parent_that_calls_another_flow_fails_the_replay():
    changed = Loom("reports")
    changed.effects.update(fanout.app.effects)
    changed.flow("report.region")(fanout.region_report)

    @changed.flow("report.all")
    async def all_regions(ctx: FlowContext, regions: list[str]) -> fanout.Summary:
        for region in regions:
            await ctx.execute(fanout.sales_total, region)  # the log started children here
        return fanout.Summary(regions=[], grand_total=0)

    with pytest.raises(NondeterminismError):
        await replay(changed, load("parent"))
