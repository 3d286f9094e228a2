"""Record the family golden histories: ``python -m tests.histories.family.record``.

On a fresh SQLite store: ``trip`` starts its children with options and acts on them through
their handles; ``report`` fails at its charge and is re-driven (a fork through its child,
its message sent, the message it took and its published values). Every log involved is
written here as JSON.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path

from loom.ops.deadletters import find, redrive
from loom.runtime import Runtime
from loom.store import SqliteEventStore
from tests.histories.family.app import BROKEN, app

HERE = Path(__file__).parent


async def main() -> None:
    store = SqliteEventStore(Path(tempfile.mkdtemp()) / "loom.db")
    rt = Runtime(app, store)
    await rt.start("trip", "t-1", execution_id="t-1")
    await rt.start("inbox", 1, execution_id="box")
    BROKEN["charge"] = True
    await rt.start("report", {"to": "box"}, execution_id="rep")
    await rt.send("rep", "note", "paid")
    BROKEN["charge"] = False
    (letter,) = await redrive(rt, await find(rt, "failed"), by="ops")
    assert letter.new_execution_id is not None and letter.status == "completed", letter
    logs = {
        "trip": "t-1",
        "trip_flight": "t-1-flight",
        "trip_hotel": "t-1.child.3",
        "report": "rep",
        "report_redrive": letter.new_execution_id,
    }
    for name, eid in logs.items():
        events = [e.model_dump(mode="json") for e in await store.read(eid)]
        (HERE / f"{name}.json").write_text(json.dumps(events, indent=1) + "\n")
    await store.aclose()


if __name__ == "__main__":
    asyncio.run(main())
