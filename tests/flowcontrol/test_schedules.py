"""Schedules fire exactly one execution per tick, on SQLite (on disk) and the Firestore
emulator: a tick delivered twice, late, or by concurrent passes starts one execution; missed
ticks after downtime are skipped, or caught up to ``catch_up``; no tick from before a
schedule was declared starts unless ``start_at`` asks for it; a broken schedule does not
stop the others; declarations are checked."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import UTC, datetime

import pytest

from loom import Loom
from loom.errors import ConfigurationError
from loom.primitives import schedules
from loom.primitives.schedules import fire_due
from loom.runtime import Runtime
from loom.store import EventStore
from loom.testing import FakeClock
from tests.flowcontrol import schedule_app

T0 = datetime(2026, 11, 30, 6, 0, tzinfo=UTC).timestamp()  # a tick of all three schedules


def _runtime(store: EventStore, app: Loom = schedule_app.app) -> Runtime:
    return Runtime(app, store, clock=FakeClock(T0))


async def _declared(runtime: Runtime, at: float) -> None:
    """A first pass at ``at``: the app's schedules are declared from then on (it starts
    nothing: a schedule's first tick is the first after it was declared)."""
    assert not any(f.started for f in await fire_due(runtime, at))


async def _ticks(store: EventStore) -> Counter[str]:
    rows = await store.list(limit=10_000)
    return Counter(r.execution_id for r in rows if r.execution_id.startswith("schedule:"))


async def test_one_execution_per_tick_when_delivered_twice_late_and_at_once(store: EventStore):
    runtime = _runtime(store)
    await _declared(runtime, T0 - 86400)
    runtime.clock.now = T0 + 10  # type: ignore[attr-defined]
    first = await fire_due(runtime)
    assert {f.execution_id for f in first if f.started} == {
        "schedule:every-5@2026-11-30T06:00:00Z",
        "schedule:hourly@2026-11-30T03:00:00Z",  # catch_up=3: the two before are missed ones
        "schedule:hourly@2026-11-30T04:00:00Z",
        "schedule:hourly@2026-11-30T05:00:00Z",
        "schedule:hourly@2026-11-30T06:00:00Z",
        "schedule:minutely@2026-11-30T05:56:00Z",  # within the 5-minute grace
        "schedule:minutely@2026-11-30T05:57:00Z",
        "schedule:minutely@2026-11-30T05:58:00Z",
        "schedule:minutely@2026-11-30T05:59:00Z",
        "schedule:minutely@2026-11-30T06:00:00Z",
    }
    again = await fire_due(runtime)  # the same tick delivered twice
    assert not any(f.started for f in again) and {f.status for f in again} == {"completed"}
    runtime.clock.now = T0 + 250  # type: ignore[attr-defined]  # late: still 06:00 for every-5
    late = await fire_due(runtime)
    assert [f.execution_id for f in late if f.started] == [
        "schedule:minutely@2026-11-30T06:01:00Z",
        "schedule:minutely@2026-11-30T06:02:00Z",
        "schedule:minutely@2026-11-30T06:03:00Z",
        "schedule:minutely@2026-11-30T06:04:00Z",
    ]
    runtime.clock.now = T0 + 300  # type: ignore[attr-defined]
    await asyncio.gather(*(fire_due(runtime) for _ in range(4)))  # four passes at once
    counts = await _ticks(store)
    assert set(counts.values()) == {1}
    assert "schedule:every-5@2026-11-30T06:05:00Z" in counts
    result = await runtime.result("schedule:every-5@2026-11-30T06:05:00Z")
    assert (result.status, result.output) == ("completed", "report {'kind': 'five'}")


async def test_passes_racing_on_a_tick_report_one_start(
    store: EventStore, monkeypatch: pytest.MonkeyPatch
):
    """Every pass reads that the tick has no execution before any creates it (the race's
    window, held open): the store's create decides, and only its winner says ``started``."""

    async def unseen(runtime: Runtime, eid: str) -> None:
        return None

    runtime = _runtime(store)
    other = _runtime(store)  # another process's pass, on the same store
    await _declared(runtime, T0 - 86400)
    monkeypatch.setattr(schedules, "_summary", unseen)
    runtime.clock.now = other.clock.now = T0 + 10  # type: ignore[attr-defined]
    passes = [await fire_due(runtime), await fire_due(other)]
    passes += await asyncio.gather(fire_due(runtime), fire_due(other))
    started = Counter(f.execution_id for fired in passes for f in fired if f.started)
    assert started == await _ticks(store) and set(started.values()) == {1}
    for fired in passes[1:]:
        assert not any(f.started for f in fired)
        assert {(f.status, f.error) for f in fired} == {("completed", None)}


async def test_missed_ticks_are_skipped_or_caught_up(store: EventStore):
    runtime = _runtime(store)
    await _declared(runtime, T0 - 86400)
    runtime.clock.now = T0 + 10 * 3600 + 30  # type: ignore[attr-defined]  # down for ten hours
    await fire_due(runtime)
    counts = await _ticks(store)
    every5 = sorted(k for k in counts if k.startswith("schedule:every-5@"))
    assert every5 == ["schedule:every-5@2026-11-30T16:00:00Z"]  # skip: the rest are gone
    # catch_up=3: the fresh tick, and the three missed before it
    hourly = sorted(k for k in counts if k.startswith("schedule:hourly@"))
    assert hourly == [f"schedule:hourly@2026-11-30T{h}:00:00Z" for h in (13, 14, 15, 16)]


async def test_a_broken_schedule_does_not_stop_the_others(store: EventStore):
    app = Loom("partly broken")

    @app.flow("ok")
    async def ok(ctx: object, value: object) -> str:
        return "ok"

    app.schedule("*/5 * * * *", flow="missing", name="broken")
    app.schedule("*/5 * * * *", flow="ok")
    runtime = _runtime(store, app)
    await fire_due(runtime, T0 - 60)  # declared a minute before
    fired = {f.schedule: f for f in await fire_due(runtime)}
    assert fired["broken"].status == "error" and "unknown flow 'missing'" in (
        fired["broken"].error or ""
    )
    assert fired["ok"].started and fired["ok"].status == "completed"


def test_declarations_are_checked():
    app = Loom("declared")
    app.schedule("@daily", flow="f")
    with pytest.raises(ConfigurationError, match="declared twice"):
        app.schedule("@hourly", flow="f")
    with pytest.raises(ConfigurationError, match="hour '25'"):
        app.schedule("0 25 * * *", flow="g")
    with pytest.raises(ConfigurationError, match="catch_up"):
        app.schedule("@daily", flow="g", catch_up=-1)
    with pytest.raises(ConfigurationError, match="unusable"):
        app.schedule("@daily", flow="g", name="a/b")
    with pytest.raises(TypeError):
        app.schedule("@daily", flow="g", every="day")


async def test_a_schedule_starts_no_tick_from_before_it_was_declared(store: EventStore):
    """First seen at 06:00:30, ``* * * * *`` starts nothing at once (the ticks of 05:56 to
    06:00 are from before it existed); its first execution is 06:01's."""
    app = Loom("new schedule")

    @app.flow("ok")
    async def ok(ctx: object, value: object) -> str:
        return "ok"

    app.schedule("* * * * *", flow="ok", name="each-minute")
    runtime = _runtime(store, app)
    assert await fire_due(runtime, T0 + 30) == []
    assert not await _ticks(store)
    fired = await fire_due(runtime, T0 + 75)
    assert [(f.execution_id, f.started) for f in fired] == [
        ("schedule:each-minute@2026-11-30T06:01:00Z", True)
    ]
    # Another process seeing it later keeps the first moment it was seen.
    later = _runtime(store, app)
    assert [f.tick for f in await fire_due(later, T0 + 130)] == [
        "2026-11-30T06:01:00Z",
        "2026-11-30T06:02:00Z",
    ]


async def test_start_at_catches_up_ticks_from_before_it_was_declared(store: EventStore):
    app = Loom("catching up")

    @app.flow("ok")
    async def ok(ctx: object, value: object) -> str:
        return "ok"

    app.schedule("* * * * *", flow="ok", name="from-0", start_at=0)  # every due tick
    app.schedule("* * * * *", flow="ok", name="from-0558", start_at=T0 - 120)
    app.schedule("* * * * *", flow="ok", name="until-0558", start_at=0, end_at=T0 - 120)
    runtime = _runtime(store, app)
    ticks = {(f.schedule, f.tick[11:16]) for f in await fire_due(runtime, T0 + 30)}
    assert ticks == {
        *(("from-0", f"05:{m}") for m in ("56", "57", "58", "59")),
        ("from-0", "06:00"),
        ("from-0558", "05:58"),
        ("from-0558", "05:59"),
        ("from-0558", "06:00"),
        ("until-0558", "05:56"),
        ("until-0558", "05:57"),
        ("until-0558", "05:58"),
    }
