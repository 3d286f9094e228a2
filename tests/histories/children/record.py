"""Record the golden histories of child flows: ``python -m tests.histories.children.record``.

``examples/fanout.py`` runs live on a fresh SQLite store: a parent fans out to two region
children and gathers them. The parent's log and each child's are written here as JSON; the
replay test proves today's code replays them without starting anything.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path

from examples.fanout import app

from loom.runtime import Runtime
from loom.store import SqliteEventStore

HERE = Path(__file__).parent


async def main() -> None:
    store = SqliteEventStore(Path(tempfile.mkdtemp()) / "loom.db")
    rt = Runtime(app, store)
    await rt.start("report.all", ["emea", "apac"], execution_id="fan")
    for eid, name in (("fan", "parent"), ("fan.child.1", "child_1"), ("fan.child.2", "child_2")):
        events = [e.model_dump(mode="json") for e in await store.read(eid)]
        (HERE / f"fanout_{name}.json").write_text(json.dumps(events, indent=1) + "\n")
    await store.aclose()


if __name__ == "__main__":
    asyncio.run(main())
