"""Schedules at run time (``runtime.schedules``, :mod:`loom.primitives.schedule_admin`) on
memory, SQLite on disk and the Firestore emulator: created, updated, paused, unpaused,
triggered, backfilled, deleted and listed; fired by the same passes as declared ones, under
reserved tick ids, first after they were created."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import UTC, datetime

import pytest

from loom.errors import InputError, ReservedExecutionIdError, UnknownFlowError, UnknownScheduleError
from loom.primitives.schedules import fire_due
from loom.runtime import Runtime
from loom.store import EventStore
from loom.testing import FakeClock
from tests.flowcontrol import schedule_app

T0 = datetime(2026, 11, 30, 6, 0, tzinfo=UTC).timestamp()


def _runtime(store: EventStore) -> Runtime:
    return Runtime(schedule_app.app, store, clock=FakeClock(T0 - 86400))


async def _pass(rt: Runtime, at: float, name: str = "") -> list[str]:
    """A pass at ``at``: the ticks it started (of schedule ``name``, if given)."""
    rt.clock.now = at  # type: ignore[attr-defined]
    started = [f.execution_id for f in await fire_due(rt) if f.started]
    return [e for e in started if e.startswith(f"schedule:{name}@")] if name else started


async def _ticks(store: EventStore, name: str) -> list[str]:
    rows = await store.list(limit=10_000)
    return sorted(r.execution_id for r in rows if r.execution_id.startswith(f"schedule:{name}"))


async def test_a_schedule_made_at_run_time_fires_from_the_first_tick_after_it(store: EventStore):
    rt = _runtime(store)
    await _pass(rt, T0 - 86400)  # the declared ones are seen long before
    rt.clock.now = T0 + 30  # type: ignore[attr-defined]
    made = await rt.schedules.create(
        "q15", "*/15 * * * *", flow="report", input="quarter", by="ops@example.com"
    )
    assert (made["declared"], made["paused"], made["next_fire"]) == (
        False,
        False,
        "2026-11-30T06:15:00Z",
    )
    listed = {s["name"]: s for s in await rt.schedules.list()}
    assert set(listed) == {"every-5", "hourly", "minutely", "q15"}
    assert await _pass(rt, T0 + 40, "q15") == []
    assert "schedule:q15@2026-11-30T06:00:00Z" not in await _ticks(store, "q15")  # before it
    started = await _pass(rt, T0 + 15 * 60 + 5, "q15")
    assert started == ["schedule:q15@2026-11-30T06:15:00Z"]
    result = await rt.result("schedule:q15@2026-11-30T06:15:00Z")
    assert (result.status, result.output) == ("completed", "report quarter")
    # Another runtime on the same store sees it (the record is the store's, not a process's).
    other = Runtime(schedule_app.app, store, clock=FakeClock(T0))
    assert "q15" in {s["name"] for s in await other.schedules.list()}


async def test_an_update_changes_the_next_ticks_and_keeps_the_past_ones(store: EventStore):
    rt = _runtime(store)
    rt.clock.now = T0 - 30  # type: ignore[attr-defined]
    await rt.schedules.create("u", "*/5 * * * *", flow="report", input="old")
    assert await _pass(rt, T0 + 5, "u") == ["schedule:u@2026-11-30T06:00:00Z"]
    changed = await rt.schedules.update("u", input="new", cron="*/10 * * * *", note="slower")
    assert (changed["cron"], changed["input"], changed["note"]) == ("*/10 * * * *", "new", "slower")
    assert await _pass(rt, T0 + 5 * 60 + 5, "u") == []  # 06:05 is no tick any more
    assert await _pass(rt, T0 + 10 * 60 + 5, "u") == ["schedule:u@2026-11-30T06:10:00Z"]
    old = await rt.result("schedule:u@2026-11-30T06:00:00Z")
    new = await rt.result("schedule:u@2026-11-30T06:10:00Z")
    assert (old.output, new.output) == ("report old", "report new")
    with pytest.raises(InputError, match="no field"):
        await rt.schedules.update("u", every="day")
    with pytest.raises(InputError, match="cron expression"):
        await rt.schedules.update("u", cron="61 * * * *")
    assert (await rt.schedules.get("u"))["cron"] == "*/10 * * * *"  # nothing half-written


async def test_pause_and_unpause_skip_the_ticks_between(store: EventStore):
    rt = _runtime(store)
    rt.clock.now = T0 - 30  # type: ignore[attr-defined]
    await rt.schedules.create("p", "* * * * *", flow="report", input="p")
    await rt.schedules.pause("p", note="maintenance", by="ops")
    assert (await rt.schedules.get("p"))["paused"] is True
    assert (await rt.schedules.get("p"))["next_fire"] is None
    assert await _pass(rt, T0 + 150, "p") == []
    rt.clock.now = T0 + 170  # type: ignore[attr-defined]
    await rt.schedules.unpause("p")
    # The ticks of 06:00 to 06:02 were missed while paused: not caught up; 06:03 runs.
    assert await _pass(rt, T0 + 185, "p") == ["schedule:p@2026-11-30T06:03:00Z"]


async def test_a_declared_schedule_pauses_but_is_not_updated_nor_deleted(store: EventStore):
    rt = _runtime(store)
    await _pass(rt, T0 - 86400)
    rt.clock.now = T0 - 30  # type: ignore[attr-defined]
    await rt.schedules.pause("minutely")
    assert not any("minutely" in e for e in await _pass(rt, T0 + 65))
    with pytest.raises(InputError, match="declared in the app's code"):
        await rt.schedules.update("minutely", input="x")
    with pytest.raises(InputError, match="declared in the app's code"):
        await rt.schedules.delete("minutely")
    with pytest.raises(InputError, match="exists"):
        await rt.schedules.create("minutely", "* * * * *", flow="report")
    await rt.schedules.unpause("minutely")
    assert "schedule:minutely@2026-11-30T06:02:00Z" in await _pass(rt, T0 + 125)


async def test_trigger_starts_one_run_now_under_a_reserved_id(store: EventStore):
    rt = _runtime(store)
    rt.clock.now = T0 + 7  # type: ignore[attr-defined]
    await rt.schedules.create("t", "0 0 1 1 *", flow="report", input="now", paused=True)
    first, second = await rt.schedules.trigger("t"), await rt.schedules.trigger("t")
    assert first.started and second.started and first.execution_id != second.execution_id
    assert first.execution_id.startswith("schedule:t#trigger-")
    assert first.execution_id.endswith("@2026-11-30T06:00:07Z")
    assert (await rt.result(first.execution_id)).output == "report now"
    with pytest.raises(ReservedExecutionIdError):  # nobody else may start one of those ids
        await rt.start("report", "x", execution_id="schedule:t#trigger-0000@2026-11-30T06:00:09Z")
    with pytest.raises(UnknownScheduleError):
        await rt.schedules.trigger("nope")


async def test_backfill_starts_each_tick_of_a_range_once(store: EventStore):
    rt = _runtime(store)
    rt.clock.now = T0  # type: ignore[attr-defined]
    await rt.schedules.create("b", "0 * * * *", flow="report", input="b")
    start = datetime(2026, 11, 29, 20, 0, tzinfo=UTC)
    fired = await rt.schedules.backfill("b", start, start.timestamp() + 4 * 3600)
    assert [f.tick[11:16] for f in fired] == ["20:00", "21:00", "22:00", "23:00"]
    assert all(f.started for f in fired)
    again = await rt.schedules.backfill("b", start.timestamp() + 1800, T0)  # overlapping
    assert [(f.tick[11:16], f.started) for f in again] == [
        ("21:00", False),
        ("22:00", False),
        ("23:00", False),
        ("00:00", True),
        ("01:00", True),
        ("02:00", True),
        ("03:00", True),
        ("04:00", True),
        ("05:00", True),
    ]
    assert Counter(await _ticks(store, "b")).most_common(1)[0][1] == 1
    with pytest.raises(InputError, match="at most"):
        await rt.schedules.create("m", "* * * * *", flow="report")
        await rt.schedules.backfill("m", T0 - 2 * 86400, T0)
    with pytest.raises(InputError, match="after its start"):
        await rt.schedules.backfill("b", T0, T0)


async def test_delete_stops_the_ticks_and_keeps_the_executions(store: EventStore):
    rt = _runtime(store)
    rt.clock.now = T0 - 30  # type: ignore[attr-defined]
    await rt.schedules.create("d", "* * * * *", flow="report")
    assert await _pass(rt, T0 + 5, "d") == ["schedule:d@2026-11-30T06:00:00Z"]
    await rt.schedules.delete("d")
    assert "d" not in {s["name"] for s in await rt.schedules.list()}
    assert await _pass(rt, T0 + 65, "d") == []
    assert await _ticks(store, "d") == ["schedule:d@2026-11-30T06:00:00Z"]
    with pytest.raises(UnknownScheduleError):
        await rt.schedules.delete("d")
    await rt.schedules.create("d", "* * * * *", flow="report")  # the name is free again


async def test_bad_schedules_are_refused_with_nothing_written(store: EventStore):
    rt = _runtime(store)
    with pytest.raises(UnknownFlowError):
        await rt.schedules.create("x", "* * * * *", flow="nope")
    with pytest.raises(InputError, match="cron expression"):
        await rt.schedules.create("x", "* * *", flow="report")
    with pytest.raises(InputError, match="zone"):
        await rt.schedules.create("x", "* * * * *", flow="report", timezone="Mars/Olympus")
    with pytest.raises(InputError, match="unusable"):
        await rt.schedules.create("a/b", "* * * * *", flow="report")
    with pytest.raises(InputError, match="end_at"):
        await rt.schedules.create("x", "* * * * *", flow="report", start_at=T0, end_at=T0 - 1)
    await rt.schedules.create("x", "* * * * *", flow="report")
    with pytest.raises(InputError, match="exists"):
        await rt.schedules.create("x", "*/2 * * * *", flow="report")
    assert (await rt.schedules.get("x"))["cron"] == "* * * * *"
    assert await rt.store.schedules().get("y") is None


async def test_racing_changes_are_each_decided_on_the_record_that_won(store: EventStore):
    rt = _runtime(store)
    await rt.schedules.create("r", "* * * * *", flow="report")
    others = [Runtime(schedule_app.app, store, clock=FakeClock(T0)) for _ in range(4)]
    notes = [f"n{i}" for i in range(4)]
    await asyncio.gather(
        *(o.schedules.pause("r", note=n) for o, n in zip(others, notes, strict=True))
    )
    record = await store.schedules().get("r")
    assert record is not None and record.version == 1 + 4 and record.paused
    assert record.note in notes
