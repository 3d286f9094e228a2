"""asyncio deadlines inside flows replay exactly as they fired live.

The ``timer_*.json`` logs were recorded from live runs on SQLite by
``python -m tests.histories.record_timers``: ``asyncio.wait_for``, ``asyncio.timeout``,
``asyncio.sleep`` and the ``timeout=`` of ``asyncio.wait``/``as_completed`` around steps,
gates and ``ctx.sleep``. Each result depends on whether a deadline fired first; a replay must
hand each firing over at its place in the log and reach the live result without invoking
anything or waiting on a clock.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from loom.events import EVENTS_ADAPTER, Event, ExecutionCompleted
from loom.runtime import Runtime
from loom.store import SqliteEventStore
from loom.store.memory import InMemoryEventStore
from loom.testing import replay
from loom.wire import ExecutionPackage
from tests.histories.record_timers import TIMERS, record
from tests.histories.timers import app

HERE = Path(__file__).parent
GOLDEN = sorted(HERE.glob("timer_*.json"))


def load(path: Path) -> list[Event]:
    return EVENTS_ADAPTER.validate_python(json.loads(path.read_text()))


def test_every_timer_flow_has_a_golden_history():
    assert {p.stem for p in GOLDEN} == set(TIMERS)


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.stem)
async def test_golden_timer_history_replays_to_the_live_result(path: Path):
    events = load(path)
    final = events[-1]
    assert isinstance(final, ExecutionCompleted)
    began = time.monotonic()
    outcome = await replay(app, events)
    assert (outcome.status, outcome.output) == ("completed", final.output)
    assert time.monotonic() - began < 5  # no deadline is waited for (the live ones sum past)


def test_the_golden_timer_histories_record_what_the_live_runs_saw():
    out = {p.stem: load(p)[-1].output for p in GOLDEN}  # type: ignore[union-attr]
    assert out["timer_wait_for"]["slow"] == "timed out"
    assert out["timer_wait_for"]["fast"] == "fast"
    assert out["timer_timeout"]["done"] == ["one", "timed out"]
    assert out["timer_sleep"]["winner"] == ["nap"]
    assert out["timer_wait_timeout"]["first"] == ["a"]
    assert out["timer_wait_timeout"]["order"] == ["d", "timed out"]
    assert out["timer_gate"] == {"early": "in time", "late": "timed out", "go": "went"}
    assert out["timer_ctx_sleep"]["long"] == "timed out"


def test_a_firing_is_in_the_log_with_its_deadline():
    events = load(HERE / "timer_wait_for.json")
    deadline = next(e for e in events if e.type == "DecisionRecorded" and e.kind == "timer")
    fired = next(e for e in events if e.type == "ExecutionResumed" and e.timed_out)
    assert fired.correlation_key.endswith(f":{deadline.step_id}")
    assert fired.at >= deadline.value  # fired at its recorded deadline, not before
    late = next(e for e in events if e.type == "EffectCompleted" and e.output == "slow")
    assert late.seq > fired.seq  # the step the deadline cut short: recorded, passed over


@pytest.mark.parametrize("store_kind", ["memory", "sqlite"])
@pytest.mark.parametrize("name", sorted(TIMERS))
async def test_a_fresh_live_timer_run_replays_the_same(name: str, store_kind: str, tmp_path: Path):
    """Run the flow again now (real time) on each store and replay its log: same result."""
    store = InMemoryEventStore() if store_kind == "memory" else SqliteEventStore(tmp_path / "db")
    try:
        events, output = await record(name, store)
    finally:
        if isinstance(store, SqliteEventStore):
            await store.aclose()
    expected = load(HERE / f"{name}.json")[-1]
    assert output == expected.output  # type: ignore[union-attr]
    outcome = await replay(app, EVENTS_ADAPTER.validate_python(events))
    assert (outcome.status, outcome.output) == ("completed", output)


async def test_a_worker_replaying_after_the_resume_keeps_the_live_view(tmp_path: Path):
    """The execute call after the last resume replays the firing from the log; a redelivered
    call after the end changes nothing."""
    store = SqliteEventStore(tmp_path / "loom.db")
    rt = Runtime(app, store)
    try:
        done = await TIMERS["timer_timeout"](rt)
        assert done.output == {"done": ["one", "timed out"], "go": "went"}
        again = await rt.execute(ExecutionPackage(execution_id="to", reason="start"))
        assert again.output == done.output
    finally:
        await store.aclose()


@pytest.mark.parametrize("name", ["timer_wait_for", "timer_gate"])
async def test_timer_flows_replay_the_same_on_the_firestore_emulator(
    name: str, firestore_store_factory: Any
):
    """The Firestore store's own deadlines (its calls run under ``asyncio.timeout``) stay
    on the loop's clock: only the flow's timers are recorded."""
    store = await firestore_store_factory()
    try:
        events, output = await record(name, store)
    finally:
        await store.aclose()
    assert output == load(HERE / f"{name}.json")[-1].output  # type: ignore[union-attr]
    outcome = await replay(app, EVENTS_ADAPTER.validate_python(events))
    assert (outcome.status, outcome.output) == ("completed", output)
    recorded = [e for e in events if e["type"] == "DecisionRecorded"]
    assert len(recorded) == 2  # the flow's two deadlines, nothing of the store's
