"""Record the golden histories of flow timers: ``python -m tests.histories.record_timers``.

Each flow of ``tests/histories/timers.py`` runs live, in real time, on a fresh store (SQLite
for the golden files): deadlines really fall during steps, an execution really suspends with
an asyncio timer pending and is woken after its deadline, a reply really comes too late. The
logs are written here as ``timer_*.json``, with the result the live run saw; the replay test
proves a replay hands the firings over at the same points and reaches the same result.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from loom.runtime import Runtime
from loom.store import SqliteEventStore
from loom.store.base import EventStore
from loom.wire import ExecutionPackage, ExecutionResult
from tests.histories.timers import app

HERE = Path(__file__).parent


async def _wake(rt: Runtime, eid: str, after: float) -> ExecutionResult:
    """What a dispatcher does for a timer: run the execution once its deadline passed."""
    await asyncio.sleep(after)
    return await rt.execute(ExecutionPackage(execution_id=eid, reason="timer"))


async def _started_then_go(rt: Runtime, flow: str, eid: str) -> ExecutionResult:
    started = await rt.start(flow, None, execution_id=eid)
    assert started.status == "suspended", started
    return await rt.resume(eid, "go", eid, "went")


async def _sleep(rt: Runtime) -> ExecutionResult:
    started = await rt.start("timer.sleep", None, execution_id="sl")
    assert started.status == "suspended", started  # on asyncio.sleep(0.2)
    woken = await _wake(rt, "sl", 0.3)
    assert woken.status == "suspended", woken
    return await rt.resume("sl", "go", "sl", "went")


async def _gate(rt: Runtime) -> ExecutionResult:
    await rt.start("timer.gate", None, execution_id="ga")
    await rt.resume("ga", "early", "ga", "in time")
    await asyncio.sleep(0.3)  # the deadline of the second gate passes; no wake-up yet
    late = await rt.resume("ga", "late", "ga", "too late")
    assert late.status == "suspended", late
    return await rt.resume("ga", "go", "ga", "went")


async def _ctx_sleep(rt: Runtime) -> ExecutionResult:
    await rt.start("timer.ctx_sleep", None, execution_id="cs")
    await _wake(rt, "cs", 0.3)  # the asyncio deadline passed, the 60 s ctx.sleep did not
    await _wake(rt, "cs", 0.2)  # the short ctx.sleep fell due
    return await rt.resume("cs", "go", "cs", "went")


Recorder = Callable[[Runtime], Awaitable[ExecutionResult]]
TIMERS: dict[str, Recorder] = {
    "timer_wait_for": lambda rt: _started_then_go(rt, "timer.wait_for", "wf"),
    "timer_timeout": lambda rt: _started_then_go(rt, "timer.timeout", "to"),
    "timer_sleep": _sleep,
    "timer_wait_timeout": lambda rt: _started_then_go(rt, "timer.wait_timeout", "wt"),
    "timer_gate": _gate,
    "timer_ctx_sleep": _ctx_sleep,
}


async def record(name: str, store: EventStore) -> tuple[list[dict[str, Any]], Any]:
    """Run one timer flow live on ``store``; its log and the live output."""
    result = await TIMERS[name](Runtime(app, store))
    assert result.status == "completed", (name, result)
    events = await store.read(result.execution_id)
    return [e.model_dump(mode="json") for e in events], result.output


async def main() -> None:
    directory = Path(tempfile.mkdtemp())
    for name in TIMERS:
        store = SqliteEventStore(directory / f"{name}.db")
        try:
            events, _ = await record(name, store)
        finally:
            await store.aclose()
        (HERE / f"{name}.json").write_text(json.dumps(events, indent=1) + "\n")


if __name__ == "__main__":
    asyncio.run(main())
