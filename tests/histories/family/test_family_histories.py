"""Golden histories of child options and handles, and of a fork through a child, a message
sent, a message taken and published values (a re-drive), replayed against today's code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loom import FlowContext, Loom
from loom import events as ev
from loom.errors import NondeterminismError
from loom.events import EVENTS_ADAPTER, Event, ExecutionCompleted
from loom.testing import replay
from tests.histories.family import app as family

HERE = Path(__file__).parent
LOGS = ["trip", "trip_flight", "report_redrive"]


def load(name: str) -> list[Event]:
    return EVENTS_ADAPTER.validate_python(json.loads((HERE / f"{name}.json").read_text()))


@pytest.mark.parametrize("name", LOGS)
async def test_each_log_replays_to_its_recorded_output(name: str):
    events = load(name)
    final = events[-1]
    assert isinstance(final, ExecutionCompleted)
    outcome = await replay(family.app, events)
    assert (outcome.status, outcome.output) == ("completed", final.output)


def test_the_options_and_the_handles_are_in_the_logs():
    trip = load("trip")
    started = [e for e in trip if isinstance(e, ev.ChildStarted)]
    assert [(e.child_id, e.explicit_id, e.on_cancel) for e in started] == [
        ("t-1-flight", True, "cancel"),
        ("t-1.child.3", False, "abandon"),
    ]
    (asked,) = [e for e in trip if isinstance(e, ev.ChildCancelRequested)]
    assert (asked.step_id, asked.child_id) == ("4", "t-1.child.3")
    (sent,) = [e for e in trip if isinstance(e, ev.MessageSent)]
    assert (sent.step_id, sent.to) == ("2", "t-1-flight")
    flight = load("trip_flight")[0]
    assert isinstance(flight, ev.ExecutionStarted)
    assert (flight.flow_version, flight.parent) == ("2", {"execution_id": "t-1", "step_id": "1"})
    assert flight.deadline == pytest.approx(flight.at + 3600)
    hotel = [e.type for e in load("trip_hotel")]
    assert hotel[-1] == "ExecutionCancelled" and "CancelDelivered" in hotel


def test_the_redrive_reused_the_prefix_and_ran_only_the_charge():
    original, fork = load("report"), load("report_redrive")
    first = fork[0]
    assert isinstance(first, ev.ExecutionStarted) and first.forked_from is not None
    assert first.forked_from.execution_id == "rep"
    copied = [
        e.type for e in fork[1 : fork.index(next(e for e in fork if e.type == "ExecutionForked"))]
    ]
    kept = [e.type for e in original if e.type not in ("ExecutionClaimed",)][1:-4]
    assert copied == kept  # every event before the failed step, claims aside
    live = [
        e.type for e in fork if e.seq > next(e.seq for e in fork if e.type == "ExecutionForked")
    ]
    assert live == ["ExecutionClaimed", "EffectCompleted", "ExecutionCompleted"]


async def test_a_trip_that_names_its_flight_otherwise_fails_the_replay():
    changed = Loom("family-golden")
    changed.effects.update(family.app.effects)
    for version, defn in family.app.versions["leg"].items():
        changed.flow("leg", version=version)(defn.fn)

    @changed.flow("trip")
    async def trip(ctx: FlowContext, trip_id: str) -> dict[str, str]:
        await ctx.start_flow("leg", "flight", execution_id=f"{trip_id}-plane", version=2)
        raise AssertionError("unreachable")

    with pytest.raises(NondeterminismError, match="explicit id"):
        await replay(changed, load("trip"))
