"""Golden histories of cancelled sagas, replayed against today's code (see ``record.py``)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from examples import saga

from loom import FlowContext, Loom
from loom.errors import NondeterminismError
from loom.events import EVENTS_ADAPTER, Event, ExecutionCancelled
from loom.testing import replay

HERE = Path(__file__).parent
HISTORIES = sorted(HERE.glob("saga_*.json"))


def load(path: Path) -> list[Event]:
    return EVENTS_ADAPTER.validate_python(json.loads(path.read_text()))


def test_the_histories_are_there():
    assert {p.stem for p in HISTORIES} == {"saga_cancelled", "saga_timeout", "saga_late"}


@pytest.mark.parametrize("path", HISTORIES, ids=lambda p: p.stem)
async def test_history_replays_to_its_recorded_cancel(path: Path):
    events = load(path)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    final = events[-1]
    assert isinstance(final, ExecutionCancelled)
    outcome = await replay(saga.app, events)
    assert outcome.status == "cancelled"
    assert outcome.error is not None and outcome.error["message"] == final.reason


def test_the_late_confirmation_lost_to_the_deadline():
    kinds = [e.type for e in load(HERE / "saga_late.json")]
    assert kinds.index("CancelRequested") < kinds.index("ExecutionResumed")
    assert kinds.count("EffectCompleted") == 4  # two bookings, two compensations


async def test_a_changed_cleanup_fails_the_replay():
    swapped = Loom("trips")
    swapped.effects.update(saga.app.effects)

    @swapped.flow("trip.book")
    async def book(ctx: FlowContext, trip: saga.Trip) -> list[str]:
        done: list[saga.Booking] = []
        try:
            done.append(await ctx.execute(saga.reserve_hotel, trip))
            done.append(await ctx.execute(saga.book_flight, trip))
            await ctx.suspend("trip.confirm", trip.trip_id, timeout=trip.confirm_within_s)
            return [b.ref for b in done]
        except asyncio.CancelledError:
            await ctx.execute(saga.reserve_hotel, trip)  # the log has booking.undo here
            raise

    with pytest.raises(NondeterminismError):
        await replay(swapped, load(HERE / "saga_cancelled.json"))
