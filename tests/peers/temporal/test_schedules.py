"""Temporal's schedule scenarios (the Python SDK's ``test_schedule_*``: create, describe,
update, pause and unpause with a note, trigger, backfill, list, delete), ported to Loom's
schedules at run time (``runtime.schedules``), over SQLite on disk with a clock the test
moves. Temporal's overlap policies have no counterpart: each tick is its own execution,
started once (its id is the tick's).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from loom import EffectContext, FlowContext, Loom
from loom.errors import InputError, UnknownScheduleError
from loom.primitives.schedules import fire_due
from loom.runtime import Runtime
from loom.store.sqlite import SqliteEventStore
from loom.testing import FakeClock

app = Loom("temporal-schedules")


@app.effect("greet")
async def greet(ctx: EffectContext, name: str) -> str:
    return f"Hello, {name}!"


@app.flow("say_hello")
async def say_hello(ctx: FlowContext, name: str) -> str:
    return await ctx.execute(greet, name)


NOON = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
async def rt(tmp_path: Path) -> AsyncIterator[Runtime]:
    runtime = Runtime(
        app, SqliteEventStore(tmp_path / "loom.db"), clock=FakeClock(NOON.timestamp())
    )
    yield runtime
    await runtime.store.aclose()


def _at(rt: Runtime, moment: datetime) -> None:
    rt.clock.now = moment.timestamp()  # type: ignore[attr-defined]


async def _fired(rt: Runtime, moment: datetime) -> list[str]:
    _at(rt, moment)
    return [f.tick for f in await fire_due(rt) if f.started]


async def test_schedule_basics(rt: Runtime):
    """``test_schedule_basics``: create, describe, pause with a note, unpause, trigger,
    update, list, delete."""
    made = await rt.schedules.create(
        "hello", "0 * * * *", flow="say_hello", input="Temporal", note="made by the test"
    )
    described = await rt.schedules.get("hello")
    assert described == made
    assert (described["next_fire"], described["note"]) == (
        "2026-06-01T13:00:00Z",
        "made by the test",
    )
    paused = await rt.schedules.pause("hello", note="paused for a while")
    assert (paused["paused"], paused["note"]) == (True, "paused for a while")
    assert await _fired(rt, NOON + timedelta(hours=1, seconds=5)) == []
    unpaused = await rt.schedules.unpause("hello", note="back")
    assert (unpaused["paused"], unpaused["note"]) == (False, "back")
    fired = await rt.schedules.trigger("hello")
    assert fired.started and (await rt.result(fired.execution_id)).output == "Hello, Temporal!"
    updated = await rt.schedules.update("hello", input="again", cron="30 * * * *")
    assert (updated["input"], updated["next_fire"]) == ("again", "2026-06-01T13:30:00Z")
    assert await _fired(rt, NOON + timedelta(hours=1, minutes=30, seconds=5)) == [
        "2026-06-01T13:30:00Z"
    ]
    assert [s["name"] for s in await rt.schedules.list()] == ["hello"]
    await rt.schedules.delete("hello")
    assert await rt.schedules.list() == []
    with pytest.raises(UnknownScheduleError):
        await rt.schedules.get("hello")


async def test_schedule_backfill(rt: Runtime):
    """``test_schedule_backfill``: a backfill over a past range starts its ticks, each once;
    another backfill over an overlapping range starts only the new ones."""
    await rt.schedules.create("minutely", "* * * * *", flow="say_hello", input="b", paused=True)
    start = NOON - timedelta(minutes=10)
    first = await rt.schedules.backfill("minutely", start, start + timedelta(minutes=2))
    assert [f.tick for f in first] == ["2026-06-01T11:50:00Z", "2026-06-01T11:51:00Z"]
    second = await rt.schedules.backfill("minutely", start, start + timedelta(minutes=4))
    assert [(f.tick[14:16], f.started) for f in second] == [
        ("50", False),
        ("51", False),
        ("52", True),
        ("53", True),
    ]
    with pytest.raises(InputError):
        await rt.schedules.backfill("minutely", NOON, NOON - timedelta(minutes=1))


async def test_schedule_first_action_is_after_creation(rt: Runtime):
    """A Temporal schedule takes its first action at the first time its spec matches after
    it was created; so does Loom's (no action for the times before it existed)."""
    _at(rt, NOON + timedelta(seconds=30))
    await rt.schedules.create("each", "* * * * *", flow="say_hello", input="x")
    assert await _fired(rt, NOON + timedelta(seconds=40)) == []
    assert await _fired(rt, NOON + timedelta(minutes=1, seconds=1)) == ["2026-06-01T12:01:00Z"]


async def test_schedule_spec_start_and_end(rt: Runtime):
    """``ScheduleSpec(start_at=, end_at=)``: no action outside the range."""
    end = NOON + timedelta(minutes=2)
    await rt.schedules.create("ranged", "* * * * *", flow="say_hello", input="r", end_at=end)
    assert await _fired(rt, NOON + timedelta(minutes=2, seconds=1)) == [
        "2026-06-01T12:01:00Z",
        "2026-06-01T12:02:00Z",
    ]
    assert await _fired(rt, NOON + timedelta(minutes=4, seconds=1)) == []
    assert (await rt.schedules.get("ranged"))["next_fire"] is None
