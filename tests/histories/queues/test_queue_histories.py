"""Golden histories of queued executions with options, replayed against today's code (see
``record.py``): the dequeue is recorded once, with the claim that first ran the execution,
and the timeout from dequeue is the deadline the cancel came from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loom.events import EVENTS_ADAPTER, Event, ExecutionDequeued, ExecutionStarted
from loom.kernel.fold import fold
from loom.testing import replay
from tests.flowcontrol import options_app

HERE = Path(__file__).parent
HISTORIES = sorted(HERE.glob("queued_*.json"))


def load(path: Path) -> list[Event]:
    return EVENTS_ADAPTER.validate_python(json.loads(path.read_text()))


def test_the_histories_are_there():
    assert {p.stem for p in HISTORIES} == {"queued_done", "queued_timeout"}


@pytest.mark.parametrize("path", HISTORIES, ids=lambda p: p.stem)
async def test_history_replays_to_its_recorded_end(path: Path):
    events = load(path)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    outcome = await replay(options_app.app, events)
    assert outcome.status == {"queued_done": "completed", "queued_timeout": "cancelled"}[path.stem]


@pytest.mark.parametrize("path", HISTORIES, ids=lambda p: p.stem)
def test_the_dequeue_rides_the_first_claim_and_sets_the_deadline(path: Path):
    events = load(path)
    kinds = [e.type for e in events]
    assert kinds[:3] == ["ExecutionStarted", "ExecutionClaimed", "ExecutionDequeued"]
    assert kinds.count("ExecutionDequeued") == 1  # later claims write none
    started, dequeued = events[0], events[2]
    assert isinstance(started, ExecutionStarted) and isinstance(dequeued, ExecutionDequeued)
    assert started.queue == "one" and started.queue_options is not None
    timeout = float(started.queue_options["timeout"])
    assert dequeued.deadline == pytest.approx(dequeued.at + timeout)
    state = fold(events)
    assert state.deadline == dequeued.deadline and state.queue_options["dequeued_at"] == dequeued.at


def test_the_timeout_from_dequeue_cancelled_the_nap():
    events = load(HERE / "queued_timeout.json")
    cancel = next(e for e in events if e.type == "CancelRequested")
    assert cancel.by == "loom.timeout"  # type: ignore[union-attr]
    dequeued = next(e for e in events if isinstance(e, ExecutionDequeued))
    assert dequeued.deadline is not None and cancel.at >= dequeued.deadline
