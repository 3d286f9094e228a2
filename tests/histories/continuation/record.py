"""Record the continue-as-new golden history: ``python -m tests.histories.continuation.record``.

Runs :mod:`tests.histories.continuation.app` live on a fresh SQLite store: run 1 continues
while its ``slow`` step is in flight (the step is abandoned), run 2 is resumed and
completes. The log is written here as ``rollover.json``.

``rollover_refused.json`` beside it was recorded the same way by the engine before the
abandon rule, which failed such a run with ``continue_in_flight``: it cannot be recorded
again and is kept to prove the pre-deploy check does not call those logs divergent.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path

from loom.runtime import Runtime
from loom.store import SqliteEventStore
from tests.histories.continuation.app import app

HERE = Path(__file__).parent


async def main() -> None:
    store = SqliteEventStore(Path(tempfile.mkdtemp()) / "loom.db")
    rt = Runtime(app, store)
    await rt.start("rollover", 1, execution_id="roll")
    await asyncio.sleep(0.2)  # the abandoned step finishes, and writes nothing
    await rt.resume("roll", "go", "k", "yes")
    events = [e.model_dump(mode="json") for e in await store.read("roll")]
    (HERE / "rollover.json").write_text(json.dumps(events, indent=1) + "\n")
    await store.aclose()


if __name__ == "__main__":
    asyncio.run(main())
