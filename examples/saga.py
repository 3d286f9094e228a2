"""A saga: book a trip step by step, and undo what was done when the booking is cancelled.

The flow reserves a hotel and a flight, then waits for the traveller to confirm. Cancel it
while it waits (or let its timeout pass) and ``asyncio.CancelledError`` arrives at that wait;
the ``except`` block runs the compensations that match what was done, each recorded like
any other step, so a crash during the cleanup resumes it without refunding twice::

    LOOM_APP=examples.saga:app loom start trip.book --input '{"trip_id": "t-1"}' --id t-1
    LOOM_APP=examples.saga:app loom cancel t-1 --reason "changed my mind"
    LOOM_APP=examples.saga:app loom show t-1
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from pydantic import BaseModel

from loom import EffectContext, FlowContext, Loom

app = Loom("trips")

BOOKED: list[str] = []  # what the fake providers did, in order (for tests and the demo)


class Trip(BaseModel):
    """What to book."""

    trip_id: str
    confirm_within_s: float = 24 * 3600


class Booking(BaseModel):
    """What one provider booked."""

    kind: str
    ref: str


@app.effect("hotel.reserve")
def reserve_hotel(ctx: EffectContext, trip: Trip) -> Booking:
    BOOKED.append(f"hotel+{trip.trip_id}")
    return Booking(kind="hotel", ref=f"H-{trip.trip_id}")


@app.effect("flight.book", idempotent=False)
def book_flight(ctx: EffectContext, trip: Trip) -> Booking:
    BOOKED.append(f"flight+{trip.trip_id}")
    return Booking(kind="flight", ref=f"F-{trip.trip_id}")


@app.effect("booking.undo")
def undo(ctx: EffectContext, booking: Booking) -> str:
    BOOKED.append(f"{booking.kind}-{booking.ref}")
    return f"undone {booking.ref}"


@app.flow("trip.book", timeout=timedelta(days=7), cleanup_timeout=timedelta(minutes=10))
async def book(ctx: FlowContext, trip: Trip) -> list[str]:
    done: list[Booking] = []
    try:
        done.append(await ctx.execute(reserve_hotel, trip))
        done.append(await ctx.execute(book_flight, trip))
        await ctx.suspend("trip.confirm", trip.trip_id, timeout=trip.confirm_within_s)
        return [b.ref for b in done]
    except asyncio.CancelledError:
        for booking in reversed(done):  # compensate in reverse order, durably
            await ctx.execute(undo, booking)
        raise  # end as cancelled
