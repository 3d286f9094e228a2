"""Record the golden histories of cancelled sagas: ``python -m tests.histories.cancel.record``.

``examples/saga.py`` runs live on a fresh SQLite store, in real time: cancelled while it
waits, cancelled by its own timeout when the timer falls due, and cancelled by its timeout
when a confirmation arrives after the deadline but before the timer. The logs are written
here as JSON; the replay test proves today's code hands the cancel over at the same place.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path

from examples.saga import app

from loom.runtime import Runtime
from loom.store import SqliteEventStore
from loom.wire import ExecutionPackage

HERE = Path(__file__).parent


async def main() -> None:
    db = Path(tempfile.mkdtemp()) / "loom.db"
    store = SqliteEventStore(db)
    rt = Runtime(app, store)
    await rt.start("trip.book", {"trip_id": "cancelled"}, execution_id="cancelled")
    await rt.cancel("cancelled", "changed my mind", by="alice@example.com")
    await rt.start("trip.book", {"trip_id": "timeout"}, execution_id="timeout", timeout=0.3)
    await rt.start("trip.book", {"trip_id": "late"}, execution_id="late", timeout=0.3)
    await asyncio.sleep(0.5)
    await rt.execute(ExecutionPackage(execution_id="timeout", reason="timer"))
    await rt.resume("late", "trip.confirm", "late", "yes")  # after the deadline, before a timer
    for eid in ("cancelled", "timeout", "late"):
        events = [e.model_dump(mode="json") for e in await store.read(eid)]
        (HERE / f"saga_{eid}.json").write_text(json.dumps(events, indent=1) + "\n")
    await store.aclose()


if __name__ == "__main__":
    asyncio.run(main())
