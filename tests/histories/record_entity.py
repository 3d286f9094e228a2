"""Record the entity golden histories: ``python -m tests.histories.record_entity``.

Runs ``loom demo``'s entity section (two accounts messaging each other, publishing their
balances, one continuing as new twice) on a fresh SQLite store and writes both logs to
``entity/``. Re-record only when a change to the event schema or the example is intended.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path

from loom.cli.demo_entity import entity_section
from loom.store import SqliteEventStore

HERE = Path(__file__).parent / "entity"


async def main() -> None:
    db = Path(tempfile.mkdtemp()) / "loom.db"
    alice, bob = await entity_section(f"sqlite:///{db}", "golden")
    store = SqliteEventStore(db)
    for name, eid in (("account_alice", alice), ("account_bob", bob)):
        events = [e.model_dump(mode="json") for e in await store.read(eid)]
        (HERE / f"{name}.json").write_text(json.dumps(events, indent=1) + "\n")
    await store.aclose()


if __name__ == "__main__":
    asyncio.run(main())
