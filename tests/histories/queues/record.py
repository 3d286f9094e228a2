"""Record the golden histories of queued executions with options:
``python -m tests.histories.queues.record``.

``tests/flowcontrol/options_app.py`` runs live on a fresh SQLite store, in real time: a job
started on a queue with a priority, a deduplication id and a timeout from dequeue, which
completes; and a nap whose timeout from dequeue passes while it sleeps, which is cancelled.
The logs are written here as JSON; the replay test proves today's code reads them the same.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path

from loom.primitives.queues import QueueRef
from loom.runtime import Runtime
from loom.store import SqliteEventStore
from loom.wire import ExecutionPackage
from tests.flowcontrol.options_app import app

HERE = Path(__file__).parent


async def main() -> None:
    db = Path(tempfile.mkdtemp()) / "loom.db"
    store = SqliteEventStore(db)
    rt = Runtime(app, store)
    q = QueueRef("one", priority=2, deduplication_id="job-1", timeout=60)
    await rt.start("job", {"name": "done", "seconds": 0.01}, execution_id="done", queue=q)
    await rt.start("nap", 5.0, execution_id="timeout", queue=QueueRef("one", timeout=0.3))
    await asyncio.sleep(0.5)
    await rt.execute(ExecutionPackage(execution_id="timeout", reason="timer"))
    for eid in ("done", "timeout"):
        events = [e.model_dump(mode="json") for e in await store.read(eid)]
        (HERE / f"queued_{eid}.json").write_text(json.dumps(events, indent=1) + "\n")
    await store.aclose()


if __name__ == "__main__":
    asyncio.run(main())
