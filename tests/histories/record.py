"""Record the golden histories: ``python -m tests.histories.record``.

Runs ``loom demo``'s flows (a gate, a timer, two real worker kills, an in-doubt verdict) on a
fresh SQLite store and writes each execution's log here as JSON. Re-record only when a change
to the event schema or the example flows is intended; the replay test then proves old logs
still replay (or must be migrated).
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path

from loom.cli.demo import run_demo
from loom.store import SqliteEventStore

HERE = Path(__file__).parent


async def main() -> None:
    db = Path(tempfile.mkdtemp()) / "loom.db"
    await run_demo(f"sqlite:///{db}")
    store = SqliteEventStore(db)
    for summary in await store.list():
        name = "order_fulfil" if summary.flow == "order.fulfil" else "order_express_in_doubt"
        events = [e.model_dump(mode="json") for e in await store.read(summary.execution_id)]
        (HERE / f"{name}.json").write_text(json.dumps(events, indent=1) + "\n")
    await store.aclose()


if __name__ == "__main__":
    asyncio.run(main())
