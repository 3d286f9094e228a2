"""Record the golden histories of updates, streams and event reads:
``python -m tests.histories.interactions.record``.

On a fresh SQLite store: a ledger takes two entries by update (each a step of its handler,
each streamed), refuses one at its validator (nothing recorded) and fails another in its
handler (recorded), then closes; a watcher started before the ledger waits for its
published value; an older ledger without handlers is left waiting. Each log is written here
as JSON; the replay tests prove today's code replays them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import tempfile
from pathlib import Path

from loom.errors import UpdateFailedError, UpdateRejectedError
from loom.runtime import Runtime
from loom.store import SqliteEventStore
from loom.wire import ExecutionPackage
from tests.histories.interactions.app import app, before_handlers

HERE = Path(__file__).parent


async def main() -> None:
    store = SqliteEventStore(Path(tempfile.mkdtemp()) / "loom.db")
    rt = Runtime(app, store)
    await rt.start("watcher", "led", execution_id="watch", run=False)
    watching = asyncio.ensure_future(rt.execute(ExecutionPackage(execution_id="watch")))
    await asyncio.sleep(0.5)  # it records its wait, then the ledger publishes
    await rt.start("ledger", 10, execution_id="led")
    await watching
    await rt.update("led", "post", {"amount": 5, "currency": "EUR"}, update_id="p-1", by="ada")
    with contextlib.suppress(UpdateRejectedError):
        await rt.update("led", "post", {"amount": -1, "currency": "USD"})
    with contextlib.suppress(UpdateFailedError):
        await rt.update("led", "refund", None, update_id="r-1")
    await rt.update("led", "post", {"amount": 3, "currency": "USD"}, update_id="p-2")
    await rt.update("led", "close", None, update_id="c-1")
    old = Runtime(before_handlers(), store)
    await old.start("ledger", 7, execution_id="old")
    for eid, name in (("led", "ledger"), ("watch", "watcher"), ("old", "ledger_before_handlers")):
        events = [e.model_dump(mode="json") for e in await store.read(eid)]
        (HERE / f"{name}.json").write_text(json.dumps(events, indent=1) + "\n")
    await store.aclose()


if __name__ == "__main__":
    asyncio.run(main())
