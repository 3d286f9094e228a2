"""Record the golden histories of racing flows: ``python -m tests.histories.record_races``.

Each flow of ``tests/histories/races.py`` runs live on a fresh SQLite store, in real time:
steps really race, a timer really falls due, a resume really lands while a step runs. The
logs are written here as ``race_*.json``, with the result the live run saw; the replay test
proves a replay hands the outcomes over in the same order and reaches the same result.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

from loom.runtime import Runtime
from loom.store import SqliteEventStore
from loom.wire import ExecutionPackage, ExecutionResult
from tests.histories.races import app

HERE = Path(__file__).parent


async def _first_completed(rt: Runtime) -> ExecutionResult:
    await rt.start("race.first_completed", None, execution_id="first")
    return await rt.resume("first", "go", "first", "went")


async def _as_completed(rt: Runtime) -> ExecutionResult:
    await rt.start("race.as_completed", None, execution_id="asc")
    return await rt.resume("asc", "go", "asc", "went")


async def _gate_or_timer(rt: Runtime) -> ExecutionResult:
    await rt.start("race.gate_or_timer", None, execution_id="gt")
    await asyncio.sleep(0.5)  # the timer falls due; the execute call below fires it
    await rt.execute(ExecutionPackage(execution_id="gt", reason="timer"))
    await rt.resume("gt", "go", "gt", "too late")
    return await rt.resume("gt", "finish", "gt", "done")


async def _step_or_gate(rt: Runtime) -> ExecutionResult:
    running = asyncio.ensure_future(rt.start("race.step_or_gate", None, execution_id="sg"))
    await asyncio.sleep(0.4)  # the step is running: this resume lands under it
    await rt.resume("sg", "go", "sg", "while running")
    await running
    return await rt.resume("sg", "again", "sg", "done")


RACES = {
    "race_first_completed": _first_completed,
    "race_as_completed": _as_completed,
    "race_gate_or_timer": _gate_or_timer,
    "race_step_or_gate": _step_or_gate,
}


async def record(name: str, directory: Path) -> tuple[list[dict[str, Any]], Any]:
    """Run one race live on SQLite under ``directory``; its log and the live output."""
    store = SqliteEventStore(directory / f"{name}.db")
    try:
        result = await RACES[name](Runtime(app, store))
        assert result.status == "completed", (name, result)
        events = await store.read(result.execution_id)
        return [e.model_dump(mode="json") for e in events], result.output
    finally:
        await store.aclose()


async def main() -> None:
    directory = Path(tempfile.mkdtemp())
    for name in RACES:
        events, _ = await record(name, directory)
        (HERE / f"{name}.json").write_text(json.dumps(events, indent=1) + "\n")


if __name__ == "__main__":
    asyncio.run(main())
