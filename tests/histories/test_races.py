"""Racing flows replay in the recorded completion order.

The ``race_*.json`` logs were recorded from live runs on SQLite by
``python -m tests.histories.record_races``. Each flow's result depends on which racer it saw
finish first; a replay must hand the recorded outcomes over one at a time, in log order, and
so reach the result the live run reached, without invoking anything.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loom.events import EVENTS_ADAPTER, Event, ExecutionCompleted
from loom.runtime import Runtime
from loom.store import SqliteEventStore
from loom.testing import replay
from loom.wire import ExecutionPackage
from tests.histories.races import app
from tests.histories.record_races import RACES, record

HERE = Path(__file__).parent
GOLDEN = sorted(HERE.glob("race_*.json"))


def load(path: Path) -> list[Event]:
    return EVENTS_ADAPTER.validate_python(json.loads(path.read_text()))


def test_every_race_has_a_golden_history():
    assert {p.stem for p in GOLDEN} == set(RACES)


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.stem)
async def test_golden_race_replays_to_the_live_result(path: Path):
    events = load(path)
    final = events[-1]
    assert isinstance(final, ExecutionCompleted)
    outcome = await replay(app, events)
    assert (outcome.status, outcome.output) == ("completed", final.output)


def test_the_golden_races_record_what_the_live_runs_saw():
    outputs = {p.stem: load(p)[-1] for p in GOLDEN}
    first = outputs["race_first_completed"]
    assert isinstance(first, ExecutionCompleted)
    assert first.output["first"] == ["fast"]  # only the fast step was done when wait returned
    timer = outputs["race_gate_or_timer"]
    assert isinstance(timer, ExecutionCompleted)
    assert timer.output["winner"] == ["timer"]


@pytest.mark.parametrize("name", sorted(RACES))
async def test_a_fresh_live_race_replays_the_same(name: str, tmp_path: Path):
    """Record the race again now (real time, SQLite) and replay it: same result."""
    events, output = await record(name, tmp_path)
    outcome = await replay(app, EVENTS_ADAPTER.validate_python(events))
    assert (outcome.status, outcome.output) == ("completed", output)


async def test_a_worker_replaying_the_race_after_a_resume_keeps_the_live_view(tmp_path: Path):
    """The live run saw ``fast`` alone; the execute call after the resume replays both
    recorded steps and must still see ``fast`` alone, or the result silently changes."""
    store = SqliteEventStore(tmp_path / "loom.db")
    rt = Runtime(app, store)
    try:
        await rt.start("race.first_completed", None, execution_id="r")
        done = await rt.resume("r", "go", "r", "ok")
        assert done.status == "completed"
        assert done.output == {"first": ["fast"], "rest": ["slow"], "go": "ok"}
        # Replaying again (a redelivered execute call) changes nothing.
        again = await rt.execute(ExecutionPackage(execution_id="r", reason="start"))
        assert again.output == done.output
    finally:
        await store.aclose()
