"""The app of the family golden histories: child options and handles, and a failed
execution that published, sent, ran a child and took a message, re-driven as a fork.

The histories were recorded live with it (``python -m tests.histories.family.record``);
the replay test proves today's code replays them without invoking anything.
"""

from __future__ import annotations

from typing import Any

from loom import ChildFlowFailedError, EffectContext, FlowContext, Loom

app = Loom("family-golden")
BROKEN = {"charge": False}


@app.effect("book")
def book(ctx: EffectContext, what: str) -> str:
    if what.startswith("charge") and BROKEN["charge"]:
        raise RuntimeError("the card network is down")
    return f"booked {what}"


@app.flow("leg", version=1)
async def leg_v1(ctx: FlowContext, name: str) -> str:
    return await ctx.execute(book, f"{name} (v1)")


@app.flow("leg", version=2)
async def leg_v2(ctx: FlowContext, name: str) -> str:
    seat = await ctx.recv("seat")
    return await ctx.execute(book, f"{name} seat {seat}")


@app.flow("trip")
async def trip(ctx: FlowContext, trip_id: str) -> dict[str, Any]:
    """A flight under an explicit id (pinned to version 2, a timeout), told its seat through
    its handle; a hotel waiting for its seat, cancelled through its handle."""
    flight = await ctx.start_flow(
        "leg", "flight", execution_id=f"{trip_id}-flight", version=2, timeout=3600
    )
    await flight.send("seat", "12A")
    hotel = await ctx.start_flow("leg", "hotel", on_cancel="abandon")
    await hotel.cancel("found a friend's couch")
    try:
        stayed = await hotel
    except ChildFlowFailedError as exc:
        stayed = exc.status
    return {"flight": await flight, "hotel": stayed}


@app.flow("inbox")
async def inbox(ctx: FlowContext, n: int) -> list[Any]:
    return [await ctx.recv("t") for _ in range(n)]


@app.flow("report")
async def report(ctx: FlowContext, spec: dict[str, Any]) -> Any:
    """Publishes, sends, runs a child, takes a message, then charges (which fails once)."""
    await ctx.set_event("progress", 0)
    await ctx.send(spec["to"], "t", "from report")
    flight = await ctx.execute_flow("leg", "report-flight", version=1)
    await ctx.set_event("progress", 1)
    note = await ctx.recv("note")
    return {"flight": flight, "charge": await ctx.execute(book, f"charge {note}")}
